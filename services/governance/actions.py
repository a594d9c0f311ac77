"""What a person (or the scheduler) does about findings: dismiss one, archive, unarchive, set importance.

Every change to a memory file goes through the write gate (``writes.py``); the
engine then applies the changed paths, and the ``ActionResult`` carries its
``ChangeSummary`` for change listeners.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..model import Memory
from .analysis import _utcnow, scratch_expired
from .dismissals import DISMISS_LOCK, load_dismissed, save_dismissed, subject_checksums
from .findings import GovernanceSettings
from .report import governance_report, memory_snapshot

if TYPE_CHECKING:
    from ..engine import ChangeSummary
    from ..engine_view import EngineView

log = logging.getLogger(__name__)


class GovernanceError(Exception):
    """A governance action that cannot be done (unknown id or fingerprint); the message says why."""


def dismiss_finding(engine: EngineView, fingerprint: str) -> dict[str, Any]:
    """Hide a finding until one of its files changes (its checksums are stored with it)."""
    report = governance_report(engine, include_dismissed=True, save=False)
    finding = next((f for f in report.findings if f.fingerprint == fingerprint), None)
    if finding is None:
        raise GovernanceError(f"no current finding with fingerprint {fingerprint!r} (see: ctxos governance)")
    checksum_of = {m.id: m.checksum for m in memory_snapshot(engine)}
    with DISMISS_LOCK:
        dismissed = load_dismissed(engine.root)
        dismissed[fingerprint] = {
            "kind": finding.kind,
            "subjects": finding.subjects(),
            "checksums": subject_checksums(engine.root, finding, checksum_of),
            "dismissed_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "reason": finding.reason,
        }
        save_dismissed(engine.root, dismissed)
    return {"dismissed": fingerprint, "kind": finding.kind, "ids": finding.ids, "paths": finding.paths}


@dataclass
class ActionResult:
    """What a governance action did (``data``), and the engine's ChangeSummary for change listeners."""

    data: dict[str, Any]
    summary: ChangeSummary | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)


def archive(engine: EngineView, memory_id: str) -> ActionResult:
    """Move a memory to ``_archive/<its path>`` (excluded from context; ``unarchive`` undoes it)."""
    from ..writes import archive_memory

    src, dst = archive_memory(engine.root, engine.store, memory_id)
    summary = engine.apply_changes([src])
    return ActionResult({"archived": memory_id, "from": src, "to": dst}, summary)


def find_archived(engine: EngineView, ref: str) -> str:
    """The ``_archive/...`` path of an archived memory named by id, file stem, or path."""
    from ..ontology import ARCHIVE_FOLDER
    from ..workspace import load_memory
    from ..writes import list_archived

    paths = list_archived(engine.root)
    wanted = ref if ref.startswith(ARCHIVE_FOLDER + "/") else f"{ARCHIVE_FOLDER}/{ref}"
    if wanted in paths:
        return wanted
    for rel in paths:
        loaded = load_memory(engine.root, rel, engine.config)
        if isinstance(loaded, Memory) and loaded.id == ref:
            return rel
    stems = [rel for rel in paths if rel.rsplit("/", 1)[-1].rsplit(".", 1)[0] == ref]
    if len(stems) == 1:
        return stems[0]
    raise GovernanceError(f"no archived memory {ref!r} under {ARCHIVE_FOLDER}/")


def unarchive(engine: EngineView, ref: str) -> ActionResult:
    """Move an archived memory back to where it was."""
    from ..writes import unarchive_memory

    src, dst = unarchive_memory(engine.root, find_archived(engine, ref))
    summary = engine.apply_changes([dst])
    memory = engine.store.get_by_path(dst)
    return ActionResult({"unarchived": memory.id if memory else ref, "from": src, "to": dst}, summary)


def set_importance(engine: EngineView, memory_id: str, value: float) -> ActionResult:
    """Rewrite a memory's ``importance`` in its frontmatter (atomic; version bumped)."""
    from ..writes import set_importance as write_importance

    rel = write_importance(engine.root, engine.store, engine.config, memory_id, value)
    summary = engine.apply_changes([rel])
    return ActionResult({"id": memory_id, "importance": round(float(value), 3), "path": rel}, summary)


def expire_scratch(engine: EngineView, now: datetime | None = None) -> list[dict[str, Any]]:
    """Archive scratch memories past ``governance.scratch_ttl_days`` (the scheduled scratch expiry)."""
    from ..writes import WriteRefused, archive_memory

    settings = GovernanceSettings.from_config(engine.config)
    done, moved = [], []
    for memory in scratch_expired(memory_snapshot(engine), now or _utcnow(), settings.scratch_ttl_days):
        # Between two moves: at SIGTERM the files already moved stay moved (each move is whole), their
        # history is still recorded, and the next start's scan takes them out of the store and index.
        engine.stop_flag.check()
        try:
            src, dst = archive_memory(engine.root, engine.store, memory.id)
        except WriteRefused as exc:  # changed or gone meanwhile: the next run sees it again
            log.warning("scratch expiry: %s", exc)
            continue
        moved.append(src)
        done.append({"archived": memory.id, "from": src, "to": dst})
    if moved:
        # One index update for the whole run: thousands of expired notes cost one commit, not one each.
        engine.apply_changes(moved)
    return done
