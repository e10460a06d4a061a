"""keep_alive parsing of the Ollama emulator (Go's time.ParseDuration, as Ollama uses it)."""

from __future__ import annotations

import pytest

from backend.devtools.emulators.durations import DurationError, keep_alive_ns, parse_go_duration
from backend.devtools.emulators.wire import FOREVER_NS

SECOND = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5m", 300 * SECOND),
        ("1h30m", 5400 * SECOND),
        ("1.5h", 5400 * SECOND),
        ("0", 0),
        ("-1m", -60 * SECOND),
        ("250ms", SECOND // 4),
        ("10us", 10_000),
        ("+2s", 2 * SECOND),
    ],
)
def test_emulator_parses_go_durations(text: str, expected: int) -> None:
    assert parse_go_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3600", 'time: missing unit in duration "3600"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("", 'time: invalid duration ""'),
        ("m", 'time: invalid duration "m"'),
    ],
)
def test_emulator_rejects_bad_durations_with_go_messages(text: str, message: str) -> None:
    with pytest.raises(DurationError) as error:
        parse_go_duration(text)
    assert str(error.value) == message


def test_emulator_keep_alive_numbers_are_seconds_and_negative_is_forever() -> None:
    assert keep_alive_ns(3600) == 3600 * SECOND
    assert keep_alive_ns(0) == 0 and keep_alive_ns("0") == 0
    assert keep_alive_ns(-1) == FOREVER_NS == keep_alive_ns("-1m")
    assert keep_alive_ns("10m") == 600 * SECOND
    with pytest.raises(DurationError, match="Unsupported type: 'bool'"):
        keep_alive_ns(True)
