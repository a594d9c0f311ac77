"""The REST API under ``/api/``: the web view's (and any script's) way into the daemon.

Every handler goes through the daemon's RPC registry (``ctx.rpc``), so each
operation has one implementation, shared with the Unix socket, the CLI and
MCP; this module only translates HTTP to RPC calls and RPC errors to HTTP
status codes with JSON bodies. Host/Origin checks and the optional bearer
token come from ``http_security.security_middleware``, installed once on the
whole app by ``http_server.py``; nothing here repeats them.

Simulation does not count as a load: ``POST /api/simulate`` calls the
``simulate`` method, which runs the one query path with ``record_access``
off. A person trying queries in the page must not raise the access-frequency
signal or the coverage part of the health score the way real agent loads do.

``GET /api/events`` is a server-sent-event stream fed by
``ctx.add_change_listener``: one ``change`` event per applied batch, with
the ids and paths that changed, so the page can refresh what it shows.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ..services import schemas
from ..services.model import SIGNALS
from ..services.ontology import MEMORY_TYPES
from ..services.query import known_intents
from .rpc import (
    CLIENT_PARAM,
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
EVENT_HEARTBEAT_SECONDS = 15.0
MAX_EVENT_CLIENTS = 32
EVENT_QUEUE_SIZE = 256
REST_CLIENT = "web page via REST"  # who REST writes are attributed to in history
CONFLICT = "conflict"  # RpcError.data["reason"] for a version conflict (and our own pre-check)

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
REST_API_KEY: web.AppKey[Any] = web.AppKey("ctxos.rest_api")


# ---------------------------------------------------------------- responses


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
    """An HTTP error raised by a handler here (bad body, missing field, conflict)."""

    def __init__(self, status: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.data = data


def _is_conflict(exc: RpcError) -> bool:
    data = exc.data if isinstance(exc.data, dict) else {}
    return data.get("reason") == CONFLICT or data.get("kind") == CONFLICT


def status_for(exc: RpcError) -> int:
    if exc.code == WRITE_REFUSED and _is_conflict(exc):
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


# ---------------------------------------------------------------- request helpers


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


def _int_query(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"query parameter '{name}' must be an integer") from None
    if not lo <= value <= hi:
        raise ApiError(400, f"query parameter '{name}' must be between {lo} and {hi}")
    return value


def _pick(body: dict[str, Any], allowed: tuple[str, ...]) -> dict[str, Any]:
    """Keep the known fields; unknown ones are refused so a typo fails loudly (the contracts' wording)."""
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise ApiError(400, "; ".join(f"{name}: unknown parameter" for name in unknown), {"allowed": sorted(allowed)})
    return {k: v for k, v in body.items() if v is not None}


# ---------------------------------------------------------------- server-sent events


class ChangeHub:
    """Fans the daemon's change notifications out to every open ``/api/events`` stream.

    A stream whose page went away is noticed at its next write (an event or the
    heartbeat); when the cap is reached, streams whose connection is already
    closed are pruned first, so closed tabs never lock out a new one.
    """

    def __init__(self) -> None:
        self._queues: dict[asyncio.Queue[dict[str, Any] | None], Callable[[], bool]] = {}
        self.sequence = 0

    @property
    def clients(self) -> int:
        return len(self._queues)

    def subscribe(self, alive: Callable[[], bool] = lambda: True) -> asyncio.Queue[dict[str, Any] | None]:
        """A queue for one stream; ``alive()`` says whether its connection is still open."""
        if len(self._queues) >= MAX_EVENT_CLIENTS:
            self._prune()
        if len(self._queues) >= MAX_EVENT_CLIENTS:
            raise ApiError(503, f"too many event streams open (limit {MAX_EVENT_CLIENTS})")
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=EVENT_QUEUE_SIZE)
        self._queues[queue] = alive
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        self._queues.pop(queue, None)

    def _prune(self) -> None:
        for queue, alive in list(self._queues.items()):
            if not alive():
                self.unsubscribe(queue)
                _put_last(queue, None)  # its handler ends at once

    def publish(self, summary: Any) -> None:
        """Change listener (runs on the loop): queue one event per stream; a stuck stream drops events."""
        self.sequence += 1
        event = change_event(summary, self.sequence)
        for queue in list(self._queues):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                log.warning("an /api/events client is not reading; dropping an event for it")

    def close(self) -> None:
        """Tell every stream to end (app shutdown)."""
        for queue in list(self._queues):
            _put_last(queue, None)


