"""A LAN key's scope at the doors: inference keys get the inference APIs, model lists and the
engine's probes; only an admin key reaches this computer's engine's own paths (pull, delete,
slots...), and a refusal is a 403 in the client API's shape, logged in one line. Every use of a
key is noted and reported to the broker in batches; the jobs name the key and the source."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from unittest import mock

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer, make_mocked_request

from backend.common.secret_hash import hash_secret
from backend.components.apikeys.secret import new_secret
from backend.protocol.proxy import Door, DoorKey, ProxyTargets, RouteTarget
from backend.protocol.types.apikeys import KEY_USE_REPORT_S, KeysUsed
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.doors.app import build_app, gate
from backend.workers.proxy.doors.clients import job_client
from backend.workers.proxy.doors.gate import PROBE_PATHS, scope_refusal
from backend.workers.proxy.doors.key_use import REPORT_ENV, KeyUseLog, report_interval
from backend.workers.proxy.relay.serving import RelayBoard
from tests.fakes import FakeClock
from tests.unit.proxy.scripted_door import make_router

INFERENCE_SECRET, ADMIN_SECRET, UNNAMED_SECRET = new_secret(), new_secret(), new_secret()
INFERENCE_HASH, ADMIN_HASH = hash_secret(INFERENCE_SECRET), hash_secret(ADMIN_SECRET)
UNNAMED_HASH = hash_secret(UNNAMED_SECRET)
LAN_PEER = "192.168.1.20"
ADMIN_PATHS = [
    ("POST", "/api/pull"),
    ("DELETE", "/api/delete"),
    ("POST", "/api/create"),
    ("POST", "/api/copy"),
    ("POST", "/api/push"),
    ("POST", "/slots/0"),
    ("GET", "/slots"),
    ("POST", "/api/version"),
]


class Engine:
    """This computer's engine: answers 200 to anything and keeps what reached it."""

    def __init__(self) -> None:
        self.reached: list[tuple[str, str]] = []
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self._answer)

    async def _answer(self, request: web.Request) -> web.Response:
        self.reached.append((request.method, request.path))
        return web.json_response({"models": [], "object": "list", "data": []})


class Doors:
    """The ollama and openai doors over one router whose only engine is ``engine``."""

    def __init__(self, session: aiohttp.ClientSession, engine_url: str) -> None:
        self.reports: list[KeysUsed] = []
        self.key_use = KeyUseLog(self.reports.append, report_s=3600.0)
        router = make_router(session, clock=FakeClock(), rng=random.Random())
        local = [RouteTarget(node_id="self", kind="local", base_url=engine_url)]
        router.update(
            ProxyTargets(
                node_id="self",
                engines={"ollama": local, "lmstudio": local},
                lan_access=True,
                api_key_hashes=sorted([INFERENCE_HASH, ADMIN_HASH, UNNAMED_HASH]),
                api_keys={
                    INFERENCE_HASH: DoorKey(name="guest laptop"),
                    ADMIN_HASH: DoorKey(name="ops", scope="admin"),
                },
            )
        )
        self.router = router
        self.apps = {
            door: build_app(DoorContext(door, router, RelayBoard(), self.key_use))
            for door in ("ollama", "openai")
        }

    async def call(
        self, method: str, path: str, *, secret: str | None, door: Door = "ollama"
    ) -> web.StreamResponse:
        """``method path`` as another computer (``secret``: its key) or this one (None)."""
        peer = LAN_PEER if secret is not None else "127.0.0.1"
        headers = {"Host": "192.168.1.5:11434" if secret is not None else "localhost"}
        if secret is not None:
            headers["Authorization"] = f"Bearer {secret}"
        transport = mock.Mock()
        transport.get_extra_info.return_value = (peer, 50000)
        app = self.apps[door]
        request = make_mocked_request(method, path, headers=headers, app=app, transport=transport)
        match = await app.router.resolve(request)
        return await match.handler(request)


