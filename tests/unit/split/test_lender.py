"""The member's rpc-server (``RpcServerLender``) with llama.cpp's real ``rpc-server``: started by
the first ``ensure()`` only, bound to 127.0.0.1, one process for concurrent callers, stopped when
idle but never while a tunnel holds it, stopped by ``close()``, replaced after a crash. Tests
named ``fake`` use a small script in its place for what the real one does not do on demand
(exit at once, never listen) and to read the arguments and environment it was given."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import stat
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psutil
import pytest

from backend.components.engines.rpc_binary import rpc_server_path
from backend.components.split.lender import (
    CACHE_DIR,
    LEDGER_NAME,
    RpcServerLender,
    RpcServerUnavailable,
)
from tests.unit.cluster.harness import eventually

pytest_plugins = ["tests.engines.fixtures"]

SHORT_IDLE_S = 0.3
MakeLender = Callable[..., RpcServerLender]

_LISTENING_FAKE = """
import json, os, socket, sys
args = sys.argv[1:]
record = {"argv": args, "env": {k: os.environ.get(k) for k in ("CUDA_DEVICE_ORDER", "LLAMA_CACHE")}}
with open(os.path.join(os.path.dirname(__file__), "started.json"), "w") as out:
    json.dump(record, out)
server = socket.socket()
server.bind((args[args.index("-H") + 1], int(args[args.index("-p") + 1])))
server.listen()
while True:
    server.accept()[0].close()
