"""RPC methods for history: ``history`` (versions of a memory), ``history_version`` (one version's
text and diffs) and ``revert`` (restore a version through the write gate).

Thin adapters over ``ctxos.services.history``; ``revert`` is a write (behind the
daemon's write lock), attributed like any write to the calling client, and
publishes the change so the index, router files and the web page follow.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .rpc import INVALID_PARAMS, NOT_FOUND, WRITE_REFUSED, RpcError, RpcRegistry, check_known, param

if TYPE_CHECKING:  # pragma: no cover
    from .context import DaemonContext


def _ref(params: dict[str, Any]) -> str:
    ref = param(params, "id", str).strip()
    if not ref:
        raise RpcError(INVALID_PARAMS, "parameter 'id' must not be empty")
    return ref


def _version_number(params: dict[str, Any], name: str) -> int:
    n = param(params, name, int)
    if n < 1:
        raise RpcError(INVALID_PARAMS, f"parameter '{name}' must be a version number (1 or more)")
    return n


def history(ctx: "DaemonContext", params: dict[str, Any]) -> dict[str, Any]:
    """A memory's versions, newest first: number, when, who, tool, summary (git commits or the journal)."""
    from ctxos.services.history import HistoryError, memory_history
    check_known(params, {"id"})
    try:
        return memory_history(ctx.engine, _ref(params))
    except HistoryError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None


def history_version(ctx: "DaemonContext", params: dict[str, Any]) -> dict[str, Any]:
    """One version's full text, its diff against the version before it and against the file now."""
    from ctxos.services.history import HistoryError, memory_version
    check_known(params, {"id", "n"})
    try:
        return memory_version(ctx.engine, _ref(params), _version_number(params, "n"))
    except HistoryError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None


def revert(ctx: "DaemonContext", params: dict[str, Any]) -> dict[str, Any]:
    """Restore version ``to`` of a memory as a new version, through the write gate (protected: refused)."""
    from ctxos.services.engine import ChangeSummary
    from ctxos.services.history import HistoryError
    from ctxos.services.history import revert as revert_version
    from ctxos.services.writes import WriteConflict, WriteRefused
    check_known(params, {"id", "to", "expected_version", "expected_checksum"})
    ref = _ref(params)
    to = _version_number(params, "to")
    expected = param(params, "expected_version", int, None)
    checksum = param(params, "expected_checksum", str, None)
    try:
        result = revert_version(ctx.engine, ref, to, expected_version=expected, expected_checksum=checksum)
    except HistoryError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None
    except WriteRefused as exc:
        raise RpcError(WRITE_REFUSED, str(exc),
                       {"reason": "conflict" if isinstance(exc, WriteConflict) else "refused"}) from None
    if result["changed"]:
        ctx.publish_change(ChangeSummary(updated=[result["id"]], paths=[result["path"]]))
    return result


def register(registry: RpcRegistry) -> None:
    registry.register("history", history)
    registry.register("history_version", history_version)
    registry.register("revert", revert, write=True)