def _put_last(queue: asyncio.Queue[Any], item: Any) -> None:
    """Queue ``item`` even if the queue is full (dropping the oldest entry)."""
    try:
        queue.put_nowait(item)
    except asyncio.QueueFull:
        queue.get_nowait()
        queue.put_nowait(item)


def change_event(summary: Any, sequence: int) -> dict[str, Any]:
    """A JSON-safe event from a ``ChangeSummary`` (or anything with ``to_dict``, or a dict)."""
    if hasattr(summary, "to_dict"):
        data = summary.to_dict()
    elif isinstance(summary, dict):
        data = dict(summary)
    else:
        data = {}
    invalid = data.get("invalid") or []
    return {
        "seq": sequence,
        "updated": [str(x) for x in data.get("updated") or []],
        "removed": [str(x) for x in data.get("removed") or []],
        "paths": [str(x) for x in data.get("paths") or []],
        "invalid": [i if isinstance(i, dict) else {"path": str(i)} for i in invalid],
    }


def _sse(event: str, data: Any) -> bytes:
    payload = json.dumps(data, default=json_default, ensure_ascii=False)
    return f"event: {event}\ndata: {payload}\n\n".encode("utf-8", "backslashreplace")


# ---------------------------------------------------------------- the API


class RestApi:
    """The handlers; one instance per app, bound to the daemon context."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.hub = ChangeHub()

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """One RPC call through the registry (read pool or write lock, as the method declares)."""
        return await self.ctx.rpc.call(self.ctx, method, {**(params or {}), CLIENT_PARAM: REST_CLIENT})

    # --- status and health ------------------------------------------------------

    async def status(self, request: web.Request) -> web.Response:
        """The daemon's status plus what the page needs to build its forms."""
        data = await self.call("status")
        if not isinstance(data, dict):
            data = {"status": data}
        config = self.ctx.config
        # What the page needs to build its forms, from the same config the engine uses.
        data.setdefault("workspace", str(self.ctx.root))
        data["default_budget"] = int(config.get("query.default_budget", 4000))
        data["intents"] = known_intents(config)
        data["types"] = list(MEMORY_TYPES)
        data["signals"] = list(SIGNALS)
        data["auth"] = (data.get("http_server") or {}).get("auth")  # "token" or "none" (the opt-out)
        return json_response(data)

    async def health(self, request: web.Request) -> web.Response:
        """The health score (0-100) and what would raise it."""
        health = normalise_health(await self.call("health"))
        doctor = await self.call("doctor")  # the files skipped, with their reasons
        health.setdefault("invalid", doctor.get("invalid", []) if isinstance(doctor, dict) else [])
        return json_response(health)

    # --- the one query path -------------------------------------------------------

    async def simulate(self, request: web.Request) -> web.Response:
        """Exactly what an agent would get for a query (the one query path; not recorded as a load).

        The body is the ``simulate`` RPC's params, checked there (``schemas.ContextRequest``): a bad one
        is a 400 with the same message the socket and MCP give.
        """
        return json_response(await self.call("simulate", await read_json_object(request)))

    # --- memories -----------------------------------------------------------------

    async def list_memories(self, request: web.Request) -> web.Response:
        """Memories, filtered by type or text (query parameters type, q)."""
        kind = request.query.get("type") or None  # checked by the list RPC (schemas.ListRequest)
        limit = _int_query(request, "limit", 100_000, 1, 100_000)
        offset = _int_query(request, "offset", 0, 0, 10_000_000)
        needle = (request.query.get("q") or "").strip().casefold()
        result = await self.call("list", {"type": kind} if kind else {})
        items = result.get("memories", []) if isinstance(result, dict) else list(result)
        if needle:
            items = [
                m
                for m in items
                if needle in m.get("id", "").casefold()
                or needle in (m.get("l0") or "").casefold()
                or any(needle in str(t).casefold() for t in m.get("tags") or [])
            ]
        page = items[offset : offset + limit]
        return json_response({"memories": page, "count": len(page), "total": len(items)})

    async def get_memory(self, request: web.Request) -> web.Response:
        """One memory with its tiers, version and checksum."""
        return json_response(await self._memory(request.match_info["id"]))

    async def _memory(self, memory_id: str) -> dict[str, Any]:
        return await self.call("get_memory", {"id": memory_id})

    async def create_memory(self, request: web.Request) -> web.Response:
        """Create a memory through the write gate (the body is checked by ``schemas.SaveMemoryRequest``)."""
        body = await read_json_object(request)
        params = {k: v for k, v in body.items() if v is not None}
        if params.get("id"):
            existing = await self._memory_or_none(str(params["id"]))
            if existing is not None:
                raise ApiError(
                    409,
                    f"memory {params['id']!r} already exists (version {existing.get('version')}); "
                    "use PUT /api/memories/{id} to update it",
                    {"reason": CONFLICT, "current_version": existing.get("version")},
                )
        saved = await self.call("save_memory", _body_fields(params))
        return json_response({**await self._memory(_saved_id(saved)), "warnings": _warnings(saved)}, status=201)

    async def update_memory(self, request: web.Request) -> web.Response:
        """Update a memory through the write gate (version or checksum checked; 409 on a conflict)."""
        memory_id = request.match_info["id"]
        body = await read_json_object(request)
        params = _pick(
            body, ("version", "checksum", "type", "content", "l0", "tags", "related", "importance", "l1", "always_load")
        )
        version = params.pop("version", None)
        if isinstance(version, bool) or not isinstance(version, int):
            raise ApiError(400, "field 'version' (the version you read) is required and must be an integer")
        checksum = params.pop("checksum", None)
        current = await self._memory(memory_id)  # 404 when it does not exist
        # Pre-check, so the page gets a clear 409 with the version on disk. The write itself
        # re-checks the version under the write lock (services/writes.py), so a race still fails.
        if current.get("version") != version:
            raise ApiError(
                409,
                f"memory {memory_id!r} changed since you read it: you read version {version}, "
                f"the file is at version {current.get('version')}; reload it",
                {"reason": CONFLICT, "current_version": current.get("version")},
            )
        if checksum and checksum != current.get("checksum"):
            raise ApiError(
                409,
                f"memory {memory_id!r} changed since you read it: the file was edited on disk "
                f"(still version {version}, different content); reload it",
                {"reason": CONFLICT, "current_version": current.get("version")},
            )
        params.setdefault("type", current.get("type"))
        params.setdefault("l0", current.get("l0"))
        if "content" not in params and "l1" not in params:
            params["l1"], params["content"] = current.get("l1") or "", current.get("l2") or ""
        fields = {**_body_fields(params), "id": memory_id, "expected_version": version}
        if checksum:
            fields["expected_checksum"] = checksum  # the gate re-checks it under the write lock
        saved = await self.call("save_memory", fields)
        return json_response({**await self._memory(_saved_id(saved) or memory_id), "warnings": _warnings(saved)})

    async def _memory_or_none(self, memory_id: str) -> dict[str, Any] | None:
        try:
            return await self._memory(memory_id)
        except RpcError as exc:
            if exc.code == NOT_FOUND:
                return None
            raise

    async def archive_memory(self, request: web.Request) -> web.Response:
        """Move a memory to _archive/ (protected memories are refused)."""
        memory_id = request.match_info["id"]
        await read_json_object(request)
        return json_response(await self.call("archive", {"id": memory_id}))

    # --- graph and governance ---------------------------------------------------

    async def graph(self, request: web.Request) -> web.Response:
        """The link graph: nodes, edges and communities."""
        return json_response(normalise_graph(await self.call("graph", {"layout": True})))

    async def governance(self, request: web.Request) -> web.Response:
        """What needs a person's judgment: findings with their evidence."""
        return json_response(normalise_governance(await self.call("governance")))

    async def governance_action(self, request: web.Request) -> web.Response:
        """Act on a finding: archive, unarchive, importance or dismiss."""
        body = await read_json_object(request)
        params = _pick(body, ("action", "memory_id", "finding_id", "importance"))
        action = params.get("action")
        if action == "archive":
            memory_id = _required_str(params, "memory_id")
            result = await self.call("archive", {"id": memory_id})
        elif action == "set_importance":
            memory_id = _required_str(params, "memory_id")
            value = params.get("importance")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ApiError(400, "field 'importance' must be a number from 0.0 to 1.0")
            result = await self.call("set_importance", {"id": memory_id, "value": float(value)})
        elif action == "dismiss":
            finding_id = _required_str(params, "finding_id")
            result = await self.call("dismiss", {"fingerprint": finding_id})
        else:
            raise ApiError(400, "field 'action' must be one of: archive, set_importance, dismiss")
        return json_response({"action": action, "result": result})

    # --- merge proposals (agents propose, the person decides here) ------------------

    async def proposals(self, request: web.Request) -> web.Response:
        """Merge proposals from agents waiting for a person (``?all=1``: decided ones too), with a diff per source."""
        include_all = request.query.get("all") in ("1", "true")
        return json_response(await self.call("proposals", {"all": include_all, "diffs": True}))

    async def decide_proposal(self, request: web.Request) -> web.Response:
        """Accept (write the merge through the write gate, archive the other sources) or reject a proposal."""
        proposal_id = request.match_info["id"]
        body = await read_json_object(request)
        decision = request.match_info["decision"]
        if decision == "accept":
            _pick(body, ())
            return json_response(await self.call("accept_proposal", {"id": proposal_id}))
        params = _pick(body, ("reason",))
        return json_response(await self.call("reject_proposal", {"id": proposal_id, **params}))

    # --- events ---------------------------------------------------------------------

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: one event per applied change batch."""

        def alive() -> bool:
            transport = request.transport
            return transport is not None and not transport.is_closing()

        queue = self.hub.subscribe(alive)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache, no-store",
                "X-Accel-Buffering": "no",
            }
        )
        try:
            await response.prepare(request)
            await response.write(b"retry: 2000\n\n" + _sse("hello", {"seq": self.hub.sequence}))
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), EVENT_HEARTBEAT_SECONDS)
                except TimeoutError:
                    await response.write(b": ping\n\n")  # keeps proxies and dead peers honest
                    continue
                if event is None:  # the server is shutting down
                    break
                await response.write(_sse("change", event))
        except (ConnectionResetError, ConnectionError):
            pass  # the page went away
        finally:
            self.hub.unsubscribe(queue)
        return response


def _required_str(params: dict[str, Any], name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ApiError(400, f"field '{name}' is required (a non-empty string)")
    return value.strip()


def _body_fields(params: dict[str, Any]) -> dict[str, Any]:
    """Map the page's two text boxes to ``save_memory``'s ``l1`` + ``content`` (the L2 part).

    A file without tier markers is all L1 (DESIGN.md), so it comes back with an
    empty L2; saving that keeps it marker-free (the text becomes ``content``).
    """
    out = dict(params)
    l1, content = out.get("l1"), out.get("content")
    if isinstance(l1, str) and not (content or "").strip():
        out["content"], out["l1"] = l1, None
    if out.get("l1") is not None and not str(out["l1"]).strip():
        out["l1"] = None
    return {k: v for k, v in out.items() if v is not None}


def _warnings(saved: Any) -> list[Any]:
    """The budget guard's warnings from a ``save_memory`` result (services/save_warnings.py)."""
    return list(saved.get("warnings") or []) if isinstance(saved, dict) else []


