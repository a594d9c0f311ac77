"""``Engine``: everything the engine knows about one workspace, behind one facade.

The daemon, the in-process CLI backend, the MCP server and the benchmarks all
hold an ``Engine``. It owns the configuration, the in-memory store, the Whoosh
index, the access log, the token counter and the (lazily rebuilt) link graph,
and keeps them consistent with the files:

- ``load`` scans every file, opens the index (recreating it when it is missing,
  corrupt or of an older schema) and indexes only what differs;
- ``apply_changes`` handles the paths a watcher reports (files or folders,
  present or gone); a file whose mtime and size are unchanged is not even read,
  and one whose checksum is unchanged is not re-indexed;
- ``reconcile`` does the same for the whole tree (cheap: one stat per file).

No threads here (see docs/ARCHITECTURE.md): the daemon serialises mutating calls;
queries may run beside one writer. The store replaces dict entries whole, the
index readers see the last commit, and derived caches (graph, pinned ids) are
rebuilt from a snapshot when the store's generation moves on.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

from . import parse_cache, writes
from .access_log import AccessLog
from .config import Config, load_config
from .graph import LinkGraph, build_graph
from .index import MemoryIndex, analyze, heading_text
from .model import ContextResult, InvalidFile, Memory
from .progress import EMBEDDING, INDEXING, READING, WRITING, Progress, ProgressCallback
from .query import execute_context_query as _execute_context_query
from .query import score_query
from .render import catalog_line, memory_block
from .semantic import EmbeddingScorer, ModelError, PrototypeClassifier, VectorIndex, load_model
from .signals import KeywordOverlapScorer, SemanticScorer
from .skill_lookup import SkillMatch, find_skill
from .store import MemoryStore
from .tokens import TokenCounter, default_counter, get_counter
from .workspace import (
    display_name,
    is_ignored_dir,
    is_memory_path,
    iter_memory_paths,
    load_memories,
    load_memory,
    relative_path,
    scan_workspace,
    state_dir,
)
from .write_gate import remove_orphan_temps

log = logging.getLogger(__name__)

TOKEN_CACHE_MAX = 200_000
# A cold build reads and indexes in chunks, committing each, so queries find the files
# indexed so far: a small first chunk (answers within a second or two), then doubling
# (few segments: 500, 1,000, 2,000, 4,000, 4,000 ... at 10,000 memories).
WARM_LIST_SIZE = 64  # warm_query_caches: important/recent lists this long (queries ask for <= 40)
COLD_FIRST_CHUNK = 500
COLD_MAX_CHUNK = 4_000
# A version number served with two different contents (a person edited without bumping
# ``version``): ``expected_version`` alone no longer says which one the caller read.
AMBIGUOUS_VERSION = "ambiguous"


@dataclass
class ChangeSummary:
    """What a load / apply_changes / reconcile / rebuild changed.

    ``updated`` and ``removed`` are memory ids (a promoted duplicate counts as
    updated); ``paths`` are the workspace-relative files that were looked at
    and differed; ``invalid`` are files now skipped, with reasons.
    """

    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    invalid: list[InvalidFile] = field(default_factory=list)
    unchanged: int = 0
    paths: list[str] = field(default_factory=list)
    index_recovered: str | None = None

    @property
    def changed(self) -> bool:
        return bool(self.updated or self.removed or self.invalid or self.paths)

    def to_dict(self) -> dict[str, Any]:
        return {
            "updated": list(self.updated),
            "removed": list(self.removed),
            "invalid": [f.to_dict() for f in self.invalid],
            "unchanged": self.unchanged,
            "paths": list(self.paths),
            "changed": self.changed,
            "index_recovered": self.index_recovered,
        }


def _changed_at(memory: Memory) -> float:
    """When a memory last changed: its ``modified`` field, else the file's mtime (seconds)."""
    when = memory.modified
    if when is not None:
        try:
            return when.timestamp() if when.tzinfo else when.replace(tzinfo=UTC).timestamp()
        except (OverflowError, ValueError, OSError):
            pass
    return float(memory.mtime or 0.0)


