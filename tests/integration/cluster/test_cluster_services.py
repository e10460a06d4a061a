"""Cluster services across three computers: from A, manage C's engine (install from a local
archive, start, change its port, stop) and B's models (pull with progress seen at A, delete);
B's errors show at A tagged with B, and a dead B is one "unreachable" error; jobs requested at B
and C are in A's history once each, and after A restarts with B offline, A backfills the jobs B
took meanwhile when B returns.

Hosts as in ``test_three_nodes``: network namespaces on a bridge, or loopback addresses.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.protocol import errors, methods
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import ServiceError
from backend.protocol.types.engines import EngineActionParams, EngineRef, EngineSetPort, NodeScope
from backend.protocol.types.jobs import JobRecord
from tests.integration.cluster.test_three_nodes import (
    Host,
    Node,
    _clients,
    _pair,
    _until,
    bridge_address,
    hosts,
    serving,
    start_node,
)
from tests.integration.conftest import ROOT, Client, free_port, serve_folder
from tests.integration.engines.test_engine_update import fake_ollama

__all__ = ["hosts", "start_node"]  # fixtures

PULLED = "phi3:mini"


@pytest.fixture
def release_site(hosts: list[Host], tmp_path: Path) -> Iterator[str]:
    """An HTTP server reachable from every host with a fake Ollama's releases 1.0.0 and 2.0.0
    (each reports its own version), their ``sha256sum.txt`` and ``latest.json`` naming 2.0.0."""
    folder = tmp_path / "www"
    folder.mkdir()
    sums = []
    for version in ("1.0.0", "2.0.0"):
        buffer = io.BytesIO()
        script = fake_ollama(version).encode()
        with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
            info = tarfile.TarInfo("bin/ollama")
            info.size, info.mode = len(script), 0o755
            bundle.addfile(info, io.BytesIO(script))
        (folder / f"ollama-linux-{version}.tgz").write_bytes(buffer.getvalue())
        digest = hashlib.sha256(buffer.getvalue()).hexdigest()
        sums.append(f"{digest}  ./ollama-linux-{version}.tgz\n")
    (folder / "sha256sum.txt").write_text("".join(sums))
    (folder / "latest.json").write_text(json.dumps({"tag_name": "v2.0.0"}))
    address = "127.0.0.1" if hosts[0].namespace is None else bridge_address()
    with serve_folder(folder, address) as url:
        yield url


def _installable(site: str) -> dict[str, Any]:
    """Ollama installed from ``site`` (1.0.0) into PAIR's install dir, and updated from it."""
    return {
        "detect": [{"path": "{install_dir}/bin/ollama"}],
        "install": {"url": f"{site}/ollama-linux-1.0.0.tgz", "archive": "tar"},
        "latest": {"url": f"{site}/latest.json"},
        "update": {
            "url": site + "/ollama-linux-{version}.tgz",
            "sha256_url": f"{site}/sha256sum.txt",
            "archive": "tar",
        },
        "platforms": {},
        "runtime": {"port": free_port(), "ready": {"timeout_s": 30}},
    }


_CHAT = """
import sys, ollama
try:
    answer = ollama.Client(host=sys.argv[1]).chat(
        model=sys.argv[2], messages=[{"role": "user", "content": "hi"}])
except ollama.ResponseError as exc:
    sys.exit(4 if exc.status_code in (404, 503) else 1)
sys.exit(0 if answer.done and answer.message.content else 1)
"""


async def _chat(host: Host, door: str, model: str) -> None:
    """One chat with the official client where ``door`` is, retried while not routable yet."""
    argv = [sys.executable, "-c", _CHAT, door, model]
    if host.namespace is not None:
        argv = ["ip", "netns", "exec", host.namespace, *argv]
    async with asyncio.timeout(40):
        while True:
            done = await asyncio.to_thread(
                subprocess.run, argv, cwd=ROOT, capture_output=True, timeout=60
            )
            if done.returncode != 4:
                break
            await asyncio.sleep(0.3)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]


