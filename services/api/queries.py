"""Use cases that read: ``status``, the one query path (``get_context``, ``simulate``), memories, skills, ``doctor``.

Each takes the :class:`~ctxos.services.api.host.Host` it runs on and its request
model (``services/schemas.py``), already validated by the transport, and returns
plain JSON data; an error the caller can act on is an
:class:`~ctxos.services.jsonrpc.RpcError`.
"""

from __future__ import annotations

from typing import Any

from .. import schemas
from ..communities import community_of_memory
from ..jsonrpc import INVALID_PARAMS, NOT_FOUND, RpcError
from ..model import ContextResult
from ..query import QueryError
from ..responses import (
    AgentContextResponse,
    ContextResponse,
    DoctorResponse,
    ListResponse,
    MemoryResponse,
    SkillResponse,
    StatusResponse,
    answers,
)
from ..save_warnings import never_at_l1
from ..skill_lookup import SkillLookupError
from .host import Host


@answers(StatusResponse)
def status(host: Host, req: schemas.NoParams) -> dict[str, Any]:
    """Daemon and index state: pid, uptime, workspace, memories, invalid files, pending events, index lag, jobs."""
    data = host.daemon_status()
    watcher = data.get("watcher") or {}
    data["pending_events"] = watcher.get("pending_events", 0)
    data["index_lag_ms"] = watcher.get("index_lag_ms", 0.0)
    data["jobs"] = host.status_extra.get("jobs", {})
    engine = host.engine
    progress = engine.progress
    data["indexing"] = progress.to_dict() if progress is not None else None
    if host.ready and not host.load_error:
        data["engine"] = _engine_status(host)
        data["memories"] = len(engine.store)
        data["invalid_files"] = len(engine.invalid_files())
        data["config_error"] = engine.config.error
        data["problems"] = list(engine.problems)
        if host.load_summary is not None:
            data["load"] = host.load_summary
    return data


def _engine_status(host: Host) -> dict[str, Any]:
    """``engine.status()``, which reads index files that a concurrent commit may just have replaced:
    retried, and at worst reported as an error inside the section, so ``status`` itself always answers."""
    for attempt in range(3):
        try:
            return host.engine.status()
        except OSError as exc:
            if attempt == 2:
                return {"error": f"{type(exc).__name__}: {exc}"}
    return {}  # pragma: no cover


def _query(host: Host, req: schemas.ContextRequest, record_access: bool) -> ContextResult:
    """The one query path; an unknown intent is the query path's to refuse (it knows the workspace's weights)."""
    engine = host.engine
    try:
        context = engine.execute_context_query(
            req.query, req.budget_tokens, req.intent or None, record_access=record_access
        )
    except QueryError as exc:  # an unknown intent: the caller's mistake
        raise RpcError(INVALID_PARAMS, str(exc)) from None
    served = (engine.store.get(chosen.id) for chosen in context.selected)  # remember them (Engine.note_served)
    engine.note_served_all(memory for memory in served if memory is not None)
    return context


def _run_query(host: Host, req: schemas.ContextRequest, record_access: bool, detail: bool = True) -> dict[str, Any]:
    result = _query(host, req, record_access).to_dict(detail=detail)
    result["token_counter"] = host.engine.counter.name
    return result


@answers(ContextResponse, check=False)  # built from typed dataclasses; checked by tests/test_responses.py
def get_context(host: Host, req: schemas.GetContextRequest) -> dict[str, Any]:
    """The context for a query within a token budget (records the access: this is what agents load).

    Each selected memory's signals, shares and sources only with ``detail`` (``simulate`` always has them).
    """
    return _run_query(host, req, record_access=True, detail=req.detail)


@answers(AgentContextResponse, check=False)  # built from typed dataclasses; checked by tests/test_responses.py
def agent_context(host: Host, req: schemas.ContextRequest) -> dict[str, Any]:
    """``get_context`` as agents are told it (the MCP tools' answer): no signals, paths or reasons (recorded too)."""
    return _query(host, req, record_access=True).agent_dict()


@answers(ContextResponse, check=False)
def simulate(host: Host, req: schemas.ContextRequest) -> dict[str, Any]:
    """Exactly ``get_context``, without recording an access (a person trying queries).

    Each selected memory also names its community (``community``, ``community_name``), for the page.
    """
    result = _run_query(host, req, record_access=False)
    selected: list[dict[str, Any]] = result.get("selected", [])
    names = community_of_memory(host.engine, [s["id"] for s in selected])
    for item in selected:
        item.update(names.get(item["id"], {"community": None, "community_name": None}))
    return result


@answers(MemoryResponse)
def get_memory(host: Host, req: schemas.GetMemoryRequest) -> dict[str, Any]:
    """One memory with its text; ``tier`` (L0/L1/L2) adds ``text`` rendered at that tier."""
    memory = host.engine.get_memory(req.id)
    if memory is None:
        raise RpcError(NOT_FOUND, f"no memory with id {req.id!r}")
    host.engine.note_served(memory)
    data = memory.to_dict(include_text=True)
    if req.tier is not None:
        data["text"] = memory.tier_text(req.tier)
    return data


@answers(ListResponse)
def list_memories(host: Host, req: schemas.ListRequest) -> dict[str, Any]:
    """Every memory's metadata (no text), optionally of one ``type``; ``invalid`` lists skipped files."""
    memories = host.engine.list_memories(req.type)
    end = req.offset + req.limit if req.limit is not None else None
    page = memories[req.offset : end]
    return {
        "memories": [m.to_dict(include_text=False) for m in page],
        "total": len(memories),
        "count": len(page),
        "invalid": len(host.engine.invalid_files()),
    }


@answers(SkillResponse)
def get_skill(host: Host, req: schemas.GetSkillRequest) -> dict[str, Any]:
    """A skill in full, by its exact id, file name or title (any case); never a near miss.

    Not found, not a skill, or ambiguous: NOT_FOUND with ``data.reason`` and
    ``data.suggestions`` (the closest skills by name).
    """
    try:
        match = host.engine.find_skill(req.name)
    except SkillLookupError as exc:
        raise RpcError(NOT_FOUND, exc.message, exc.to_dict()) from None
    host.engine.note_served(match.memory)
    return {**match.memory.to_dict(include_text=True), "matched": True, "matched_by": match.matched_by}


@answers(DoctorResponse)
def doctor(host: Host, req: schemas.NoParams) -> dict[str, Any]:
    """Files that were skipped, each with its reason, a broken ``_config.yaml`` if any, and memories whose
    L1 can never fit the default budget (``never_load_at_l1``)."""
    engine = host.engine
    invalid = engine.invalid_files()
    plan, never = never_at_l1(engine)
    return {
        "invalid": [f.to_dict() for f in invalid],
        "count": len(invalid),
        "config_error": engine.config.error,
        "problems": list(engine.problems),
        "memories": len(engine.store),
        "l1_budget": plan.to_dict(),
        "never_load_at_l1": never,
    }
