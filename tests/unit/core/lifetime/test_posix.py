"""Linux's and macOS's lifetimes: spawn keywords, the launcher's argv, group signals (fakes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.cli.main import GUARD_COMMAND, main
from backend.core import processes
from backend.core.lifetime import Ending, child_lifetime, for_platform, guard, macos
from backend.core.lifetime.macos import MacLifetime
from backend.core.lifetime.posix import LinuxLifetime, ProcessGroup, posix_preexec
from backend.core.lifetime.windows import WindowsLifetime


class Child:
    pid = 321

    def terminate(self) -> None:
        raise AssertionError("POSIX ends a tree through its group")


def test_one_place_picks_the_lifetime_by_platform() -> None:
    assert isinstance(for_platform("win32"), WindowsLifetime)
    assert isinstance(for_platform("darwin"), MacLifetime)
    assert for_platform("linux") == LinuxLifetime(parent_death=True)
    assert for_platform("freebsd14") == LinuxLifetime(parent_death=False)
    assert child_lifetime() is child_lifetime()


def test_linux_keeps_the_argv_and_spawns_with_only_a_preexec() -> None:
    linux = LinuxLifetime()
    options = linux.spawn_options()

    assert linux.command(["engine", "-x"], ignore_sigpipe=True) == ["engine", "-x"]
    assert options.keys() == {"preexec_fn"}, "no session of its own: the module says why"
    assert callable(options["preexec_fn"])
    assert callable(LinuxLifetime(parent_death=False).spawn_options()["preexec_fn"])


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")
@pytest.mark.parametrize("parent_death", [True, False])
def test_a_linux_child_leads_its_own_group_in_the_spawners_session(parent_death: bool) -> None:
    """Its own group, so ``killpg`` ends its tree; the spawner's session, so on Linux it
    shares the spawner's scheduling autogroup instead of being alone in one."""
    if parent_death and not sys.platform.startswith("linux"):
        pytest.skip("Linux's parent-death signal")
    options = LinuxLifetime(parent_death=parent_death).spawn_options()
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, **options
    )
    try:
        assert os.getpgid(child.pid) == child.pid != os.getpgid(0)
        assert os.getsid(child.pid) == os.getsid(0)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)


def test_the_preexec_exists_only_when_it_has_something_to_do() -> None:
    assert posix_preexec(parent_death=False, ignore_sigpipe=False) is None
    assert callable(posix_preexec(parent_death=False, ignore_sigpipe=True))
    assert callable(posix_preexec(parent_death=True, ignore_sigpipe=False))
    assert callable(posix_preexec(parent_death=False, ignore_sigpipe=False, own_group=True))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal")
def test_child_preexec_still_gives_linux_children_the_preexec() -> None:
    assert callable(processes.child_preexec())
    assert callable(processes.child_preexec(ignore_sigpipe=True))


@pytest.mark.parametrize("lifetime", [LinuxLifetime, MacLifetime])
def test_a_tree_is_its_process_group(lifetime: type[LinuxLifetime | MacLifetime]) -> None:
    sent: list[tuple[int, int]] = []

    def kill_group(group: int, signum: int) -> None:
        if sent and sent[-1] == (group, signum):
            raise ProcessLookupError  # the group is gone by the second SIGKILL
        sent.append((group, signum))

    tree = lifetime(kill_group=kill_group).adopt(Child())
    tree.end(Ending.TERMINATE)
    tree.end(Ending.KILL)
    tree.end(Ending.KILL)
    tree.release()
    lifetime(kill_group=kill_group).kill_orphan(654)

    assert sent == [(321, signal.SIGTERM), (321, signal.SIGKILL), (654, signal.SIGKILL)]


def test_a_group_owned_by_someone_else_is_left_quietly() -> None:
    def kill_group(group: int, signum: int) -> None:
        raise PermissionError

    ProcessGroup(1, kill_group).end(Ending.KILL)


def test_macos_starts_the_child_through_the_launcher_with_the_broker_pid() -> None:
    mac = MacLifetime(guard_command=["py", "guard.py"], broker_pid=lambda: 77)

    assert mac.command(["engine", "-x"]) == ["py", "guard.py", "77", "--", "engine", "-x"]
    assert mac.command(["engine"], ignore_sigpipe=True) == [
        "py",
        "guard.py",
        "77",
        "--ignore-sigpipe",
        "--",
        "engine",
    ]
    options = mac.spawn_options()
    assert options == {"preexec_fn": None, "start_new_session": True}
    assert callable(mac.spawn_options(ignore_sigpipe=True)["preexec_fn"])


def test_the_launcher_is_this_interpreter_running_the_guard_script_isolated() -> None:
    command = macos.default_guard_command()

    assert command == [sys.executable, "-I", str(Path(guard.__file__))]
    assert MacLifetime().command(["engine"])[-2:] == ["--", "engine"]


def test_a_frozen_app_runs_the_launcher_as_its_own_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(macos, "is_frozen", lambda: True)
    monkeypatch.setattr(macos, "sys", SimpleNamespace(executable="/Applications/PAIR/pair"))

    command = MacLifetime(broker_pid=lambda: 41).command(["engine", "-x"])

    assert command == ["/Applications/PAIR/pair", GUARD_COMMAND, "41", "--", "engine", "-x"]


def test_the_guard_command_runs_the_launcher_without_the_command_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(guard, "main", lambda args: seen.append(list(args)) or 7)

    assert main([GUARD_COMMAND, "41", "--", "engine"]) == 7
    assert seen == [["41", "--", "engine"]]
