"""The log level: the command line holds over the setting until log/set-level chooses one."""

from __future__ import annotations

from backend.components.settings.log_level import LogLevels


def test_without_a_command_line_level_the_setting_applies_when_it_changes() -> None:
    levels = LogLevels(command_line=None, saved="warning")
    assert levels.current == "warning"
    assert levels.setting_changed("warning") is None
    assert levels.setting_changed("debug") == "debug"
    assert levels.worker_environment() == {"PAIR_LOG_LEVEL": "debug"}


def test_the_command_line_level_holds_over_any_change_of_the_setting() -> None:
    levels = LogLevels(command_line="debug", saved="info")
    assert levels.current == "debug"
    assert levels.setting_changed("info") is None
    assert levels.setting_changed("error") is None
    assert levels.current == "debug"
    assert levels.worker_environment() == {"PAIR_LOG_LEVEL": "debug"}


def test_an_explicit_choice_ends_the_command_line_level_and_then_the_setting_applies() -> None:
    levels = LogLevels(command_line="debug", saved="info")
    assert levels.choose("debug") is None, "already the running level"
    assert levels.setting_changed("warning") == "warning"
    levels = LogLevels(command_line="debug", saved="info")
    assert levels.choose("info") == "info"
    assert levels.current == "info"
    assert levels.setting_changed("error") == "error"
