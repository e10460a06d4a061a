"""CPace against the published test vectors of draft-irtf-cfrg-cpace-21.

Every hex value below is copied from the draft's text (draft-irtf-cfrg-cpace-21.txt in the
CFRG repository github.com/cfrg/draft-irtf-cfrg-cpace, directory draft-irtf-cfrg-cpace-21/):
Appendix A.1.2 (prepend_len), A.1.4 (lv_cat), A.3.5 (transcript_ir), B.1.1 to B.1.5 (G_X25519
with SHA-512: generator, messages, K, ISK in the initiator-responder mode) and B.1.10 (low-order
points for scalar_mult_vfy). The repository's top-level testvectors.json belongs to an older
revision (its CI and generator differ), so it is not used here.
"""

from __future__ import annotations

import hashlib

import pytest

from backend.components.cluster.pake import (
    DSI,
    DSI_ISK,
    HASH_BLOCK_BYTES,
    IDENTITY,
    CPaceError,
    CPaceRun,
    Role,
    calculate_generator,
    decode_u_coordinate,
    generator_string,
    intermediate_session_key,
    lv_cat,
    prepend_len,
    scalar_mult_vfy,
    transcript_ir,
)


def _hex(*lines: str) -> bytes:
    return bytes.fromhex("".join(lines))


# Appendix B.1.1 to B.1.5.
PRS = b"Password"
CI = _hex("0b415f696e69746961746f720b425f726573706f6e646572")
SID = _hex("7e4b4791d6a8ef019b936c79fb7f2c57")
GENERATOR_STRING = _hex(
    "0843506163653235350850617373776f72646d000000000000000000",
    "00000000000000000000000000000000000000000000000000000000",
    "00000000000000000000000000000000000000000000000000000000",
    "00000000000000000000000000000000000000000000000000000000",
    "00000000000000000000000000000000180b415f696e69746961746f",
    "720b425f726573706f6e646572107e4b4791d6a8ef019b936c79fb7f",
    "2c57",
)
GENERATOR_HASH = _hex("03998087bdb1a2617bbe25ef5a7c18cd4f84f902328701790958755ee4aed1d3")
DECODED_FIELD_ELEMENT = _hex("03998087bdb1a2617bbe25ef5a7c18cd4f84f902328701790958755ee4aed153")
GENERATOR = _hex("d04bf6d41f6a289632a2e929fa29bebd51092512a7829fdde7d314b62f05a73f")
ADA = b"ADa"
YA_SCALAR = _hex("21b4f4bd9e64ed355c3eb676a28ebedaf6d8f17bdc365995b319097153044080")
YA = _hex("1d13c89278cdadd826f6d8d7f887701430f8380ddc17611cdd6dc989ce0c9f32")
ADB = b"ADb"
YB_SCALAR = _hex("848b0779ff415f0af4ea14df9dd1d3c29ac41d836c7808896c4eba19c51ac40a")
YB = _hex("248cccf6d5cdc3646f0ad593f9e6cef4e69d4945f8372e623512ecea32185623")
K = _hex("5b067effbdc0b2a0e1d907b21ebb25cfedb96a852179a847c37e43ee71322c6b")
TRANSCRIPT_IR = _hex(
    "201d13c89278cdadd826f6d8d7f887701430f8380ddc17611cdd6dc9",
    "89ce0c9f320341446120248cccf6d5cdc3646f0ad593f9e6cef4e69d",
    "4945f8372e623512ecea3218562303414462",
)
DSI_ISK_HEX = _hex("43506163653235355f49534b")
ISK_INPUT = _hex(
    "0c43506163653235355f49534b107e4b4791d6a8ef019b936c79fb7f",
    "2c57205b067effbdc0b2a0e1d907b21ebb25cfedb96a852179a847c3",
    "7e43ee71322c6b201d13c89278cdadd826f6d8d7f887701430f8380d",
    "dc17611cdd6dc989ce0c9f320341446120248cccf6d5cdc3646f0ad5",
    "93f9e6cef4e69d4945f8372e623512ecea3218562303414462",
)
ISK_IR = _hex(
    "6e19b875f7a561d6b3ca3dbb9ef42ac55de3e717881018204b8922b4",
    "d5e53bb2aa82c300bea7b65d2b671da71922ddf6472301b79bc270ad",
    "fa8bf413285f2263",
)

