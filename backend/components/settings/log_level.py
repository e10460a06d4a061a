"""Which level the broker and its workers log at: the command line, the setting, an explicit
choice. A pure decision: the caller applies the level it returns."""

from __future__ import annotations

from backend.protocol.types.broker import LogLevel

LEVEL_ENV = "PAIR_LOG_LEVEL"


class LogLevels:
    """``pair node --log-level`` holds over the saved ``log_level`` setting for the whole run,
    until ``log:set-level`` chooses a level explicitly (that one then holds and is saved);
    without a command-line level the saved setting applies whenever it changes."""

    def __init__(self, *, command_line: LogLevel | None, saved: LogLevel) -> None:
        self._held = command_line
        self._saved = saved

    @property
    def current(self) -> LogLevel:
        """The level to log at now."""
        return self._held if self._held is not None else self._saved

    def setting_changed(self, saved: LogLevel) -> LogLevel | None:
        """The ``log_level`` setting is now ``saved``: the level to apply, or None when the
        running level stays (the setting did not change, or the command line's level holds)."""
        before = self.current
        self._saved = saved
        return self._new_since(before)

    def choose(self, level: LogLevel) -> LogLevel | None:
        """``log:set-level`` chose ``level``: it holds from now on (over the command line's
        level too); the level to apply, or None when it is the running one already."""
        before = self.current
        self._held = None
        self._saved = level
        return self._new_since(before)

    def worker_environment(self) -> dict[str, str]:
        """The environment that starts a worker at the current level."""
        return {LEVEL_ENV: self.current}

    def _new_since(self, before: LogLevel) -> LogLevel | None:
        return self.current if self.current != before else None
