"""A model spread over three computers: llama.cpp's RPC carried through PAIR's tunnels.

Three brokers on three hosts (network namespaces on a bridge, or loopback addresses, as in
``test_three_nodes``), each with the real llama.cpp build (``llama-server`` and its RPC server).
A holds a generated six-layer model and spreads it over B and C; the official OpenAI client at
A's door, and at B's, gets, greedy, the same text as from the model on A alone. C's broker is
killed while an answer streams: the stream ends with an error, not a hang; A marks the spread
degraded naming C, and plans again over A and B, which answer again; so does a crash of A's own
llama-server. A client without a member's certificate gets nothing from the tunnel route.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from backend.devtools import tiny_model
from backend.protocol import errors, methods
from backend.protocol.types.engines import EngineStatus
from tests.integration.cluster.test_three_nodes import (
    Host,
    Node,
    _clients,
    _pair,
    hosts,
    start_node,
)
from tests.integration.conftest import ROOT, Client
from tests.integration.engines.conftest import write_override
from tests.support.ports import free_port

pytest_plugins = ["tests.engines.fixtures"]
__all__ = ["hosts", "start_node"]  # fixtures

MODEL = "six"
# Six layers, so each of three computers holds some.
SHAPE = tiny_model.ModelShape(embedding_length=128, block_count=6, feed_forward_length=256)

# The official OpenAI client at a door, run on the door's host. ``answer``: one greedy answer,
# printed as JSON. ``stream``: prints "first" at the first token, then how the stream ended.
_CLIENT = """
import json, sys, time, openai
door, mode, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = openai.OpenAI(base_url=door + "/v1", api_key="none", max_retries=0, timeout=120)
# The model's random weights mostly pick byte tokens, rarely valid UTF-8, which llama-server
# holds back until the end; without them (and without its end token) every token streams.
no_bytes = {str(token): -100 for token in range(259)}
ask = dict(model="six", messages=[{"role": "user", "content": "hello there"}],
           temperature=0, seed=7, max_tokens=tokens, logit_bias=no_bytes)
try:
    if mode == "answer":
        answer = client.chat.completions.create(**ask)
        print(json.dumps({"text": answer.choices[0].message.content}))
        sys.exit(0)
    chunks, finish = 0, None
    for chunk in client.chat.completions.create(stream=True, **ask):
        if not chunk.choices:
            continue
        if not chunks:
            print("first", flush=True)
        chunks += 1
        finish = chunk.choices[0].finish_reason or finish
    print(json.dumps({"ended": "complete", "finish": finish, "chunks": chunks,
                      "at": time.time()}))
except openai.APIStatusError as exc:
    print(json.dumps({"ended": "error", "status": exc.status_code, "error": str(exc),
                      "at": time.time()}))
    sys.exit(4 if exc.status_code in (404, 503) else 0)
except Exception as exc:
    print(json.dumps({"ended": "error", "error": f"{type(exc).__name__}: {exc}",
                      "at": time.time()}))
"""


@pytest.fixture(scope="module")
def six_layers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spread") / f"{MODEL}.gguf"
    try:
        return tiny_model.write_model(path, shape=SHAPE, seed=3)
    except tiny_model.MissingDevDependencyError as error:
        pytest.skip(f"cannot write a model: {error}")


def _llama_cpp(data_dir: Path, binary: Path, model: Path | None = None) -> None:
    """llama.cpp on a free port, detected at ``binary``; ``model`` linked into its store."""
    write_override(
        data_dir,
        "llamacpp",
        {
            "detect": [{"path": str(binary)}],
            "runtime": {"port": free_port(), "ready": {"timeout_s": 120}},
        },
    )
    # One slot with the model's whole context: the longest answer, to be cut while it streams.
    settings = {"llamacpp_context": 2048, "llamacpp_parallel": 1}
    (data_dir / "settings.json").write_text(json.dumps(settings))
    store = data_dir / "models" / "llamacpp"
    store.mkdir(parents=True, exist_ok=True)
    if model is not None:
        (store / model.name).symlink_to(model)


def _client(host: Host, door: str, mode: str, tokens: int) -> list[str]:
    return _on(host, [sys.executable, "-c", _CLIENT, door, mode, str(tokens)])


def _on(host: Host, argv: list[str]) -> list[str]:
    if host.namespace is not None:
        argv = ["ip", "netns", "exec", host.namespace, *argv]
    return argv


async def _answer(host: Host, door: str) -> str:
    """The greedy answer at ``door``, waiting while the door does not route the model yet."""
    async with asyncio.timeout(120):
        while True:
            done = await asyncio.to_thread(
                subprocess.run,
                _client(host, door, "answer", 24),
                cwd=ROOT,
                capture_output=True,
                timeout=150,
            )
            if done.returncode == 0:
                return str(json.loads(done.stdout)["text"])
            assert done.returncode == 4, done.stderr.decode()[-2000:]
            await asyncio.sleep(0.5)


async def _status(client: Client) -> EngineStatus:
    return await client.typed(methods.ENGINE_STATUS, {"engine": "llamacpp"})


async def _until_status(
    client: Client, check: Callable[[EngineStatus], bool], timeout: float = 120, why: str = ""
) -> EngineStatus:
    try:
        async with asyncio.timeout(timeout):
            while not check(status := await _status(client)):
                await asyncio.sleep(0.3)
    except TimeoutError:
        logs = await client.typed(methods.ENGINE_LOGS, {"engine": "llamacpp", "lines": 60})
        last = await _status(client)
        pytest.fail(f"{why}: llama.cpp is {last}; its last output:\n" + "\n".join(logs.lines))
    return status


async def _load_across(client: Client, across: list[str]) -> None:
    """Load the model spread over ``across``, once A has the members' memory figures."""
    params = {"engine": "llamacpp", "action": "load_model", "model": MODEL, "across": across}
    async with asyncio.timeout(90):
        while True:
            try:
                await client.call(methods.ENGINE_ACTION, params, timeout=150)
                return
            except (errors.Conflict, errors.Unavailable) as exc:
                # Discovery has not read the members' node-info (or link) yet.
                if "no memory figures" not in str(exc) and "cannot be reached" not in str(exc):
                    raise
                await asyncio.sleep(0.5)