# Appendix B.1.10: (u, expected scalar_mult_vfy(s, u), must abort when received).
LOW_ORDER_SCALAR = _hex("af46e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449aff")
ZERO = "00" * 32
LOW_ORDER_CASES = [
    ("0000000000000000000000000000000000000000000000000000000000000000", ZERO, True),
    ("0100000000000000000000000000000000000000000000000000000000000000", ZERO, True),
    ("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", ZERO, True),
    ("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800", ZERO, True),
    ("5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157", ZERO, True),
    ("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", ZERO, True),
    (
        "daffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "d8e2c776bbacd510d09fd9278b7edcd25fc5ae9adfba3b6e040e8d3b71b21806",
        False,
    ),
    ("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", ZERO, True),
    (
        "dbffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "c85c655ebe8be44ba9c0ffde69f2fe10194458d137f09bbff725ce58803cdb38",
        False,
    ),
    (
        "d9ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "db64dafa9b8fdd136914e61461935fe92aa372cb056314e1231bc4ec12417456",
        False,
    ),
    (
        "cdeb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b880",
        "e062dcd5376d58297be2618c7498f55baa07d7e03184e8aada20bca28888bf7a",
        False,
    ),
    (
        "4c9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f11d7",
        "993c6ad11c4c29da9a56f7691fd0ff8d732e49de6250b6c2e80003ff4629a175",
        False,
    ),
]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "00"),
        (b"1234", "0431323334"),
        (bytes(range(127)), "7f" + bytes(range(127)).hex()),
        (bytes(range(128)), "8001" + bytes(range(128)).hex()),
    ],
)
def test_prepend_len_matches_appendix_a_1_2(data: bytes, expected: str) -> None:
    assert prepend_len(data).hex() == expected


def test_prepend_len_uses_several_leb128_bytes_for_long_strings() -> None:
    # 300 = 0b10_0101100: low seven bits 0x2c with the continuation bit, then 0x02.
    assert prepend_len(bytes(300))[:3] == bytes([0xAC, 0x02, 0x00])


def test_lv_cat_matches_appendix_a_1_4() -> None:
    assert lv_cat(b"1234", b"5", b"", b"678").hex() == "043132333401350003363738"


def test_transcript_ir_matches_appendix_a_3_5() -> None:
    first = transcript_ir(b"123", b"PartyA", b"234", b"PartyB")
    second = transcript_ir(b"3456", b"PartyA", b"2345", b"PartyB")
    assert first.hex() == "03313233065061727479410332333406506172747942"
    assert second.hex() == "043334353606506172747941043233343506506172747942"


def test_generator_string_pads_the_first_block() -> None:
    gen_str = generator_string(DSI, PRS, CI, SID, HASH_BLOCK_BYTES)
    assert gen_str == GENERATOR_STRING
    assert len(gen_str) == 170
    assert gen_str[18] == 109  # ZPAD length 109, as the draft lists, right after DSI and PRS


def test_generator_hash_and_decoded_field_element() -> None:
    gen_str_hash = hashlib.sha512(GENERATOR_STRING).digest()[:32]
    assert gen_str_hash == GENERATOR_HASH
    decoded = decode_u_coordinate(gen_str_hash)
    assert decoded.to_bytes(32, "little") == DECODED_FIELD_ELEMENT


def test_calculate_generator_matches_appendix_b_1_1() -> None:
    assert calculate_generator(PRS, CI, SID) == GENERATOR


def test_shares_match_appendix_b_1_2_and_b_1_3() -> None:
    assert scalar_mult_vfy(YA_SCALAR, GENERATOR) == YA
    assert scalar_mult_vfy(YB_SCALAR, GENERATOR) == YB


def test_secret_point_matches_appendix_b_1_4() -> None:
    assert scalar_mult_vfy(YA_SCALAR, YB) == K
    assert scalar_mult_vfy(YB_SCALAR, YA) == K


def test_isk_matches_appendix_b_1_5() -> None:
    assert DSI_ISK == DSI_ISK_HEX
    assert transcript_ir(YA, ADA, YB, ADB) == TRANSCRIPT_IR
    assert lv_cat(DSI_ISK, SID, K) + TRANSCRIPT_IR == ISK_INPUT
    assert intermediate_session_key(SID, K, TRANSCRIPT_IR) == ISK_IR


def test_a_full_run_with_the_vector_scalars_reproduces_the_vectors() -> None:
    initiator = CPaceRun(Role.INITIATOR, PRS, CI, SID, ADA, scalar=YA_SCALAR)
    responder = CPaceRun(Role.RESPONDER, PRS, CI, SID, ADB, scalar=YB_SCALAR)
    assert (initiator.share, responder.share) == (YA, YB)
    responder.receive(initiator.share, ADA)
    initiator.receive(responder.share, ADB)
    assert responder.verify(initiator.tag())
    assert initiator.verify(responder.tag())
    assert initiator.isk == responder.isk == ISK_IR


@pytest.mark.parametrize(("point", "expected", "aborts"), LOW_ORDER_CASES)
def test_scalar_mult_vfy_matches_appendix_b_1_10(point: str, expected: str, aborts: bool) -> None:
    result = scalar_mult_vfy(LOW_ORDER_SCALAR, bytes.fromhex(point))
    assert result.hex() == expected
    assert (result == IDENTITY) is aborts


@pytest.mark.parametrize(
    ("point", "role"),
    [(point, role) for point, _, aborts in LOW_ORDER_CASES if aborts for role in Role],
)
def test_a_run_aborts_on_a_low_order_share(point: str, role: Role) -> None:
    run = CPaceRun(role, PRS, CI, SID, b"AD")
    with pytest.raises(CPaceError, match="low-order"):
        run.receive(bytes.fromhex(point), b"peer AD")
