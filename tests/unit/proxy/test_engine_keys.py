"""The key of an engine PAIR launched goes with every request to it, from both clients, in
place of the client's own credentials; no key goes to a peer or an engine added by address."""

from __future__ import annotations

import asyncio

from yarl import URL

from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.upstream.engine_client import EngineClient, _head
from backend.workers.proxy.upstream.engine_keys import EngineKeys

LOCAL = RouteTarget(
    node_id="me", kind="local", base_url="http://127.0.0.1:8081", models=["m"], api_key="k1"
)
ADDED = RouteTarget(node_id="box", kind="engine", base_url="http://10.0.0.9:8081", api_key="no")
PEER = RouteTarget(node_id="gpu", kind="peer", base_url="https://10.0.0.7:47821", api_key="no")


def test_only_this_computers_keyed_engines_have_a_key() -> None:
    keys = EngineKeys()
    seen: list[dict[tuple[str, int], str]] = []
    keys.on_change(lambda found: seen.append(dict(found)))
    table = ProxyTargets(node_id="me", engines={"llamacpp": [LOCAL, ADDED, PEER]})
    keys.follow(table)
    keys.follow(table)  # the same keys: nobody is told again
    assert seen == [{("127.0.0.1", 8081): "Bearer k1"}]
    keys.follow(ProxyTargets(node_id="me", engines={}))
    assert seen[-1] == {}


def test_the_head_carries_pairs_key_instead_of_the_clients() -> None:
    url = URL("http://127.0.0.1:8081/v1/chat/completions")
    client = {"Authorization": "Bearer sk-client", "Content-Type": "application/json"}
    head = _head("POST", url, "127.0.0.1", 8081, client, b"{}", "Bearer k1").decode()
    assert "Authorization: Bearer k1\r\n" in head and "sk-client" not in head
    plain = _head("POST", url, "127.0.0.1", 8081, client, b"{}").decode()
    assert "Authorization: Bearer sk-client\r\n" in plain, "an engine without a key: as before"


async def test_the_lean_client_sends_the_key_its_origin_has_now() -> None:
    heads: list[bytes] = []

    async def engine(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await reader.readuntil(b"\r\n\r\n"):
            heads.append(head)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            if reader.at_eof():
                break

    server = await asyncio.start_server(engine, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = URL(f"http://127.0.0.1:{port}/slots")
    engines = EngineClient()
    try:
        engines.use_keys({("127.0.0.1", port): "Bearer k1"})
        assert await (await engines.request("GET", url, {}, None)).read() == b"ok"
        engines.use_keys({("127.0.0.1", port): "Bearer k2"})  # relaunched with another key
        assert await (await engines.request("GET", url, {}, None)).read() == b"ok"
    finally:
        await engines.close()
        server.close()
        await server.wait_closed()
    assert [b"Authorization: Bearer k1" in heads[0], b"Authorization: Bearer k2" in heads[1]] == [
        True,
        True,
    ]
    assert "k1" not in repr(LOCAL), "a target's repr never shows its key"
