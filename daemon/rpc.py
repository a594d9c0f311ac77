"""JSON-RPC 2.0: the method registry and message handling, independent of transport.

The Unix socket server (``ipc_server.py``), REST (``rest/``) and the MCP tools
share this one registry, so a method behaves the same whichever way it is
reached; its methods are the use cases of ``services/api`` (registered by
``components.register_rpc_methods``; the CLI's in-process backend calls those
directly). Handlers are plain sync functions ``handler(ctx, params) -> JSON-able``;
the registry validates params with the method's request model, then runs the
handler on the context's worker threads (``run_read``) or behind its single
write lock (``run_write``) so the event loop never blocks on the engine.

Errors a caller can act on are raised as :class:`RpcError`; anything else a
handler raises becomes an "internal error" reply (logged with its traceback)
and never takes the connection or the daemon down.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxos.services.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NOT_FOUND,
    NOT_READY,
    PARSE_ERROR,
    WRITE_REFUSED,
    RpcError,
    encode_message,
    json_default,
)
from ctxos.services.schemas import ContractError, Request, validate

if TYPE_CHECKING:  # pragma: no cover
    from .context import DaemonContext

log = logging.getLogger(__name__)

# The shared vocabulary (services/jsonrpc.py), re-exported for the daemon's method modules.
__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "NOT_FOUND",
    "NOT_READY",
    "PARSE_ERROR",
    "WRITE_REFUSED",
    "RpcError",
    "RpcRegistry",
    "encode_message",
    "json_default",
]

MAX_REQUEST_BYTES = 4 * 1024 * 1024  # one request line; larger ones get INVALID_REQUEST

Handler = Callable[["DaemonContext", dict[str, Any]], Any]
Schema = type[Request]


@dataclass(frozen=True)
class RpcMethod:
    name: str
    handler: Handler
    write: bool = False  # serialised behind the single write lock
    wait_ready: bool = True  # wait for the initial load before running (False for status)
    doc: str = ""
    partial_ok: bool = False  # reads that may answer from a cold build's first chunks (say so in status)
    schema: Schema | None = None  # the request contract (services/schemas.py) params are validated with


def checked_params(entry: RpcMethod, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` validated by the method's request model: INVALID_PARAMS with the contract's message."""
    if entry.schema is None:
        return params
    try:
        return validate(entry.schema, params).params()
    except ContractError as exc:
        raise RpcError(INVALID_PARAMS, exc.message, {"allowed": exc.allowed}) from None


class RpcRegistry:
    """Name -> handler. Method modules call :meth:`register` from their ``register(registry)``."""

    def __init__(self) -> None:
        self._methods: dict[str, RpcMethod] = {}

    def register(
        self,
        name: str,
        handler: Handler,
        write: bool = False,
        *,
        wait_ready: bool = True,
        doc: str | None = None,
        partial_ok: bool = False,
        schema: Schema | None = None,
    ) -> None:
        """``partial_ok``: a read that may run while a cold build continues, on the memories indexed so far.

        ``schema``: the request model (``services/schemas.py``); params are validated with it before
        the handler runs, which then receives them checked, with absent optional ones left out.
        """
        if name in self._methods:
            raise ValueError(f"RPC method {name!r} is already registered")
        self._methods[name] = RpcMethod(
            name,
            handler,
            write,
            wait_ready,
            (doc if doc is not None else (handler.__doc__ or "")).strip(),
            partial_ok and not write,
            schema,
        )

    def get(self, name: str) -> RpcMethod | None:
        return self._methods.get(name)

    def names(self) -> list[str]:
        return sorted(self._methods)

    def __contains__(self, name: object) -> bool:
        return name in self._methods

    def _lookup(self, method: str, params: Any) -> tuple[RpcMethod, dict[str, Any], Handler]:
        entry = self._methods.get(method)
        if entry is None:
            raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}", {"available": self.names()})
        clean = normalise_params(params)
        client = None
        if CLIENT_PARAM in clean:
            clean = dict(clean)
            client = clean.pop(CLIENT_PARAM)
        return entry, checked_params(entry, clean), _attributed(entry, client)

    async def call(self, ctx: DaemonContext, method: str, params: Any = None) -> Any:
        """Run ``method`` in the daemon: reads on the read pool, writes behind the write lock.

        A ``workspace`` parameter names the workspace to run it on (see :func:`route_workspace`).
        """
        if method not in self._methods:
            self._lookup(method, params)  # method-not-found first
        target, params = route_workspace(ctx, normalise_params(params))
        if target is not ctx:
            return await target.rpc.call(target, method, params)
        entry, clean, handler = self._lookup(method, params)
        if entry.wait_ready:
            await (ctx.wait_serving() if entry.partial_ok else ctx.wait_ready())
        runner = ctx.run_write if entry.write else ctx.run_read
        try:
            return await runner(handler, ctx, clean)
        except RpcError as exc:
            if exc.code != NOT_FOUND or method not in FEDERATED_LOOKUPS:
                raise
            found = await _federated_lookup(ctx, method, params, exc)
            if found is None:
                raise
            return found

    def call_sync(self, ctx: DaemonContext, method: str, params: Any = None) -> Any:
        """Run ``method`` in the calling thread (in-process backend); writes still take the write lock."""
        if method in self._methods:
            _same, params = route_workspace(ctx, normalise_params(params), allow_other=False)
        entry, clean, handler = self._lookup(method, params)
        if entry.write:
            return ctx.write_sync(handler, ctx, clean)
        return handler(ctx, clean)


