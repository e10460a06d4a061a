"""One door, every model, across a cluster: at the front doors of a computer with no engine, the
official ``ollama``, ``openai`` and ``anthropic`` clients reach the model only its paired member
has, served by the member's Ollama (the emulator).

The OpenAI client at the llama.cpp door passes through to Ollama's OpenAI API; the Anthropic
client is translated on the member, since Ollama does not speak Messages (the relay hands the
member the client's own request). Hosts as in ``test_three_nodes``: network namespaces on a
bridge, or loopback addresses.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import anthropic
import ollama
import openai
import pytest

from backend.protocol import methods
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineRef
from tests.integration.cluster.test_three_nodes import (
    Host,
    Node,
    _clients,
    _pair,
    _until,
    hosts,
    serving,
    start_node,
)

__all__ = ["hosts", "start_node"]  # fixtures

MODEL = "only-b:latest"
HELLO: Any = [{"role": "user", "content": "hello"}]
REQUESTS = 6  # the answered ones below: two per client, streamed and not
_CLONE_NEWNET = 0x40000000  # <sched.h>


def _join_network_namespace(namespace: str) -> None:
    """Move the calling thread (only it: Linux keeps a network namespace per thread) into
    ``namespace``, so the sockets it opens from then on are on that host."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open(f"/run/netns/{namespace}", "rb") as handle:
        if libc.setns(handle.fileno(), _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {namespace} failed")


def _run_on(host: Host, checks: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``checks`` on an event loop of its own on ``host``: a front door listens on its
    host's loopback, and only a client on that host is let in without a LAN key."""
    failures: list[BaseException] = []

    def body() -> None:
        try:
            if host.namespace is not None:
                _join_network_namespace(host.namespace)
            asyncio.run(checks())
        except BaseException as failure:  # re-raised in the test's own thread
            failures.append(failure)

    thread = threading.Thread(target=body, name=f"clients-on-{host.address}")
    thread.start()
    thread.join()
    if failures:
        raise failures[0]


async def _until_listed(door: str) -> None:
    """Until the member's model is in the door's list (A's routing table has B's models)."""
    client = ollama.AsyncClient(host=door)
    async with asyncio.timeout(40):
        while MODEL not in {entry.model for entry in (await client.list()).models}:
            await asyncio.sleep(0.2)


async def _ollama_client(door: str) -> None:
    client = ollama.AsyncClient(host=door)
    assert MODEL in {entry.model for entry in (await client.list()).models}
    options = {"num_predict": 5}
    whole = await client.chat(model=MODEL, messages=HELLO, options=options)
    assert whole.done and whole.model == MODEL and whole.message.content
    parts = [part async for part in await client.chat(MODEL, HELLO, stream=True, options=options)]
    assert parts[-1].done and not any(part.done for part in parts[:-1])
    assert "".join(part.message.content or "" for part in parts)
    with pytest.raises(ollama.ResponseError) as unknown:
        await client.chat(model="no-such-model", messages=HELLO)
    assert unknown.value.status_code == 404


async def _openai_client(door: str) -> None:
    async with openai.AsyncOpenAI(base_url=door + "/v1", api_key="x") as client:
        assert MODEL in {entry.id for entry in (await client.models.list()).data}
        whole = await client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=5)
        assert whole.choices[0].message.content and whole.choices[0].finish_reason
        stream = await client.chat.completions.create(
            model=MODEL, messages=HELLO, max_tokens=5, stream=True
        )
        chunks = [chunk async for chunk in stream]
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="no-such-model", messages=HELLO)


async def _anthropic_client(door: str) -> None:
    async with anthropic.AsyncAnthropic(base_url=door, api_key="x") as client:
        whole = await client.messages.create(
            model=MODEL, max_tokens=5, messages=HELLO, system="Be brief."
        )
        assert whole.role == "assistant" and whole.model == MODEL
        assert whole.stop_reason in ("end_turn", "max_tokens") and whole.usage.output_tokens > 0
        async with client.messages.stream(model=MODEL, max_tokens=5, messages=HELLO) as stream:
            final = await stream.get_final_message()
        assert final.role == "assistant" and final.content
        assert final.stop_reason in ("end_turn", "max_tokens") and final.usage.output_tokens > 0
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.create(model="no-such-model", max_tokens=5, messages=HELLO)


async def test_every_client_at_a_computer_without_engines_reaches_its_members_model(
    hosts: list[Host], start_node: Callable[..., Node]
) -> None:
    a, b = serving(
        start_node(hosts[0], "a", "", wait=False),  # its Ollama is never started
        start_node(hosts[1], "b", MODEL, wait=False),
    )
    async with _clients(a, b) as (ca, cb):
        await cb.typed(methods.ENGINE_START, EngineRef(engine=EngineName("ollama")), timeout=40)
        a_status, b_status = await ca.typed(methods.STATUS), await cb.typed(methods.STATUS)
        await _pair(ca, cb, b.host.address, b_status.ports.node)
        if a.host.namespace is None:  # no mDNS on loopback: A learns B by address
            await ca.call(
                methods.NODE_ADD, {"address": b.host.address, "port": b_status.ports.node}
            )
        doors = a_status.front_doors

        async def every_client() -> None:
            await _until_listed(doors["ollama"])
            await _ollama_client(doors["ollama"])
            await _openai_client(doors["llamacpp"])
            await _anthropic_client(doors["openai"])

        await asyncio.to_thread(_run_on, a.host, every_client)

        def served(snapshot: Any) -> list[Any]:
            # Routed jobs only: a refused request (no engine) is not one of the clients' answers.
            return [job for job in snapshot.jobs if job.model == MODEL and job.engine]

        history = await _until(
            ca,
            methods.JOBS_GET_INITIAL,
            lambda s: (
                len(served(s)) >= REQUESTS and all(job.state == "completed" for job in served(s))
            ),
        )
        jobs = served(history)
        assert len(jobs) == REQUESTS, [(job.path, job.state) for job in jobs]
        paths = sorted(job.path for job in jobs)
        assert paths == sorted(2 * ["/api/chat", "/v1/chat/completions", "/v1/messages"])
        assert {(job.engine, job.serving, job.origin) for job in jobs} == {
            ("ollama", b_status.node_id, a_status.node_id)
        }
