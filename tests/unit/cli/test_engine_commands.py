"""The engine and model commands, run as ``pair ...`` against a scripted broker: exactly what
each sends (with ``--node`` naming a member, this node or nothing), what it prints, the port
and line checks before anything is sent, the question before an uninstall or a delete, and
``pair pull`` / ``pair engine install|update`` drawing their progress from the engine stream."""

from __future__ import annotations

import io
import sys
from typing import Any

import pytest

from backend.cli import engine_commands, exit_codes, model_commands
from backend.cli.engine_format import describe_status, describe_versions
from backend.cli.main import build_parser, main
from backend.cli.node_ref import KnownNode, with_node
from backend.cli.progress_bar import ProgressBar, progress_line
from backend.components.federation import link
from backend.protocol import errors, methods
from backend.protocol.types.base import NodeId
from backend.protocol.types.engines import (
    EngineActionParams,
    EngineActionResult,
    EngineLogs,
    EngineStatus,
    EngineVersions,
    InstallProgressed,
    PullProgressed,
)
from tests.unit.cli.scripted import (
    ALICE,
    BOB,
    INSTALL,
    MODEL,
    NO_MODELS,
    OLLAMA,
    REMOTE_PULL,
    StreamingBroker,
    changed,
    drawn,
)


class Terminal(io.StringIO):
    """Standard input that is a terminal."""

    def isatty(self) -> bool:
        return True


def _status(**fields: Any) -> EngineStatus:
    values: dict[str, Any] = {
        "engine": "ollama",
        "display_name": "Ollama",
        "front_door": "ollama",
        "mode": "process",
        "installed": True,
        "state": "running",
        "port": 11500,
        "default_port": 11434,
    }
    return EngineStatus(**(values | fields))


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> StreamingBroker:
    """The broker every ``pair`` command of the test talks to; standard input is no terminal."""
    broker = StreamingBroker()
    broker.attach(monkeypatch)
    stopped = _status(state="stopped", pid=None)
    for method in (methods.ENGINE_STATUS, methods.ENGINE_INSTALL, methods.ENGINE_UPDATE):
        broker.answer(method.name, stopped)
    broker.answer(methods.ENGINE_UNINSTALL.name, _status(installed=False, state="not-installed"))
    broker.answer(methods.ENGINE_SET_PORT.name, _status(port=23456, state="stopped"))
    broker.answer(methods.ENGINE_LOGS.name, EngineLogs(engine=OLLAMA, lines=["one", "two"]))
    broker.answer(methods.ENGINE_ACTION.name, EngineActionResult(ok=True))
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    return broker


def _engine_calls(broker: StreamingBroker) -> list[tuple[str, Any]]:
    """What was sent to the engine manager, but the subscription to its stream."""
    return [
        (method, params)
        for method, params in broker.calls
        if method.startswith("engine:") and method != methods.ENGINE_SUBSCRIBE.name
    ]


NEW_COMMANDS: list[tuple[list[str], str, dict[str, Any]]] = [
    (["engine", "status", "ollama"], methods.ENGINE_STATUS.name, {"engine": "ollama"}),
    (["engine", "install", "ollama"], methods.ENGINE_INSTALL.name, {"engine": "ollama"}),
    (["engine", "update", "ollama"], methods.ENGINE_UPDATE.name, {"engine": "ollama"}),
    (
        ["engine", "uninstall", "ollama", "--yes"],
        methods.ENGINE_UNINSTALL.name,
        {"engine": "ollama"},
    ),
    (
        ["engine", "set-port", "ollama", "23456"],
        methods.ENGINE_SET_PORT.name,
        {"engine": "ollama", "port": 23456},
    ),
    (["engine", "logs", "ollama"], methods.ENGINE_LOGS.name, {"engine": "ollama"}),  # 200
    (
        ["engine", "logs", "ollama", "--lines", "50"],
        methods.ENGINE_LOGS.name,
        {"engine": "ollama", "lines": 50},
    ),
    (
        ["model", "load", "ollama", MODEL],
        methods.ENGINE_ACTION.name,
        {"engine": "ollama", "action": "load_model", "model": MODEL},
    ),
    (
        ["model", "eject", "ollama", MODEL],
        methods.ENGINE_ACTION.name,
        {"engine": "ollama", "action": "unload_model", "model": MODEL},
    ),
    (
        ["model", "delete", "ollama", MODEL, "--yes"],
        methods.ENGINE_ACTION.name,
        {"engine": "ollama", "action": "delete_model", "model": MODEL},
    ),
]