def _saved_id(saved: Any) -> str:
    if isinstance(saved, dict):
        return str(saved.get("id") or "")
    return str(getattr(saved, "id", "") or "")


# ---------------------------------------------------------------- shape normalisers
# The page relies on these shapes; the RPC methods own the data, this only names fields.


def normalise_graph(data: Any) -> dict[str, Any]:
    data = data if isinstance(data, dict) else {}
    nodes = []
    for n in data.get("nodes") or []:
        nodes.append(
            {
                "id": n.get("id"),
                "type": n.get("type"),
                "community": n.get("community"),
                "l0": n.get("l0", ""),
                "importance": n.get("importance"),
                **{k: v for k, v in n.items() if k not in ("id", "type", "community", "l0", "importance")},
            }
        )
    edges = []
    for e in data.get("edges") or []:
        edges.append(
            {
                "source": e.get("source", e.get("from")),
                "target": e.get("target", e.get("to")),
                "kind": e.get("kind", e.get("type", "link")),
                **{k: v for k, v in e.items() if k not in ("source", "target", "from", "to", "kind", "type")},
            }
        )
    rest = {k: v for k, v in data.items() if k not in ("nodes", "edges")}
    return {"nodes": nodes, "edges": edges, **rest}


def normalise_governance(data: Any) -> dict[str, Any]:
    findings = data.get("findings", []) if isinstance(data, dict) else list(data or [])
    rest = {k: v for k, v in data.items() if k != "findings"} if isinstance(data, dict) else {}
    clean = [normalise_finding(f) for f in findings if isinstance(f, dict)]
    return {**rest, "findings": clean, "count": len(clean)}


