"""RPC methods that bring files in: ``inbox`` (list), ``promote`` (inbox file → memory).

Thin adapters over ``services/inbox.py``, like the other method modules.
``promote`` is registered ``write=True``: it runs behind the daemon's write lock,
so it is serialised with every other write, and it publishes the engine's change
summary (router files, communities and the web view follow).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxos.services import schemas

from .rpc import WRITE_REFUSED, RpcError, RpcRegistry

if TYPE_CHECKING:  # pragma: no cover
    from .context import DaemonContext


def inbox(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Files waiting in ``inbox/``, each with the one line it would get (or why it cannot be promoted)."""
    from ctxos.services.inbox import list_inbox

    items = list_inbox(ctx.engine.root, ctx.engine.config)
    return {"items": [item.to_dict() for item in items], "count": len(items)}


def promote(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Move an inbox file into the ontology folder of ``type``, its frontmatter filled in (write gate)."""
    from ctxos.services.inbox import promote as run
    from ctxos.services.write_gate import WriteRefused

    name, kind = params["path"], params["type"]
    engine = ctx.engine
    try:
        result = run(engine.root, engine.store, engine.config, name, kind, memory_id=params.get("id"))
    except WriteRefused as exc:
        raise RpcError(WRITE_REFUSED, str(exc), {"reason": "refused"}) from None
    summary = engine.apply_changes([result.path, result.source])
    if summary.changed:
        ctx.publish_change(summary)
    return result.to_dict()


def register(registry: RpcRegistry) -> None:
    registry.register("inbox", inbox, schema=schemas.NoParams)
    registry.register("promote", promote, write=True, schema=schemas.PromoteRequest)