@pytest.mark.parametrize(("argv", "method", "params"), NEW_COMMANDS)
@pytest.mark.parametrize(
    ("node", "sent"), [(None, None), ("bob", BOB), ("7B1D0", BOB), ("alice", None)]
)
def test_each_new_command_sends_its_params_and_the_member(
    broker: StreamingBroker,
    argv: list[str],
    method: str,
    params: dict[str, Any],
    node: str | None,
    sent: NodeId | None,
) -> None:
    given = ["--node", node] if node is not None else []
    assert main([*argv, *given]) == exit_codes.OK
    assert _engine_calls(broker) == [(method, params | ({"node": sent} if sent else {}))]
    asked = [m for m, _ in broker.calls if m in (methods.STATUS.name, methods.CLUSTER_STATUS.name)]
    assert asked == ([methods.STATUS.name, methods.CLUSTER_STATUS.name] if node else [])
    assert broker.connections == 1  # --yes: nothing is asked, one connection does it all


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["engine", "install", "ollama"], "Ollama on bob: installed, stopped\n"),
        (["engine", "update", "ollama"], "Ollama on bob: updated, stopped\n"),
        (
            ["engine", "uninstall", "ollama", "--yes"],
            "Ollama on bob: uninstalled, the models stay\n",
        ),
        (["engine", "set-port", "ollama", "23456"], "Ollama on bob: port 23456, stopped\n"),
        (["engine", "logs", "ollama"], "one\ntwo\n"),
        (["model", "load", "ollama", MODEL], f"{MODEL} is loaded in ollama on bob\n"),
        (["model", "eject", "ollama", MODEL], f"{MODEL} is ejected from ollama on bob\n"),
        (
            ["model", "delete", "ollama", MODEL, "--yes"],
            f"{MODEL} is deleted from ollama on bob; ollama did not need a restart\n",
        ),
    ],
)
def test_each_new_command_says_what_it_did_on_which_node(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    assert main([*argv, "--node", "bob"]) == exit_codes.OK
    assert capsys.readouterr().out == expected


@pytest.mark.parametrize(
    ("restarted", "said"),
    [
        (True, "ollama was restarted to pick the change up"),
        (False, "ollama did not need a restart"),
    ],
)
def test_a_delete_says_whether_the_engine_was_restarted(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str], restarted: bool, said: str
) -> None:
    broker.answer(methods.ENGINE_ACTION.name, EngineActionResult(ok=True, restarted=restarted))
    assert main(["model", "delete", "ollama", MODEL, "--yes"]) == exit_codes.OK
    assert capsys.readouterr().out == f"{MODEL} is deleted from ollama; {said}\n"


def test_logs_of_an_engine_without_output_say_so_on_stderr(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.answer(methods.ENGINE_LOGS.name, EngineLogs(engine=OLLAMA, lines=[]))
    assert main(["engine", "logs", "ollama"]) == exit_codes.OK
    out, err = capsys.readouterr()
    assert (out, err) == ("", "ollama has written no output yet\n")


def test_status_shows_every_known_fact_and_leaves_out_the_unknown() -> None:
    running = _status(binary="/usr/bin/ollama", pid=4242, slots=4, desired=True, adopted=True)
    assert describe_status(running, KnownNode(BOB, "bob")) == (
        "Ollama on bob: running on port 11500 (adopted: not started by PAIR)\n"
        "  installed  /usr/bin/ollama\n"
        "  port       11500 (default 11434)\n"
        "  pid        4242\n"
        "  slots      4\n"
        "  wanted     running"
    )
    broken = _status(installed=False, state="error", port=11434, error="exited with code 1")
    assert describe_status(broken) == (
        "Ollama: error\n  installed  no\n  port       11434\n  wanted     not set\n"
        "  error      exited with code 1"
    )


@pytest.mark.parametrize("port", ["0", "1023", "65536", "-1", "99999", "http", "80.5", ""])
def test_a_port_outside_1024_to_65535_is_a_usage_error_before_anything_is_sent(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str], port: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["engine", "set-port", "ollama", port, "--node", "bob"])
    assert exited.value.code == exit_codes.USAGE
    assert "argument PORT" in capsys.readouterr().err
    assert (broker.connections, broker.calls) == (0, [])


