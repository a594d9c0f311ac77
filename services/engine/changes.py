"""Keeping the store and index in step with the files after the engine is loaded.

- ``apply_changes`` handles the paths a watcher reports (files or folders,
  present or gone); a file whose mtime and size are unchanged is not even read,
  and one whose checksum is unchanged is not re-indexed;
- ``reconcile`` does the same for the whole tree (cheap: one stat per file).

The store's entries are replaced whole and the generation moves on once per
batch, so a query running beside a batch sees each memory before or after it.
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections.abc import Iterable
from pathlib import Path

from ..index_build import keep_query_values
from ..model import InvalidFile, Memory
from ..workspace import (
    display_name,
    is_ignored_dir,
    is_memory_path,
    iter_memory_paths,
    load_memory,
    relative_path,
)
from .state import EngineState
from .summary import ChangeSummary


class ChangeApplication(EngineState):
    """Apply the paths that changed on disk (or the whole tree) to the store, index and embeddings."""

    def _rel(self, path: Path | str) -> str | None:
        candidate = Path(path)
        if candidate.is_absolute():
            # watcher paths may come through a symlinked root; compare resolved forms too
            rel = relative_path(self.root, candidate)
            if rel is None:
                try:
                    rel = relative_path(self.root, candidate.resolve())
                except OSError:
                    rel = None
            return rel
        return relative_path(self.root, candidate)

    def _unchanged_on_disk(self, rel: str) -> bool:
        """True when the file's mtime and size match what the store holds (no read needed)."""
        memory = self.store.by_path.get(rel)
        if memory is None:
            return False
        try:
            stat = os.stat(self.root / rel)
        except OSError:
            return False
        return stat.st_mtime == memory.mtime and stat.st_size == memory.size and memory.size > 0

    def _known_path(self, rel: str) -> bool:
        """Is ``rel`` a file the store holds (valid, invalid or shadowed)? O(1), unlike known_paths()."""
        store = self.store
        return rel in store.by_path or rel in store.invalid or store.checksum_of(rel) is not None

    def _apply_file(self, rel: str, changed_ids: set[str], touched: set[str]) -> bool:
        """Bring one path up to date in the store; True if anything changed.

        One odd path (a name the OS rejects, a loop, a race) never blocks the batch:
        it is recorded as an invalid file with the reason and the rest goes on.
        """
        try:
            return self._apply_file_unguarded(rel, changed_ids, touched)
        except (OSError, RuntimeError, ValueError) as exc:
            reason = f"cannot be read: {getattr(exc, 'strerror', None) or exc}"
            odd = InvalidFile(display_name(rel), reason)
            if self.store.invalid.get(rel) == odd:
                return False
            changed_ids.update(self.store.put_invalid(odd))
            touched.add(rel)
            return True

    def _apply_file_unguarded(self, rel: str, changed_ids: set[str], touched: set[str]) -> bool:
        store = self.store
        known = self._known_path(rel)
        path = self.root / rel
        if not is_memory_path(rel) or not (path.exists() or path.is_symlink()):
            if known:
                changed_ids.update(store.remove_path(rel))
                touched.add(rel)
                return True
            return False
        if self._unchanged_on_disk(rel):
            return False
        loaded = load_memory(self.root, rel, self.config)
        if loaded is None:
            if known:
                changed_ids.update(store.remove_path(rel))
                touched.add(rel)
                return True
            return False
        if isinstance(loaded, Memory):
            if store.checksum_of(rel) == loaded.checksum and rel in store.by_path:
                # same bytes, new mtime (touch): keep the entry but remember the new stat
                store.by_path[rel].mtime = loaded.mtime
                return False
            changed_ids.update(store.put(loaded))
        else:
            if store.invalid.get(rel) == loaded:
                return False
            changed_ids.update(store.put_invalid(loaded))
        touched.add(rel)
        return True

    def _walk_folder(self, rel_dir: str) -> list[str]:
        folder = self.root / rel_dir
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
            rel_here = relative_path(self.root, dirpath) or ""
            dirnames[:] = sorted(d for d in dirnames if not is_ignored_dir(f"{rel_here}/{d}".lstrip("/")))
            for name in sorted(filenames):
                rel = f"{rel_here}/{name}".lstrip("/")
                if is_memory_path(rel):
                    found.append(rel)
        return found

    def _finish(self, changed_ids: set[str], touched: set[str], unchanged: int) -> ChangeSummary:
        """Push store changes for ``touched`` paths and ``changed_ids`` into the index."""
        paths = set(touched)
        for mid in changed_ids:
            memory = self.store.get(mid)
            if memory is not None:
                paths.add(memory.rel_path)
        upserts = [self.store.by_path[p] for p in sorted(paths) if p in self.store.by_path]
        removals = [p for p in sorted(paths) if p not in self.store.by_path]
        if upserts or removals:
            self._require_index().update(upserts, removals)
        if changed_ids or touched:
            self._bump()
        updated = sorted(mid for mid in changed_ids if mid in self.store.memories)
        removed = sorted(mid for mid in changed_ids if mid not in self.store.memories)
        if self.vectors is not None and (updated or removed):
            self.vectors.update([self.store.memories[mid] for mid in updated], removed)
        # indexed and embedded: their text is read back from the files from now on
        self.store.compact(keep_query_values)
        invalid = [self.store.invalid[p] for p in sorted(touched) if p in self.store.invalid]
        return ChangeSummary(
            updated=updated, removed=removed, invalid=invalid, unchanged=unchanged, paths=sorted(touched)
        )

    def apply_changes(self, paths: Iterable[Path | str]) -> ChangeSummary:
        """Re-read the given files or folders (absolute or workspace-relative); drop the gone ones.

        Cost is per given path, not per known path: the prefix scan over all
        known paths (for a folder that was deleted or moved away) runs only
        for a path that no longer exists and is not itself a known file, and
        the known-path list it scans is built once per call.
        """
        self._require_loaded()
        changed_ids: set[str] = set()
        touched: set[str] = set()
        unchanged = 0
        known_sorted: list[str] | None = None

        def known_under(prefix: str) -> list[str]:
            nonlocal known_sorted
            if known_sorted is None:
                known_sorted = sorted(self.store.known_paths())
            start = bisect.bisect_left(known_sorted, prefix)
            out = []
            for item in itertools.islice(known_sorted, start, None):
                if not item.startswith(prefix):
                    break
                out.append(item)
            return out

        for raw in self.stop_flag.checked(paths, 256):  # a shutdown stops between files (stop_flag.py)
            rel = self._rel(raw)
            if rel is None:
                continue
            target = self.root / rel
            if target.is_dir() and not target.is_symlink():
                if is_ignored_dir(rel):
                    continue
                present = set(self._walk_folder(rel))
                gone = set(known_under(rel.rstrip("/") + "/")) - present
                for item in self.stop_flag.checked(sorted(present | gone), 256):
                    if self._apply_file(item, changed_ids, touched):
                        continue
                    unchanged += 1
                continue
            if not (target.exists() or target.is_symlink()) and not self._known_path(rel):
                under = known_under(rel.rstrip("/") + "/")
                if under:
                    for item in self.stop_flag.checked(under, 256):  # a folder was deleted or moved away
                        self._apply_file(item, changed_ids, touched)
                    continue
            if not self._apply_file(rel, changed_ids, touched):
                unchanged += 1
        return self._finish(changed_ids, touched, unchanged)

    def merge_index_segments(self) -> bool:
        """Merge the index's small segments if commits left them due (``defer_index_merges``); True if merged.

        The daemon calls it on its write thread after a change batch is searchable,
        so no save waits for the merge.
        """
        index = self.index
        return index is not None and index.merge_small_segments()

    def reconcile(self) -> ChangeSummary:
        """Compare every file with the store (stat first) and the store with the index; apply the difference."""
        self._require_loaded()
        changed_ids: set[str] = set()
        touched: set[str] = set()
        unchanged = 0
        problems: list[InvalidFile] = []
        present = set(iter_memory_paths(self.root, problems))
        odd = {p.rel_path: p for p in problems}  # folders that cannot be listed stay in doctor
        for rel in self.stop_flag.checked(sorted(present | self.store.known_paths()), 256):
            if rel in odd:
                continue
            if self._apply_file(rel, changed_ids, touched):
                continue
            unchanged += 1
        for rel, problem in odd.items():
            if self.store.invalid.get(rel) != problem:
                changed_ids.update(self.store.put_invalid(problem))
                touched.add(rel)
        summary = self._finish(changed_ids, touched, unchanged)
        if self._index_catch_up(summary)[1]:  # the index drifted from the store (a crash, a lost commit)
            self._bump()
        if self.vectors is not None:
            self.vectors.sync(list(self.store.memories.values()))
        self.store.compact(keep_query_values)
        return summary
