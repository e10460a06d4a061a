"""Network failures reach users as sentences: the paths that report them (discovery's probe, the
node-info and certificate reads of invites and add-node checks, pulls by URL) are made to fail
for real, on a closed port, an unresolvable name and a port that does not speak TLS."""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from backend.components.cluster import peer_client
from backend.components.discovery import probe
from backend.components.engines.http import EngineEndpoint, request_json
from backend.components.engines.model_store import ModelStore
from backend.core.plain_errors import plain_error
from backend.protocol import errors
from backend.protocol.types.base import EngineName
from tests.support.ports import refusing_port

UNRESOLVABLE = "no-such-host.invalid"
INTERNALS = ("object at 0x", "ssl:", "b'", 'b"', "Errno", "Error ", "Error:")


def assert_plain(text: str) -> None:
    for internal in INTERNALS:
        assert internal not in text, text


@pytest.fixture
async def plain_http_port() -> AsyncIterator[int]:
    """A loopback port that answers plain HTTP (what a TLS client meets on an engine's port)."""

    async def answer(_: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def failure_of(call: Callable[[], Awaitable[object]], kind: type[Exception]) -> str:
    with pytest.raises(kind) as raised:
        await call()
    assert_plain(str(raised.value))
    return str(raised.value)


async def probe_text(address: str, port: int, *, secure: bool) -> str:
    async with aiohttp.ClientSession() as session:
        return await failure_of(
            lambda: probe.get_json(session, address, port, "/v1/node-info", 3.0, secure=secure),
            probe.ProbeFailed,
        )


async def test_discovery_probes_say_refused_unresolved_or_not_tls(plain_http_port: int) -> None:
    with refusing_port() as closed:
        refused = await probe_text("127.0.0.1", closed, secure=True)
        assert refused.startswith(f"cannot connect to https://127.0.0.1:{closed}/")
        assert "connection refused" in refused
        assert "connection refused" in await probe_text("127.0.0.1", closed, secure=False)
    unresolved = await probe_text(UNRESOLVABLE, 9, secure=True)
    assert unresolved.startswith(f"the name {UNRESOLVABLE} did not resolve")
    not_tls = await probe_text("127.0.0.1", plain_http_port, secure=True)
    assert "does not speak TLS" in not_tls


async def test_invite_and_add_node_checks_read_plainly(plain_http_port: int) -> None:
    unreachable = peer_client.PeerUnreachable
    with refusing_port() as closed:
        text = await failure_of(lambda: peer_client.node_info("127.0.0.1", closed), unreachable)
        assert "connection refused" in text
        text = await failure_of(
            lambda: peer_client.server_certificate("127.0.0.1", closed), unreachable
        )
        assert text == f"cannot connect to 127.0.0.1:{closed}: connection refused " + (
            "(nothing listens there)"
        )
    text = await failure_of(lambda: peer_client.server_certificate(UNRESOLVABLE, 9), unreachable)
    assert f"the name {UNRESOLVABLE} did not resolve" in text
    text = await failure_of(lambda: peer_client.node_info(UNRESOLVABLE, 9), unreachable)
    assert f"the name {UNRESOLVABLE} did not resolve" in text
    text = await failure_of(
        lambda: peer_client.server_certificate("127.0.0.1", plain_http_port), unreachable
    )
    assert "does not speak TLS" in text
    text = await failure_of(
        lambda: peer_client.node_info("127.0.0.1", plain_http_port), unreachable
    )
    assert "does not speak TLS" in text


async def test_a_pull_by_url_says_why_the_download_failed(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "models")

    async def pull(url: str) -> object:
        async with aiohttp.ClientSession() as session:
            return await store.pull(
                session, url, "tiny", sha256=None, progress=lambda _: None, engine=ENGINE
            )

    with refusing_port() as closed:
        url = f"http://127.0.0.1:{closed}/tiny.gguf"
        text = await failure_of(lambda: pull(url), errors.Unavailable)
        assert text == f"cannot download tiny: cannot connect to {url}: " + (
            "connection refused (nothing listens there)"
        )
    text = await failure_of(lambda: pull(f"http://{UNRESOLVABLE}/tiny.gguf"), errors.Unavailable)
    assert f"the name {UNRESOLVABLE} did not resolve" in text


ENGINE = EngineName("llamacpp")


async def test_an_engine_that_is_not_there_is_said_plainly() -> None:
    with refusing_port() as closed:
        async with aiohttp.ClientSession() as session:
            engine = EngineEndpoint(
                ENGINE, "llama.cpp", f"http://127.0.0.1:{closed}", closed, session
            )
            text = await failure_of(
                lambda: request_json(engine, "GET", "/v1/models", None, timeout=5),
                errors.Unavailable,
            )
    assert text == f"llama.cpp is not reachable: cannot connect to port {closed}: " + (
        "connection refused (nothing listens there)"
    )


def test_a_silent_port_reads_differently_from_a_name_that_does_not_resolve() -> None:
    silent = plain_error(TimeoutError(), "192.0.2.1:14320")
    unresolved = plain_error(socket.gaierror(-2, "Name or service not known"), f"{UNRESOLVABLE}:1")
    assert silent == "192.0.2.1:14320 did not answer in time"
    assert unresolved.startswith(f"the name {UNRESOLVABLE} did not resolve")


def test_tls_failures_name_the_certificate_or_the_handshake() -> None:
    refused = ssl.SSLCertVerificationError(1, "certificate verify failed")
    refused.verify_message = "self-signed certificate"
    assert plain_error(refused, "a:1") == (
        "a:1 presented a certificate this computer refuses: self-signed certificate"
    )
    failed = ssl.SSLError(1, "[SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert unknown ca")
    failed.reason = "TLSV1_ALERT_UNKNOWN_CA"
    assert plain_error(failed, "a:1") == "the TLS handshake with a:1 failed: tlsv1 alert unknown ca"


def test_other_failures_never_show_python_internals() -> None:
    assert plain_error(aiohttp.ServerDisconnectedError(), "u") == (
        "u closed the connection without answering"
    )
    assert plain_error(ConnectionResetError(104, "Connection reset by peer"), "u") == (
        "u reset the connection"
    )
    assert plain_error(OSError(113, "No route to host"), "h:1") == (
        "cannot connect to h:1: no route to host"
    )
    odd = aiohttp.ClientError("<object object at 0x7f00>")
    assert plain_error(odd, "u") == "the connection to u failed"