@pytest.mark.parametrize("port", [1024, 65535])
def test_the_ends_of_the_port_range_are_sent(broker: StreamingBroker, port: int) -> None:
    assert main(["engine", "set-port", "ollama", str(port)]) == exit_codes.OK
    assert _engine_calls(broker) == [
        (methods.ENGINE_SET_PORT.name, {"engine": "ollama", "port": port})
    ]


@pytest.mark.parametrize("lines", ["0", "-5", "many"])
def test_a_line_count_below_one_is_a_usage_error(broker: StreamingBroker, lines: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["engine", "logs", "ollama", "--lines", lines])
    assert exited.value.code == exit_codes.USAGE
    assert broker.calls == []


def test_a_broker_error_prints_its_message_and_exits_1(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.answer(methods.ENGINE_SET_PORT.name, errors.Conflict("port 23456 is already in use"))
    broker.answer(methods.ENGINE_ACTION.name, errors.NotFound("model 'nope' not found"))
    assert main(["engine", "set-port", "ollama", "23456"]) == exit_codes.ERROR
    assert main(["model", "load", "ollama", "nope", "--node", "bob"]) == exit_codes.ERROR
    out, err = capsys.readouterr()
    assert out == ""
    assert "port 23456 is already in use" in err and "model 'nope' not found" in err


def test_a_start_refused_as_not_installed_names_the_install_command(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    refused = errors.NotFound(
        "Ollama is not installed on this computer", {"engine": "ollama", "action": "install"}
    )
    broker.answer(methods.ENGINE_START.name, refused)
    assert main(["engine", "start", "ollama"]) == exit_codes.ERROR
    assert main(["engine", "start", "ollama", "--node", "bob"]) == exit_codes.ERROR
    here, on_bob = capsys.readouterr().err.splitlines()
    assert here.endswith(
        "not installed on this computer; install it with `pair engine install ollama`"
    )
    assert on_bob.endswith("install it with `pair engine install ollama --node bob`")


# The question before an uninstall or a delete ---------------------------------------------

CONFIRMED = [
    (["engine", "uninstall", "ollama"], methods.ENGINE_UNINSTALL.name, "uninstall ollama"),
    (
        ["model", "delete", "ollama", MODEL],
        methods.ENGINE_ACTION.name,
        f"delete {MODEL} from ollama",
    ),
]


@pytest.mark.parametrize(("argv", "method", "action"), CONFIRMED)
@pytest.mark.parametrize("node", [[], ["--node", "bob"]])
def test_without_a_terminal_and_without_yes_nothing_is_asked_or_sent(
    broker: StreamingBroker,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    method: str,
    action: str,
    node: list[str],
) -> None:
    monkeypatch.setattr("builtins.input", _never_asked)
    assert main([*argv, *node]) == exit_codes.USAGE
    assert (broker.connections, broker.calls) == (0, [])
    out, err = capsys.readouterr()
    assert out == ""
    assert f"refusing to {action}" in err and "pass --yes" in err


def _never_asked(question: str) -> str:
    raise AssertionError(f"asked {question!r}")


@pytest.mark.parametrize(("argv", "method", "action"), CONFIRMED)
def test_yes_without_a_terminal_does_it_without_asking(
    broker: StreamingBroker,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    method: str,
    action: str,
) -> None:
    monkeypatch.setattr("builtins.input", _never_asked)
    assert main([*argv, "--yes"]) == exit_codes.OK
    assert [m for m, _ in _engine_calls(broker)] == [method]


class Asker:
    """Answers the question with ``answer`` and notes what was sent before it was asked."""

    def __init__(self, broker: StreamingBroker, answer: str | BaseException) -> None:
        self.broker, self.answer = broker, answer
        self.questions: list[str] = []
        self.sent_before: list[str] = []

    def __call__(self, question: str) -> str:
        self.questions.append(question)
        self.sent_before = [method for method, _ in self.broker.calls]
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(("argv", "method", "action"), CONFIRMED)
@pytest.mark.parametrize("answer", ["y", "YES"])
def test_on_a_terminal_a_yes_does_it_on_the_member_named(
    broker: StreamingBroker,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    method: str,
    action: str,
    answer: str,
) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal())
    asker = Asker(broker, answer)
    monkeypatch.setattr("builtins.input", asker)
    assert main([*argv, "--node", "7b1d0"]) == exit_codes.OK
    assert len(asker.questions) == 1
    assert asker.questions[0].startswith(action[:1].upper() + action[1:] + " on bob? ")
    assert asker.questions[0].endswith(" [y/N] ")
    assert asker.sent_before == [methods.STATUS.name, methods.CLUSTER_STATUS.name]
    assert [(m, p.get("node")) for m, p in _engine_calls(broker)] == [(method, BOB)]
    assert broker.connections == 2  # asked between connections, not inside the event loop


@pytest.mark.parametrize(("argv", "method", "action"), CONFIRMED)
@pytest.mark.parametrize("answer", ["", "n", "no thanks", EOFError(), KeyboardInterrupt()])
def test_on_a_terminal_anything_but_yes_sends_nothing(
    broker: StreamingBroker,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    method: str,
    action: str,
    answer: str | BaseException,
) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal())
    asker = Asker(broker, answer)
    monkeypatch.setattr("builtins.input", asker)
    assert main(argv) == exit_codes.ERROR
    assert asker.questions[0].startswith(action[:1].upper() + action[1:] + "? ")
    assert _engine_calls(broker) == []
    assert f"Did not {action} (`--yes` skips the question)" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "method", "action"), CONFIRMED)