@pytest.fixture
async def engine() -> AsyncIterator[tuple[Engine, str]]:
    fake = Engine()
    server = TestServer(fake.app)
    await server.start_server()
    try:
        yield fake, str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


@pytest.fixture
async def doors(engine: tuple[Engine, str]) -> AsyncIterator[Doors]:
    async with aiohttp.ClientSession() as session:
        built = Doors(session, engine[1])
        try:
            yield built
        finally:
            await built.router.close()


@pytest.mark.parametrize(("method", "path"), ADMIN_PATHS)
async def test_an_inference_key_is_refused_the_engines_own_paths_naming_the_admin_scope(
    doors: Doors, engine: tuple[Engine, str], method: str, path: str
) -> None:
    answer = await doors.call(method, path, secret=INFERENCE_SECRET)
    assert isinstance(answer, web.Response) and answer.status == 403
    assert answer.text is not None and "admin scope" in answer.text and "--admin" in answer.text
    assert set(answer.content_type.split()) == {"application/json"}
    assert "insufficient_scope" in answer.headers["WWW-Authenticate"]
    assert engine[0].reached == [], "nothing reached the engine"


async def test_the_refusal_is_in_the_api_shape_of_the_path(doors: Doors) -> None:
    ollama = await doors.call("POST", "/api/pull", secret=INFERENCE_SECRET)
    assert isinstance(ollama, web.Response) and ollama.text is not None
    assert set(_json(ollama)) == {"error"}, "Ollama's shape"
    openai = await doors.call("POST", "/slots/0", secret=INFERENCE_SECRET, door="openai")
    error = _json(openai)["error"]
    assert error["code"] == "insufficient_scope" and "admin scope" in error["message"]


async def test_a_key_the_table_does_not_describe_is_an_inference_key(doors: Doors) -> None:
    answer = await doors.call("POST", "/api/pull", secret=UNNAMED_SECRET)
    assert answer.status == 403


async def test_an_admin_key_and_this_computer_reach_the_engines_own_paths(
    doors: Doors, engine: tuple[Engine, str]
) -> None:
    for method, path in ADMIN_PATHS:
        assert (await doors.call(method, path, secret=ADMIN_SECRET)).status == 200
        assert (await doors.call(method, path, secret=None)).status == 200
    assert engine[0].reached == [call for call in ADMIN_PATHS for _ in range(2)]


@pytest.mark.parametrize("path", sorted(PROBE_PATHS))
async def test_an_inference_key_may_probe_that_the_engine_is_there(
    doors: Doors, engine: tuple[Engine, str], path: str
) -> None:
    assert (await doors.call("GET", path, secret=INFERENCE_SECRET)).status == 200
    assert engine[0].reached == [("GET", path)]


async def test_an_inference_key_lists_models(doors: Doors, engine: tuple[Engine, str]) -> None:
    for path in ("/api/tags", "/api/ps", "/v1/models"):
        assert (await doors.call("GET", path, secret=INFERENCE_SECRET)).status == 200


async def test_a_refusal_is_logged_in_one_line_with_key_source_method_and_path(
    doors: Doors, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="backend.workers.proxy.doors.key_use")
    await doors.call("DELETE", "/api/delete", secret=INFERENCE_SECRET)
    [line] = [r.getMessage() for r in caplog.records if r.name.endswith("key_use")]
    assert "DELETE" in line and "/api/delete" in line and "guest laptop" in line
    assert LAN_PEER in line and "\n" not in line


async def test_refusals_from_one_source_are_logged_at_most_once_in_a_while(
    doors: Doors, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="backend.workers.proxy.doors.key_use")
    for _ in range(50):
        await doors.call("POST", "/api/pull", secret=INFERENCE_SECRET)
    assert len([r for r in caplog.records if r.name.endswith("key_use")]) == 1