def normalise_finding(f: dict[str, Any]) -> dict[str, Any]:
    """A finding plus what the page needs to offer its actions (``services/governance.py`` owns the data).

    ``actions`` lists what ``POST /api/governance/actions`` can do with it:
    archive (the suggested archive, or archiving the near-duplicates a merge would drop),
    set_importance (god nodes, with ``suggested_importance``), and dismiss (always).
    """
    suggested = f.get("action") if isinstance(f.get("action"), dict) else {}
    kind_of_action = suggested.get("action")
    ids = list(f.get("ids") or [])
    out = {**f, "id": f.get("fingerprint") or f.get("id"), "memory_ids": ids}
    actions: list[str] = []
    archive_ids: list[str] = []
    if kind_of_action == "archive":
        archive_ids = list(suggested.get("ids") or ids)
        out["suggestion"] = "archive " + ", ".join(archive_ids)
    elif kind_of_action == "merge":
        archive_ids = list(suggested.get("ids") or [])
        out["suggestion"] = f"merge {', '.join(archive_ids)} into {suggested.get('into')}, then archive the rest"
    elif kind_of_action == "set_importance":
        out["suggested_importance"] = suggested.get("value")
        out["suggestion"] = f"set the importance of {suggested.get('id')} to {suggested.get('value')}"
        actions.append("set_importance")
    elif kind_of_action == "review":
        out["suggestion"] = "read both and decide which one holds; edit or archive the other"
    elif kind_of_action == "fix":
        out["suggestion"] = (
            suggested.get("suggestion") or f"fix {suggested.get('path') or ', '.join(f.get('paths') or [])} by hand"
        )
    if archive_ids:
        actions.insert(0, "archive")
    actions.append("dismiss")
    out["archive_ids"] = archive_ids
    out["actions"] = actions
    if f.get("command"):
        out["suggestion"] = (out.get("suggestion") or "") + f"  (CLI: {f['command']})"
    return out