def test_on_a_terminal_an_unknown_node_is_refused_before_the_question(
    broker: StreamingBroker,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    method: str,
    action: str,
) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal())
    monkeypatch.setattr("builtins.input", _never_asked)
    assert main([*argv, "--node", "7b1d"]) == exit_codes.USAGE  # bob and carol
    assert _engine_calls(broker) == []
    assert "matches 2 nodes" in capsys.readouterr().err


# Progress from the engine stream ----------------------------------------------------------

DONE = {"install": "installed", "update": "updated"}


@pytest.mark.parametrize("operation", ["install", "update"])
def test_install_and_update_draw_a_local_install_from_install_progressed(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str], operation: str
) -> None:
    method = engine_commands.INSTALLS[operation]
    broker.pushes[method.name] = [
        InstallProgressed(seq=n, progress=p) for n, p in enumerate(INSTALL, 1)
    ]
    assert main(["engine", operation, "ollama"]) == exit_codes.OK
    engine_methods = [m for m, _ in broker.calls if m.startswith("engine:")]
    assert engine_methods == [methods.ENGINE_SUBSCRIBE.name, method.name]
    out = capsys.readouterr().out
    bar, said = out.rsplit("\n", 2)[:2]
    assert drawn(io.StringIO(bar)) == [progress_line(p) for p in INSTALL]
    assert said == f"Ollama: {DONE[operation]}, stopped"


@pytest.mark.parametrize("operation", ["install", "update"])
def test_install_and_update_on_a_member_draw_its_installs(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str], operation: str
) -> None:
    method = engine_commands.INSTALLS[operation]
    broker.pushes[method.name] = [
        InstallProgressed(seq=1, progress=INSTALL[1]),  # this node's, not the member's
        *(changed(n, BOB, installs=[p]) for n, p in enumerate(INSTALL, 2)),
    ]
    assert main(["engine", operation, "ollama", "--node", "bob"]) == exit_codes.OK
    out = capsys.readouterr().out
    bar, said = out.rsplit("\n", 2)[:2]
    assert drawn(io.StringIO(bar)) == [progress_line(p) for p in INSTALL]
    assert said == f"Ollama on bob: {DONE[operation]}, stopped"


