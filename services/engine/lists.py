"""The pinned, important and recent lists every query starts from, patched after a few changes.

Each is a pass over every memory (~12 ms for the three at 10,000 on a quiet
machine, 40 ms on a busy one), and the first query after an editor's save
paid it, or competed for the interpreter with the daemon's refresh doing it.
After a batch that changed a few memories, the lists are patched instead:
the memories that changed (found by identity and mtime against the snapshot
the lists were computed from) leave the lists and re-enter where their new
key puts them. A top-k list stays exact down to its last surviving entry
(nothing outside the list ranked above it, and the unchanged memories kept
their keys), so it is cut there; when that leaves fewer entries than asked
for, the lists are computed in full again. ``tests/test_query_lists.py``
checks patched == full after sequences of edits.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC

from ..model import Memory

LIST_SIZE = 80  # entries kept per ranked list: queries ask for <= 64 (warm_query_caches)
MAX_CHANGED = 64  # more changed memories than this: compute the lists in full


def changed_at(memory: Memory) -> float:
    """When a memory last changed: its ``modified`` field, else the file's mtime (seconds)."""
    when = memory.modified
    if when is not None:
        try:
            return when.timestamp() if when.tzinfo else when.replace(tzinfo=UTC).timestamp()
        except (OverflowError, ValueError, OSError):
            pass
    return float(memory.mtime or 0.0)


def _pinned(memory: Memory) -> bool:
    return memory.type == "rule" or memory.always_load


def _important(memory: Memory) -> bool:
    return not _pinned(memory) and memory.importance > 0


def _importance_key(memory: Memory) -> tuple[float, float, str]:
    return (-memory.importance, -(memory.mtime or 0.0), memory.id)


def _recent_key(memory: Memory) -> tuple[float, str]:
    return (-changed_at(memory), memory.id)


@dataclass(frozen=True)
class QueryLists:
    """The three lists for one store generation, and the snapshot they were computed from."""

    generation: int
    basis: dict[str, Memory]  # id -> the object the lists were computed from
    # Each basis memory's mtime then, in the basis's order: a touch (same bytes, new mtime) moves a
    # memory's mtime in place. An array, not a (memory, mtime) tuple per memory: 8 bytes instead of
    # ~64, 8 MiB at 100,000 memories (issue 16).
    mtimes: array[float]
    pinned: list[str]  # sorted ids of rules and always_load memories
    important: list[str]  # best first
    important_complete: bool  # every candidate is in the list (nothing below it was cut)
    recent: list[str]  # newest first
    recent_complete: bool
    size: int  # entries asked for the ranked lists


def compute(memories: Mapping[str, Memory], generation: int, size: int = LIST_SIZE) -> QueryLists:
    """The lists in full: one pass over every memory."""
    snapshot = dict(memories)
    pinned, important, recent = [], [], []
    for memory in snapshot.values():
        if _pinned(memory):
            pinned.append(memory.id)
        else:
            recent.append(memory)
            if memory.importance > 0:
                important.append(memory)
    return QueryLists(
        generation,
        snapshot,
        _mtimes(snapshot),
        sorted(pinned),
        [m.id for m in heapq.nsmallest(size, important, key=_importance_key)],
        len(important) <= size,
        [m.id for m in heapq.nsmallest(size, recent, key=_recent_key)],
        len(recent) <= size,
        size,
    )


def patch(previous: QueryLists, memories: Mapping[str, Memory], generation: int, size: int) -> QueryLists | None:
    """The lists for ``memories`` from ``previous``; None when they must be computed in full."""
    if size > previous.size:
        return None
    snapshot = dict(memories)
    old = previous.basis
    changed = {mid for mid, memory in snapshot.items() if old.get(mid) is not memory}
    changed.update(mid for mid in old if mid not in snapshot)
    if len(changed) > MAX_CHANGED:
        return None
    # A memory whose mtime moved in place (a touch: same bytes, new mtime) changed its keys too.
    changed.update(
        mid
        for (mid, memory), mtime in zip(old.items(), previous.mtimes, strict=True)
        if mid not in changed and _mtime(memory) != mtime
    )
    if len(changed) > MAX_CHANGED:
        return None
    entered = [snapshot[mid] for mid in changed if mid in snapshot]
    pinned = sorted({mid for mid in previous.pinned if mid not in changed} | {m.id for m in entered if _pinned(m)})
    important = _merge(
        previous.important, previous.important_complete, changed, entered, snapshot, _important, _importance_key
    )
    recent = _merge(previous.recent, previous.recent_complete, changed, entered, snapshot, _not_pinned, _recent_key)
    if important is None or recent is None:
        return None
    (important_ids, important_complete), (recent_ids, recent_complete) = important, recent
    if (len(important_ids) < size and not important_complete) or (len(recent_ids) < size and not recent_complete):
        return None
    # The unchanged keep the mtime recorded with them: one touched meanwhile is found by the next patch.
    basis: dict[str, Memory] = {}
    mtimes = array("d")
    for (mid, kept), mtime in zip(old.items(), previous.mtimes, strict=True):
        if mid in changed:
            now = snapshot.get(mid)
            if now is None:
                continue
            kept, mtime = now, _mtime(now)
        basis[mid] = kept
        mtimes.append(mtime)
    for mid in changed:
        if mid not in old and (entered_now := snapshot.get(mid)) is not None:
            basis[mid] = entered_now
            mtimes.append(_mtime(entered_now))
    return QueryLists(
        generation,
        basis,
        mtimes,
        pinned,
        important_ids[:size],
        important_complete and len(important_ids) <= size,
        recent_ids[:size],
        recent_complete and len(recent_ids) <= size,
        size,
    )


def _mtime(memory: Memory) -> float:
    return float(memory.mtime or 0.0)  # as the keys read it (None sorts as 0)


def _mtimes(basis: dict[str, Memory]) -> array[float]:
    """The basis memories' mtimes now, in the basis's order."""
    return array("d", [_mtime(memory) for memory in basis.values()])


def _not_pinned(memory: Memory) -> bool:
    return not _pinned(memory)


def _merge(
    ranked: list[str],
    complete: bool,
    changed: set[str],
    entered: list[Memory],
    memories: Mapping[str, Memory],
    admits: Callable[[Memory], bool],
    key: Callable[[Memory], tuple[float | str, ...]],
) -> tuple[list[str], bool] | None:
    """``ranked`` without the changed ids, with the changed memories ``admits`` takes, cut where still exact."""
    survivors = [memories[mid] for mid in ranked if mid not in changed]
    candidates = survivors + [m for m in entered if admits(m)]
    candidates.sort(key=key)
    if complete:
        return [m.id for m in candidates], True
    if not survivors:
        return None
    last = key(survivors[-1])  # anything outside the list ranks below this
    return [m.id for m in candidates if key(m) <= last], False
