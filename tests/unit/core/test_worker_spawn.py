"""A worker's spawn keywords per OS, as ``WorkerProcess`` passes them: each lifetime's own
options (Linux: parent-death preexec and its own session; macOS: its own session only;
Windows: no console window, its own process group, nothing POSIX), and inherited descriptors
only where there are any."""

from __future__ import annotations

from backend.core.lifetime import for_platform
from backend.core.lifetime.macos import MacLifetime
from backend.core.lifetime.posix import LinuxLifetime
from backend.core.lifetime.windows import (
    CREATE_NEW_PROCESS_GROUP,
    CREATE_NO_WINDOW,
    WindowsLifetime,
)
from backend.core.worker import spawn_keywords


def no_kill(pid: int, signal: int) -> None:
    raise AssertionError("a spawn signals nothing")


def test_linux_gets_the_preexec_of_its_own_group_and_the_parent_death_signal() -> None:
    keywords = spawn_keywords(LinuxLifetime(kill_group=no_kill), [5, 6])
    assert sorted(keywords) == ["pass_fds", "preexec_fn"]
    assert callable(keywords["preexec_fn"])
    assert keywords["pass_fds"] == (5, 6)


def test_macos_gets_its_own_session_and_no_preexec() -> None:
    keywords = spawn_keywords(MacLifetime(guard_command=None, kill_group=no_kill), [5])
    assert keywords == {"preexec_fn": None, "start_new_session": True, "pass_fds": (5,)}


def test_windows_gets_creation_flags_only() -> None:
    keywords = spawn_keywords(WindowsLifetime(), [])
    assert keywords == {"creationflags": CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW}


def test_no_descriptor_to_inherit_passes_no_pass_fds() -> None:
    assert "pass_fds" not in spawn_keywords(LinuxLifetime(kill_group=no_kill), ())


def test_each_platform_s_lifetime_gives_its_own_keywords() -> None:
    assert "creationflags" in spawn_keywords(for_platform("win32"), ())
    darwin = spawn_keywords(for_platform("darwin"), ())
    assert darwin["preexec_fn"] is None and darwin["start_new_session"] is True
    linux = spawn_keywords(for_platform("linux"), ())
    assert callable(linux["preexec_fn"]) and "start_new_session" not in linux
