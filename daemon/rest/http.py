"""What every ``/api/`` route shares: JSON replies, the one error shape, and reading a request's params.

A route's params (its JSON body, its query string, the parts of its path) are
checked by a request model (``services/schemas.py``), so a bad one is a 400 with
the same words the socket and MCP give. RPC errors become HTTP statuses here,
once. Host/Origin checks and the bearer token are ``http_security``'s, installed
on the whole app by ``http_server.py``; nothing here repeats them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from aiohttp import web
from ctxos.services import schemas
from ctxos.services.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NOT_FOUND,
    NOT_READY,
    WRITE_REFUSED,
    RpcError,
    json_default,
)

log = logging.getLogger("ctxos.daemon.rest")

API_PREFIX = "/api/"
CONFLICT = "conflict"  # RpcError.data["reason"] for a version conflict (and the REST pre-check)

# RPC error code -> HTTP status.
_STATUS_BY_CODE: dict[int, int] = {
    INVALID_PARAMS: 400,
    INVALID_REQUEST: 400,
    NOT_FOUND: 404,
    WRITE_REFUSED: 403,
    NOT_READY: 503,
    METHOD_NOT_FOUND: 501,
    INTERNAL_ERROR: 500,
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
M = TypeVar("M", bound=schemas.Request)


def json_response(data: Any, status: int = 200) -> web.Response:
    """JSON with the RPC layer's encoder (dataclasses, dates and paths serialise the same way)."""
    body = json.dumps(data, default=json_default, ensure_ascii=False).encode("utf-8", "backslashreplace")
    return web.Response(status=status, body=body, content_type="application/json", charset="utf-8")


def error_response(status: int, message: str, *, code: int | None = None, data: Any = None) -> web.Response:
    """The one error shape: ``{"error": {"status", "message", "code"?, "data"?}}``."""
    error: dict[str, Any] = {"status": status, "message": message}
    if code is not None:
        error["code"] = code
    if data is not None:
        error["data"] = data
    return json_response({"error": error}, status=status)


class ApiError(Exception):
    """An HTTP error raised by a route (bad body, conflict, too many event streams)."""

    def __init__(self, status: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.data = data


def status_for(exc: RpcError) -> int:
    """The HTTP status of an RPC error; a refused write about versions is 409."""
    data = exc.data if isinstance(exc.data, dict) else {}
    if exc.code == WRITE_REFUSED and data.get("reason") == CONFLICT:
        return 409
    return _STATUS_BY_CODE.get(exc.code, 500)


@web.middleware
async def json_errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Under ``/api/``, every error is JSON with a status code, including aiohttp's own 404/405/413."""
    if not request.path.startswith(API_PREFIX):
        return await handler(request)
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.message, data=exc.data)
    except RpcError as exc:
        return error_response(status_for(exc), exc.message, code=exc.code, data=exc.data)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, exc.reason or exc.text or "error")
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug in one request must not take the server down
        log.exception("REST %s %s failed", request.method, request.path)
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}")


async def read_json_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object; an empty body is ``{}``."""
    if not request.can_read_body:
        return {}
    raw = await request.read()  # aiohttp enforces client_max_size (413)
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ApiError(400, "request body is not valid JSON: nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object")
    return data


def checked(model: type[M], params: Mapping[str, Any], *, from_text: bool = False) -> M:
    """``params`` validated by ``model``: a 400 with the contract's message (the socket's and MCP's words).

    ``from_text``: the values come from a query string or a path, where everything is text: a number
    or a boolean is read from its JSON spelling first (``schemas.from_text``), then checked like a
    JSON body's, so ``?limit=-1`` gets the socket's ``limit: must be at least 0 (got -1)``.
    """
    values = schemas.from_text(model, dict(params)) if from_text else dict(params)
    try:
        request = schemas.validate(model, values, strict=not from_text)
    except schemas.ContractError as exc:
        raise ApiError(400, exc.message, {"allowed": exc.allowed}) from None
    assert isinstance(request, model)
    return request


def query_params(request: web.Request) -> dict[str, str]:
    """The query string as one value per name (an empty value counts as not given)."""
    return {k: v for k, v in request.query.items() if v != ""}
