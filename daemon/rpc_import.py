"""RPC method ``import``: plan (``dry_run``) or run an import of a path the caller names.

Registered ``write=True``: it runs behind the daemon's write lock like every other
write, re-indexes what it wrote, and publishes the change (router files, communities
and the web view follow). Only the local socket and the CLI's in-process backend
reach it: the path is read with the daemon user's rights, which are the caller's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .rpc import INVALID_PARAMS, RpcError, RpcRegistry, check_known, param

if TYPE_CHECKING:  # pragma: no cover
    from .context import DaemonContext


def import_path(ctx: "DaemonContext", params: dict[str, Any]) -> dict[str, Any]:
    """What an import of ``path`` does (``dry_run: true``: the plan only) and what it did."""
    from ctxos.services.importers import ImportError_, run_import
    check_known(params, {"path", "format", "dry_run"})
    engine = ctx.engine
    try:
        plan = run_import(engine.root, engine.store, engine.config, param(params, "path", str),
                          param(params, "format", str, None), dry_run=param(params, "dry_run", bool, False))
    except ImportError_ as exc:
        raise RpcError(INVALID_PARAMS, str(exc)) from None
    written = plan.written_paths()
    if written:
        summary = engine.apply_changes(written)
        if summary.changed:
            ctx.publish_change(summary)
    return plan.to_dict()


def register(registry: RpcRegistry) -> None:
    registry.register("import", import_path, write=True)
