"""The node API's pairing routes under malformed and mutated messages: every answer is a clean
JSON 4xx (or a normal protocol answer), never a 500, and a real pairing still works afterwards."""

from __future__ import annotations

import json
import random
from pathlib import Path

import aiohttp
import msgspec

from backend.components.cluster import messages as m
from backend.components.cluster import peer_client
from backend.protocol.types.base import NodeId
from tests.fakes import FakeClock
from tests.unit.cluster.harness import Node, start_node, stop_node

SEED = 20261201
ROUNDS = 400


def _valid_bodies(invite_id: str, a: Node) -> dict[str, bytes]:
    share, sid, tag = b"\x09" + bytes(31), bytes(16), bytes(64)
    return {
        m.INVITE_PATH: msgspec.json.encode(
            m.InviteOffer(
                invite_id=invite_id,
                node_id=a.node_id,
                name="x",
                cert_der=a.credentials.cert_der,
                node_port=1,
                expires_in_s=10,
            )
        ),
        m.START_PATH: msgspec.json.encode(
            m.Start(invite_id=invite_id, sid=sid, share=share, ad=b"{}")
        ),
        m.CONFIRM_PATH: msgspec.json.encode(m.Confirm(invite_id=invite_id, tag=tag)),
        m.FINISH_PATH: msgspec.json.encode(m.Finish(invite_id=invite_id, box=bytes(48))),
        m.CANCEL_PATH: msgspec.json.encode(m.InviteEnd(invite_id=invite_id)),
        m.HELLO_PATH: msgspec.json.encode(m.Hello(invite_id=invite_id)),
    }


def _mutate(body: bytes, chooser: random.Random) -> bytes:
    """One random change: a flipped byte, a cut, a field of another type, or noise."""
    kind = chooser.randrange(5)
    if kind == 0 and body:
        at = chooser.randrange(len(body))
        return body[:at] + bytes([body[at] ^ (1 << chooser.randrange(8))]) + body[at + 1 :]
    if kind == 1:
        return body[: chooser.randrange(len(body) + 1)]
    if kind == 2:
        document = json.loads(body)
        key = chooser.choice(sorted(document))
        document[key] = chooser.choice([None, -1, 10**30, "", "ä" * 300, [], {}, True, 1.5])
        return json.dumps(document).encode()
    if kind == 3:
        document = json.loads(body)
        document[chooser.choice(["extra", "invite_id", "__proto__"])] = "x" * 40
        return json.dumps(document).encode()
    return bytes(chooser.randrange(256) for _ in range(chooser.randrange(200)))


async def test_mutated_pairing_messages_never_break_the_node_api(tmp_path: Path) -> None:
    clock = FakeClock(start=1_700_000_000.0)
    a = await start_node(tmp_path, "desk", clock, NodeId("aaaaaaaa-0000-4000-8000-0000000000f1"))
    b = await start_node(tmp_path, "laptop", clock, NodeId("bbbbbbbb-0000-4000-8000-0000000000f2"))
    try:
        for node in (a, b):  # both take invites, so offers reach the deepest checks
            node.service.open_join_window(15)
        created = await a.service.invite("127.0.0.1", b.port)
        bodies = _valid_bodies(created.invite.id, a)
        chooser = random.Random(SEED)
        context = peer_client.pinned_anonymous_context(a.credentials.cert_der)
        statuses: set[int] = set()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            for _ in range(ROUNDS):
                path = chooser.choice(sorted(bodies))
                body = _mutate(bodies[path], chooser)
                async with session.post(f"https://127.0.0.1:{a.port}{path}", data=body) as answer:
                    statuses.add(answer.status)
                    assert answer.status < 500, (path, body[:60], await answer.text())
                    assert isinstance(await answer.json(content_type=None), dict)
        assert 400 in statuses, "the mutations were refused, not ignored"
        # The node still pairs: a fresh invite with the right PIN completes.
        for node in (a, b):
            await node.service.expire()
        clock.now += 301
        await a.service.expire()
        await b.service.expire()
        b.service.open_join_window(10)
        again = await a.service.invite("127.0.0.1", b.port)
        assert again.invite.state == "pending", again.invite.reason
        assert (await b.service.accept(again.invite.id, again.pin)).state == "paired"
    finally:
        for node in (a, b):
            await stop_node(node)