"""


class RecordingLedger:
    """Stands in for the engine ledger: what was recorded for a later broker to reap."""

    def __init__(self) -> None:
        self.recorded: dict[int, str] = {}

    async def record_process(self, engine: str, pid: int, create_time: float) -> None:
        self.recorded[pid] = engine

    async def forget_process(self, pid: int) -> None:
        self.recorded.pop(pid, None)


@pytest.fixture
def real_llama_server(llama_server_binary: Path) -> Path:
    """The installed llama-server, when an ``rpc-server`` of the same build lies beside it."""
    if rpc_server_path(llama_server_binary) is None:
        pytest.skip(
            f"no rpc-server beside {llama_server_binary}: llama.cpp was built without -DGGML_RPC=ON"
        )
    return llama_server_binary


@pytest.fixture
async def make_lender(tmp_path: Path) -> AsyncIterator[MakeLender]:
    """Builds lenders over a given llama-server, each closed (its rpc-server stopped) at the end."""
    made: list[RpcServerLender] = []

    def make(llama_server: Path | None, **options: object) -> RpcServerLender:
        lender = RpcServerLender(
            llama_server=lambda: llama_server,
            data_dir=tmp_path / "data",
            **options,  # type: ignore[arg-type]
        )
        made.append(lender)
        return lender

    yield make
    for lender in made:
        await lender.close()


def fake_llama_cpp(root: Path, rpc_server_body: str) -> Path:
    """A llama.cpp folder whose ``rpc-server`` is a Python script; returns its llama-server."""
    folder = root / "llama.cpp"
    folder.mkdir()
    llama_server = folder / "llama-server"
    llama_server.write_text("")
    rpc_server = folder / "rpc-server"
    rpc_server.write_text(f"#!{sys.executable}\n{rpc_server_body}")
    rpc_server.chmod(0o755)
    return llama_server


def rpc_servers_running() -> list[psutil.Process]:
    """Our child rpc-server processes that have not exited (one that exits while they are
    listed is not one)."""
    return [child for child in psutil.Process().children(recursive=True) if _rpc_server(child)]


def _rpc_server(process: psutil.Process) -> bool:
    try:
        running = process.status() != psutil.STATUS_ZOMBIE
        return running and "rpc-server" in " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return False


def gone(pid: int) -> bool:
    """Whether ``pid`` exited (a zombie not yet reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def non_loopback_ipv4() -> str | None:
    """An IPv4 address of this computer other than loopback, if it has one."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return str(address.address)
    return None


async def test_nothing_runs_until_the_first_ensure(
    real_llama_server: Path, make_lender: MakeLender, tmp_path: Path
) -> None:
    lender = make_lender(real_llama_server)
    await asyncio.sleep(0.2)
    assert lender.pid is None
    assert rpc_servers_running() == []
    port = await lender.ensure()
    assert [process.pid for process in rpc_servers_running()] == [lender.pid]
    assert await lender.ensure() == port  # the running one, not a second
    assert (tmp_path / "data" / CACHE_DIR / "rpc").is_dir()  # its tensor cache, in PAIR's data


async def test_it_listens_on_loopback_only(
    real_llama_server: Path, make_lender: MakeLender
) -> None:
    lender = make_lender(real_llama_server)
    port = await lender.ensure()
    assert lender.pid is not None
    listening = [
        connection.laddr
        for connection in psutil.Process(lender.pid).net_connections(kind="inet")
        if connection.status == psutil.CONN_LISTEN
    ]
    assert [(address.ip, address.port) for address in listening] == [("127.0.0.1", port)]
    other = non_loopback_ipv4()
    if other is not None:
        with pytest.raises(ConnectionRefusedError):
            await asyncio.wait_for(asyncio.open_connection(other, port), timeout=5)


@pytest.mark.skipif(sys.platform == "win32", reason="no SIGPIPE on Windows")
async def test_it_outlives_a_host_that_hangs_up_while_it_writes(
    real_llama_server: Path, make_lender: MakeLender
) -> None:
    # What a write to a vanished host raises in it; rpc-server does not ignore it itself.
    lender = make_lender(real_llama_server)
    port = await lender.ensure()
    assert lender.pid is not None
    os.kill(lender.pid, signal.SIGPIPE)
    await asyncio.sleep(0.5)
    assert psutil.Process(lender.pid).status() != psutil.STATUS_ZOMBIE
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.close()


async def test_concurrent_ensures_start_one_process(
    real_llama_server: Path, make_lender: MakeLender
) -> None:
    lender = make_lender(real_llama_server)
    ports = await asyncio.gather(*(lender.ensure() for _ in range(3)))
    assert len(set(ports)) == 1
    assert len(rpc_servers_running()) == 1


async def test_it_stops_once_unused_for_the_idle_time(
    real_llama_server: Path, make_lender: MakeLender
) -> None:
    lender = make_lender(real_llama_server, idle_s=SHORT_IDLE_S)
    await lender.ensure()
    pid = lender.pid
    assert pid is not None
    await eventually(lambda: lender.pid is None and gone(pid))


async def test_a_held_rpc_server_is_not_stopped_for_idleness(
    real_llama_server: Path, make_lender: MakeLender
) -> None:
    lender = make_lender(real_llama_server, idle_s=SHORT_IDLE_S)
    lender.hold()  # as a tunnel does before it asks for the port
    await lender.ensure()
    pid = lender.pid
    assert pid is not None
    await asyncio.sleep(SHORT_IDLE_S * 4)
    assert lender.pid == pid and not gone(pid)
    lender.release()
    await eventually(lambda: lender.pid is None and gone(pid))


async def test_close_stops_it_and_refuses_later_starts(
    real_llama_server: Path, make_lender: MakeLender
) -> None:
    ledger = RecordingLedger()
    lender = make_lender(real_llama_server, ledger=ledger)
    await lender.ensure()
    pid = lender.pid
    assert pid is not None
    assert ledger.recorded == {pid: LEDGER_NAME}  # a later broker reaps it if this one crashes
    await lender.close()
    assert gone(pid)
    assert ledger.recorded == {}
    with pytest.raises(RpcServerUnavailable, match="shutting down"):
        await lender.ensure()


async def test_an_rpc_server_that_dies_is_replaced_by_the_next_ensure(
    real_llama_server: Path, make_lender: MakeLender, caplog: pytest.LogCaptureFixture
) -> None:
    lender = make_lender(real_llama_server)
    await lender.ensure()
    crashed = lender.pid
    assert crashed is not None
    os.kill(crashed, signal.SIGKILL)
    await eventually(lambda: lender.pid is None)
    assert f"rpc-server (pid {crashed}) exited" in caplog.text
    await lender.ensure()
    assert lender.pid not in (None, crashed)
    assert len(rpc_servers_running()) == 1


async def test_fake_rpc_server_gets_loopback_a_cache_every_core_and_pci_order(
    tmp_path: Path, make_lender: MakeLender
) -> None:
    lender = make_lender(fake_llama_cpp(tmp_path, _LISTENING_FAKE))
    port = await lender.ensure()
    started = json.loads((tmp_path / "llama.cpp" / "started.json").read_text())
    threads = str(psutil.cpu_count(logical=False) or os.cpu_count() or 1)
    assert started["argv"] == ["-H", "127.0.0.1", "-p", str(port), "-c", "-t", threads]
    cache = tmp_path / "data" / CACHE_DIR
    assert started["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "LLAMA_CACHE": str(cache)}
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


async def test_fake_rpc_server_that_exits_at_once_is_refused_with_its_output(
    tmp_path: Path, make_lender: MakeLender
) -> None:
    exits = "print('bind failed: address in use', flush=True)\nraise SystemExit(3)\n"
    lender = make_lender(fake_llama_cpp(tmp_path, exits))
    with pytest.raises(RpcServerUnavailable) as refused:
        await lender.ensure()
    assert "exited with status 3 before it listened: bind failed: address in use" in str(
        refused.value
    )
    assert lender.pid is None


async def test_fake_rpc_server_that_never_listens_is_stopped_and_refused(
    tmp_path: Path, make_lender: MakeLender
) -> None:
    silent = "import time\nprint('loading devices', flush=True)\ntime.sleep(60)\n"
    # Long enough for the script to print (an interpreter start on a loaded machine).
    lender = make_lender(fake_llama_cpp(tmp_path, silent), listen_timeout_s=3.0)
    with pytest.raises(RpcServerUnavailable, match=r"did not listen .* loading devices"):
        await lender.ensure()
    await eventually(lambda: rpc_servers_running() == [])


async def test_without_llama_cpp_it_says_so(make_lender: MakeLender) -> None:
    with pytest.raises(RpcServerUnavailable, match=r"llama\.cpp is not installed on this computer"):
        await make_lender(None).ensure()


async def test_a_llama_cpp_without_rpc_server_says_so(
    tmp_path: Path, make_lender: MakeLender
) -> None:
    llama_server = fake_llama_cpp(tmp_path, "")
    (llama_server.parent / "rpc-server").unlink()
    with pytest.raises(
        RpcServerUnavailable, match=r"llama\.cpp's rpc-server is not installed on this computer"
    ):
        await make_lender(llama_server).ensure()
