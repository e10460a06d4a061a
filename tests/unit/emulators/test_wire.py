"""Byte-level encoding helpers of the engine emulators."""

from __future__ import annotations

from backend.devtools.emulators.wire import go_json, iso_millis, js_json, rfc3339_nano


def test_emulator_timestamps_follow_go_rfc3339_nano() -> None:
    assert rfc3339_nano(1_700_000_000_123_400_000, utc=True) == "2023-11-14T22:13:20.1234Z"
    assert rfc3339_nano(1_700_000_000_000_000_000, utc=True) == "2023-11-14T22:13:20Z"
    assert iso_millis(1_700_000_000.5) == "2023-11-14T22:13:20.500Z"


def test_emulator_go_json_is_compact_and_html_escaped_like_encoding_json() -> None:
    assert go_json({"a": "<b>&"}) == '{"a":"\\u003cb\\u003e\\u0026"}'
    assert go_json({"x": "é"}) == '{"x":"é"}'
    assert js_json({"a": "<b>"}) == '{"a":"<b>"}'
