"""The macOS watchdog launcher's logic: the kqueue calls against a fake ``select`` module, the
decisions against fakes (``tests/integration/test_lifetime_guard.py`` runs it for real)."""

from __future__ import annotations

import signal
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from backend.core.lifetime import guard
from backend.core.lifetime.guard import KqueueExits, exit_like, parse, wait_first

BROKER, CHILD = 100, 200


@dataclass
class FakeQueue:
    """A kqueue: ``gone`` PIDs refuse registration, ``exits`` is the order of exit events."""

    gone: set[int] = field(default_factory=set)
    exits: list[int] = field(default_factory=list)
    registered: list[Any] = field(default_factory=list)
    closed: bool = False

    def control(self, changes: list[Any] | None, max_events: int) -> list[Any]:
        if changes is not None:
            assert max_events == 0
            for change in changes:
                if change.ident in self.gone:
                    raise ProcessLookupError(3, "No such process")
                self.registered.append(change)
            return []
        assert max_events == 1
        return [types.SimpleNamespace(ident=self.exits.pop(0))] if self.exits else []

    def close(self) -> None:
        self.closed = True


def fake_select(queue: FakeQueue) -> types.ModuleType:
    module = types.ModuleType("select")
    module.kqueue = lambda: queue  # type: ignore[attr-defined]
    module.kevent = lambda ident, **kwargs: types.SimpleNamespace(ident=ident, **kwargs)  # type: ignore[attr-defined]
    # macOS's values.
    module.KQ_FILTER_PROC, module.KQ_EV_ADD, module.KQ_EV_ONESHOT = -5, 0x1, 0x10  # type: ignore[attr-defined]
    module.KQ_NOTE_EXIT = 0x80000000  # type: ignore[attr-defined]
    return module


def test_kqueue_watches_both_pids_for_exit_and_reports_the_first() -> None:
    queue = FakeQueue(exits=[CHILD])

    assert wait_first(KqueueExits(fake_select(queue)), BROKER, CHILD, lambda: None) == "child"
    assert [(e.ident, e.filter, e.flags, e.fflags) for e in queue.registered] == [
        (BROKER, -5, 0x11, 0x80000000),
        (CHILD, -5, 0x11, 0x80000000),
    ]
    assert queue.closed


def test_an_event_for_another_pid_is_skipped() -> None:
    queue = FakeQueue(exits=[999, BROKER])

    assert wait_first(KqueueExits(fake_select(queue)), BROKER, CHILD, lambda: None) == "broker"


@pytest.mark.parametrize(("gone", "first"), [(BROKER, "broker"), (CHILD, "child")])
def test_a_pid_gone_before_it_is_watched_counts_as_its_exit(gone: int, first: str) -> None:
    queue = FakeQueue(gone={gone})

    assert wait_first(KqueueExits(fake_select(queue)), BROKER, CHILD, lambda: None) == first
    assert queue.closed


def test_an_exit_between_the_start_and_the_watch_is_not_waited_for() -> None:
    queue = FakeQueue()  # no event will come

    assert wait_first(KqueueExits(fake_select(queue)), BROKER, CHILD, lambda: "child") == "child"
    assert len(queue.registered) == 2 and queue.closed


@dataclass
class FakeChild:
    pid: int = CHILD
    code: int = 0
    exited: bool = False

    def poll(self) -> int | None:
        return self.code if self.exited else None

    def wait(self) -> int:
        return self.code


@dataclass
class FakeWatch:
    first: int
    watched: list[int] = field(default_factory=list)

    def watch(self, pid: int) -> None:
        self.watched.append(pid)

    def wait(self) -> int:
        return self.first

    def close(self) -> None:
        pass


def run_guard(
    first: int, *, parent: int = BROKER, code: int = 0, exited: bool = False
) -> tuple[int, list[Any]]:
    killed: list[tuple[int, int]] = []
    started: list[tuple[list[str], bool]] = []

    def start(argv: Any, ignore_sigpipe: bool) -> Any:
        started.append((list(argv), ignore_sigpipe))
        return FakeChild(code=code, exited=exited)

    result = guard.guard(
        BROKER,
        ["engine", "--flag"],
        watch=FakeWatch(first),
        ignore_sigpipe=True,
        start=start,
        getppid=lambda: parent,
        kill_group=lambda group, signum: killed.append((group, signum)),
    )
    assert started == [(["engine", "--flag"], True)]
    return result, killed


def test_the_broker_exiting_first_kills_the_group() -> None:
    _, killed = run_guard(BROKER)

    assert killed == [(guard.os.getpgid(0), signal.SIGKILL)]


def test_a_broker_gone_before_the_watch_kills_the_group_at_once() -> None:
    _, killed = run_guard(CHILD, parent=1)  # reparented: the broker is gone

    assert [signum for _, signum in killed] == [signal.SIGKILL]


def test_the_child_exiting_first_gives_its_status_and_kills_nothing() -> None:
    assert run_guard(CHILD, code=3) == (3, [])


def test_a_child_gone_before_the_watch_gives_its_status() -> None:
    assert run_guard(BROKER, code=4, exited=True) == (4, []), "the watch is never waited on"


def test_a_child_that_cannot_start_is_status_127(capsys: pytest.CaptureFixture[str]) -> None:
    def start(argv: Any, ignore_sigpipe: bool) -> Any:
        raise FileNotFoundError(2, "No such file or directory")

    assert guard.guard(BROKER, ["missing"], watch=FakeWatch(CHILD), start=start) == 127
    assert "cannot start missing" in capsys.readouterr().err


def test_exit_like_repeats_a_code_or_a_signal() -> None:
    sent: list[tuple[int, int]] = []

    assert exit_like(7, kill=lambda pid, signum: sent.append((pid, signum))) == 7
    assert sent == []
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        code = exit_like(-signal.SIGUSR1, kill=lambda pid, signum: sent.append((pid, signum)))
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert sent == [(guard.os.getpid(), signal.SIGUSR1)]
    assert code == 128 + signal.SIGUSR1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["12", "--", "a", "b"], (12, False, ["a", "b"])),
        (["12", "--ignore-sigpipe", "--", "a"], (12, True, ["a"])),
        (["12", "--", "a", "--", "b"], (12, False, ["a", "--", "b"])),
    ],
)
def test_parse_reads_the_broker_pid_the_option_and_the_argv(
    args: list[str], expected: tuple[int, bool, list[str]]
) -> None:
    assert parse(args) == expected


@pytest.mark.parametrize("args", [[], ["12", "--"], ["x", "--", "a"], ["12", "a"]])
def test_parse_refuses_anything_else(args: list[str]) -> None:
    with pytest.raises(ValueError, match="usage"):
        parse(args)
    assert guard.main(args) == 2
