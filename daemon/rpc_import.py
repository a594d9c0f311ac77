"""RPC method ``import``: plan (``dry_run``) or run an import of a path the caller names.

Registered ``write=True``: it runs behind the daemon's write lock like every other
write, re-indexes what it wrote, and publishes the change (router files, communities
and the web view follow). Only the local socket and the CLI's in-process backend
reach it: the path is read with the daemon user's rights, which are the caller's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxos.services import schemas

from .rpc import INVALID_PARAMS, RpcError, RpcRegistry

if TYPE_CHECKING:  # pragma: no cover
    from .context import DaemonContext


def import_path(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """What an import of ``path`` does (``dry_run: true``: the plan only) and what it did."""
    from ctxos.services.importers import ImportError_, run_import

    engine = ctx.engine
    try:
        plan = run_import(
            engine.root, engine.store, engine.config, params["path"], params.get("format"), dry_run=params["dry_run"]
        )
    except ImportError_ as exc:
        raise RpcError(INVALID_PARAMS, str(exc)) from None
    written = plan.written_paths()
    if written:
        summary = engine.apply_changes(written)
        if summary.changed:
            ctx.publish_change(summary)
    return plan.to_dict()


def register(registry: RpcRegistry) -> None:
    registry.register("import", import_path, write=True, schema=schemas.ImportRequest)
