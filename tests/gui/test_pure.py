"""Small pure pieces: exit classification, event sequencing, options, formatting."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.broker.launch import BrokerLaunch
from app.broker.state import Ending, Ownership, ServiceState, classify_exit
from app.options import parse_options
from app.stores.subscription import EventStep, next_event_step
from app.window.look import describe, format_duration


@pytest.mark.parametrize(
    ("returncode", "asked", "ending"),
    [
        (0, False, Ending.STOPPED_ELSEWHERE),
        (1, False, Ending.CRASHED),
        (-9, False, Ending.CRASHED),
        (3, False, Ending.ALREADY_RUNNING),
        (-9, True, Ending.CLOSED),
        (0, True, Ending.CLOSED),
    ],
)
def test_classify_exit(returncode: int, asked: bool, ending: Ending) -> None:
    assert classify_exit(returncode, asked_to_stop=asked) is ending


@pytest.mark.parametrize(
    ("last", "seq", "step"),
    [
        (5, 6, EventStep.APPLY),
        (5, 5, EventStep.SKIP),
        (5, 2, EventStep.SKIP),
        (5, 7, EventStep.GAP),
        (0, 1, EventStep.APPLY),
    ],
)
def test_next_event_step(last: int, seq: int, step: EventStep) -> None:
    assert next_event_step(last, seq) is step


def test_options_pass_broker_flags_through(tmp_path: object) -> None:
    options = parse_options(
        ["--data-dir", "/tmp/pair-x", "--node-port", "4000", "--log-level", "debug"]
    )
    assert str(options.data_dir) == "/tmp/pair-x"
    assert options.broker_args == ("--node-port", "4000", "--log-level", "debug")
    assert options.log_level == "debug"
    launch = BrokerLaunch(options.data_dir, options.broker_args, python="py")
    assert launch.command() == [
        "py", "-m", "backend", "node", "--stdio", "--data-dir", "/tmp/pair-x",
        "--node-port", "4000", "--log-level", "debug",
    ]  # fmt: skip


def test_options_accept_every_flag_the_pair_command_passes_on() -> None:
    options = parse_options(["--json-logs", "--llamacpp-port", "9", "--openai-port", "8"])
    assert options.broker_args == ("--openai-port", "8", "--llamacpp-port", "9", "--json-logs")


def test_options_reject_unknown_flags() -> None:
    with pytest.raises(SystemExit):
        parse_options(["--bogus"])


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (59.9, "59 s"), (60, "1 min"), (3599, "59 min"), (3660, "1 h 01 min"),
     (90000, "1 d 1 h")],
)  # fmt: skip
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_descriptions_say_what_quitting_does() -> None:
    assert "stops it" in describe(ServiceState.READY, Ownership.OWNED)
    assert "leaves it running" in describe(ServiceState.READY, Ownership.ATTACHED)
    assert "Start" in describe(ServiceState.DISCONNECTED, None)


def test_qt_calls_keep_the_reference_counts_of_none_and_true() -> None:
    """PySide6 6.12.0 on Python 3.11 leaked one reference per call and aborted; 6.11.3 is pinned."""
    import sys

    from PySide6.QtCore import QObject, Signal

    class Emitter(QObject):
        fired = Signal()

    emitter = Emitter()
    emitter.fired.connect(lambda: None)
    none_before, true_before = sys.getrefcount(None), sys.getrefcount(True)
    for _ in range(200):
        emitter.setObjectName("x")
        emitter.fired.emit()
    assert sys.getrefcount(None) - none_before > -50
    assert sys.getrefcount(True) - true_before > -50


def test_the_app_log_is_a_private_rotating_file(tmp_path: Path) -> None:
    import logging
    import stat

    from app.logging_setup import configure_logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        path = configure_logging(tmp_path / "node", "info")
        assert path == tmp_path / "node" / "logs" / "app.log"
        logging.getLogger("app.test").info("hello from the app")
        for handler in root.handlers:
            handler.flush()
        assert "hello from the app" in path.read_text()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        for handler in set(root.handlers) - set(handlers):
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
