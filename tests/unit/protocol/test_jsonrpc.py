"""Classification of decoded frames into JSON-RPC message kinds."""

import pytest

from backend.protocol import errors, jsonrpc


def test_request_notification_and_response_are_told_apart() -> None:
    assert jsonrpc.classify({"jsonrpc": "2.0", "id": 1, "method": "ping"}) == jsonrpc.Request(
        1, "ping", None
    )
    assert jsonrpc.classify({"jsonrpc": "2.0", "method": "x", "params": [1]}) == (
        jsonrpc.Notification("x", [1])
    )
    response = jsonrpc.classify({"jsonrpc": "2.0", "id": "a", "result": {"ok": True}})
    assert response == jsonrpc.Response("a", {"ok": True}, None)


@pytest.mark.parametrize(
    ("message", "expected_id"),
    [
        ([], None),
        ({"id": 3, "method": "ping"}, 3),
        ({"jsonrpc": "1.0", "id": 3, "method": "ping"}, 3),
        ({"jsonrpc": "2.0", "id": 4, "method": 7}, 4),
        ({"jsonrpc": "2.0", "id": 5, "method": "x", "params": "nope"}, 5),
        ({"jsonrpc": "2.0", "id": True, "method": "x"}, None),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "x"}, None),
        ({"jsonrpc": "2.0", "id": 6}, 6),
    ],
)
def test_invalid_messages_are_answered_with_invalid_request(
    message: object, expected_id: object
) -> None:
    result = jsonrpc.classify(message)
    assert isinstance(result, jsonrpc.Invalid)
    assert result.id == expected_id
    assert result.error.code == jsonrpc.INVALID_REQUEST


def test_error_response_becomes_the_typed_exception() -> None:
    response = jsonrpc.classify(
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad", "data": {"k": 1}}}
    )
    assert isinstance(response, jsonrpc.Response)
    assert response.error is not None
    exc = errors.from_error_object(response.error)
    assert isinstance(exc, errors.InvalidParams)
    assert exc.data == {"k": 1}


def test_unknown_error_code_keeps_its_code() -> None:
    exc = errors.from_error_object(jsonrpc.ErrorObject(-31999, "custom"))
    assert type(exc) is errors.RpcError
    assert exc.code == -31999


def test_encode_ends_each_frame_with_one_newline() -> None:
    frame = jsonrpc.encode(jsonrpc.notification("a", {"text": "line\nbreak"}))
    assert frame.count(b"\n") == 1
    assert frame.endswith(b"\n")


def test_decode_frame_reports_parse_errors() -> None:
    with pytest.raises(ValueError, match="truncated"):
        jsonrpc.decode_frame(b'{"jsonrpc": ')
