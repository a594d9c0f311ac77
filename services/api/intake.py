"""Use cases that bring files in: ``inbox`` (list), ``promote`` (an inbox file becomes a memory), ``import``.

``promote`` and ``import`` are writes (the host runs them behind its write lock);
they re-index what they wrote and publish the change, so router files,
communities and the web view follow. ``import`` reads a path the caller names
with the host process's rights, which are the caller's: only the local socket
and the CLI reach it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import schemas
from ..importers import ImportError_, run_import
from ..inbox import list_inbox
from ..inbox import promote as promote_file
from ..jsonrpc import INVALID_PARAMS, RpcError
from ..responses import InboxResponse, IntakeResponse, answers
from ..write_gate import WriteRefused
from .host import Host
from .writes import publish, refused


@answers(InboxResponse)
def inbox(host: Host, req: schemas.NoParams) -> dict[str, Any]:
    """Files waiting in ``inbox/``, each with the one line it would get (or why it cannot be promoted)."""
    items = list_inbox(host.engine.root, host.engine.config)
    return {"items": [item.to_dict() for item in items], "count": len(items)}


@answers(IntakeResponse)
def promote(host: Host, req: schemas.PromoteRequest) -> dict[str, Any]:
    """Move an inbox file into the ontology folder of ``type``, its frontmatter filled in (write gate)."""
    engine = host.engine
    try:
        result = promote_file(engine.root, engine.store, engine.config, req.path, req.type, memory_id=req.id)
    except WriteRefused as exc:
        raise refused(exc) from None
    publish(host, engine.apply_changes([result.path, result.source]))
    return result.to_dict()


@answers(IntakeResponse)
def import_path(host: Host, req: schemas.ImportRequest) -> dict[str, Any]:
    """What an import of ``path`` does (``dry_run: true``: the plan only) and what it did."""
    engine = host.engine
    try:
        plan = run_import(engine.root, engine.store, engine.config, Path(req.path), req.format, dry_run=req.dry_run)
    except ImportError_ as exc:
        raise RpcError(INVALID_PARAMS, str(exc)) from None
    written = plan.written_paths()
    if written:
        publish(host, engine.apply_changes(written))
    return plan.to_dict()
