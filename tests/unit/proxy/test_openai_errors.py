"""An engine's flat error string becomes an OpenAI error object; anything else is untouched."""

from __future__ import annotations

import json

from backend.workers.proxy.upstream.stream import openai_error_body


def test_a_flat_error_string_becomes_an_openai_error_object() -> None:
    body = json.loads(openai_error_body(b'{"error": "\'messages\' field is required"}', 400))
    assert body == {
        "error": {
            "message": "'messages' field is required",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    assert json.loads(openai_error_body(b'{"error": "gone"}', 404))["error"]["type"] == (
        "not_found_error"
    )
    assert json.loads(openai_error_body(b'{"error": "boom"}', 500))["error"]["type"] == (
        "server_error"
    )


def test_objects_and_non_json_pass_through_unchanged() -> None:
    shaped = b'{"error": {"message": "x", "type": "t", "param": null, "code": null}}'
    assert openai_error_body(shaped, 400) == shaped
    assert openai_error_body(b"<html>oops</html>", 502) == b"<html>oops</html>"
    assert openai_error_body(b"[1, 2]", 400) == b"[1, 2]"
