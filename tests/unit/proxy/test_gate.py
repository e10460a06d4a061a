"""Who may use a front door: loopback peers, loopback Host names, loopback Origins; other
computers only with LAN access on and a valid key; and which credentials travel on."""

from __future__ import annotations

import random
import ssl
from unittest import mock

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from backend.common.secret_hash import hash_secret
from backend.components.apikeys.secret import new_secret
from backend.protocol.proxy import ProxyTargets
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.doors.app import CONTEXT_KEY, build_app, gate
from backend.workers.proxy.doors.gate import (
    FOREIGN_ORIGIN,
    KEY_INVALID,
    KEY_MISSING,
    LAN_ACCESS_OFF,
    Refusal,
    bearer_token,
    host_allowed,
    key_accepted,
    origin_allowed,
    peer_allowed,
    refusal,
)
from backend.workers.proxy.relay.serving import RelayBoard
from backend.workers.proxy.upstream.attempt import Failure, Timeouts, on_this_computer, precommit
from backend.workers.proxy.upstream.forward import (
    LAN_CLIENT_KEY,
    request_headers,
    without_credentials,
)
from tests.fakes import FakeClock
from tests.unit.proxy.scripted_door import make_router

SECRET = new_secret()
HASHES = [hash_secret(new_secret()), hash_secret(SECRET)]
LAN_PEER = "192.168.1.20"
LAN_HOST = "192.168.1.5:11434"


@pytest.mark.parametrize(
    ("peer", "allowed"),
    [
        ("127.0.0.1", True),
        ("127.8.9.1", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("192.168.1.20", False),
        ("::ffff:192.168.1.20", False),
        ("fe80::1%eth0", False),
        (None, False),
        ("not-an-ip", False),
    ],
)
def test_only_loopback_peers_pass(peer: str | None, allowed: bool) -> None:
    assert peer_allowed(peer) is allowed


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("localhost", True),
        ("LOCALHOST:11434", True),
        ("127.0.0.1", True),
        ("127.0.0.1:8080", True),
        ("[::1]", True),
        ("[::1]:1234", True),
        (None, True),
        ("attacker.example", False),
        ("attacker.example:11434", False),
        ("localhost.attacker.example", False),
        ("127.0.0.1.nip.io", False),
        ("localhost:abc", False),
        ("[::1]x", False),
        ("[::1", False),
        ("", False),
    ],
)
def test_host_header_must_name_this_computer(host: str | None, allowed: bool) -> None:
    assert host_allowed(host) is allowed


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, True),
        ("http://localhost:3000", True),
        ("https://127.0.0.1", True),
        ("http://[::1]:8080", True),
        ("https://evil.example", False),
        ("http://localhost.evil.example", False),
        ("null", False),
        ("file://", False),
        ("http://localhost:notaport", False),
    ],
)
def test_browser_origin_must_be_loopback(origin: str | None, allowed: bool) -> None:
    assert origin_allowed(origin) is allowed


def _message(refused: Refusal | None) -> str:
    return refused.message if refused is not None else ""


def test_refusal_names_the_first_failed_check() -> None:
    assert refusal("127.0.0.1", "localhost:11434", None) is None
    assert "loopback" in _message(refusal("10.0.0.5", "localhost", None))
    assert "Host" in _message(refusal("127.0.0.1", "evil.example", None))
    assert "cross-origin" in _message(refusal("127.0.0.1", "localhost", "https://evil.example"))


def _lan(
    authorization: str | None, *, lan_access: bool = True, origin: str | None = None
) -> Refusal | None:
    return refusal(
        LAN_PEER,
        LAN_HOST,
        origin,
        authorization=authorization,
        lan_access=lan_access,
        key_hashes=HASHES,
    )


def test_loopback_needs_no_key_whatever_lan_access_says() -> None:
    for lan_access in (False, True):
        for authorization in (None, "Bearer anything-at-all", f"Bearer {SECRET}"):
            decided = refusal(
                "127.0.0.1",
                "localhost:11434",
                None,
                authorization=authorization,
                lan_access=lan_access,
                key_hashes=HASHES,
            )
            assert decided is None
    assert _message(refusal("::1", "evil.example", None, lan_access=True)).startswith("the Host")


