"""The JSON-RPC 2.0 vocabulary every side shares: error codes, the error, and the one-line framing.

The daemon's socket server, the use-case layer (``services/api``), the CLI's
in-process backend and the MCP tools all speak it, so it lives here, with no
socket, thread or event loop: only the codes, :class:`RpcError` and how one
message becomes one UTF-8 line. The registry and the socket server that use
it are the daemon's (``daemon/rpc.py``, ``daemon/ipc_server.py``); the client's
socket connection is ``ctxos.client``.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import date, datetime
from pathlib import Path
from typing import Any

try:  # a declared dependency; a checkout whose environment predates it encodes with the standard library
    import orjson
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]

# JSON-RPC 2.0 standard codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# Application codes (the -32000..-32099 "server error" range).
NOT_FOUND = -32004  # the named memory / skill does not exist
WRITE_REFUSED = -32010  # a safety rule refused a write (protected, read-only folder, ...)
NOT_READY = -32011  # the daemon is still loading (only for callers that do not wait)


class RpcError(Exception):
    """An error reply: ``code`` and ``message`` as JSON-RPC defines them, optional ``data``.

    The use cases raise it for what the caller can act on (a bad parameter, no such
    memory, a refused write); every transport turns it into its own error shape.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class BackendError(Exception):
    """A call a backend (the daemon's registry, or its socket) answered with an error; what MCP tools report."""

    def __init__(self, message: str, code: int | None = None, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


def json_default(value: Any) -> Any:
    """Serialise the few non-JSON types handlers may return (dataclasses with ``to_dict``, paths, dates)."""
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


# orjson: what json_default handles (a dataclass's ``to_dict``, dates) goes to it, as with the standard library.
_ORJSON_OPTIONS = (
    (orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS)
    | orjson.OPT_PASSTHROUGH_DATETIME
    if orjson is not None
    else 0
)


def encode_message(message: Any) -> bytes:
    """One JSON-RPC message as a single UTF-8 line (compact JSON never contains a raw newline).

    Encoded with orjson: a ``get_context`` answer (~64 KB, ~1,700 numbers) took ~0.9 ms
    with the standard library, on the daemon's event loop and under its interpreter lock,
    ~9 % of the daemon's samples with 8 clients; orjson takes ~0.15 ms (issue 16,
    docs/engine.md). What orjson refuses goes through the standard library as before:
    a lone surrogate (a file name that is not UTF-8, decoded with surrogateescape) is
    written as its JSON escape ``\\udcxx``, so no name can make a reply fail; an
    integer beyond 64 bits is written as it is. ``NaN``/``Infinity`` are not JSON:
    orjson writes them as ``null``, the standard library (``allow_nan=False``) refuses
    them, and the reply becomes an internal error; either way no client gets a line
    its parser rejects.
    """
    if orjson is not None:
        try:
            return orjson.dumps(message, default=json_default, option=_ORJSON_OPTIONS)
        except TypeError:  # orjson.JSONEncodeError: a surrogate, a huge integer, too deep, ...
            pass
    return (
        json.dumps(message, default=json_default, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode(
            "utf-8", "backslashreplace"
        )
        + b"\n"
    )


def as_json(value: Any) -> Any:
    """``value`` as the plain JSON data a socket reply would deliver (tuples become lists, dates strings ...)."""
    return json.loads(encode_message(value))


def request_line(request_id: int, method: str, params: dict[str, Any] | None) -> bytes:
    """One request, framed as the daemon reads it: compact JSON on one line."""
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
    return json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"
