"""History a person can read and revert: git commits or a journal per write (docs/history.md).

- ``actor.py``: who is writing (client and tool), carried from the front end to the hook;
- ``recorder.py``: the ``write_gate`` hooks that commit (git) or journal each write;
- ``gitrepo.py`` / ``journal.py``: the two stores;
- ``versions.py``: listing versions, their text, diffs, and revert through the gate;
- ``sync.py``: the optional scheduled ``git pull --rebase`` / ``push`` for a team workspace.

The functions below are the Engine-facing API the RPC methods call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .actor import Actor, acting, clean_client, current_actor
from .recorder import HistoryRecorder, install, recorder_for, scope, uninstall
from .versions import HistoryError, list_versions, revert_memory, unified_diff, version_text

__all__ = [
    "Actor",
    "HistoryError",
    "HistoryRecorder",
    "acting",
    "clean_client",
    "current_actor",
    "install",
    "memory_history",
    "memory_version",
    "recorder_for",
    "revert",
    "scope",
    "uninstall",
]


def _recorder(engine: Any) -> HistoryRecorder:
    recorder = recorder_for(engine.root)
    if recorder is None:  # an engine that was never loaded through Engine.load
        recorder = install(engine.root, lambda: engine.config)
    return recorder


def _resolve(engine: Any, ref: str) -> tuple[str, str | None]:
    """(memory id, current path) for an id, or a workspace-relative path (an archived file, say)."""
    memory = engine.store.get(ref)
    if memory is not None:
        return memory.id, memory.rel_path
    if "/" in ref and ref.endswith(".md") and not Path(ref).is_absolute() and ".." not in ref.split("/"):
        from .recorder import frontmatter_fields

        path = Path(engine.root) / ref
        mid = None
        if path.is_file():
            mid, _ = frontmatter_fields(path.read_text(encoding="utf-8", errors="replace"))
        return mid or Path(ref).stem, ref
    if recorder_for(engine.root) is not None and _recorder(engine).mode() == "journal":
        return ref, None  # a memory gone from disk: the journal still knows it by id
    raise HistoryError(f"no memory with id {ref!r} (for an archived memory, give its _archive/ path)")


def memory_history(engine: Any, ref: str) -> dict[str, Any]:
    """``{"id", "path", "mode", "versions": [...]}``, newest first."""
    recorder = _recorder(engine)
    memory_id, rel_path = _resolve(engine, ref)
    mode, versions = list_versions(recorder, memory_id, rel_path)
    return {
        "id": memory_id,
        "path": rel_path,
        "mode": mode,
        "versions": [v.to_dict() for v in versions],
        "count": len(versions),
    }


def memory_version(engine: Any, ref: str, n: int) -> dict[str, Any]:
    """Version ``n``'s text, its diff against the version before it and against the file now."""
    recorder = _recorder(engine)
    memory_id, rel_path = _resolve(engine, ref)
    _, versions = list_versions(recorder, memory_id, rel_path)
    text = version_text(recorder, memory_id, versions, n)
    older = [v for v in versions if v.n < n]
    previous = ""
    if older:
        try:
            previous = version_text(recorder, memory_id, versions, older[0].n)
        except HistoryError:
            previous = ""
    current = ""
    if rel_path:
        try:
            current = (Path(engine.root) / rel_path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            current = ""
    chosen = next(v for v in versions if v.n == n)
    return {
        "id": memory_id,
        "path": rel_path,
        "n": n,
        "version": chosen.to_dict(),
        "text": text,
        "diff": unified_diff(previous, text, f"version {older[0].n}" if older else "(before)", f"version {n}"),
        "diff_to_current": unified_diff(text, current, f"version {n}", "now"),
    }


def revert(
    engine: Any, ref: str, n: int, expected_version: int | None = None, expected_checksum: str | None = None
) -> dict[str, Any]:
    """Restore version ``n`` of a memory through the write gate; indexed before it returns."""
    from .. import writes

    recorder = _recorder(engine)
    memory = engine.store.get(ref)
    if memory is None:
        raise HistoryError(
            f"no memory with id {ref!r}; revert works on memories the workspace serves "
            "(unarchive an archived one first)"
        )
    _, versions = list_versions(recorder, memory.id, memory.rel_path)
    text = version_text(recorder, memory.id, versions, n)
    with writes.write_lock(engine.root):
        rel, changed = revert_memory(
            engine.root,
            engine.store,
            engine.config,
            memory,
            text,
            n,
            expected_version=expected_version,
            expected_checksum=expected_checksum,
        )
    engine.apply_changes([rel])
    now = engine.store.get_by_path(rel)
    return {
        "id": memory.id,
        "path": rel,
        "reverted_to": n,
        "changed": changed,
        "version": now.version if now is not None else None,
    }