def test_lan_access_off_refuses_another_computer_with_403_even_with_a_good_key() -> None:
    for authorization in (None, f"Bearer {SECRET}"):
        assert _lan(authorization, lan_access=False) == Refusal(403, LAN_ACCESS_OFF)
    assert "loopback" in LAN_ACCESS_OFF and "lan_access" in LAN_ACCESS_OFF


def test_lan_without_a_key_is_401_saying_how_to_get_one() -> None:
    for authorization in (None, "", "Bearer", "Bearer   ", f"Basic {SECRET}", SECRET):
        refused = _lan(authorization)
        assert refused == Refusal(401, KEY_MISSING), authorization
    assert "pair api-key create" in KEY_MISSING
    assert Refusal(401, KEY_MISSING).kind == "authentication_error"


def test_lan_with_a_wrong_key_is_401() -> None:
    for wrong in (new_secret(), SECRET[:-1], SECRET + "x", hash_secret(SECRET), "pair-é"):
        assert _lan(f"Bearer {wrong}") == Refusal(401, KEY_INVALID), wrong
    assert "pair api-key create" in KEY_INVALID


def test_lan_with_a_good_key_passes_with_its_network_host_but_not_a_foreign_origin() -> None:
    assert _lan(f"Bearer {SECRET}") is None
    assert _lan(f"bearer  {SECRET} ") is None, "the scheme is case-insensitive (RFC 9110)"
    assert _lan(f"Bearer {SECRET}", origin="http://localhost:3000") is None
    foreign = _lan(f"Bearer {SECRET}", origin="https://evil.example")
    assert foreign is not None and foreign.status == 403
    no_keys = refusal(LAN_PEER, LAN_HOST, None, authorization=f"Bearer {SECRET}", lan_access=True)
    assert no_keys == Refusal(401, KEY_INVALID), "no key is valid before one is created"


def test_an_anthropic_clients_x_api_key_is_a_lan_key_too() -> None:
    def lan(api_key: str | None, authorization: str | None = None) -> Refusal | None:
        return refusal(
            LAN_PEER,
            LAN_HOST,
            None,
            authorization=authorization,
            api_key=api_key,
            lan_access=True,
            key_hashes=HASHES,
        )

    assert lan(SECRET) is None
    assert lan(f" {SECRET} ") is None
    assert lan(SECRET[:-1]) == Refusal(401, KEY_INVALID)
    assert lan("") == Refusal(401, KEY_MISSING)
    assert lan(new_secret(), authorization=f"Bearer {SECRET}") is None, "the bearer token first"
    assert "x-api-key" in KEY_MISSING


async def test_a_lan_clients_x_api_key_goes_to_no_engine() -> None:
    open_door = _door(ProxyTargets(lan_access=True, api_key_hashes=HASHES))
    headers = {"Host": LAN_HOST, "x-api-key": SECRET}
    served, reached = await _through_gate(open_door, LAN_PEER, headers)
    assert served.status == 200 and len(reached) == 1
    assert "x-api-key" not in request_headers(reached[0], credentials=True)


def test_origins_of_the_allowed_origins_setting_pass_and_others_stay_refused() -> None:
    extension = "chrome-extension://abcdefghijklmnop"
    assert not origin_allowed(extension), "refused unless allowed"
    allowed = ["chrome-extension://*", "app://obsidian.md"]
    assert origin_allowed(extension, allowed)
    assert origin_allowed("APP://Obsidian.md", allowed), "any case"
    assert not origin_allowed("moz-extension://x", allowed)
    assert not origin_allowed("https://evil.example", allowed)
    assert origin_allowed("https://evil.example", ["*"]), "the user's own choice"
    passed = refusal("127.0.0.1", "localhost", extension, allowed_origins=allowed)
    assert passed is None
    refused = refusal("127.0.0.1", "localhost", extension)
    assert refused == Refusal(403, FOREIGN_ORIGIN) and "allowed_origins" in FOREIGN_ORIGIN


def test_bearer_tokens_and_key_checks() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("BEARER abc") == "abc"
    assert bearer_token("Token abc") is None
    assert bearer_token(None) is None
    assert key_accepted(SECRET, HASHES)
    assert not key_accepted(SECRET, [])
    assert not key_accepted("\udcff", HASHES), "a header that is not ASCII is no key"


def _door(targets: ProxyTargets) -> web.Application:
    router = make_router(mock.Mock(), clock=FakeClock(), rng=random.Random())
    router.update(targets)
    return build_app(DoorContext("ollama", router, RelayBoard()))