def _routed(jobs: list[JobRecord]) -> list[JobRecord]:
    """The jobs of requests sent to a node (not those the door refused while the model was
    not routable yet: those are failed jobs that name no engine)."""
    return [job for job in jobs if job.engine]


async def _linked(client: Client, *nodes: NodeId) -> None:
    """Until ``client``'s broker has a live link to each of ``nodes``."""
    snapshot = await _until(
        client,
        methods.ENGINE_SUBSCRIBE,
        lambda s: {m.node_id for m in s.members if m.reachable} >= set(nodes),
        timeout=40,
    )
    assert snapshot is not None


def _member_events(client: Client, node: NodeId, since: int = 0) -> list[dict[str, Any]]:
    return [
        params["member"]
        for name, params in client.pushes[since:]
        if name == methods.ENGINE_EVENT.name
        and params.get("event") == "member_changed"
        and params["member"]["node_id"] == node
    ]


def _errors_of(entries: list[ServiceError], node: NodeId) -> list[str]:
    return sorted(entry.id for entry in entries if entry.node_id == node)


async def _three(
    hosts: list[Host], start_node: Callable[..., Node], c_override: dict[str, Any]
) -> tuple[list[Node], list[NodeId]]:
    a, b, c = serving(
        start_node(hosts[0], "a", "only-a:latest", wait=False),
        start_node(hosts[1], "b", "on-b:latest", wait=False),
        start_node(hosts[2], "c", "", override=c_override, wait=False),
    )
    async with _clients(a, b, c) as (ca, cb, cc):
        status = [await client.typed(methods.STATUS) for client in (ca, cb, cc)]
        ids = [s.node_id for s in status]
        await _pair(ca, cb, b.host.address, status[1].ports.node)
        await _pair(cb, cc, c.host.address, status[2].ports.node)
        await _until(ca, methods.CLUSTER_STATUS, lambda s: ids[2] in [m.node_id for m in s.members])
    return [a, b, c], ids


async def test_a_manages_cs_engine_and_bs_models(
    hosts: list[Host], start_node: Callable[..., Node], release_site: str
) -> None:
    (a, b, c), (_, b_id, c_id) = await _three(hosts, start_node, _installable(release_site))
    async with _clients(a, b, c) as (ca, cb, cc):
        await _linked(ca, b_id, c_id)
        ollama = EngineRef(engine="ollama", node=c_id)

        # Install on C from A, with C's progress seen at A.
        before = len(ca.pushes)
        installed = await ca.typed(methods.ENGINE_INSTALL, ollama, timeout=120)
        assert installed.installed
        installs = [i for m in _member_events(ca, c_id, before) for i in m["installs"]]
        assert any(i["done"] for i in installs), installs
        assert any(i["stage"] for i in installs if not i["done"])

        # Start, move and stop it from A; C applies them as its own (C's own status agrees).
        started = await ca.typed(methods.ENGINE_START, ollama, timeout=60)
        assert started.state == "running" and not started.adopted
        port = free_port()
        moved = await ca.typed(
            methods.ENGINE_SET_PORT, EngineSetPort(engine="ollama", port=port, node=c_id), 60
        )
        assert moved.port == port and moved.state == "running"
        here = await cc.typed(methods.ENGINE_STATUS, EngineRef(engine="ollama"))
        assert (here.port, here.state, here.desired) == (port, "running", True)
        # Update it from A: C's engine goes from 1.0.0 to 2.0.0 and runs again.
        versions = await ca.typed(methods.ENGINE_VERSIONS, ollama, timeout=30)
        assert (versions.installed, versions.latest) == ("1.0.0", "2.0.0")
        assert versions.update_available and versions.can_update
        before = len(ca.pushes)
        updated = await ca.typed(methods.ENGINE_UPDATE, ollama, timeout=180)
        assert updated.state == "running" and updated.desired is True
        assert updated.pid != started.pid
        versions = await cc.typed(methods.ENGINE_VERSIONS, EngineRef(engine="ollama"), 30)
        assert versions.installed == "2.0.0" and not versions.update_available
        stages = [i["stage"] for m in _member_events(ca, c_id, before) for i in m["installs"]]
        assert "replacing" in stages and "updated" in stages, stages

        stopped = await ca.typed(methods.ENGINE_STOP, ollama, timeout=60)
        assert stopped.state == "stopped"
        assert (await cc.typed(methods.ENGINE_STATUS, EngineRef(engine="ollama"))).desired is False
        # A's snapshot of C follows.
        await _until(
            ca,
            methods.ENGINE_SUBSCRIBE,
            lambda s: any(
                m.node_id == c_id
                and [e.state for e in m.engines if e.engine == "ollama"] == ["stopped"]
                for m in s.members
            ),
        )

        # An error comes back unchanged: C's own rule (a port in use) answered at A.
        with pytest.raises(errors.InvalidParams):
            await ca.typed(
                methods.ENGINE_SET_PORT, EngineSetPort(engine="ollama", port=0, node=c_id)
            )
        with pytest.raises(errors.NotFound):
            await ca.typed(methods.ENGINE_LIST, NodeScope(node=NodeId("not-a-member")))

        # B's models from A: pull with progress seen at A, then delete.
        b_ollama = EngineRef(engine="ollama", node=b_id)
        await ca.typed(methods.ENGINE_START, b_ollama, timeout=60)
        before = len(ca.pushes)
        pull = EngineActionParams(engine="ollama", action="pull_model", model=PULLED, node=b_id)
        assert (await ca.typed(methods.ENGINE_ACTION, pull, timeout=120)).ok
        pulls = [
            p for m in _member_events(ca, b_id, before) for p in m["pulls"] if p["model"] == PULLED
        ]
        assert any(p["done"] for p in pulls), pulls
        assert any(p.get("percent") is not None for p in pulls), "measured progress reached A"
        listed = await ca.typed(methods.ENGINE_MODELS, NodeScope(node=b_id), timeout=30)
        assert PULLED in listed.by_engine["ollama"]
        delete = EngineActionParams(engine="ollama", action="delete_model", model=PULLED, node=b_id)
        assert (await ca.typed(methods.ENGINE_ACTION, delete, timeout=60)).ok
        listed = await cb.typed(methods.ENGINE_MODELS, timeout=30)
        assert PULLED not in listed.by_engine["ollama"]


