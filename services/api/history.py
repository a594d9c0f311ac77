"""Use cases for history: ``history`` (versions of a memory), ``history_version`` (one version's text and
diffs) and ``revert`` (restore a version through the write gate, as a new version).

``revert`` is a write: the host runs it behind its write lock, history attributes it
to the calling client like any write, and the change is published.
"""

from __future__ import annotations

from typing import Any

from .. import schemas
from ..engine import ChangeSummary
from ..history import HistoryError, memory_history, memory_version
from ..history import revert as revert_version
from ..jsonrpc import NOT_FOUND, RpcError
from ..responses import HistoryResponse, RevertResponse, VersionResponse, answers
from ..write_gate import WriteRefused
from .host import Host
from .writes import refused


@answers(HistoryResponse)
def history(host: Host, req: schemas.MemoryRefRequest) -> dict[str, Any]:
    """A memory's versions, newest first: number, when, who, tool, summary (git commits or the journal)."""
    try:
        return memory_history(host.engine, req.id.strip())
    except HistoryError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None


@answers(VersionResponse)
def history_version(host: Host, req: schemas.HistoryVersionRequest) -> dict[str, Any]:
    """One version's full text, its diff against the version before it and against the file now."""
    try:
        return memory_version(host.engine, req.id.strip(), req.n)
    except HistoryError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None


@answers(RevertResponse)
def revert(host: Host, req: schemas.RevertRequest) -> dict[str, Any]:
    """Restore version ``to`` of a memory as a new version, through the write gate (protected: refused)."""
    try:
        result = revert_version(
            host.engine,
            req.id.strip(),
            req.to,
            expected_version=req.expected_version,
            expected_checksum=req.expected_checksum,
        )
    except HistoryError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None
    except WriteRefused as exc:
        raise refused(exc) from None
    if result["changed"]:
        host.publish_change(ChangeSummary(updated=[result["id"]], paths=[result["path"]]))
    return result
