"""CPaceRun's behaviour: agreement, disagreement on any changed input, aborts and one-use rules."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from backend.components.cluster.pake import (
    IDENTITY,
    SHARE_BYTES,
    TAG_BYTES,
    CPaceError,
    CPaceRun,
    Role,
    calculate_generator,
    confirmation_mac_key,
    confirmation_tag,
    intermediate_session_key,
    sample_scalar,
    scalar_mult_vfy,
    transcript_ir,
)

PIN = b"483920"
CI = b"channel identifier"
SID = bytes(range(16))
AD_INITIATOR = b"joiner's associated data"
AD_RESPONDER = b"inviter's associated data"


@dataclass(frozen=True)
class Inputs:
    """One side's view of the run's inputs."""

    prs: bytes = PIN
    ci: bytes = CI
    sid: bytes = SID


@dataclass(frozen=True)
class Outcome:
    """What each side concluded, and what went over the wire."""

    initiator: CPaceRun
    responder: CPaceRun
    initiator_confirmed: bool
    responder_confirmed: bool
    initiator_tag: bytes
    responder_tag: bytes


def _run(
    initiator_view: Inputs = Inputs(),
    responder_view: Inputs = Inputs(),
    *,
    ad_seen_by_responder: bytes = AD_INITIATOR,
    initiator_scalar: bytes | None = None,
) -> Outcome:
    """Both sides of a run; each takes its tag before checking the peer's, so both conclude."""
    initiator = CPaceRun(
        Role.INITIATOR, *_fields(initiator_view), AD_INITIATOR, scalar=initiator_scalar
    )
    responder = CPaceRun(Role.RESPONDER, *_fields(responder_view), AD_RESPONDER)
    responder.receive(initiator.share, ad_seen_by_responder)
    initiator.receive(responder.share, AD_RESPONDER)
    initiator_tag, responder_tag = initiator.tag(), responder.tag()
    return Outcome(
        initiator=initiator,
        responder=responder,
        initiator_confirmed=initiator.verify(responder_tag),
        responder_confirmed=responder.verify(initiator_tag),
        initiator_tag=initiator_tag,
        responder_tag=responder_tag,
    )


def _fields(view: Inputs) -> tuple[bytes, bytes, bytes]:
    return view.prs, view.ci, view.sid


def test_the_right_pin_confirms_on_both_sides() -> None:
    outcome = _run()
    assert outcome.initiator_confirmed
    assert outcome.responder_confirmed
    assert outcome.initiator.isk == outcome.responder.isk
    assert len(outcome.initiator.isk) == 64
    assert len(outcome.initiator_tag) == len(outcome.responder_tag) == TAG_BYTES


@pytest.mark.parametrize(
    ("initiator_view", "responder_view"),
    [
        pytest.param(Inputs(prs=b"483921"), Inputs(), id="wrong PIN"),
        pytest.param(Inputs(ci=b"another channel"), Inputs(), id="different CI"),
        pytest.param(Inputs(), Inputs(sid=bytes(16)), id="different sid"),
    ],
)
def test_any_differing_input_fails_on_both_sides(
    initiator_view: Inputs, responder_view: Inputs
) -> None:
    outcome = _run(initiator_view, responder_view)
    assert not outcome.initiator_confirmed
    assert not outcome.responder_confirmed


def test_associated_data_altered_in_transit_fails_on_both_sides() -> None:
    outcome = _run(ad_seen_by_responder=b"joiner's associated data, edited")
    assert not outcome.initiator_confirmed
    assert not outcome.responder_confirmed


def test_no_isk_without_a_verified_tag() -> None:
    outcome = _run(Inputs(prs=b"000001"))
    with pytest.raises(RuntimeError, match="only after"):
        _ = outcome.initiator.isk
    with pytest.raises(RuntimeError, match="failed confirmation"):
        outcome.responder.tag()


def test_two_initiators_never_agree() -> None:
    # Role labels keep a run from being looped back into a second run of the same role.
    first = CPaceRun(Role.INITIATOR, PIN, CI, SID, AD_INITIATOR)
    second = CPaceRun(Role.INITIATOR, PIN, CI, SID, AD_RESPONDER)
    first.receive(second.share, AD_RESPONDER)
    second.receive(first.share, AD_INITIATOR)
    first_tag, second_tag = first.tag(), second.tag()
    assert not first.verify(second_tag)
    assert not second.verify(first_tag)


@pytest.mark.parametrize("role", list(Role))
def test_a_reflected_share_is_refused(role: Role) -> None:
    run = CPaceRun(role, PIN, CI, SID, AD_INITIATOR)
    with pytest.raises(CPaceError, match="equals ours"):
        run.receive(run.share, AD_INITIATOR)


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_a_share_of_the_wrong_length_is_refused(length: int) -> None:
    run = CPaceRun(Role.RESPONDER, PIN, CI, SID, AD_RESPONDER)
    with pytest.raises(CPaceError, match="32 bytes"):
        run.receive(b"\x09" * length, AD_INITIATOR)