async def _through_gate(
    app: web.Application, peer: str, headers: dict[str, str]
) -> tuple[web.StreamResponse, list[web.Request]]:
    transport = mock.Mock()
    transport.get_extra_info.return_value = (peer, 50000)
    request = make_mocked_request("GET", "/api/tags", headers=headers, app=app, transport=transport)
    assert request.app[CONTEXT_KEY].door == "ollama"
    reached: list[web.Request] = []

    async def engine(passed: web.Request) -> web.StreamResponse:
        reached.append(passed)
        return web.json_response({"models": []})

    return await gate(request, engine), reached


async def test_the_door_refuses_lan_clients_in_the_api_shape_and_admits_a_good_key() -> None:
    open_door = _door(ProxyTargets(lan_access=True, api_key_hashes=HASHES))
    missing, reached = await _through_gate(open_door, LAN_PEER, {"Host": LAN_HOST})
    assert isinstance(missing, web.Response) and missing.status == 401 and not reached
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert missing.text is not None and "pair api-key create" in missing.text
    closed = _door(ProxyTargets(lan_access=False, api_key_hashes=HASHES))
    headers = {"Host": LAN_HOST, "Authorization": f"Bearer {SECRET}", "X-Client": "kept"}
    off, reached = await _through_gate(closed, LAN_PEER, headers)
    assert off.status == 403 and not reached

    served, reached = await _through_gate(open_door, LAN_PEER, headers)
    assert served.status == 200 and len(reached) == 1
    assert reached[0][LAN_CLIENT_KEY] is True
    for credentials in (True, False):
        passed_on = request_headers(reached[0], credentials=credentials)
        assert "Authorization" not in passed_on, "the PAIR key goes to no engine"
        assert passed_on["X-Client"] == "kept"


async def test_a_local_clients_credentials_reach_only_this_computers_engines() -> None:
    door = _door(ProxyTargets())
    headers = {
        "Host": "localhost",
        "Authorization": "Bearer own",
        "Cookie": "a=1",
        "X-Api-Key": "k",
    }
    served, reached = await _through_gate(door, "127.0.0.1", headers)
    assert served.status == 200 and reached[0][LAN_CLIENT_KEY] is False
    assert request_headers(reached[0])["Authorization"] == "Bearer own"
    stripped = request_headers(reached[0], credentials=False)
    assert {"authorization", "cookie", "x-api-key"}.isdisjoint(k.lower() for k in stripped)
    kept = without_credentials(CIMultiDict({"Authorization": "x", "Accept": "*/*"}))
    assert list(kept.items()) == [("Accept", "*/*")]


@pytest.mark.parametrize(
    ("url", "tls", "here"),
    [
        ("http://127.0.0.1:11435/api/chat", True, True),
        ("http://[::1]:8080/v1/chat/completions", True, True),
        ("http://localhost:1234/v1/models", True, True),
        ("http://192.168.1.30:11434/api/chat", True, False),
        ("http://engine.lan:11434/api/chat", True, False),
        ("https://127.0.0.2:14321/_pair/relay/ollama/api/chat", True, False),
        ("http://127.0.0.1:14321/x", ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), False),
    ],
)
def test_precommit_sends_credentials_only_to_an_engine_on_this_computer(
    url: str, tls: ssl.SSLContext | bool, here: bool
) -> None:
    assert on_this_computer(url, tls) is here


async def test_precommit_strips_credentials_on_the_way_off_this_computer() -> None:
    seen: dict[str, CIMultiDict[str]] = {}

    async def request(method: str, url: object, *, headers: CIMultiDict[str], **_: object) -> None:
        seen[str(url)] = CIMultiDict(headers)
        raise aiohttp.ClientConnectionError("recorded")

    session = mock.Mock(spec=aiohttp.ClientSession)
    session.request = request
    headers = CIMultiDict({"Authorization": "Bearer own", "Cookie": "a=1", "Accept": "*/*"})
    timeouts = Timeouts(headers=1.0, first_content=1.0)
    for url in ("http://127.0.0.1:11435/api/chat", "http://192.168.1.30:11434/api/chat"):
        failed = await precommit(session, "POST", url, headers, b"{}", timeouts, inference=True)
        assert isinstance(failed, Failure) and failed.kind == "transport"
    local, remote = seen.values()
    assert (local["Authorization"], local["Cookie"]) == ("Bearer own", "a=1")
    assert list(remote.items()) == [("Accept", "*/*")]