class Engine:
    """The facade that holds all state for one workspace (see docs/ARCHITECTURE.md)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser().resolve()
        self.config: Config = Config()
        self._config_ok = False  # a _config.yaml that parsed and validated has been loaded
        self.store = MemoryStore()
        self.state_dir: Path | None = None
        self.index: MemoryIndex | None = None  # type: ignore[assignment]
        self.access_log: AccessLog | None = None  # type: ignore[assignment]
        self.counter: TokenCounter = default_counter()
        self.semantic: SemanticScorer = KeywordOverlapScorer()
        self.vectors: VectorIndex | None = None  # embeddings (semantic.model), None for 'lexical'
        self._semantic_setting: str | None = None
        self._semantic_problem: str | None = None
        self.problems: list[str] = []
        self._generation = 0
        self._derived_lock = threading.Lock()
        self._graph: tuple[int, LinkGraph] | None = None
        # The daemon sets this: queries then use the last built graph and the
        # daemon calls refresh_graph() after each change batch (see graph()).
        self.allow_stale_graph = False
        self._pinned: tuple[int, list[str]] | None = None
        self._important: tuple[int, list[str]] | None = None
        self._recent: tuple[int, list[str]] | None = None
        self._classifier: PrototypeClassifier | None = None
        self._communities: tuple[int, Mapping[str, int] | None] | None = None
        self._community_override: Mapping[str, int] | None = None
        self._token_cache: dict[tuple[str, str, str], int] = {}
        self._heading_cache: dict[tuple[str, str], frozenset[str]] = {}
        self._loaded = False
        # (id, version) -> checksum of every version this engine served (get_memory,
        # resources, context): expected_version alone then detects an unversioned edit.
        self._served: dict[tuple[str, int], set[str]] = {}
        self._served_lock = threading.Lock()
        self.removed_temp_files: list[str] = []
        self.history: Any = None  # the workspace's HistoryRecorder once loaded (services/history)
        # Long jobs (cold build, reindex): the current step, replaced whole (status reads it from
        # another thread), and a callback for each new one (the CLI's bar, the daemon's readiness).
        self.progress: Progress | None = None
        self.on_progress: ProgressCallback | None = None
        self.parse_cache_hits = 0  # files a warm load took from the parse cache (services/parse_cache)
        # How a cold build parses chunks of files: ``map`` here; the daemon and the CLI pass a
        # process pool's ``map`` so parsing runs on another core while this thread indexes.
        self.parse_map: Callable[..., Iterable[list[Memory | InvalidFile]]] = map

    # --- lifecycle -----------------------------------------------------------------
    def load(self) -> ChangeSummary:
        """Read config, scan files, open (or recover) the index, index what differs."""
        self.reload_config()
        self.state_dir = state_dir(self.root)
        if self.history is None:  # every write from here on becomes a commit or a journal entry
            from .history import install

            self.history = install(self.root, lambda: self.config)
        try:
            with writes.write_lock(self.root):
                self.removed_temp_files = remove_orphan_temps(self.root)
        except OSError as exc:
            log.warning("could not clean orphaned temp files: %s", exc)
        if self.removed_temp_files:
            log.info(
                "removed %d orphaned temp file(s) left by a crash: %s",
                len(self.removed_temp_files),
                ", ".join(self.removed_temp_files[:10]),
            )
        if self.index is None:
            self.index = MemoryIndex(self.state_dir / "index")
        fresh = self.index.open()
        summary = ChangeSummary(index_recovered=self.index.recovered)
        if self.access_log is None:
            self.access_log = AccessLog(self.state_dir, float(self.config.get("access_log.frequency_window_days", 30)))
        self.access_log.open()
        try:
            if fresh:
                self._cold_build(summary)
            else:
                self.store = MemoryStore.from_items(self._scan_reusing_cache())
                self._bump()
                summary = self._sync_index(summary)
            summary.invalid = self.store.invalid_files()
            self._configure_semantic()
            if self.vectors is not None:
                current = self.progress
                self._set_progress(
                    Progress(
                        current.job if current else "load",
                        EMBEDDING,
                        0,
                        len(self.store),
                        partial=fresh,
                        started=current.started if current else time.time(),
                    )
                )
                self.vectors.sync(list(self.store.memories.values()))
        finally:
            self._set_progress(None)
        self._loaded = True
        return summary

    def _set_progress(self, progress: Progress | None) -> None:
        self.progress = progress
        if progress is not None and self.on_progress is not None:
            try:
                self.on_progress(progress)
            except Exception:  # noqa: BLE001 - a display must never break a build
                log.exception("progress callback failed")

    def _reporter(
        self, job: str, phase: str, total: int | None = None, base: int = 0, partial: bool = False
    ) -> Callable[..., None]:
        """A ``progress(done[, total])`` callback that publishes ``Progress(job, phase, ...)``."""
        current = self.progress
        started = current.started if current is not None and current.job == job else time.time()

        def report(done: int, of: int | None = None) -> None:
            self._set_progress(
                Progress(job, phase, base + done, of if of is not None else (total or 0), partial, started)
            )

        return report

    def _scan_reusing_cache(self) -> list[Memory | InvalidFile]:
        """Every file, parsed, except those the parse cache still describes (a warm start's main saving).

        The cache is rewritten when anything was parsed afresh, so the next
        start re-parses only what changes from now on.
        """
        fp = parse_cache.fingerprint(self.config.data)
        cached = parse_cache.load(self.state_dir, fp)
        root = self.root

        def reuse(rel: str) -> Memory | None:
            hit = cached.get(rel)
            return hit if parse_cache.reusable(root, rel, hit) else None

        items = scan_workspace(self.root, self.config, self._reporter("load", READING), reuse)
        fresh = sum(1 for m in items if isinstance(m, Memory) and cached.get(m.rel_path) is not m)
        if fresh or len(cached) != sum(1 for m in items if isinstance(m, Memory)):
            parse_cache.save(self.state_dir, fp, items)
        self.parse_cache_hits = sum(1 for m in items if isinstance(m, Memory)) - fresh
        return items

    def _cold_build(self, summary: ChangeSummary) -> None:
        """No usable index: read and index the files in growing chunks, one commit each.

        Queries may run once the first chunk is committed (``_loaded`` is set
        then, and ``Progress.partial`` tells the owner): they see the memories
        indexed so far, and the store holds exactly those. Files are parsed by
        ``parse_map`` (a process pool in the daemon: the next chunk is parsed
        while this one is indexed) and put in the store in path order, so
        duplicate ids resolve as in a full scan.
        """
        problems: list[InvalidFile] = []
        paths = list(iter_memory_paths(self.root, problems))
        total = len(paths)
        chunks: list[list[str]] = []
        size, at = COLD_FIRST_CHUNK, 0
        while at < total:
            chunks.append(paths[at : at + size])
            at += size
            size = min(COLD_MAX_CHUNK, size * 2)
        store = MemoryStore()
        self.store = store
        self._bump()
        started = Progress("cold build", INDEXING, 0, total)
        self._set_progress(started)
        done = 0
        parse = functools.partial(load_memories, self.root, config=self.config)
        parsed: list[Memory | InvalidFile] = []
        for chunk, items in zip(chunks, self.parse_map(parse, chunks)):
            parsed += items
            changed = store.add_items(items)
            in_chunk = set(chunk)
            fresh = [store.by_path[p] for p in chunk if p in store.by_path]
            self.index.extend(fresh, self._reporter("cold build", INDEXING, total, done, partial=done > 0))
            # Files of earlier chunks renamed by this one (a second Templates.md qualifies both names).
            renamed = [m for m in map(store.get, changed) if m is not None and m.rel_path not in in_chunk]
            if renamed:
                self.index.update(renamed)
            done += len(chunk)
            self._bump()
            self._loaded = True  # from the first committed chunk on, queries may run
            self._set_progress(Progress("cold build", INDEXING, done, total, partial=True, started=started.started))
        store.add_items(problems)
        self._sync_index(ChangeSummary())  # a served file shadowed later, say: the index follows the store
        parse_cache.save(self.state_dir, parse_cache.fingerprint(self.config.data), parsed)
        summary.updated = sorted(store.memories)
        summary.paths = sorted(m.rel_path for m in store.memories.values())

    def reload_config(self) -> None:
        """Re-read ``_config.yaml`` (the counter and weights take effect on the next query)."""
        fresh = load_config(self.root)
        if not fresh.usable and self._config_ok:
            # Fail closed: a typo must not replace the user's settings (a token, say) with defaults.
            fresh = Config(self.config.data, error=f"{fresh.error}; keeping the last good configuration", usable=True)
        else:
            self._config_ok = self._config_ok or fresh.usable
        self.config = fresh
        self.problems = [self.config.error] if self.config.error else []
        try:
            counter = get_counter(self.config.get("tokens.counter", "heuristic"))
        except ValueError as exc:
            self.problems.append(f"{exc}; using the heuristic counter")
            counter = default_counter()
        if getattr(counter, "name", None) != getattr(self.counter, "name", None):
            self._token_cache = {}
        self.counter = counter
        if self.access_log is not None:
            self.access_log.window_days = float(self.config.get("access_log.frequency_window_days", 30))
        if self.state_dir is not None and self._configure_semantic() and self.vectors is not None and self._loaded:
            self.vectors.sync(list(self.store.memories.values()))
        if self._semantic_problem:
            self.problems.append(self._semantic_problem)
        self._bump()

    def _configure_semantic(self) -> bool:
        """Load the ``semantic.model`` named in the config (once per setting); True when it changed.

        The caller syncs the embeddings (``vectors.sync``) with the store.

        A model that cannot be loaded is reported in ``problems`` and the
        keyword-overlap signal is used instead (the engine keeps serving).
        """
        setting = str(self.config.get("semantic.model", "wordllama") or "wordllama").strip()
        if setting == self._semantic_setting:
            return False
        self._semantic_setting = setting
        self._semantic_problem = None
        try:
            model = load_model(setting)
        except ModelError as exc:
            model = None
            self._semantic_problem = f"{exc}; using keyword overlap"
            log.warning("%s", self._semantic_problem)
        if model is None:
            self.vectors = None
            self.semantic = KeywordOverlapScorer()
            return True
        self.vectors = VectorIndex(model, self.state_dir)
        self.semantic = EmbeddingScorer(self.vectors)
        return True

    def close(self) -> None:
        if self.vectors is not None:
            self.vectors.flush()
        if self.history is not None:
            from .history import uninstall

            uninstall(self.history)
            self.history = None
        if self.index is not None:
            self.index.close()
        if self.access_log is not None:
            self.access_log.close()

    def _require_loaded(self) -> None:
        if not self._loaded:
            raise RuntimeError("Engine.load() has not been called")

    def _bump(self) -> None:
        self._generation += 1

    @property
    def generation(self) -> int:
        """Moves on with every change to the store: a key for caches derived from it."""
        return self._generation

    # --- keeping files, store and index in step --------------------------------------
    def _sync_index(self, summary: ChangeSummary) -> ChangeSummary:
        """Make the index match the store: re-index differing checksums, drop stale paths."""
        indexed = self.index.checksums()
        upserts = [m for m in self.store.memories.values() if not self.index.is_current(m)]
        stale = [p for p in indexed if p not in self.store.by_path]
        if upserts or stale:
            self.index.update(upserts, stale)
        summary.updated = sorted({*summary.updated, *(m.id for m in upserts)})
        summary.paths = sorted({*summary.paths, *(m.rel_path for m in upserts), *stale})
        summary.unchanged = len(self.store.memories) - len(upserts)
        return summary

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
            self.index.update(upserts, removals)
        if changed_ids or touched:
            self._bump()
        updated = sorted(mid for mid in changed_ids if mid in self.store.memories)
        removed = sorted(mid for mid in changed_ids if mid not in self.store.memories)
        if self.vectors is not None and (updated or removed):
            self.vectors.update([self.store.memories[mid] for mid in updated], removed)
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

        for raw in paths:
            rel = self._rel(raw)
            if rel is None:
                continue
            target = self.root / rel
            if target.is_dir() and not target.is_symlink():
                if is_ignored_dir(rel):
                    continue
                present = set(self._walk_folder(rel))
                gone = set(known_under(rel.rstrip("/") + "/")) - present
                for item in sorted(present | gone):
                    if self._apply_file(item, changed_ids, touched):
                        continue
                    unchanged += 1
                continue
            if not (target.exists() or target.is_symlink()) and not self._known_path(rel):
                under = known_under(rel.rstrip("/") + "/")
                if under:
                    for item in under:  # a folder was deleted or moved away
                        self._apply_file(item, changed_ids, touched)
                    continue
            if not self._apply_file(rel, changed_ids, touched):
                unchanged += 1
        return self._finish(changed_ids, touched, unchanged)

    def reconcile(self) -> ChangeSummary:
        """Compare every file with the store (stat first) and the store with the index; apply the difference."""
        self._require_loaded()
        changed_ids: set[str] = set()
        touched: set[str] = set()
        unchanged = 0
        problems: list[InvalidFile] = []
        present = set(iter_memory_paths(self.root, problems))
        odd = {p.rel_path: p for p in problems}  # folders that cannot be listed stay in doctor
        for rel in sorted(present | self.store.known_paths()):
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
        indexed = self.index.checksums()
        drift = [m for m in self.store.memories.values() if not self.index.is_current(m)]
        stale = [p for p in indexed if p not in self.store.by_path]
        if drift or stale:
            self.index.update(drift, stale)
            summary.updated = sorted({*summary.updated, *(m.id for m in drift)})
            summary.paths = sorted({*summary.paths, *(m.rel_path for m in drift), *stale})
            self._bump()
        if self.vectors is not None:
            self.vectors.sync(list(self.store.memories.values()))
        return summary

    def rebuild_index(self) -> ChangeSummary:
        """Rescan every file and rebuild the index from scratch (one commit)."""
        self._require_loaded()
        try:
            store = MemoryStore.from_items(scan_workspace(self.root, self.config, self._reporter("reindex", READING)))
            self.store = store  # swapped whole: readers never see a half-filled store
            self._bump()
            total = len(store.memories)
            self.index.rebuild(
                list(store.memories.values()),
                self._reporter("reindex", INDEXING, total),
                lambda: self._reporter("reindex", WRITING, total)(total),
            )
            if self.vectors is not None:
                self.vectors.sync(list(store.memories.values()))
        finally:
            self._set_progress(None)
        self._bump()
        return ChangeSummary(
            updated=sorted(self.store.memories),
            invalid=self.store.invalid_files(),
            paths=sorted(m.rel_path for m in self.store.memories.values()),
        )

    # --- derived state used by the query path ----------------------------------------
    def graph(self, *, stale_ok: bool = False) -> LinkGraph:
        """The link graph for the current store (rebuilt lazily after changes).

        ``stale_ok`` (the query path passes it) with ``allow_stale_graph``
        (the daemon sets it): a graph built for an older generation is served
        as is, and the owner calls ``refresh_graph()`` off the query path
        after each change batch. A query then never pays for the rebuild, at
        the price of neighbours and authority lagging a change by one refresh
        (BM25 and the memories themselves are always current, and ids the
        store no longer holds are skipped). Every other caller (communities,
        graph views, governance) gets the current graph.
        """
        cached = self._graph
        if cached is not None and (cached[0] == self._generation or (stale_ok and self.allow_stale_graph)):
            return cached[1]
        return self.refresh_graph()

    def graph_is_stale(self) -> bool:
        """True when the cached graph (if any) predates the last change."""
        cached = self._graph
        return cached is None or cached[0] != self._generation

    def refresh_graph(self) -> LinkGraph:
        """Build the graph for the current generation unless it is already built; return it.

        Safe beside queries and one writer: it builds from a snapshot of the
        store and swaps the cached tuple in one assignment. The community map
        read from disk (when no one set one) follows the same generation.
        """
        cached = self._graph
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        with self._derived_lock:
            cached = self._graph
            generation = self._generation
            if cached is not None and cached[0] == generation:
                return cached[1]
            min_shared = int(self.config.get("graph.implicit_edge_min_shared_tags", 2) or 0)
            graph = build_graph(list(self.store.memories.values()), self.store.resolve_link, min_shared_tags=min_shared)
            self._graph = (generation, graph)
        if self.allow_stale_graph and self._community_override is None:
            self._load_communities()
        return graph

    def pinned_ids(self) -> list[str]:
        """Rules and always_load memories: always candidates, rendered first."""
        cached = self._pinned
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        generation = self._generation
        ids = sorted(m.id for m in list(self.store.memories.values()) if m.type == "rule" or m.always_load)
        self._pinned = (generation, ids)
        return ids

    def important_ids(self, limit: int) -> list[str]:
        """The ``limit`` most important memories (then most recent), candidates for every query.

        Seed §4.2: high-importance memories are loaded even when less directly
        relevant; the composite still decides whether they earn a place.
        """
        if limit <= 0:
            return []
        cached = self._important
        if cached is None or cached[0] != self._generation or len(cached[1]) < limit:
            generation = self._generation
            memories = [
                m
                for m in list(self.store.memories.values())
                if m.type != "rule" and not m.always_load and m.importance > 0
            ]
            best = heapq.nsmallest(max(limit, 32), memories, key=lambda m: (-m.importance, -(m.mtime or 0.0), m.id))
            cached = (generation, [m.id for m in best])
            self._important = cached
        return cached[1][:limit]

    def warm_query_caches(self) -> None:
        """Compute the per-generation lists every query needs (pinned, important, recent) now.

        Each is a pass over every memory (~50-100 ms at 10,000 on a busy machine);
        the daemon calls this off the query path after each change batch, so the
        first query after an editor's save does not pay for it.
        """
        self.pinned_ids()
        self.important_ids(WARM_LIST_SIZE)
        self.recent_ids(WARM_LIST_SIZE)

    def recent_ids(self, limit: int) -> list[str]:
        """The ``limit`` most recently changed memories (for the catalog), cached per generation."""
        if limit <= 0:
            return []
        cached = self._recent
        if cached is None or cached[0] != self._generation or len(cached[1]) < limit:
            generation = self._generation
            memories = [m for m in list(self.store.memories.values()) if m.type != "rule" and not m.always_load]
            newest = heapq.nsmallest(max(limit, 64), memories, key=lambda m: (-_changed_at(m), m.id))
            cached = (generation, [m.id for m in newest])
            self._recent = cached
        return cached[1][:limit]

    def intent_classifier(self):
        """Nearest-prototype intent classifier on the current embeddings (None without a model)."""
        if self.vectors is None:
            return None
        classifier = self._classifier
        if classifier is None or classifier.model is not self.vectors.model:
            classifier = PrototypeClassifier(self.vectors.model)
            self._classifier = classifier
        return classifier

    def set_community_of(self, mapping: Mapping[str, int] | None) -> None:
        """Give the scorer a community map (the communities module / daemon calls this)."""
        self._community_override = mapping

    def community_of(self, *, stale_ok: bool = False) -> Mapping[str, int] | None:
        """Community per memory id, for the +community_bonus graph signal; None when unknown.

        ``stale_ok``: as for ``graph()``, the map read for an older generation
        may be served (``refresh_graph`` re-reads it).
        """
        if self._community_override is not None:
            return self._community_override
        cached = self._communities
        if cached is not None and (cached[0] == self._generation or (stale_ok and self.allow_stale_graph)):
            return cached[1]
        return self._load_communities()

    def _load_communities(self) -> Mapping[str, int] | None:
        generation = self._generation
        mapping: Mapping[str, int] | None = None
        try:
            from .communities import load_communities

            cmap = load_communities(self.root)
            mapping = cmap.community_of() if cmap is not None else None
        except Exception as exc:  # a damaged cache file must not break queries
            log.warning("communities unavailable: %s", exc)
        self._communities = (generation, mapping)
        return mapping

    def catalog_tokens(self, memory: Memory) -> int:
        """Tokens of a memory's catalog line (cached like ``block_tokens``)."""
        key = (memory.id, memory.checksum, "catalog")
        value = self._token_cache.get(key)
        if value is None:
            value = self.counter.count(catalog_line(memory))
            self._token_cache[key] = value
        return value

    def heading_tokens(self, memory: Memory) -> frozenset[str]:
        """Analysed tokens of a memory's summary line, title, id and tags (cached per checksum)."""
        key = (memory.id, memory.checksum)
        value = self._heading_cache.get(key)
        if value is None:
            if len(self._heading_cache) > TOKEN_CACHE_MAX:
                self._heading_cache = {}
            value = frozenset(analyze(heading_text(memory) + "\n" + " ".join(memory.tags)))
            self._heading_cache[key] = value
        return value

    def block_tokens(self, memory: Memory, tier: str) -> int:
        """Tokens of a memory's rendered block at a tier (cached per checksum and counter)."""
        key = (memory.id, memory.checksum, tier)
        value = self._token_cache.get(key)
        if value is None:
            if len(self._token_cache) > TOKEN_CACHE_MAX:
                self._token_cache = {}
            value = self.counter.count(memory_block(memory, tier))
            self._token_cache[key] = value
        return value

    # --- queries -----------------------------------------------------------------------
    def execute_context_query(
        self, query: str, budget_tokens: int | None = None, intent: str | None = None, *, record_access: bool = True
    ) -> ContextResult:
        self._require_loaded()
        return _execute_context_query(self, query, budget_tokens, intent, record_access=record_access)

    def score_query(self, query: str, intent: str | None = None, **kwargs: Any):
        """Candidates with signals, best first (no budget, nothing logged); for benchmarks and tools."""
        self._require_loaded()
        return score_query(self, query, intent, **kwargs)

    def note_served(self, memory: Memory) -> None:
        """Remember the checksum of a version handed to a client (bounded)."""
        with self._served_lock:
            if len(self._served) > 200_000:
                self._served.clear()
            self._served.setdefault((memory.id, memory.version), set()).add(memory.checksum)

    def served_checksum(self, memory_id: str, version: int) -> str | None:
        """The checksum served for this version; ``AMBIGUOUS`` when one version was served with two contents."""
        with self._served_lock:
            seen = self._served.get((memory_id, version))
        if not seen:
            return None
        return next(iter(seen)) if len(seen) == 1 else AMBIGUOUS_VERSION

    def get_memory(self, memory_id: str) -> Memory | None:
        return self.store.get(memory_id)

    def list_memories(self, type: str | None = None) -> list[Memory]:
        return self.store.list(type)

    def invalid_files(self) -> list[InvalidFile]:
        return self.store.invalid_files()

    def get_skill(self, name: str) -> Memory:
        """The skill named exactly ``name`` (id, file name or title, any case); see skill_lookup.py.

        Raises ``SkillLookupError`` (with the closest skills by name) instead of
        ever answering with a different memory.
        """
        return self.find_skill(name).memory

    def find_skill(self, name: str) -> SkillMatch:
        """Like :meth:`get_skill`, and says which key matched."""
        self._require_loaded()
        return find_skill(self.store.list(), name)

    # --- writes (see writes.py for the safety rules) -------------------------------------
    def save_memory(self, **fields: Any) -> Memory:
        self._require_loaded()
        mid, version = fields.get("id"), fields.get("expected_version")
        if (
            not fields.get("expected_checksum")
            and isinstance(mid, str)
            and isinstance(version, int)
            and not isinstance(version, bool)
        ):
            known = self.store.get(mid.strip())
            served = self.served_checksum(known.id, version) if known is not None else None
            if served is not None:
                fields["expected_checksum"] = served
        result = writes.save_memory(self.root, self.store, self.config, **fields)
        self._index_after_write(result.rel_path)
        memory = self.store.get_by_path(result.rel_path)
        if memory is None:
            invalid = self.store.invalid.get(result.rel_path)
            raise writes.WriteRefused(
                f"saved {result.rel_path} but it did not load: {invalid.reason if invalid else 'unknown reason'}"
            )
        self.note_served(memory)
        return memory

    def log_session(self, event: str, details: str | None = None) -> str:
        self._require_loaded()
        rel_path = writes.log_session(self.root, self.config, event, details)
        self._index_after_write(rel_path)
        return rel_path

    def _index_after_write(self, rel_path: str) -> None:
        """Index a file the gate just made final. The write stands even if the index cannot be
        updated (e.g. the disk filled up in between): the store serves it, the next re-sync indexes it,
        and the caller is never told "failed" about a file that was written."""
        try:
            self.apply_changes([rel_path])
        except OSError as exc:
            log.warning("%s was saved but the index could not be updated (%s); the next re-sync retries", rel_path, exc)
            if rel_path not in self.store.by_path:
                loaded = load_memory(self.root, rel_path, self.config)
                if isinstance(loaded, Memory):
                    self.store.put(loaded)
                    self._bump()

    # --- status ------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        by_type = Counter(m.type for m in list(self.store.memories.values()))
        return {
            "workspace": str(self.root),
            "memories": len(self.store),
            "by_type": dict(sorted(by_type.items())),
            "invalid": len(self.store.invalid),
            "index": self.index.info() if self.index is not None else None,
            "state_dir": str(self.state_dir) if self.state_dir else None,
            "token_counter": getattr(self.counter, "name", type(self.counter).__name__),
            "semantic_scorer": getattr(self.semantic, "name", type(self.semantic).__name__),
            "embeddings": len(self.vectors) if self.vectors is not None else None,
            "config_problems": list(self.problems),
            "queries_logged": self.access_log.query_count() if self.access_log is not None else 0,
        }