def test_scalar_mult_vfy_maps_a_wrong_length_point_to_the_identity() -> None:
    assert scalar_mult_vfy(sample_scalar(), bytes(31)) == IDENTITY


def test_a_run_is_used_once() -> None:
    initiator = CPaceRun(Role.INITIATOR, PIN, CI, SID, AD_INITIATOR)
    responder = CPaceRun(Role.RESPONDER, PIN, CI, SID, AD_RESPONDER)
    with pytest.raises(RuntimeError, match="not received"):
        initiator.tag()
    initiator.receive(responder.share, AD_RESPONDER)
    with pytest.raises(RuntimeError, match="already received"):
        initiator.receive(responder.share, AD_RESPONDER)
    assert not initiator.verify(b"\x00" * TAG_BYTES)
    with pytest.raises(RuntimeError, match="already checked"):
        initiator.verify(b"\x00" * TAG_BYTES)


def test_an_aborted_run_cannot_be_resumed() -> None:
    responder = CPaceRun(Role.RESPONDER, PIN, CI, SID, AD_RESPONDER)
    with pytest.raises(CPaceError):
        responder.receive(IDENTITY, AD_INITIATOR)
    honest = CPaceRun(Role.INITIATOR, PIN, CI, SID, AD_INITIATOR)
    with pytest.raises(RuntimeError, match="already received"):
        responder.receive(honest.share, AD_INITIATOR)


def test_a_tag_of_the_wrong_length_is_just_wrong() -> None:
    initiator = CPaceRun(Role.INITIATOR, PIN, CI, SID, AD_INITIATOR)
    initiator.receive(CPaceRun(Role.RESPONDER, PIN, CI, SID, AD_RESPONDER).share, AD_RESPONDER)
    assert not initiator.verify(b"short")


def test_an_empty_password_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty password"):
        CPaceRun(Role.INITIATOR, b"", CI, SID, AD_INITIATOR)


def test_the_injected_scalar_decides_the_share() -> None:
    scalar = sample_scalar()
    first = CPaceRun(Role.INITIATOR, PIN, CI, SID, AD_INITIATOR, scalar=scalar)
    second = CPaceRun(Role.INITIATOR, PIN, CI, SID, AD_INITIATOR, scalar=scalar)
    assert first.share == second.share == scalar_mult_vfy(scalar, calculate_generator(PIN, CI, SID))


class TestPassiveObserver:
    """What someone who recorded a whole run (shares, ADs, tags) can and cannot do.

    CPace's claim is that such a recording gives no offline test of a PIN guess. A unit test
    cannot prove that; it can show where the secret lies. The PIN enters only through the
    generator, and the shares are that generator times secret scalars. The tags depend on K,
    which takes one of those scalars: with the initiator's scalar the tag is reproduced, with any
    other scalar it is not, even by someone who knows the right PIN. Checking a guess would
    mean finding a scalar linking a recorded share to the guess's generator, a discrete
    logarithm. Shares and tags are fresh in every run, so nothing repeats across runs either.
    """

    def _candidate_tag(self, outcome: Outcome, scalar: bytes) -> bytes:
        """The initiator's tag recomputed from the public record, completing K with ``scalar``."""
        initiator_share, responder_share = outcome.initiator.share, outcome.responder.share
        k = scalar_mult_vfy(scalar, responder_share)
        transcript = transcript_ir(initiator_share, AD_INITIATOR, responder_share, AD_RESPONDER)
        isk = intermediate_session_key(SID, k, transcript)
        return confirmation_tag(confirmation_mac_key(SID, isk), initiator_share, AD_INITIATOR)

    def test_the_initiator_scalar_reproduces_the_recorded_tag(self) -> None:
        scalar = sample_scalar()
        outcome = _run(initiator_scalar=scalar)
        assert self._candidate_tag(outcome, scalar) == outcome.initiator_tag

    def test_the_right_pin_with_any_other_scalar_does_not(self) -> None:
        outcome = _run()
        observer = CPaceRun(Role.INITIATOR, PIN, CI, SID, AD_INITIATOR)  # knows the right PIN
        observer_scalar = sample_scalar()
        assert self._candidate_tag(outcome, observer_scalar) != outcome.initiator_tag
        assert observer.share not in (outcome.initiator.share, outcome.responder.share)

    def test_runs_with_the_same_pin_share_nothing(self) -> None:
        first, second = _run(), _run()
        assert first.initiator.share != second.initiator.share
        assert first.responder.share != second.responder.share
        assert first.initiator_tag != second.initiator_tag
        assert first.responder_tag != second.responder_tag

    def test_fresh_shares_are_distinct_32_byte_strings(self) -> None:
        generator = calculate_generator(PIN, CI, SID)
        shares = {CPaceRun(Role.INITIATOR, PIN, CI, SID, b"").share for _ in range(64)}
        assert len(shares) == 64
        assert all(len(share) == SHARE_BYTES for share in shares)
        assert generator not in shares
        assert IDENTITY not in shares