CLIENT_PARAM = "_client"
"""Optional param on any call: who is asking, e.g. ``"claude-code via MCP"``. Not passed to handlers;
every file the call writes is attributed to it in history (git author ``ctxos (<client>)``)."""


def _attributed(entry: RpcMethod, client: Any) -> Handler:
    """The handler, run inside a history scope: its writes are one commit naming the client and method."""
    from ctxos.services.history import Actor, clean_client, scope

    actor = Actor(client=clean_client(client) or "unnamed client via socket", tool=entry.name)

    def run(ctx: DaemonContext, params: dict[str, Any]) -> Any:
        with scope(actor):
            return entry.handler(ctx, params)

    return run


# Reads by name that a federated workspace may answer when this one has no such memory.
FEDERATED_LOOKUPS = frozenset({"get_memory", "get_skill"})


async def _federated_lookup(ctx: DaemonContext, method: str, params: dict[str, Any], local: RpcError) -> Any:
    """Ask the workspaces ``ctx`` federates (in order) for what it did not find; None if none has it.

    Only "not found" falls through: a local refusal that names what the thing is
    (a rule asked for as a skill, an ambiguous name) stands. The answer carries
    ``workspace``, as federated memories do in ``get_context``.
    """
    reason = local.data.get("reason") if isinstance(local.data, dict) else None
    holder = ctx.workspaces
    if holder is None or reason not in (None, "not_found"):
        return None
    for name, _engine in list(ctx.engine.federated):
        other = holder.get(name)
        if other is None or other is ctx:
            continue
        try:
            result = await other.rpc.call(other, method, {k: v for k, v in params.items() if k != "workspace"})
        except RpcError:
            continue
        if isinstance(result, dict):
            return {**result, "workspace": name}
    return None


def route_workspace(
    ctx: DaemonContext, params: dict[str, Any], *, allow_other: bool = True
) -> tuple[DaemonContext, dict[str, Any]]:
    """The context a call runs on, and its params without ``workspace``.

    Any method takes ``workspace`` (a registered name): the per-user daemon runs
    it on that workspace's context, so a new method needs nothing to work per
    workspace, and ``save_memory`` can write to a federated workspace. Without
    it (or naming the context's own workspace) the call stays where it arrived.
    A name this daemon does not serve is an error, never a silent fallback.
    """
    if "workspace" not in params:
        return ctx, params
    rest = {k: v for k, v in params.items() if k != "workspace"}
    name = params["workspace"]
    if name is None or name == "" or name == ctx.name:
        return ctx, rest
    if not isinstance(name, str):
        raise RpcError(INVALID_PARAMS, "parameter 'workspace' must be a string (a registered workspace name)")
    holder = ctx.workspaces if allow_other else None
    target = holder.get(name) if holder is not None else None
    if target is None:
        served = sorted(c.name for c in holder.contexts() if c.name) if holder is not None else []
        raise RpcError(
            INVALID_PARAMS,
            f"no workspace named {name!r} is served here"
            + (
                f" (served: {', '.join(served)})"
                if served
                else " (only the per-user daemon, `ctxos start`, serves several workspaces)"
            ),
        )
    return target, rest


def normalise_params(params: Any) -> dict[str, Any]:
    """Named params only: an object, or absent/null/[] meaning none."""
    if params is None or params == []:
        return {}
    if isinstance(params, dict):
        return params
    raise RpcError(INVALID_PARAMS, "params must be an object of named parameters")


# ---------------------------------------------------------------- params

_MISSING: Any = object()
_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    list: "a list",
    dict: "an object",
}


