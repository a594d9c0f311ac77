"""The core RPC methods: status, the one query path, memories, writes, reindex, doctor.

Each handler is a thin, synchronous adapter: call the engine with params the
registry already checked against the method's request model
(``services/schemas.py``), return plain JSON. The registry decides the thread (read pool, or the
write thread behind the write lock for ``write=True``). The same functions
serve the daemon's socket, HTTP (through ``ctx.rpc``), MCP and the CLI's
in-process fallback, so every front end gets identical answers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ctxos.services import schemas

from .rpc import INVALID_PARAMS, NOT_FOUND, WRITE_REFUSED, RpcError, RpcRegistry

if TYPE_CHECKING:  # pragma: no cover
    from .context import DaemonContext

log = logging.getLogger(__name__)


def _write_refused(exc: Exception) -> RpcError:
    """A safety rule said no: WRITE_REFUSED, flagged as a conflict when it is about versions."""
    from ctxos.services.writes import WriteConflict

    is_conflict = isinstance(exc, WriteConflict)
    return RpcError(WRITE_REFUSED, str(exc), {"reason": "conflict" if is_conflict else "refused"})


def _refusal_types() -> tuple[type[Exception], ...]:
    from ctxos.services.writes import WriteRefused

    return (WriteRefused,)


# ---------------------------------------------------------------- status


def status(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Daemon and index state: pid, uptime, workspace, memories, invalid files, pending events, index lag, jobs."""
    data = ctx.daemon_status()
    watcher = data.get("watcher") or {}
    data["pending_events"] = watcher.get("pending_events", 0)
    data["index_lag_ms"] = watcher.get("index_lag_ms", 0.0)
    data["jobs"] = ctx.status_extra.get("jobs", {})
    progress = getattr(ctx.engine, "progress", None)
    data["indexing"] = progress.to_dict() if progress is not None else None
    if ctx.ready and not ctx.load_error:
        data["engine"] = _engine_status(ctx)
        data["memories"] = len(ctx.engine.store)
        data["invalid_files"] = len(ctx.engine.invalid_files())
        data["config_error"] = getattr(ctx.config, "error", None)
        data["problems"] = list(getattr(ctx.engine, "problems", []) or [])
        if ctx.load_summary is not None:
            data["load"] = ctx.load_summary
    return data


def _engine_status(ctx: DaemonContext) -> dict[str, Any]:
    """``engine.status()``, which reads index files that a concurrent commit may just have replaced:
    retried, and at worst reported as an error inside the section, so ``status`` itself always answers."""
    for attempt in range(3):
        try:
            return ctx.engine.status()
        except OSError as exc:
            if attempt == 2:
                return {"error": f"{type(exc).__name__}: {exc}"}
    return {}  # pragma: no cover


# ---------------------------------------------------------------- the one query path


def _run_query(ctx: DaemonContext, params: dict[str, Any], record_access: bool) -> dict[str, Any]:
    """``params`` checked by ``schemas.ContextRequest``; an unknown intent is the query path's to refuse."""
    from ctxos.services.query import QueryError

    try:
        context = ctx.engine.execute_context_query(
            params["query"], params.get("budget_tokens"), params.get("intent") or None, record_access=record_access
        )
        result = context.to_dict()
    except QueryError as exc:  # an unknown intent or a bad budget: the caller's mistake
        raise RpcError(INVALID_PARAMS, str(exc)) from None
    result["token_counter"] = getattr(ctx.engine.counter, "name", type(ctx.engine.counter).__name__)
    for chosen in context.selected:  # remember what was served (see Engine.note_served)
        memory = ctx.engine.store.get(chosen.id)
        if memory is not None:
            ctx.engine.note_served(memory)
    return result


