"""The REST routes under ``/api/``: the web view's (and any script's) way into the daemon.

Each route checks its params with a request model (``services/schemas.py``) and
calls an operation through the daemon's RPC registry (``ctx.rpc``), which runs
the use case (``services/api``) on the right thread; so each operation has one
implementation and one set of messages, shared with the socket, the CLI and MCP.
This module only maps URLs to operations, and HTTP to their params.

Simulation does not count as a load: ``POST /api/simulate`` calls ``simulate``,
which runs the one query path with ``record_access`` off, so a person trying
queries in the page does not raise the access-frequency signal or the coverage
part of the health score the way real agent loads do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from ctxos.services import schemas
from ctxos.services.api.governance import finding_card
from ctxos.services.model import SIGNALS
from ctxos.services.ontology import MEMORY_TYPES
from ctxos.services.query import known_intents

from ..rpc import CLIENT_PARAM, NOT_FOUND, RpcError
from .events import ChangeHub
from .http import CONFLICT, ApiError, Handler, checked, json_response, query_params, read_json_object

if TYPE_CHECKING:  # pragma: no cover
    from ..context import DaemonContext

REST_CLIENT = "web page via REST"  # who REST writes are attributed to in history


@dataclass(frozen=True)
class Route:
    """One endpoint: method, path, handler, and the model its params are checked with (for ``GET /api/``)."""

    method: str
    path: str
    handler: Handler
    model: type[schemas.Request] | None = None
    params_in: str = "body"  # where they come from: "body" (JSON), "query" (the query string), "path_params"


class RestApi:
    """The handlers; one instance per app, bound to the daemon context."""

    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        self.hub = ChangeHub()

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """One operation through the registry (read pool or write lock, as the operation declares)."""
        return await self.ctx.rpc.call(self.ctx, method, {**(params or {}), CLIENT_PARAM: REST_CLIENT})

    # --- status and health ------------------------------------------------------

    async def status(self, request: web.Request) -> web.Response:
        """The daemon's status plus what the page needs to build its forms."""
        data: dict[str, Any] = await self.call("status")
        config = self.ctx.config
        data.setdefault("workspace", str(self.ctx.root))
        data["default_budget"] = config.settings.query.default_budget
        data["intents"] = known_intents(config)
        data["types"] = list(MEMORY_TYPES)
        data["signals"] = list(SIGNALS)
        data["auth"] = (data.get("http_server") or {}).get("auth")  # "token" or "none" (the opt-out)
        return json_response(data)

    async def health(self, request: web.Request) -> web.Response:
        """The health score (0-100) and what would raise it, with the files skipped and why."""
        health: dict[str, Any] = await self.call("health")
        doctor: dict[str, Any] = await self.call("doctor")
        health.setdefault("invalid", doctor["invalid"])
        return json_response(health)

    # --- the one query path -------------------------------------------------------

    async def simulate(self, request: web.Request) -> web.Response:
        """Exactly what an agent would get for a query (the one query path; not recorded as a load)."""
        body = checked(schemas.ContextRequest, await read_json_object(request))
        return json_response(await self.call("simulate", body.params()))

    # --- memories -----------------------------------------------------------------

    async def list_memories(self, request: web.Request) -> web.Response:
        """Memories, filtered by type or text (query parameters type, q, limit, offset)."""
        query = checked(schemas.MemoryListQuery, query_params(request), from_text=True)
        result: dict[str, Any] = await self.call("list", {"type": query.type} if query.type else {})
        items: list[dict[str, Any]] = result["memories"]
        needle = (query.q or "").strip().casefold()
        if needle:
            items = [
                m
                for m in items
                if needle in m["id"].casefold()
                or needle in (m["l0"] or "").casefold()
                or any(needle in str(t).casefold() for t in m["tags"])
            ]
        end = query.offset + query.limit if query.limit is not None else None
        page = items[query.offset : end]
        return json_response({"memories": page, "count": len(page), "total": len(items)})

    async def get_memory(self, request: web.Request) -> web.Response:
        """One memory with its tiers, version and checksum."""
        return json_response(await self._memory(request.match_info["id"]))

    async def _memory(self, memory_id: str) -> dict[str, Any]:
        found: dict[str, Any] = await self.call("get_memory", {"id": memory_id})
        return found

    async def _memory_or_none(self, memory_id: str) -> dict[str, Any] | None:
        try:
            return await self._memory(memory_id)
        except RpcError as exc:
            if exc.code == NOT_FOUND:
                return None
            raise

    async def create_memory(self, request: web.Request) -> web.Response:
        """Create a memory through the write gate (a 409 when the id is taken: PUT updates)."""
        body = checked(schemas.SaveMemoryRequest, await read_json_object(request))
        if body.id:
            existing = await self._memory_or_none(body.id)
            if existing is not None:
                raise ApiError(
                    409,
                    f"memory {body.id!r} already exists (version {existing['version']}); "
                    "use PUT /api/memories/{id} to update it",
                    {"reason": CONFLICT, "current_version": existing["version"]},
                )
        saved = await self.call("save_memory", _page_text(body.params()))
        return json_response({**await self._memory(saved["id"]), "warnings": saved["warnings"]}, status=201)

    async def update_memory(self, request: web.Request) -> web.Response:
        """Update a memory through the write gate (version or checksum checked; 409 on a conflict)."""
        memory_id = request.match_info["id"]
        body = checked(schemas.UpdateMemoryBody, await read_json_object(request))
        current = await self._memory(memory_id)  # 404 when it does not exist
        # Pre-check, so the page gets a clear 409 with the version on disk. The write itself
        # re-checks the version under the write lock (services/writes.py), so a race still fails.
        if current["version"] != body.version:
            raise ApiError(
                409,
                f"memory {memory_id!r} changed since you read it: you read version {body.version}, "
                f"the file is at version {current['version']}; reload it",
                {"reason": CONFLICT, "current_version": current["version"]},
            )
        if body.checksum and body.checksum != current["checksum"]:
            raise ApiError(
                409,
                f"memory {memory_id!r} changed since you read it: the file was edited on disk "
                f"(still version {body.version}, different content); reload it",
                {"reason": CONFLICT, "current_version": current["version"]},
            )
        fields = body.params()
        fields.pop("version")
        fields.pop("checksum", None)
        fields.setdefault("type", current["type"])
        fields.setdefault("l0", current["l0"])
        if "content" not in fields and "l1" not in fields:
            fields["l1"], fields["content"] = current["l1"] or "", current["l2"] or ""
        fields = {**_page_text(fields), "id": memory_id, "expected_version": body.version}
        if body.checksum:
            fields["expected_checksum"] = body.checksum  # the gate re-checks it under the write lock
        saved = await self.call("save_memory", fields)
        return json_response({**await self._memory(saved["id"]), "warnings": saved["warnings"]})

    async def archive_memory(self, request: web.Request) -> web.Response:
        """Move a memory to _archive/ (protected memories are refused)."""
        checked(schemas.NoParams, await read_json_object(request))
        return json_response(await self.call("archive", {"id": request.match_info["id"]}))

    # --- graph and governance ---------------------------------------------------

    async def graph(self, request: web.Request) -> web.Response:
        """The link graph: nodes, edges and communities, with positions for the view."""
        return json_response(await self.call("graph", {"layout": True}))

    async def governance(self, request: web.Request) -> web.Response:
        """What needs a person's judgment: findings with their evidence and the actions offered."""
        report: dict[str, Any] = await self.call("governance")
        cards = [finding_card(f) for f in report["findings"]]
        return json_response({**report, "findings": cards, "count": len(cards)})

    async def governance_action(self, request: web.Request) -> web.Response:
        """Act on a finding: archive, set_importance or dismiss."""
        body = checked(schemas.GovernanceActionBody, await read_json_object(request))
        if body.action == "dismiss":
            result = await self.call("dismiss", {"fingerprint": _needed(body.finding_id, "finding_id")})
        elif body.action == "archive":
            result = await self.call("archive", {"id": _needed(body.memory_id, "memory_id")})
        else:
            memory_id = _needed(body.memory_id, "memory_id")
            value = _needed(body.importance, "importance")
            result = await self.call("set_importance", {"id": memory_id, "value": value})
        return json_response({"action": body.action, "result": result})

    # --- merge proposals (agents propose, the person decides here) ------------------

    async def proposals(self, request: web.Request) -> web.Response:
        """Merge proposals from agents waiting for a person (``?all=1``: decided ones too), with a diff per source."""
        query = checked(schemas.ProposalsRequest, query_params(request), from_text=True)
        return json_response(await self.call("proposals", {"all": query.all, "diffs": True}))

    async def decide_proposal(self, request: web.Request) -> web.Response:
        """Accept (write the merge through the write gate, archive the other sources) or reject a proposal."""
        params = {**await read_json_object(request), "id": request.match_info["id"]}
        if request.match_info["decision"] == "accept":
            accepted = checked(schemas.ProposalIdRequest, params)
            return json_response(await self.call("accept_proposal", accepted.params()))
        rejected = checked(schemas.RejectProposalRequest, params)
        return json_response(await self.call("reject_proposal", rejected.params()))

    # --- history ------------------------------------------------------------------

    async def history(self, request: web.Request) -> web.Response:
        """A memory's versions, newest first (git commits or the journal): who, when, tool, summary."""
        ref = checked(schemas.MemoryRefRequest, dict(request.match_info), from_text=True)
        return json_response(await self.call("history", ref.params()))

    async def history_version(self, request: web.Request) -> web.Response:
        """Version n's full text, its diff against the version before it and against the file now."""
        version = checked(schemas.HistoryVersionRequest, dict(request.match_info), from_text=True)
        return json_response(await self.call("history_version", version.params()))

    async def revert(self, request: web.Request) -> web.Response:
        """Restore version {"to": n} as a new version through the write gate (403 protected, 409 conflict)."""
        body = {**await read_json_object(request), "id": request.match_info["id"]}
        return json_response(await self.call("revert", checked(schemas.RevertRequest, body).params()))

    # --- the table ----------------------------------------------------------------

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/api/status", self.status, schemas.NoParams, "query"),
            Route("GET", "/api/health", self.health, schemas.NoParams, "query"),
            Route("POST", "/api/simulate", self.simulate, schemas.ContextRequest),
            Route("GET", "/api/memories", self.list_memories, schemas.MemoryListQuery, "query"),
            Route("POST", "/api/memories", self.create_memory, schemas.SaveMemoryRequest),
            Route("GET", "/api/memories/{id}", self.get_memory, schemas.MemoryRefRequest, "path_params"),
            Route("PUT", "/api/memories/{id}", self.update_memory, schemas.UpdateMemoryBody),
            Route("POST", "/api/memories/{id}/archive", self.archive_memory, schemas.MemoryRefRequest, "path_params"),
            Route("GET", "/api/memories/{id}/history", self.history, schemas.MemoryRefRequest, "path_params"),
            Route(
                "GET",
                "/api/memories/{id}/history/{n}",
                self.history_version,
                schemas.HistoryVersionRequest,
                "path_params",
            ),
            Route("POST", "/api/memories/{id}/revert", self.revert, schemas.RevertRequest),
            Route("GET", "/api/graph", self.graph),
            Route("GET", "/api/governance", self.governance),
            Route("POST", "/api/governance/actions", self.governance_action, schemas.GovernanceActionBody),
            Route("GET", "/api/proposals", self.proposals, schemas.ProposalsRequest, "query"),
            Route(
                "POST",
                "/api/proposals/{id}/{decision:accept|reject}",
                self.decide_proposal,
                schemas.RejectProposalRequest,
            ),
            Route("GET", "/api/events", self.hub.stream),
        ]


def _needed(value: Any, name: str) -> Any:
    """A parameter the chosen action needs (the contracts' wording when it is missing)."""
    if value is None:
        raise ApiError(400, f"{name}: is required")
    return value


def _page_text(params: dict[str, Any]) -> dict[str, Any]:
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
