"""Go duration parsing, as Ollama applies it to ``keep_alive`` (pure functions)."""

from __future__ import annotations

import re
from typing import Final

from backend.devtools.emulators.wire import FOREVER_NS

_UNITS: Final = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_PART: Final = re.compile(r"(\d*)(\.\d*)?([^\d.]*)")


class DurationError(ValueError):
    """A value Ollama would reject; the message is Go's, which Ollama returns verbatim."""


def parse_go_duration(text: str) -> int:
    """Go's ``time.ParseDuration`` in nanoseconds (``"5m"``, ``"1h30m"``, ``"-1m"``, ``"0"``)."""
    quoted = '"' + text + '"'
    rest = text
    negative = rest.startswith("-")
    if rest[:1] in "+-" and rest:
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise DurationError(f"time: invalid duration {quoted}")
    total = 0
    while rest:
        match = _PART.match(rest)
        assert match is not None  # the pattern matches any string
        whole, fraction, unit = match.groups()
        if not whole and fraction in (None, "."):
            raise DurationError(f"time: invalid duration {quoted}")
        if not unit:
            raise DurationError(f"time: missing unit in duration {quoted}")
        if unit not in _UNITS:
            raise DurationError(f'time: unknown unit "{unit}" in duration {quoted}')
        value = float((whole or "0") + (fraction or ""))
        total += round(value * _UNITS[unit])
        rest = rest[match.end() :]
    return -total if negative else total


def keep_alive_ns(value: object) -> int:
    """Ollama's ``api.Duration``: numbers are seconds, strings Go durations, < 0 is forever."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        type_name = "bool" if isinstance(value, bool) else type(value).__name__
        raise DurationError(f"Unsupported type: '{_go_type_name(type_name)}'")
    if isinstance(value, str):
        parsed = parse_go_duration(value)
        return FOREVER_NS if parsed < 0 else parsed
    if value < 0:
        return FOREVER_NS
    return int(value * 1_000_000_000)


def _go_type_name(python_name: str) -> str:
    return {"list": "[]interface {}", "dict": "map[string]interface {}"}.get(
        python_name, python_name
    )