def _tunnel_as_stranger(host: Host, port: int) -> int | str:
    """What a client without a member's certificate gets from ``host``'s tunnel route."""
    import http.client

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connection = http.client.HTTPSConnection(host.address, port, context=context, timeout=10)
    try:
        connection.request(
            "GET",
            "/v1/cluster/rpc-tunnel",
            headers={"Connection": "Upgrade", "Upgrade": "websocket"},
        )
        return connection.getresponse().status
    except (OSError, ssl.SSLError) as exc:
        return f"refused: {exc}"
    finally:
        connection.close()


@pytest.mark.timeout(420)  # three brokers, four loads of the model, two of them over tunnels
async def test_a_model_spread_over_three_members_answers_as_on_one_and_survives_losing_one(
    hosts: list[Host],
    start_node: Callable[..., Node],
    llama_server_binary: Path,
    six_layers: Path,
    tmp_path: Path,
) -> None:
    for name, model in (("a", six_layers), ("b", None), ("c", None)):
        _llama_cpp(tmp_path / name, llama_server_binary, model)
    a = start_node(hosts[0], "a", "nothing:latest")
    b = start_node(hosts[1], "b", "nothing:latest")
    c = start_node(hosts[2], "c", "nothing:latest")
    async with _clients(a, b, c) as (ca, cb, cc):
        status = [await client.typed(methods.STATUS) for client in (ca, cb, cc)]
        await _pair(ca, cb, b.host.address, status[1].ports.node)
        await _pair(ca, cc, c.host.address, status[2].ports.node)
        if a.host.namespace is None:  # no mDNS on loopback: A learns the others by address
            for node, st in ((b, status[1]), (c, status[2])):
                params = {"address": node.host.address, "port": st.ports.node}
                await ca.call(methods.NODE_ADD, params)
        door = status[0].front_doors["llamacpp"]

        # On A alone first: the text every spread must give too.
        await ca.call(methods.ENGINE_START, {"engine": "llamacpp"}, timeout=150)
        alone = await _answer(a.host, door)
        assert alone

        a_id, b_id, c_id = (st.node_id for st in status)
        await _load_across(ca, [b_id, c_id])
        spread = (await _status(ca)).spread
        assert spread is not None and spread.state == "running", spread
        # The host first; the others largest free memory first (here: the same computer's).
        assert [(s.node, s.host) for s in spread.shares[:1]] == [(a_id, True)]
        assert {s.node for s in spread.shares[1:]} == {b_id, c_id}
        assert sum(s.layers for s in spread.shares) == SHAPE.block_count
        assert all(s.layers > 0 for s in spread.shares)
        assert await _answer(a.host, door) == alone
        # Every member's door has it: B's sends it to A, the one that runs it.
        assert await _answer(b.host, status[1].front_doors["llamacpp"]) == alone

        # A stranger (no member certificate) gets nothing from B's tunnel route.
        refused = await asyncio.to_thread(_tunnel_as_stranger, b.host, status[1].ports.node)
        assert refused == 403 or str(refused).startswith("refused"), refused

        # C's broker dies while an answer streams: the stream ends with an error, no hang.
        streaming = subprocess.Popen(
            _client(a.host, door, "stream", 2000),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            first = await asyncio.to_thread(streaming.stdout.readline)  # type: ignore[union-attr]
            assert first.strip() == "first", streaming.stderr.read()  # type: ignore[union-attr]
            killed_at = time.time()
            os.kill(c.broker.process.pid, signal.SIGKILL)
            out, err = await asyncio.to_thread(streaming.communicate, timeout=60)
        finally:
            if streaming.poll() is None:
                streaming.kill()
        assert out.strip(), f"the client printed nothing more: {err[-2000:]}"
        ended = json.loads(out.strip().splitlines()[-1])
        assert ended["ended"] == "error" or ended["finish"] not in ("length", "stop"), (
            ended,
            err[-2000:],
        )
        # How long after the kill it ended (a hang guard, not a speed target).
        assert ended["at"] - killed_at < 30, ended

        # A marks the spread degraded naming C, plans again over A and B, and answers.
        replanned = await _until_status(
            ca,
            lambda s: (
                s.spread is not None
                and s.state == "running"
                and [share.node for share in s.spread.shares] == [a_id, b_id]
            ),
            why=f"A is {a_id}, B {b_id}, C (killed) {c_id}",
        )
        assert replanned.spread is not None and replanned.spread.state == "degraded"
        c_name = next(share.name for share in spread.shares if share.node == c_id)
        assert replanned.spread.reason.startswith(f"{c_name} "), replanned.spread.reason
        assert await _answer(a.host, door) == alone

        # The host's own llama-server crashes: it comes back, spread over the members there are.
        assert replanned.pid is not None
        os.kill(replanned.pid, signal.SIGKILL)
        back = await _until_status(
            ca,
            lambda s: s.state == "running" and s.pid not in (None, replanned.pid),
            why="llama.cpp did not come back after its crash",
        )
        assert back.spread is not None
        assert [share.node for share in back.spread.shares] == [a_id, b_id]
        assert await _answer(a.host, door) == alone
