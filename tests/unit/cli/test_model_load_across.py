"""``pair model load llamacpp MODEL --across NODE[,NODE...]`` against a scripted broker: the
members it sends, the refusal of an empty list before anything is sent, the broker's refusal
shown as it gave it, what it says while loading and where the model runs after; and a spread
model's shares (and a degraded one's reason) under its row in ``pair engines`` and
``pair models``."""

from __future__ import annotations

import io
import sys
from typing import Any

import pytest

from backend.cli import engine_commands, exit_codes, model_commands
from backend.cli.main import main
from backend.cli.node_ref import KnownNode
from backend.cli.spread_format import describe_share, spread_lines
from backend.protocol import errors, methods
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import (
    EngineActionResult,
    EngineModels,
    EngineStatus,
    SpreadShare,
    SpreadStatus,
)
from tests.unit.cli.scripted import ALICE, BOB, CAROL, StreamingBroker

LLAMACPP = EngineName("llamacpp")
SHARES = [
    SpreadShare(
        node=ALICE, name="alice", layers=33, bytes=16_500_000_000, memory="vram", host=True
    ),
    SpreadShare(node=BOB, name="bob", layers=47, bytes=23_500_000_000, memory="ram"),
]
RUNNING = SpreadStatus(model="qwen", state="running", shares=SHARES)
LOST = "bob went away; PAIR plans the spread again"
DEGRADED = SpreadStatus(model="qwen", state="degraded", shares=SHARES, reason=LOST)
ALICE_SHARE = "alice 33 layers (16.5 GB VRAM, runs it)"
BOB_SHARE = "bob 47 layers (23.5 GB RAM)"


def _llamacpp(spread: SpreadStatus | None = None, **fields: Any) -> EngineStatus:
    values: dict[str, Any] = {
        "engine": LLAMACPP,
        "display_name": "llama.cpp",
        "front_door": "llamacpp",
        "mode": "process",
        "installed": True,
        "state": "running",
        "port": 8090,
        "default_port": 8080,
        "spread": spread,
    }
    return EngineStatus(**(values | fields))


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> StreamingBroker:
    """A broker whose llama.cpp loads succeed and runs ``qwen`` spread over alice and bob."""
    broker = StreamingBroker()
    broker.attach(monkeypatch)
    broker.answer(methods.ENGINE_ACTION.name, EngineActionResult(ok=True))
    broker.answer(methods.ENGINE_STATUS.name, _llamacpp(RUNNING))
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    return broker


def _sent(broker: StreamingBroker) -> list[tuple[str, Any]]:
    return [(m, p) for m, p in broker.calls if m.startswith("engine:")]


# Parsing --across ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "across"),
    [
        (["--across", "bob"], ["bob"]),
        (["--across", "bob,carol"], ["bob", "carol"]),
        (["--across", " bob , 7b1d99f0 "], ["bob", "7b1d99f0"]),
        (["--across", "bob", "--across", "carol"], ["bob", "carol"]),
    ],
)
def test_across_sends_the_members_named_and_then_reads_where_it_runs(
    broker: StreamingBroker, given: list[str], across: list[str]
) -> None:
    assert main(["model", "load", "llamacpp", "qwen", *given]) == exit_codes.OK
    load = {"engine": "llamacpp", "action": "load_model", "model": "qwen", "across": across}
    assert _sent(broker) == [
        (methods.ENGINE_ACTION.name, load),
        (methods.ENGINE_STATUS.name, {"engine": "llamacpp"}),
    ]


def test_across_on_another_node_sends_both_to_it(broker: StreamingBroker) -> None:
    argv = ["model", "load", "llamacpp", "qwen", "--across", "carol", "--node", "bob"]
    assert main(argv) == exit_codes.OK
    load = {"engine": "llamacpp", "action": "load_model", "model": "qwen", "across": ["carol"]}
    assert _sent(broker) == [
        (methods.ENGINE_ACTION.name, load | {"node": BOB}),
        (methods.ENGINE_STATUS.name, {"engine": "llamacpp", "node": BOB}),
    ]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("", "--across needs at least one member name"),
        (" , ", "--across needs at least one member name"),
        ("bob,,carol", "--across 'bob,,carol' has an empty member name"),
        ("bob,", "--across 'bob,' has an empty member name"),
    ],
)
def test_an_empty_across_is_a_usage_error_before_anything_is_sent(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str], given: str, said: str
) -> None:
    assert main(["model", "load", "llamacpp", "qwen", "--across", given]) == exit_codes.USAGE
    assert (broker.connections, broker.calls) == (0, [])
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"pair: {said}")


@pytest.mark.parametrize("operation", ["eject", "delete"])
def test_only_load_takes_across(broker: StreamingBroker, operation: str) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["model", operation, "llamacpp", "qwen", "--across", "bob"])
    assert refused.value.code == exit_codes.USAGE
    assert broker.calls == []


