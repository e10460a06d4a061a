"""Typed exceptions for JSON-RPC errors: one function maps wire codes to classes."""

from __future__ import annotations

from typing import Any

from backend.protocol import jsonrpc


class RpcError(Exception):
    """An error response from the peer (or one we send): stable code, message and data."""

    code: int = jsonrpc.INTERNAL_ERROR

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data

    def to_error_object(self) -> jsonrpc.ErrorObject:
        """The wire error for this exception."""
        return jsonrpc.ErrorObject(self.code, self.message, self.data)


class ParseError(RpcError):
    """The frame was not JSON."""

    code = jsonrpc.PARSE_ERROR


class InvalidRequest(RpcError):
    """The frame was JSON but not a JSON-RPC message (or was too large)."""

    code = jsonrpc.INVALID_REQUEST


class MethodNotFound(RpcError):
    """No such method."""

    code = jsonrpc.METHOD_NOT_FOUND


class InvalidParams(RpcError):
    """Parameters missing or of the wrong type; ``message`` says which."""

    code = jsonrpc.INVALID_PARAMS


class InternalError(RpcError):
    """The handler failed unexpectedly."""

    code = jsonrpc.INTERNAL_ERROR


class Unavailable(RpcError):
    """The component that owns the method is not running."""

    code = jsonrpc.UNAVAILABLE


class ShuttingDown(RpcError):
    """The broker is shutting down and takes no new work."""

    code = jsonrpc.SHUTTING_DOWN


class Conflict(RpcError):
    """The request conflicts with current state (a port in use, an operation in progress)."""

    code = jsonrpc.CONFLICT


class NotFound(RpcError):
    """The named thing does not exist."""

    code = jsonrpc.NOT_FOUND


class ConnectionLost(RpcError):
    """The connection closed before a response arrived (never sent on the wire)."""

    code = jsonrpc.INTERNAL_ERROR


class BadResult(RpcError):
    """A result or push of a shape the contract does not declare (never sent on the wire)."""

    code = jsonrpc.INTERNAL_ERROR


class CallTimeout(RpcError):
    """No response within the call's timeout (never sent on the wire)."""

    code = jsonrpc.INTERNAL_ERROR


_BY_CODE: dict[int, type[RpcError]] = {
    cls.code: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        InternalError,
        Unavailable,
        ShuttingDown,
        Conflict,
        NotFound,
    )
}


def from_error_object(error: jsonrpc.ErrorObject) -> RpcError:
    """The exception for a wire error; unknown codes become a plain ``RpcError``."""
    cls = _BY_CODE.get(error.code)
    if cls is None:
        exc = RpcError(error.message, error.data)
        exc.code = error.code
        return exc
    return cls(error.message, error.data)