def test_a_failed_install_ends_the_bar_line_and_exits_1(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.pushes[methods.ENGINE_INSTALL.name] = [InstallProgressed(seq=1, progress=INSTALL[1])]
    broker.answer(methods.ENGINE_INSTALL.name, errors.InternalError("checksum mismatch"))
    assert main(["engine", "install", "ollama"]) == exit_codes.ERROR
    out, err = capsys.readouterr()
    assert out.endswith("\n") and "checksum mismatch" in err


def test_long_calls_wait_longer_than_the_broker_waits_for_a_member(
    broker: StreamingBroker,
) -> None:
    for argv in (c[0] for c in NEW_COMMANDS):
        assert main([*argv, "--node", "bob"]) == exit_codes.OK
    forwarded = {method.name: method for method in methods.FORWARDED}
    waited = {name: broker.timeouts[name] for name in forwarded if name in broker.timeouts}
    assert len(waited) == len({method for _, method, _ in NEW_COMMANDS})
    for name, timeout in waited.items():
        assert timeout is not None and timeout > link.call_timeout(forwarded[name]), name


async def _pull(broker: StreamingBroker, given: str | None, out: io.StringIO) -> int:
    bar = ProgressBar(OLLAMA, MODEL, out)
    broker.listener = bar.on_push
    asked = EngineActionParams(engine=OLLAMA, action="pull_model", model=MODEL)
    work = with_node(given, lambda peer, node: model_commands.pull(peer, bar, node, asked))
    return await work(broker.peer)


async def test_pull_with_node_follows_the_stream_and_ends_with_the_call(
    capsys: pytest.CaptureFixture[str],
) -> None:
    broker, out = StreamingBroker(), io.StringIO()
    broker.pushes[methods.ENGINE_ACTION.name] = [
        changed(n, BOB, [p]) for n, p in enumerate(REMOTE_PULL, 1)
    ]
    broker.answer(methods.ENGINE_ACTION.name, EngineActionResult(ok=True))
    assert await _pull(broker, "bob", out) == exit_codes.OK
    assert broker.methods_called[-2:] == [methods.ENGINE_SUBSCRIBE.name, methods.ENGINE_ACTION.name]
    action = broker.calls[-1][1]
    assert action == {"engine": "ollama", "action": "pull_model", "model": MODEL, "node": BOB}
    assert drawn(out)[-1] == progress_line(REMOTE_PULL[-1])
    assert out.getvalue().endswith("\n")
    assert capsys.readouterr().out == f"{MODEL} is ready in ollama on bob\n"


async def test_pull_with_this_nodes_name_is_a_local_pull(
    capsys: pytest.CaptureFixture[str],
) -> None:
    broker, out = StreamingBroker(), io.StringIO()
    broker.pushes[methods.ENGINE_ACTION.name] = [PullProgressed(seq=1, progress=REMOTE_PULL[-1])]
    broker.answer(methods.ENGINE_ACTION.name, EngineActionResult(ok=True))
    assert await _pull(broker, ALICE[:8], out) == exit_codes.OK
    assert broker.calls[-1][1] == {"engine": "ollama", "action": "pull_model", "model": MODEL}
    assert drawn(out) == [progress_line(REMOTE_PULL[-1])]
    assert capsys.readouterr().out == f"{MODEL} is ready in ollama\n"


async def test_a_failed_remote_pull_ends_the_bar_line_and_raises() -> None:
    broker, out = StreamingBroker(), io.StringIO()
    broker.pushes[methods.ENGINE_ACTION.name] = [changed(1, BOB, [REMOTE_PULL[1]])]
    broker.answer(methods.ENGINE_ACTION.name, errors.InternalError("no space left on device"))
    with pytest.raises(errors.InternalError):
        await _pull(broker, "bob", out)
    assert out.getvalue().endswith("\n")  # the broker's error goes on a line of its own


# The commands that were there before ------------------------------------------------------


@pytest.mark.parametrize(("given", "sent"), [(None, None), ("alice", None), ("7b1d0", BOB)])
async def test_lifecycle_sends_the_member_and_names_it(
    capsys: pytest.CaptureFixture[str], given: str | None, sent: NodeId | None
) -> None:
    broker = StreamingBroker()
    broker.answer(methods.ENGINE_RESTART.name, _status())
    method = engine_commands.LIFECYCLE["restart"]
    work = with_node(
        given, lambda peer, node: engine_commands._lifecycle(peer, method, OLLAMA, node)
    )
    assert await work(broker.peer) == exit_codes.OK
    method_name, params = broker.calls[-1]
    assert method_name == methods.ENGINE_RESTART.name
    assert params == ({"engine": "ollama"} | ({"node": sent} if sent else {}))
    where = " on bob" if sent else ""
    assert capsys.readouterr().out == f"Ollama{where}: running on port 11500\n"


async def test_engines_and_models_ask_for_the_member(capsys: pytest.CaptureFixture[str]) -> None:
    broker = StreamingBroker()
    broker.answer(methods.ENGINE_LIST.name, [_status(state="stopped")])
    broker.answer(methods.ENGINE_MODELS.name, NO_MODELS)
    member = KnownNode(BOB, "bob")
    assert await engine_commands._engines(broker.peer, member) == exit_codes.OK
    assert await model_commands.list_models(broker.peer, member) == exit_codes.OK
    assert await model_commands.list_models(broker.peer, None) == exit_codes.OK
    assert broker.calls == [
        (methods.ENGINE_LIST.name, {"node": BOB}),
        (methods.ENGINE_MODELS.name, {"node": BOB}),
        (methods.ENGINE_MODELS.name, {}),
    ]
    out = capsys.readouterr().out
    assert "ollama    stopped" in out
    assert out.endswith("no engine is running on bob\nno engine is running\n")


async def test_engines_columns_widen_for_an_adopted_engine_and_long_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    broker = StreamingBroker()
    rows = [
        _status(state="stopped", pid=None),
        _status(
            engine="llamacpp",
            state="running",
            adopted=True,
            port=65535,
            pid=4_194_304_123,
            slots=1_048_576,
            desired=True,
            binary="/usr/local/bin/llama-server",
            backend="CUDA 12.4",
        ),
    ]
    broker.answer(methods.ENGINE_LIST.name, rows)
    assert await engine_commands._engines(broker.peer, None) == exit_codes.OK
    header, stopped, adopted = capsys.readouterr().out.splitlines()
    assert adopted.split() == [
        "llamacpp",
        "running",
        "(adopted)",
        "65535",
        "4194304123",
        "1048576",
        "CUDA",
        "12.4",
        "on",
        "/usr/local/bin/llama-server",
    ]
    assert "running (adopted)  65535" in adopted
    # Every column starts where its title does, on every line.
    cells = (("PORT", "65535"), ("PID", "4194304123"), ("SLOTS", "1048576"), ("BACKEND", "CUDA"))
    for title, value in cells:
        assert adopted.index(value) == header.index(title)
    assert stopped.index("11500") == header.index("PORT")
    assert adopted.index("/usr") == header.index("DETAIL") == stopped.index("not installed")


@pytest.mark.parametrize(
    "argv",
    [
        ["engines"],
        ["models"],
        ["pull", "ollama", MODEL],
        *(["engine", operation, "ollama"] for operation in engine_commands.LIFECYCLE),
        ["engine", "versions", "ollama"],
        *(argv for argv, _, _ in NEW_COMMANDS),
    ],
)
def test_every_engine_and_model_command_takes_node(argv: list[str]) -> None:
    assert build_parser().parse_args([*argv, "--node", "bob"]).node == "bob"
    assert build_parser().parse_args(argv).node is None


def test_versions_go_to_the_member(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    versions = EngineVersions(engine=OLLAMA, installed="0.5.7", latest="0.6.2")
    broker.answer(methods.ENGINE_VERSIONS.name, versions)
    assert main(["engine", "versions", "ollama", "--node", "BOB"]) == exit_codes.OK
    assert _engine_calls(broker) == [
        (methods.ENGINE_VERSIONS.name, {"engine": "ollama", "node": BOB})
    ]
    assert capsys.readouterr().out.startswith("ollama on bob: installed 0.5.7, latest 0.6.2\n")


@pytest.mark.parametrize(
    ("fields", "member", "expected"),
    [
        (
            {"installed": "0.5.7", "latest": "0.6.2", "update_available": True, "can_update": True},
            KnownNode(BOB, "bob"),
            "ollama on bob: installed 0.5.7, latest 0.6.2\n"
            "An update is available: `pair engine update ollama --node 7b1d00c4`.",
        ),
        (
            {"installed": "0.5.7", "latest": "0.6.2", "update_available": True, "can_update": True},
            None,
            "ollama: installed 0.5.7, latest 0.6.2\n"
            "An update is available: `pair engine update ollama`.",
        ),
        (
            {
                "installed": "0.5.7",
                "latest": "0.6.2",
                "update_available": True,
                "reason": "not installed by PAIR",
            },
            None,
            "ollama: installed 0.5.7, latest 0.6.2\n"
            "An update is available, but PAIR cannot install it: not installed by PAIR.",
        ),
        (
            {"installed": "0.6.2", "latest": "0.6.2"},
            None,
            "ollama: installed 0.6.2, latest 0.6.2\nUp to date.",
        ),
        (
            {"installed": "0.6.2", "reason": "offline: the release list could not be read"},
            None,
            "ollama: installed 0.6.2, latest unknown\nOffline: the release list could not be read",
        ),
    ],
)
def test_versions_say_what_to_do_next(
    fields: dict[str, Any], member: KnownNode | None, expected: str
) -> None:
    assert describe_versions(EngineVersions(engine=OLLAMA, **fields), member) == expected