def param(params: dict[str, Any], name: str, kind: type, default: Any = _MISSING, *, allow_none: bool = False) -> Any:
    """Fetch and type-check one named parameter, raising INVALID_PARAMS with a clear message.

    ``bool`` is not accepted for ``int``/``float`` (JSON ``true`` is not a number),
    and an ``int`` is accepted for ``float``.
    """
    if name not in params or (params[name] is None and not allow_none and default is not _MISSING):
        if default is _MISSING:
            raise RpcError(INVALID_PARAMS, f"missing required parameter '{name}'")
        return default
    value = params[name]
    if value is None and allow_none:
        return None
    ok = isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, float))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        raise RpcError(INVALID_PARAMS, f"parameter '{name}' must be {_TYPE_NAMES.get(kind, kind.__name__)}")
    return value


def check_known(params: dict[str, Any], allowed: set[str] | frozenset[str]) -> None:
    """Reject unknown parameter names (a typo should fail loudly, not be ignored)."""
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise RpcError(INVALID_PARAMS, f"unknown parameter(s): {', '.join(unknown)}", {"allowed": sorted(allowed)})


# ---------------------------------------------------------------- messages


def encode_reply(reply: Any) -> bytes:
    """Encode a reply (or batch of replies) as one line; a result that is not JSON-serialisable
    becomes an internal-error reply for that request instead of a dead connection."""
    try:
        return encode_message(reply)
    except (TypeError, ValueError):
        if isinstance(reply, list):
            items = [encode_reply(item)[:-1] for item in reply]
            return b"[" + b",".join(items) + b"]\n"
        request_id = reply.get("id") if isinstance(reply, dict) else None
        log.exception("RPC reply for id %r is not JSON-serialisable", request_id)
        return encode_message(
            error_response(request_id, RpcError(INTERNAL_ERROR, "internal error: the result is not JSON-serialisable"))
        )


def error_response(request_id: Any, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_dict()}


def _valid_id(value: Any) -> bool:
    """JSON-RPC ids are a string, a number or null; never a bool, an object, a list or a
    non-finite number (``1e999`` parses as infinity, which no JSON reply can echo)."""
    if value is None or isinstance(value, str):
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


async def _handle_one(ctx: DaemonContext, registry: RpcRegistry, request: Any) -> dict[str, Any] | None:
    if not isinstance(request, dict):
        return error_response(None, RpcError(INVALID_REQUEST, "a request must be a JSON object"))
    request_id = request.get("id")
    is_notification = "id" not in request
    if not _valid_id(request_id):
        return error_response(None, RpcError(INVALID_REQUEST, "id must be a string, a finite number or null"))
    if request.get("jsonrpc") != "2.0":
        return error_response(request_id, RpcError(INVALID_REQUEST, 'jsonrpc must be "2.0"'))
    method = request.get("method")
    if not isinstance(method, str) or not method:
        return error_response(request_id, RpcError(INVALID_REQUEST, "method must be a non-empty string"))
    try:
        result = await registry.call(ctx, method, request.get("params"))
        response = {"jsonrpc": "2.0", "id": request_id, "result": result}
    except RpcError as exc:
        response = error_response(request_id, exc)
    except Exception as exc:  # noqa: BLE001 - a handler bug must not kill the connection
        log.exception("RPC %s failed", method)
        response = error_response(request_id, RpcError(INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}"))
    return None if is_notification else response


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def parse_message(payload: bytes | str) -> Any:
    """Decode one message; every way it can fail is a PARSE_ERROR that names the problem.

    Invalid UTF-8, malformed JSON, the non-JSON constants ``NaN``/``Infinity`` and
    nesting deeper than the interpreter's recursion limit (the C decoder raises
    ``RecursionError`` there, e.g. for 100,000 ``[``) are all answered the same
    way, so one bad line never closes the connection.
    """
    try:
        text = payload.decode("utf-8") if isinstance(payload, bytes) else payload
    except UnicodeDecodeError as exc:
        raise RpcError(
            PARSE_ERROR, f"parse error: the request is not valid UTF-8 ({exc.reason} at byte {exc.start})"
        ) from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise RpcError(PARSE_ERROR, "parse error: the request is nested too deeply") from None
    except ValueError as exc:
        raise RpcError(PARSE_ERROR, f"parse error: {exc}") from None


async def handle_payload(ctx: DaemonContext, registry: RpcRegistry, payload: bytes | str) -> Any:
    """Handle one raw message (a request or a batch); return the reply object, or None for notifications."""
    try:
        message = parse_message(payload)
    except RpcError as exc:
        return error_response(None, exc)
    if isinstance(message, list):
        if not message:
            return error_response(None, RpcError(INVALID_REQUEST, "empty batch"))
        replies = [await _handle_one(ctx, registry, item) for item in message]
        replies = [r for r in replies if r is not None]
        return replies or None
    return await _handle_one(ctx, registry, message)
