"""The spawn keywords the app (for its broker) and the demo (for brokers and the app) choose on
each OS: a session (the app's broker) or a process group in the demo's session (the demo's
brokers) on POSIX, a process group and no console window on Windows."""

from __future__ import annotations

import pytest

from app.broker.process import CREATE_NEW_PROCESS_GROUP, CREATE_NO_WINDOW, broker_spawn_options
from backend.devtools.demo import app_spawn_options
from backend.devtools.demo import broker_spawn_options as demo_broker_spawn_options

WINDOWS_FLAGS = 0x08000200  # CREATE_NO_WINDOW | CREATE_NEW_PROCESS_GROUP


def test_the_app_starts_its_broker_without_a_console_window_on_windows() -> None:
    assert broker_spawn_options("win32") == {"creationflags": WINDOWS_FLAGS}
    assert (CREATE_NO_WINDOW, CREATE_NEW_PROCESS_GROUP) == (0x08000000, 0x200)


@pytest.mark.parametrize("platform", ["linux", "darwin", "freebsd14"])
def test_the_app_starts_its_broker_in_a_new_session_on_posix(platform: str) -> None:
    assert broker_spawn_options(platform) == {"start_new_session": True}


def test_the_demo_starts_brokers_and_the_app_without_console_windows_on_windows() -> None:
    assert demo_broker_spawn_options("win32") == {"creationflags": WINDOWS_FLAGS}
    assert app_spawn_options("win32") == {"creationflags": WINDOWS_FLAGS}


def test_the_demo_ties_brokers_to_itself_on_linux_and_only_detaches_the_app() -> None:
    options = demo_broker_spawn_options("linux")

    assert options.keys() == {"preexec_fn"} and callable(options["preexec_fn"])
    assert app_spawn_options("linux") == {"start_new_session": True}
    assert app_spawn_options("darwin") == {"start_new_session": True}
    mac = demo_broker_spawn_options("darwin")
    assert mac["start_new_session"] is True and "creationflags" not in mac
