"""The member link as the sign of a member's liveness: a link on which nothing arrives any more
(the member vanished without closing it) goes down on its own, a quiet but live one stays up,
a member that was up a moment ago is dialled again quickly, and the board says which members
are linked (the routing table follows that)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from backend.components.federation import link as link_module
from backend.components.federation import websocket
from backend.components.federation.component import MemberEnginesBoard
from backend.components.federation.link import BACKOFF_S, RECENT_BACKOFF_S
from backend.core.rpc import ClientHub, NumberedStream
from backend.protocol import methods
from backend.protocol.types.engines import MemberEngines
from tests.unit.cluster.harness import A_ID, B_ID, C_ID, free_port
from tests.unit.federation.member_server import MemberServer, member_server, until
from tests.unit.federation.test_link import ScriptedMember, Sinks, quick_clock, running_link


class SilencingProxy:
    """Moves bytes between a link and B's server until ``silence()``: from then on it drops
    everything both ways and closes nothing, as a dead Wi-Fi link or a blackholed route does."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._silent = False
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accepted, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def silence(self) -> None:
        self._silent = True

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._port)
        self._writers += [writer, up_writer]
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await source.read(65536):
                if not self._silent:
                    sink.write(data)
                    await sink.drain()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[MemberServer]:
    async with member_server(tmp_path) as server:
        yield server


@pytest.fixture
def member(server: MemberServer) -> ScriptedMember:
    return ScriptedMember(server)


@pytest.fixture
def quick_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pings every 0.1 s, dead after 0.6 s of silence (the rule, at a test's pace)."""
    monkeypatch.setattr(websocket, "HEARTBEAT_S", 0.1)
    monkeypatch.setattr(websocket, "SILENCE_LIMIT_S", 0.6)


@pytest.mark.usefixtures("quick_heartbeat")
async def test_a_link_on_which_nothing_arrives_any_more_goes_down_on_its_own(
    server: MemberServer, member: ScriptedMember
) -> None:
    proxy = SilencingProxy(server.port)
    port = await proxy.start()
    sinks = Sinks()
    try:
        async with running_link(server, sinks, addresses=lambda: [("127.0.0.1", port)]) as link:
            await until(lambda: link.state.reachable)
            proxy.silence()  # no FIN, no RST: only the link's own heartbeat can tell
            await until(lambda: not link.state.reachable, timeout=10.0)
            assert "nothing was heard" in (link.state.error or "")
            # Closed before the link stops: its next dial, into the silence, would hold the
            # link's cancellation until its handshake timed out.
            await proxy.close()
    finally:
        await proxy.close()


@pytest.mark.usefixtures("quick_heartbeat")
async def test_a_quiet_but_live_link_stays_up_on_pongs_alone(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    async with running_link(server, sinks) as link:
        await until(lambda: link.state.reachable)
        await asyncio.sleep(2.0)  # more than three silence limits without a message
        assert link.state.reachable
        assert member.engine_subscribes == 1, "the link never dropped and came back"
        assert [state.reachable for state in sinks.engines] == [True]


async def test_a_member_that_was_up_a_moment_ago_is_dialled_again_within_seconds(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    clock = quick_clock()
    where = server.addresses()
    async with running_link(server, sinks, clock, addresses=lambda: where) as link:
        await until(lambda: link.state.reachable)
        where = [("127.0.0.1", free_port())]
        await server.b.service.roster.remove(A_ID)  # B closes the link; its address is gone
        await until(lambda: len(clock.sleeps) >= 4)
    assert clock.sleeps[:4] == [0.5, 1.0, 2.0, 2.0]
    assert max(RECENT_BACKOFF_S) < max(BACKOFF_S)


async def test_an_address_that_hangs_does_not_hold_up_the_link_at_another(
    server: MemberServer, member: ScriptedMember, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(link_module, "CONNECT_TIMEOUT_S", 60.0)

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # takes the TCP connection, never says a word of TLS

    hanging = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = hanging.sockets[0].getsockname()[1]
    addresses = [("127.0.0.1", port), *server.addresses()]
    sinks = Sinks()
    try:
        async with running_link(server, sinks, addresses=lambda: addresses) as link:
            await until(lambda: link.state.reachable, timeout=10.0)
    finally:
        hanging.close()


def test_the_board_lists_the_members_whose_link_is_up() -> None:
    board = MemberEnginesBoard(NumberedStream(methods.ENGINE_EVENT, ClientHub()))
    board.changed(MemberEngines(node_id=B_ID, name="laptop", reachable=True))
    board.changed(MemberEngines(node_id=C_ID, name="tower", reachable=False))
    assert board.linked() == {B_ID}
    board.changed(MemberEngines(node_id=B_ID, name="laptop", reachable=False))
    assert board.linked() == frozenset()
