"""JSON-RPC 2.0 message shapes, standard error codes and classification of raw frames."""

from __future__ import annotations

from typing import Any, Final

import msgspec

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
# Application codes (the -32000..-32099 range is reserved for implementation errors).
UNAVAILABLE: Final = -32000
SHUTTING_DOWN: Final = -32001
CONFLICT: Final = -32002
NOT_FOUND: Final = -32004

RequestId = int | str


class Request(msgspec.Struct, frozen=True):
    """A call that expects a response."""

    id: RequestId
    method: str
    params: Any


class Notification(msgspec.Struct, frozen=True):
    """A call without an id: no response is sent."""

    method: str
    params: Any


class Response(msgspec.Struct, frozen=True):
    """The answer to one of our requests: ``error`` is set or ``result`` is meaningful."""

    id: RequestId | None
    result: Any
    error: ErrorObject | None


class ErrorObject(msgspec.Struct, frozen=True):
    """The ``error`` member of a response."""

    code: int
    message: str
    data: Any = None

    def to_wire(self) -> dict[str, Any]:
        """The JSON object for this error."""
        wire: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            wire["data"] = self.data
        return wire


class Invalid(msgspec.Struct, frozen=True):
    """A frame that is not a valid message; answer it with ``error`` under ``id``."""

    id: RequestId | None
    error: ErrorObject


Message = Request | Notification | Response | Invalid

_decoder = msgspec.json.Decoder()


def decode_frame(frame: bytes) -> Any:
    """Parse one frame's JSON; raises ValueError with a readable reason."""
    try:
        return _decoder.decode(frame)
    except msgspec.DecodeError as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:  # msgspec recurses per nesting level, on the caller's stack
        raise ValueError("JSON nested too deeply") from None


def classify(obj: Any) -> Message:
    """Sort one decoded JSON value into a message kind, or say why it is invalid."""
    if not isinstance(obj, dict):
        return _invalid(None, "a message must be a JSON object")
    raw_id = obj.get("id")
    request_id = raw_id if _valid_id(raw_id) else None
    if obj.get("jsonrpc") != "2.0":
        return _invalid(request_id, 'the "jsonrpc" member must be exactly "2.0"')
    if "id" in obj and raw_id is not None and not _valid_id(raw_id):
        return _invalid(None, '"id" must be a string, an integer or null')
    if "method" in obj:
        return _classify_call(obj, request_id)
    if "result" in obj or "error" in obj:
        return _classify_response(obj, request_id)
    return _invalid(request_id, 'a message needs "method", "result" or "error"')


def _classify_call(obj: dict[str, Any], request_id: RequestId | None) -> Message:
    method = obj["method"]
    if not isinstance(method, str) or not method:
        return _invalid(request_id, '"method" must be a non-empty string')
    params = obj.get("params")
    if params is not None and not isinstance(params, dict | list):
        return _invalid(request_id, '"params" must be an object or an array')
    if "id" not in obj:
        return Notification(method, params)
    if request_id is None:
        return _invalid(None, 'a request "id" must be a string or an integer')
    return Request(request_id, method, params)


def _classify_response(obj: dict[str, Any], request_id: RequestId | None) -> Message:
    error = obj.get("error")
    if error is None:
        return Response(request_id, obj.get("result"), None)
    if not isinstance(error, dict) or not isinstance(error.get("code"), int):
        return _invalid(request_id, '"error" must be an object with an integer "code"')
    message = error.get("message")
    return Response(
        request_id,
        None,
        ErrorObject(error["code"], message if isinstance(message, str) else "", error.get("data")),
    )


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _invalid(request_id: RequestId | None, reason: str) -> Invalid:
    return Invalid(request_id, ErrorObject(INVALID_REQUEST, f"Invalid Request: {reason}"))


def request(request_id: RequestId, method: str, params: Any = None) -> dict[str, Any]:
    """The wire form of a request."""
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        frame["params"] = params
    return frame


def notification(method: str, params: Any = None) -> dict[str, Any]:
    """The wire form of a notification."""
    frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        frame["params"] = params
    return frame


def result_response(request_id: RequestId, result: Any) -> dict[str, Any]:
    """The wire form of a successful response."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: RequestId | None, error: ErrorObject) -> dict[str, Any]:
    """The wire form of an error response."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_wire()}


_encoder = msgspec.json.Encoder()


def encode(obj: Any) -> bytes:
    """One frame: compact JSON plus the terminating newline (msgspec Structs welcome)."""
    return _encoder.encode(obj) + b"\n"