def test_the_brokers_refusal_is_shown_as_it_gave_it(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    refusal = "Ollama cannot spread a model over members; only llama.cpp's load can"
    broker.answer(methods.ENGINE_ACTION.name, errors.InvalidParams(refusal, {"engine": "ollama"}))
    assert main(["model", "load", "ollama", "phi3", "--across", "bob"]) == exit_codes.ERROR
    out, err = capsys.readouterr()
    assert out == "" and err.rstrip().endswith(refusal)
    assert [m for m, _ in _sent(broker)] == [methods.ENGINE_ACTION.name]


# What a load says ------------------------------------------------------------------------------


def test_a_spread_load_says_what_it_does_then_where_the_model_runs(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["model", "load", "llamacpp", "qwen", "--across", "bob"]) == exit_codes.OK
    out, err = capsys.readouterr()
    assert err == (
        "Loading qwen into llamacpp, spread over bob as well: PAIR plans each member's share "
        "and sends it its layers…\n"
    )
    assert out.splitlines() == [
        "qwen is loaded in llamacpp",
        f"qwen is spread over 2 members: {ALICE_SHARE} · {BOB_SHARE}",
    ]


def test_a_spread_that_runs_degraded_after_its_load_says_why(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.answer(methods.ENGINE_STATUS.name, _llamacpp(DEGRADED))
    assert main(["model", "load", "llamacpp", "qwen", "--across", "bob"]) == exit_codes.OK
    assert capsys.readouterr().out.splitlines()[1:] == [
        f"qwen is spread over 2 members: {ALICE_SHARE} · {BOB_SHARE}",
        f"It runs degraded: {LOST}",
    ]


@pytest.mark.parametrize(("node", "where"), [([], "this computer"), (["--node", "carol"], "carol")])
def test_a_load_asked_to_spread_that_runs_alone_says_so(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str], node: list[str], where: str
) -> None:
    broker.answer(methods.ENGINE_STATUS.name, _llamacpp())
    assert main(["model", "load", "llamacpp", "qwen", "--across", "alice", *node]) == exit_codes.OK
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"qwen runs on {where} alone: no other member took a share"
    )


@pytest.mark.parametrize(
    ("running", "said"),
    [
        (None, []),
        (RUNNING, [f"qwen is spread over 2 members: {ALICE_SHARE} · {BOB_SHARE}"]),
        (SpreadStatus(model="other", state="running", shares=SHARES), []),  # not this model's
    ],
)
def test_a_llamacpp_load_without_across_shows_a_spread_the_broker_chose(
    broker: StreamingBroker,
    capsys: pytest.CaptureFixture[str],
    running: SpreadStatus | None,
    said: list[str],
) -> None:
    broker.answer(methods.ENGINE_STATUS.name, _llamacpp(running))
    assert main(["model", "load", "llamacpp", "qwen"]) == exit_codes.OK
    out, err = capsys.readouterr()
    assert (out.splitlines(), err) == (["qwen is loaded in llamacpp", *said], "")
    assert "across" not in _sent(broker)[0][1]


def test_a_status_that_cannot_be_read_after_a_load_is_noted_and_the_load_stands(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.answer(methods.ENGINE_STATUS.name, errors.Unavailable("bob cannot be reached"))
    assert main(["model", "load", "llamacpp", "qwen", "--across", "bob"]) == exit_codes.OK
    out, err = capsys.readouterr()
    assert out == "qwen is loaded in llamacpp\n"
    assert err.splitlines()[-1] == "pair: where qwen runs could not be read: bob cannot be reached"


# Tables --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spread", "under"),
    [
        (RUNNING, [f"  spread     qwen over 2 members: {ALICE_SHARE} · {BOB_SHARE}"]),
        (
            DEGRADED,
            [
                f"  spread     qwen over 2 members: {ALICE_SHARE} · {BOB_SHARE}",
                f"  degraded   {LOST}",
            ],
        ),
    ],
)
async def test_engines_show_a_spread_under_its_engines_row(
    capsys: pytest.CaptureFixture[str], spread: SpreadStatus, under: list[str]
) -> None:
    broker = StreamingBroker()
    alone = _llamacpp(engine=EngineName("ollama"), display_name="Ollama")
    broker.answer(methods.ENGINE_LIST.name, [_llamacpp(spread), alone])
    assert await engine_commands._engines(broker.peer, None) == exit_codes.OK
    _header, spread_row, *rest = capsys.readouterr().out.splitlines()
    assert spread_row.startswith("llamacpp") and rest[-1].startswith("ollama")
    assert rest[:-1] == under


def _models() -> EngineModels:
    return EngineModels(
        models=["phi3", "qwen", "tiny"],
        by_engine={LLAMACPP: ["qwen", "tiny"], EngineName("ollama"): ["phi3"]},
        loaded_by_engine={LLAMACPP: ["qwen"]},
        slots_by_engine={LLAMACPP: {"qwen": 1}},
    )


@pytest.mark.parametrize(("member", "sent"), [(None, {}), (KnownNode(CAROL, "carol"), CAROL)])
async def test_models_show_which_members_hold_which_share_under_the_model(
    capsys: pytest.CaptureFixture[str], member: KnownNode | None, sent: Any
) -> None:
    broker = StreamingBroker()
    broker.answer(methods.ENGINE_MODELS.name, _models())
    broker.answer(methods.ENGINE_LIST.name, [_llamacpp(DEGRADED)])
    assert await model_commands.list_models(broker.peer, member) == exit_codes.OK
    scope = {"node": sent} if sent else {}
    assert broker.calls == [(methods.ENGINE_MODELS.name, scope), (methods.ENGINE_LIST.name, scope)]
    lines = capsys.readouterr().out.splitlines()
    assert " qwen " in lines[1] and lines[1].endswith("loaded, 1 slots")
    assert lines[4].endswith(" tiny") and lines[5].endswith(" phi3")  # no spread of theirs
    assert lines[2:4] == spread_lines(DEGRADED)


def test_a_share_reads_in_words() -> None:
    one = SpreadShare(node=NodeId("n"), name="pi", layers=1, bytes=49_000_000, memory="ram")
    assert describe_share(one) == "pi 1 layer (49.0 MB RAM)"
    unexplained = SpreadStatus(model="qwen", state="degraded", shares=[one])
    assert spread_lines(unexplained) == [
        "  spread     qwen over 1 member: pi 1 layer (49.0 MB RAM)",
        "  degraded   a member that holds a share was lost",
    ]
