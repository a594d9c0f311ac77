"""Use cases that write memory files: ``save_memory``, ``log_session``, ``reindex``.

Every write goes through the engine's write rules (``services/write_gate.py``
underneath); the host runs these one at a time (the daemon: behind its write
lock). Each publishes one change note, because the engine indexed the file
itself: when the watcher later sees the write it finds nothing new.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import schemas
from ..engine import ChangeSummary
from ..engine_view import loaded_index
from ..jsonrpc import WRITE_REFUSED, RpcError
from ..model import Memory
from ..responses import LogSessionResponse, ReindexResponse, SaveResponse, answers
from ..save_warnings import save_warnings
from ..write_gate import WriteConflict, WriteRefused
from .host import Host

log = logging.getLogger(__name__)


def refused(exc: WriteRefused) -> RpcError:
    """A safety rule said no: WRITE_REFUSED, ``data.reason`` "conflict" when it is about versions."""
    return RpcError(WRITE_REFUSED, str(exc), {"reason": "conflict" if isinstance(exc, WriteConflict) else "refused"})


def publish(host: Host, summary: ChangeSummary) -> None:
    """Pass the engine's change summary on when it changed anything (router, web view, communities follow)."""
    if summary.changed:
        host.publish_change(summary)


@answers(SaveResponse)
def save_memory(host: Host, req: schemas.SaveMemoryRequest) -> dict[str, Any]:
    """Create or update a memory through the write rules; indexed before it returns."""
    fields = req.params()
    engine = host.engine
    # Runs behind the write lock, so "did it exist before" cannot change under us.
    existed = req.id is not None and engine.get_memory(req.id) is not None
    try:
        saved = engine.save_memory(**fields)
    except WriteRefused as exc:
        raise refused(exc) from None
    data = saved.to_dict(include_text=False)
    # "created" is whether this call created the memory; the frontmatter date goes to "created_on".
    result = {
        **data,
        "created_on": data.get("created"),
        "created": not existed,
        "warnings": _warnings(host, saved, req.l0),
    }
    host.publish_change(ChangeSummary(updated=[saved.id], paths=[saved.rel_path]))
    return result


def _warnings(host: Host, saved: Memory, raw_l0: str) -> list[dict[str, Any]]:
    """The budget guard's advice on a saved memory (services/save_warnings.py); never fails the save."""
    try:
        return [w.to_dict() for w in save_warnings(host.engine, saved, raw_l0=raw_l0)]
    except Exception:  # noqa: BLE001 - the memory is saved; advice is best effort
        log.exception("save warnings for %s failed", saved.id)
        return []


@answers(LogSessionResponse)
def log_session(host: Host, req: schemas.LogSessionRequest) -> dict[str, Any]:
    """Append a timestamped line to today's session log."""
    engine = host.engine
    try:
        rel_path = engine.log_session(req.event, req.details)
    except WriteRefused as exc:
        raise refused(exc) from None
    memory = engine.store.get_by_path(str(rel_path))
    host.publish_change(ChangeSummary(updated=[memory.id] if memory else [], paths=[str(rel_path)]))
    return {"path": str(rel_path), "event": req.event, "id": memory.id if memory else None}


@answers(ReindexResponse)
def reindex(host: Host, req: schemas.ReindexRequest) -> dict[str, Any]:
    """Compare files with the index and apply the difference; ``full: true`` rebuilds the index from scratch."""
    engine = host.engine
    summary = engine.rebuild_index() if req.full else engine.reconcile()
    publish(host, summary)
    index = loaded_index(engine)
    return {"full": req.full, **summary.to_dict(), "indexed": len(index), "index": index.info()}