async def test_errors_follow_their_member_and_a_dead_member_is_one_error(
    hosts: list[Host], start_node: Callable[..., Node], release_site: str
) -> None:
    (a, b, _), (a_id, b_id, c_id) = await _three(hosts, start_node, _installable(release_site))
    async with _clients(a, b) as (ca, cb):
        await _linked(ca, b_id, c_id)
        members = (await ca.typed(methods.CLUSTER_STATUS)).members
        assert {m.node_id: m.state for m in members} == {b_id: "online", c_id: "online"}
        await cb.call(methods.ERRORS_REPORT, {"id": "test:on-b", "message": "B has a problem"})
        entries = await _until(
            ca, methods.ERRORS_GET_INITIAL, lambda e: "test:on-b" in _errors_of(e, b_id)
        )
        assert "test:on-b" not in _errors_of(entries, a_id)
        await cb.call(methods.ERRORS_CLEAR, {"id": "test:on-b"})
        await _until(
            ca, methods.ERRORS_GET_INITIAL, lambda e: "test:on-b" not in _errors_of(e, b_id)
        )
        await cb.call(methods.ERRORS_REPORT, {"id": "test:on-b", "message": "B again"})
        await _until(ca, methods.ERRORS_GET_INITIAL, lambda e: "test:on-b" in _errors_of(e, b_id))
        # Cleared from A: the clear goes to B, whose list then says so.
        await ca.call(methods.ERRORS_CLEAR, {"id": "test:on-b", "node_id": b_id})
        await _until(
            cb, methods.ERRORS_GET_INITIAL, lambda e: "test:on-b" not in _errors_of(e, b_id)
        )
        await cb.call(methods.ERRORS_REPORT, {"id": "test:on-b", "message": "B once more"})
        await _until(ca, methods.ERRORS_GET_INITIAL, lambda e: "test:on-b" in _errors_of(e, b_id))

    os.kill(b.broker.process.pid, signal.SIGKILL)
    b.broker.process.wait(10)
    async with a.broker.connect() as ca:
        entries = await _until(
            ca, methods.ERRORS_GET_INITIAL, lambda e: _errors_of(e, b_id) == ["cluster:unreachable"]
        )
        assert "cannot be reached" in next(e.message for e in entries if e.node_id == b_id)
        snapshot = await ca.typed(methods.ENGINE_SUBSCRIBE)
        assert [m.reachable for m in snapshot.members if m.node_id == b_id] == [False]
        members = (await ca.typed(methods.CLUSTER_STATUS)).members
        assert {m.node_id: m.state for m in members} == {b_id: "offline", c_id: "online"}
        with pytest.raises(errors.Unavailable, match="unreachable"):
            await ca.typed(methods.ENGINE_LIST, NodeScope(node=b_id))