def get_context(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """The context for a query within a token budget (records the access: this is what agents load)."""
    return _run_query(ctx, params, record_access=True)


def simulate(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Exactly ``get_context``, without recording an access (a person trying queries).

    Each selected memory also names its community (``community``, ``community_name``), for the page.
    """
    from ctxos.services.communities import community_of_memory

    result = _run_query(ctx, params, record_access=False)
    names = community_of_memory(ctx.engine, [s["id"] for s in result.get("selected", [])])
    for selected in result.get("selected", []):
        selected.update(names.get(selected["id"], {"community": None, "community_name": None}))
    return result


# ---------------------------------------------------------------- memories


def get_memory(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """One memory with its text; ``tier`` (L0/L1/L2) adds ``text`` rendered at that tier."""
    memory_id, tier = params["id"], params.get("tier")
    memory = ctx.engine.get_memory(memory_id)
    if memory is None:
        raise RpcError(NOT_FOUND, f"no memory with id {memory_id!r}")
    ctx.engine.note_served(memory)
    data = memory.to_dict(include_text=True)
    if tier is not None:
        data["text"] = memory.tier_text(tier)
    return data


def list_memories(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Every memory's metadata (no text), optionally of one ``type``; ``invalid`` lists skipped files."""
    kind, limit, offset = params.get("type"), params.get("limit"), params["offset"]
    memories = ctx.engine.list_memories(kind)
    page = memories[offset : offset + limit if limit is not None else None]
    return {
        "memories": [m.to_dict(include_text=False) for m in page],
        "total": len(memories),
        "count": len(page),
        "invalid": len(ctx.engine.invalid_files()),
    }


def get_skill(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """A skill in full, by its exact id, file name or title (any case); never a near miss.

    Not found, not a skill, or ambiguous: NOT_FOUND with ``data.reason`` and
    ``data.suggestions`` (the closest skills by name).
    """
    from ctxos.services.skill_lookup import SkillLookupError

    name = params["name"]
    try:
        match = ctx.engine.find_skill(name)
    except SkillLookupError as exc:
        raise RpcError(NOT_FOUND, exc.message, exc.to_dict()) from None
    ctx.engine.note_served(match.memory)
    return {**match.memory.to_dict(include_text=True), "matched": True, "matched_by": match.matched_by}


def doctor(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Files that were skipped, each with its reason, a broken ``_config.yaml`` if any, and memories whose
    L1 can never fit the default budget (``never_load_at_l1``)."""
    from ctxos.services.save_warnings import never_at_l1

    invalid = ctx.engine.invalid_files()
    plan, never = never_at_l1(ctx.engine)
    return {
        "invalid": [f.to_dict() for f in invalid],
        "count": len(invalid),
        "config_error": getattr(ctx.config, "error", None),
        "problems": list(getattr(ctx.engine, "problems", []) or []),
        "memories": len(ctx.engine.store),
        "l1_budget": plan.to_dict(),
        "never_load_at_l1": never,
    }


# ---------------------------------------------------------------- writes


def save_memory(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Create or update a memory through the write rules; indexed before it returns."""
    fields = dict(params)
    # Runs behind the write lock, so "did it exist before" cannot change under us.
    existed = "id" in fields and ctx.engine.get_memory(fields["id"]) is not None
    try:
        saved = ctx.engine.save_memory(**fields)
    except _refusal_types() as exc:
        raise _write_refused(exc) from None
    data = saved.to_dict(include_text=False)
    # "created" is whether this call created the memory; the frontmatter date goes to "created_on".
    result = {
        **data,
        "created_on": data.get("created"),
        "created": not existed,
        "warnings": _save_warnings(ctx, saved, fields.get("l0")),
    }
    _publish(ctx, updated=[saved.id], paths=[saved.rel_path])
    return result


def _save_warnings(ctx: DaemonContext, saved: Any, raw_l0: str | None) -> list[dict[str, Any]]:
    """The budget guard's advice on a saved memory (services/save_warnings.py); never fails the save."""
    from ctxos.services.save_warnings import save_warnings

    try:
        return [w.to_dict() for w in save_warnings(ctx.engine, saved, raw_l0=raw_l0)]
    except Exception:  # noqa: BLE001 - the memory is saved; advice is best effort
        log.exception("save warnings for %s failed", getattr(saved, "id", "?"))
        return []


def log_session(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Append a timestamped line to today's session log."""
    event, details = params["event"], params.get("details")
    try:
        rel_path = ctx.engine.log_session(event, details)
    except _refusal_types() as exc:
        raise _write_refused(exc) from None
    memory = ctx.engine.store.get_by_path(str(rel_path))
    _publish(ctx, updated=[memory.id] if memory else [], paths=[str(rel_path)])
    return {"path": str(rel_path), "event": event, "id": memory.id if memory else None}


def reindex(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Compare files with the index and apply the difference; ``full: true`` rebuilds the index from scratch."""
    full = params["full"]
    summary = ctx.engine.rebuild_index() if full else ctx.engine.reconcile()
    if getattr(summary, "changed", False):
        ctx.publish_change(summary)
    return {"full": full, **summary.to_dict(), "indexed": len(ctx.engine.index), "index": ctx.engine.index.info()}


def _publish(ctx: DaemonContext, *, updated: list[str], paths: list[str]) -> None:
    """Tell change listeners (router, web view) about a write made through RPC.

    The engine indexed the file itself, so when the watcher sees the write it
    finds nothing new and stays quiet: this is the one notification for it.
    """
    from ctxos.services.engine import ChangeSummary

    ctx.publish_change(ChangeSummary(updated=list(updated), paths=list(paths)))


def register(registry: RpcRegistry) -> None:
    registry.register("status", status, wait_ready=False, schema=schemas.NoParams)
    # Reads answer during a cold build from the memories indexed so far (status says "indexing n of N").
    registry.register("get_context", get_context, partial_ok=True, schema=schemas.ContextRequest)
    registry.register("simulate", simulate, partial_ok=True, schema=schemas.ContextRequest)
    registry.register("get_memory", get_memory, partial_ok=True, schema=schemas.GetMemoryRequest)
    registry.register("list", list_memories, partial_ok=True, schema=schemas.ListRequest)
    registry.register("get_skill", get_skill, partial_ok=True, schema=schemas.GetSkillRequest)
    registry.register("doctor", doctor, schema=schemas.NoParams)
    registry.register("save_memory", save_memory, write=True, schema=schemas.SaveMemoryRequest)
    registry.register("log_session", log_session, write=True, schema=schemas.LogSessionRequest)
    registry.register("reindex", reindex, write=True, schema=schemas.ReindexRequest)