def normalise_health(data: Any) -> dict[str, Any]:
    return data if isinstance(data, dict) else {"score": data}


# ---------------------------------------------------------------- wiring

# Endpoints whose JSON body is an RPC method's params as they are (services/schemas.py checks them).
BODY_CONTRACTS: dict[tuple[str, str], type[schemas.Request]] = {
    ("POST", "/api/simulate"): schemas.ContextRequest,
    ("POST", "/api/memories"): schemas.SaveMemoryRequest,
}


async def api_index(request: web.Request) -> web.Response:
    """``GET /api/``: every REST endpoint this daemon serves (method, path, what it does).

    Read from the router itself, so an endpoint added anywhere is listed without editing this.
    An endpoint whose body is an RPC request contract also gives its JSON schema (``body``).
    """
    endpoints = []
    for route in request.app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if not path.startswith("/api/") or route.method == "HEAD" or path == "/api/":
            continue
        doc = (getattr(route.handler, "__doc__", None) or "").strip().splitlines()
        entry = {"method": route.method, "path": path, "about": doc[0] if doc else ""}
        contract = BODY_CONTRACTS.get((route.method, path))
        if contract is not None:
            entry["body"] = schemas.input_schema(contract)
        endpoints.append(entry)
    endpoints.sort(key=lambda e: (e["path"], e["method"]))
    return json_response({"endpoints": endpoints, "docs": "docs/web.md"})


def add_routes(app: web.Application, ctx: Any) -> RestApi:
    """Add the REST endpoints to ``app`` (called by ``http_server.py`` before the app starts).

    Also installs the JSON-error middleware for ``/api/`` and subscribes the
    event hub to the daemon's change notifications (unsubscribed at cleanup).
    """
    api = RestApi(ctx)
    app.middlewares.append(json_errors_middleware)
    r = app.router
    r.add_get("/api/", api_index)
    r.add_get("/api/status", api.status)
    r.add_get("/api/health", api.health)
    r.add_post("/api/simulate", api.simulate)
    r.add_get("/api/memories", api.list_memories)
    r.add_post("/api/memories", api.create_memory)
    r.add_get("/api/memories/{id}", api.get_memory)
    r.add_put("/api/memories/{id}", api.update_memory)
    r.add_post("/api/memories/{id}/archive", api.archive_memory)
    r.add_get("/api/graph", api.graph)
    r.add_get("/api/governance", api.governance)
    r.add_post("/api/governance/actions", api.governance_action)
    r.add_get("/api/proposals", api.proposals)
    r.add_post("/api/proposals/{id}/{decision:accept|reject}", api.decide_proposal)
    r.add_get("/api/events", api.events)
    from .rest_history import add_history_routes

    add_history_routes(app, api)

    ctx.add_change_listener(api.hub.publish)

    async def _on_shutdown(_app: web.Application) -> None:
        api.hub.close()

    async def _on_cleanup(_app: web.Application) -> None:
        remove = getattr(ctx, "remove_change_listener", None)
        if remove is not None:
            remove(api.hub.publish)

    app.on_shutdown.append(_on_shutdown)
    app.on_cleanup.append(_on_cleanup)
    app[REST_API_KEY] = api
    return api
