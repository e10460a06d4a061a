"""A real broker process: its RPC surface, bad input, single instance, CLI, shutdown."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from backend.common import buildinfo
from backend.protocol import errors
from backend.protocol.endpoint import open_control_connection
from tests.integration.conftest import ROOT, Broker, node_argv, serving_broker

StartBroker = Callable[..., Broker]


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker with the test worker, for the tests that leave it as a fresh one would serve
    them: they read it, report and clear their own errors, set settings no other test reads, or
    send it garbage it must survive. A test that restarts a worker starts its own broker (the
    new worker process would count as the test's leak)."""
    folder = tmp_path_factory.mktemp("shared-broker")
    with serving_broker(folder, "--test-worker", "healthy") as broker:
        yield broker


async def test_ping_version_and_status_describe_the_running_broker(shared_broker: Broker) -> None:
    broker = shared_broker
    async with broker.connect() as client:
        ping = await client.call("ping")
        assert ping["pong"] is True and ping["uptime_ms"] >= 0
        version = await client.call("version")
        assert version["protocol"] == 1
        assert version["commit"] == buildinfo.commit()  # the checkout's, or the build's
        status = await client.call("status")
        assert status["pid"] == broker.process.pid
        assert status["data_dir"] == str(broker.data_dir.resolve())
        names = {component["name"]: component for component in status["components"]}
        assert names["control"]["status"] == "running"
        assert names["testworker"]["kind"] == "worker"
        assert names["testworker"]["pid"] != broker.process.pid
        app_ready = await client.wait_push("app:ready")
        assert app_ready["pid"] == broker.process.pid
    assert stat.S_IMODE(os.stat(broker.address).st_mode) == 0o600


async def test_several_clients_share_the_broker_and_all_get_error_pushes(
    shared_broker: Broker,
) -> None:
    broker = shared_broker
    async with broker.connect() as first, broker.connect() as second:
        await first.call(
            "errors:report", {"id": "gpu:hot", "message": "GPU at 95 °C", "severity": "warning"}
        )
        for client in (first, second):
            update = await client.wait_push("errors:update", lambda entries: len(entries) == 1)
            assert update[0]["id"] == "gpu:hot" and update[0]["node_id"]
        assert [entry["id"] for entry in await second.call("errors:get-initial")] == ["gpu:hot"]
        await second.call("errors:clear", {"id": "gpu:hot"})
        await first.wait_push("errors:update", lambda entries: entries == [])
        with pytest.raises(errors.InvalidParams, match="id must not be empty"):
            await first.call("errors:report", {"id": "", "message": "x"})
        with pytest.raises(errors.InvalidParams, match="message"):
            await first.call("errors:report", {"id": "x"})


async def test_settings_are_validated_persisted_0600_and_pushed(shared_broker: Broker) -> None:
    broker = shared_broker
    async with broker.connect() as client:
        with pytest.raises(errors.InvalidParams, match="expects a string; got int"):
            await client.call("settings/set", {"values": {"node_name": 5}})
        with pytest.raises(errors.InvalidParams, match="must be an object"):
            await client.call("settings/set", [1, 2])
        snapshot = await client.call("settings/set", {"values": {"node_name": "gpu-box"}})
        assert snapshot["values"]["node_name"] == "gpu-box"
        await client.wait_push("settings:changed", lambda s: s["values"]["node_name"] == "gpu-box")
        assert (await client.call("status"))["node_name"] == "gpu-box"
        assert await client.call("log/set-level", {"level": "debug"}) == {"level": "debug"}
        with pytest.raises(errors.InvalidParams):
            await client.call("log/set-level", {"level": "verbose"})
    path = broker.data_dir / "settings.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["log_level"] == "debug"


