"""RPC methods for history: ``history`` (versions of a memory), ``history_version`` (one version's
text and diffs) and ``revert`` (restore a version through the write gate).

Thin adapters over ``ctxos.services.history``; ``revert`` is a write (behind the
daemon's write lock), attributed like any write to the calling client, and
publishes the change so the index, router files and the web page follow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxos.services import schemas

from .rpc import NOT_FOUND, WRITE_REFUSED, RpcError, RpcRegistry

if TYPE_CHECKING:  # pragma: no cover
    from .context import DaemonContext


def history(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """A memory's versions, newest first: number, when, who, tool, summary (git commits or the journal)."""
    from ctxos.services.history import HistoryError, memory_history

    try:
        return memory_history(ctx.engine, params["id"].strip())
    except HistoryError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None


def history_version(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """One version's full text, its diff against the version before it and against the file now."""
    from ctxos.services.history import HistoryError, memory_version

    try:
        return memory_version(ctx.engine, params["id"].strip(), params["n"])
    except HistoryError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None


def revert(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Restore version ``to`` of a memory as a new version, through the write gate (protected: refused)."""
    from ctxos.services.engine import ChangeSummary
    from ctxos.services.history import HistoryError
    from ctxos.services.history import revert as revert_version
    from ctxos.services.writes import WriteConflict, WriteRefused

    ref, to = params["id"].strip(), params["to"]
    expected, checksum = params.get("expected_version"), params.get("expected_checksum")
    try:
        result = revert_version(ctx.engine, ref, to, expected_version=expected, expected_checksum=checksum)
    except HistoryError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None
    except WriteRefused as exc:
        raise RpcError(
            WRITE_REFUSED, str(exc), {"reason": "conflict" if isinstance(exc, WriteConflict) else "refused"}
        ) from None
    if result["changed"]:
        ctx.publish_change(ChangeSummary(updated=[result["id"]], paths=[result["path"]]))
    return result


def register(registry: RpcRegistry) -> None:
    registry.register("history", history, schema=schemas.MemoryRefRequest)
    registry.register("history_version", history_version, schema=schemas.HistoryVersionRequest)
    registry.register("revert", revert, write=True, schema=schemas.RevertRequest)