async def test_every_use_of_a_key_is_reported_once_per_batch(doors: Doors) -> None:
    for _ in range(20):
        await doors.call("GET", "/api/tags", secret=INFERENCE_SECRET)
    await doors.call("POST", "/api/pull", secret=ADMIN_SECRET)
    await doors.call("POST", "/api/pull", secret=INFERENCE_SECRET)  # refused, but used
    await doors.call("GET", "/api/tags", secret=None)  # this computer: no key
    assert doors.reports == [], "nothing is sent per request"
    doors.key_use.flush()
    [report] = doors.reports
    assert set(report.used) == {INFERENCE_HASH, ADMIN_HASH}
    doors.key_use.flush()
    assert len(doors.reports) == 1, "nothing new: nothing sent"


async def test_uses_are_reported_after_the_report_interval_without_a_flush() -> None:
    reports: list[KeysUsed] = []
    times = iter([100.0, 101.0, 102.0])
    key_use = KeyUseLog(reports.append, report_s=0.01, wall=lambda: next(times))
    key_use.used("a")
    key_use.used("b")
    key_use.used("a")
    await _until(lambda: bool(reports))
    assert reports == [KeysUsed(used={"a": 102.0, "b": 101.0})]


def test_the_scope_rule() -> None:
    inference, admin = DoorKey(name="x"), DoorKey(name="y", scope="admin")
    assert scope_refusal(admin, "POST", "/api/pull", "ollama") is None
    refused = scope_refusal(inference, "POST", "/api/pull", "ollama")
    assert refused is not None and refused.status == 403
    assert scope_refusal(None, "DELETE", "/api/delete", "ollama") is not None
    assert scope_refusal(inference, "HEAD", "/", "ollama") is None
    assert scope_refusal(inference, "POST", "/", "ollama") is not None


async def test_a_job_names_the_key_or_loopback_and_the_source(doors: Doors) -> None:
    table = doors.router.table
    seen: dict[str, tuple[str | None, str | None]] = {}

    async def record(request: web.Request) -> web.StreamResponse:
        seen[request.headers.get("Authorization", "none")] = job_client(request, table)
        return web.json_response({})

    for secret in (INFERENCE_SECRET, UNNAMED_SECRET, None):
        await _gated_call(doors, record, secret)
    assert seen == {
        f"Bearer {INFERENCE_SECRET}": ("guest laptop", LAN_PEER),
        f"Bearer {UNNAMED_SECRET}": ("(unnamed key)", LAN_PEER),
        "none": ("loopback", "127.0.0.1"),
    }
    relayed = make_mocked_request("POST", "/api/chat")
    assert job_client(relayed, table) == (None, None), "a member's request: no door admitted it"


async def _gated_call(
    doors: Doors,
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    secret: str | None,
) -> web.StreamResponse:
    peer = LAN_PEER if secret is not None else "127.0.0.1"
    headers = {"Host": "192.168.1.5" if secret else "localhost"}
    if secret is not None:
        headers["Authorization"] = f"Bearer {secret}"
    transport = mock.Mock()
    transport.get_extra_info.return_value = (peer, 50000)
    request = make_mocked_request(
        "POST", "/api/chat", headers=headers, app=doors.apps["ollama"], transport=transport
    )
    return await gate(request, handler)


def _json(answer: web.StreamResponse) -> dict[str, Any]:
    assert isinstance(answer, web.Response) and answer.text is not None
    decoded: dict[str, Any] = json.loads(answer.text)
    return decoded


async def _until(check: Callable[[], bool]) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not within 5 s")


def test_the_report_interval_can_be_shortened_for_tests_only_to_a_positive_number() -> None:
    assert report_interval({}) == KEY_USE_REPORT_S
    assert report_interval({REPORT_ENV: "0.2"}) == 0.2
    for wrong in ("soon", "0", "-1"):
        assert report_interval({REPORT_ENV: wrong}) == KEY_USE_REPORT_S