async def _send_a_stray_response(broker: Broker, request_id: int) -> None:
    """A response to nothing the broker asked, which it logs at debug level; then a ping, whose
    answer says the response has been handled."""
    reader, writer = await open_control_connection(broker.address)
    try:
        stray = {"jsonrpc": "2.0", "id": request_id, "result": None}
        writer.write(json.dumps(stray).encode() + b"\n")
        writer.write(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
        await writer.drain()
        while json.loads(await asyncio.wait_for(reader.readline(), 10)).get("id") != 1:
            pass
    finally:
        writer.close()
        await writer.wait_closed()


def _logged_stray(broker: Broker, request_id: int) -> bool:
    needle = f"response to unknown id {request_id} ignored"
    return any(r["level"] == "debug" and needle in r["msg"] for r in broker.logs())


async def test_the_command_line_log_level_holds_until_log_set_level_changes_it(
    start_broker: StartBroker,
) -> None:
    broker = start_broker("--log-level", "debug")
    async with broker.connect() as client:
        await client.call("settings/set", {"values": {"node_name": "gpu-box"}})
        await client.call("settings/set", {"values": {"proxy_pinned_node": "node-b"}})
        await _send_a_stray_response(broker, 901)
        assert _logged_stray(broker, 901), "a settings change dropped --log-level debug"
        assert await client.call("log/set-level", {"level": "warning"}) == {"level": "warning"}
        await _send_a_stray_response(broker, 902)
        assert not _logged_stray(broker, 902)
    assert json.loads((broker.data_dir / "settings.json").read_text())["log_level"] == "warning"


async def test_components_subscription_is_a_snapshot_then_numbered_events(
    start_broker: StartBroker,
) -> None:
    broker = start_broker("--test-worker", "healthy")
    async with broker.connect() as client:
        snapshot = await client.call("components:subscribe")
        assert {c["name"] for c in snapshot["components"]} == {
            "cluster",
            "control",
            "discovery",
            "engines",
            "nodeinfo",
            "federation",
            "node-api",
            "proxy",
            "replicas",
            "spread",
            "jobs",
            "testworker",
        }
        await client.call("components:restart", {"name": "testworker"})
        event = await client.wait_push(
            "components:event", lambda e: e["component"]["status"] == "running"
        )
        seqs = [params["seq"] for name, params in client.pushes if name == "components:event"]
        assert seqs == list(range(snapshot["seq"] + 1, snapshot["seq"] + 1 + len(seqs)))
        assert event["event"] == "component_changed"
        with pytest.raises(errors.NotFound):
            await client.call("components:restart", {"name": "nope"})


async def test_garbage_on_the_control_socket_gets_errors_and_the_connection_lives(
    shared_broker: Broker,
) -> None:
    broker = shared_broker
    reader, writer = await open_control_connection(broker.address, limit=2**20)
    oversized = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":["' + b"a" * (17 * 2**20)
    writer.write(b"\x00\xff garbage\n" + b'{"jsonrpc":"2.0","id":7,\n' + b'{"id":8}\n')
    writer.write(oversized + b'"]}\n')
    writer.write(b'{"jsonrpc":"2.0","id":9,"method":"no/such"}\n')
    writer.write(b'{"jsonrpc":"2.0","id":10,"method":"ping"}\n')
    await writer.drain()
    replies = []
    while len(replies) < 6:
        line = await asyncio.wait_for(reader.readline(), 20)
        message = json.loads(line)
        if "method" not in message:  # skip pushes such as app:ready
            replies.append(message)
    codes = [reply.get("error", {}).get("code") for reply in replies]
    assert codes == [-32700, -32700, -32600, -32600, -32601, None]
    assert replies[3]["error"]["data"]["reason"] == "frame-too-large"
    assert replies[5]["result"]["pong"] is True
    writer.close()
    assert broker.process.poll() is None


def test_garbage_on_stdin_never_reaches_stdout_as_non_frames_and_eof_stops(tmp_path: Path) -> None:
    process = subprocess.Popen(
        node_argv(tmp_path / "node", "--stdio"),
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(b"hello\n{]\n" + b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
        process.stdin.flush()
        frames = []
        deadline = time.monotonic() + 20

        def seen_all() -> bool:
            answered = any(frame.get("id") == 1 for frame in frames)
            return answered and any(frame.get("method") == "app:ready" for frame in frames)

        while not seen_all() and time.monotonic() < deadline:
            line = process.stdout.readline()
            frames.append(json.loads(line))  # every stdout line must be a JSON-RPC frame
        errors_seen = [frame["error"]["code"] for frame in frames if "error" in frame]
        assert errors_seen == [-32700, -32700]
        assert any(frame.get("method") == "app:ready" for frame in frames)
        started = time.monotonic()
        process.stdin.close()
        assert process.wait(15) == 0
        assert time.monotonic() - started < 10, "shutdown must finish within its 10 s budget"
        assert process.stdout.read() == b""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_a_second_broker_for_the_same_data_dir_is_refused(shared_broker: Broker) -> None:
    first = shared_broker
    second = subprocess.run(node_argv(first.data_dir), cwd=ROOT, capture_output=True, timeout=30)
    assert second.returncode == 3
    assert f"pid {first.process.pid}" in second.stderr.decode()
    assert first.process.poll() is None


def test_pair_status_and_stop_attach_over_the_control_socket(
    start_broker: StartBroker, tmp_path: Path
) -> None:
    broker = start_broker("--test-worker", "healthy")
    pair = [sys.executable, "-m", "backend"]
    shown = subprocess.run(
        [*pair, "status", "--data-dir", str(broker.data_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"pid {broker.process.pid}" in shown.stdout
    assert "testworker" in shown.stdout and "no open errors" in shown.stdout
    as_json = subprocess.run(
        [*pair, "status", "--json", "--data-dir", str(broker.data_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert json.loads(as_json.stdout)["pid"] == broker.process.pid
    stopped = subprocess.run(
        [*pair, "stop", "--data-dir", str(broker.data_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert stopped.returncode == 0
    assert broker.process.wait(15) == 0
    missing = subprocess.run(
        [*pair, "status", "--data-dir", str(tmp_path / "empty")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert missing.returncode == 4
    assert "no PAIR broker is running" in missing.stderr


def test_sigterm_shuts_down_in_stages_and_records_a_clean_stop(start_broker: StartBroker) -> None:
    broker = start_broker("--test-worker", "healthy")
    started = time.monotonic()
    assert broker.stop() == 0
    assert time.monotonic() - started < 10
    assert not os.path.exists(broker.address)
    assert any("shutdown took" in record["msg"] for record in broker.logs())
    with sqlite3.connect(broker.data_dir / "pair.db") as db:
        rows = db.execute("SELECT pid, stopped_at FROM broker_runs").fetchall()
    assert rows[-1][0] == broker.process.pid and rows[-1][1] is not None


def test_a_corrupt_settings_file_is_set_aside_and_reported(
    start_broker: StartBroker, tmp_path: Path
) -> None:
    data_dir = tmp_path / "node-corrupt"
    data_dir.mkdir()
    (data_dir / "settings.json").write_text('{"log_level": ')
    broker = start_broker(data_dir=data_dir)

    async def check() -> None:
        async with broker.connect() as client:
            entries = await client.call("errors:get-initial")
            assert [entry["id"] for entry in entries] == ["settings:corrupt"]
            assert entries[0]["severity"] == "warning"

    asyncio.run(check())
    assert len(list(data_dir.glob("settings.json.corrupt-*"))) == 1