async def test_one_job_history_for_the_cluster_with_backfill(
    hosts: list[Host], start_node: Callable[..., Node], release_site: str
) -> None:
    (a, b, c), (a_id, b_id, c_id) = await _three(hosts, start_node, _installable(release_site))
    async with _clients(a, b, c) as (ca, cb, cc):
        await _linked(ca, b_id, c_id)
        await _linked(cb, a_id, c_id)

        async def install_and_start_c() -> None:
            await cc.typed(methods.ENGINE_INSTALL, EngineRef(engine="ollama"), timeout=120)
            await cc.typed(methods.ENGINE_START, EngineRef(engine="ollama"), timeout=60)

        await asyncio.gather(
            cb.typed(methods.ENGINE_START, EngineRef(engine="ollama"), timeout=60),
            install_and_start_c(),
        )
        doors = [(await cl.typed(methods.STATUS)).front_doors["ollama"] for cl in (ca, cb, cc)]
        await _chat(b.host, doors[1], "on-b:latest")  # asked at B, served by B
        await _chat(c.host, doors[2], "on-b:latest")  # asked at C, served by B over the relay
        await _chat(a.host, doors[0], "on-b:latest")  # asked at A, served by B

        def origins(snapshot: Any) -> list[str]:
            return sorted(job.origin for job in _routed(snapshot.jobs))

        listed = await _until(
            ca,
            methods.JOBS_GET_INITIAL,
            lambda j: (
                origins(j) == sorted([a_id, b_id, c_id])
                and all(job.state == "completed" for job in _routed(j.jobs))
            ),
        )
        assert len({job.key for job in _routed(listed.jobs)}) == 3, "one row per request"
        assert all(job.serving == b_id for job in _routed(listed.jobs))
        # B served all three; still one row each at B (its relay copies are folded in).
        await _until(
            cb,
            methods.JOBS_GET_INITIAL,
            lambda j: origins(j) == sorted([a_id, b_id, c_id]),
        )

    # A stops; B takes a job meanwhile and then goes offline; A starts again with B offline.
    a.broker.stop()
    async with b.broker.connect() as cb:
        await _chat(b.host, doors[1], "on-b:latest")
        missed = (await cb.typed(methods.JOBS_GET_INITIAL, {"limit": 1})).jobs[0]
        assert missed.origin == b_id
    b.broker.stop()
    a2 = start_node(a.host, "a", "", again=a)
    async with a2.broker.connect() as ca:
        await _until(
            ca, methods.ERRORS_GET_INITIAL, lambda e: _errors_of(e, b_id) == ["cluster:unreachable"]
        )
        held = await ca.typed(methods.JOBS_GET_INITIAL)
        assert missed.key not in [job.key for job in held.jobs]
        kept = [job for job in _routed(held.jobs) if job.origin == b_id]
        assert len(kept) == 1, "kept across restarts"
        start_node(b.host, "b", "", again=b)
        backfilled = await _until(
            ca,
            methods.JOBS_GET_INITIAL,
            lambda j: missed.key in [job.key for job in j.jobs],
            timeout=40,
        )
        assert [job.state for job in backfilled.jobs if job.key == missed.key] == ["completed"]
        await _until(ca, methods.ERRORS_GET_INITIAL, lambda e: _errors_of(e, b_id) == [])
