"""Loading a workspace into an engine, re-reading its config, rebuilding and closing it.

- ``load`` scans every file, opens the index (recreating it when it is missing,
  corrupt or of an older schema) and indexes only what differs; a warm start
  takes unchanged files from the parse cache, a cold build indexes in chunks
  so queries are answered while it runs;
- ``reload_config`` re-reads ``_config.yaml`` and keeps the last good one;
- ``rebuild_index`` rescans and rebuilds the index from scratch;
- ``close`` flushes the embeddings and releases the index, log and history.
"""

from __future__ import annotations

import gc
import logging
import shutil
import time
from pathlib import Path

import numpy as np

from .. import parse_cache, writes
from ..access_log import AccessLog
from ..block_store import FOLDER as BLOCKS_FOLDER
from ..block_store import BlockStore, clear_folder
from ..config import Config, load_config
from ..index import MemoryIndex, StagedSegment
from ..index_build import STAGING_FOLDER, ChunkBuilder, keep_query_values
from ..index_layout import INDEX_FOLDER
from ..model import InvalidFile, Memory
from ..progress import EMBEDDING, INDEXING, READING, WRITING, Progress
from ..semantic import WORDLLAMA, EmbeddingScorer, ModelError, VectorIndex, load_model
from ..signals import KeywordOverlapScorer
from ..store import MemoryStore
from ..tokens import default_counter, get_counter
from ..workspace import iter_memory_paths, scan_workspace, state_dir
from ..write_gate import remove_orphan_temps
from .state import EngineState
from .summary import ChangeSummary

log = logging.getLogger(__name__)

# A cold build reads and indexes in chunks, committing each, so queries find the files
# indexed so far: one small first chunk (answers within a second), then an even number of equal
# chunks for two builder processes (cold_chunks: 250 + 2 x 4,875 at 10,000 memories). Each chunk
# is a segment, and a query reads a word it has not met before from every segment: at 10,000,
# 3 segments instead of 6 (two first chunks, the rest at most 2,500 each) cut a distinct query's
# first reads of its words from 41 to ~21 a query, and the cold build took as long (4.2-4.6 s
# either way, first answers at 0.8 s; docs/engine.md "Session 21").
COLD_FIRST_CHUNK = 250
COLD_MAX_CHUNK = 5_000
COLD_MAX_REST_CHUNKS = 4


class PausedCollector:
    """The cyclic garbage collector off from construction until ``resume`` (idempotent).

    A warm load builds the whole store at once (100,000 memories: millions of
    objects read back from the parse cache and the index), and CPython runs a
    full collection each time the long-lived heap has grown by a quarter: about
    thirty passes over an ever larger heap, for the little cyclic garbage a load
    makes. Measured at 100,000 memories (loaded machine): warm ``Engine.load``
    16.9 s with the collector on, 7.1 s with it off. Reference counting still
    frees everything else meanwhile; the collector's previous state is restored.
    """

    def __init__(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._paused = True

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            if self._was_enabled:
                gc.enable()


class Lifecycle(EngineState):
    """Load, reload the config, rebuild and close (the parts that replace the store whole)."""

    def load(self) -> ChangeSummary:
        """Read config, scan files, open (or recover) the index, index what differs."""
        self.reload_config()
        self.state_dir = state_dir(self.root)
        if self.history is None:  # every write from here on becomes a commit or a journal entry
            from ..history import install

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
            self.index = MemoryIndex(self.state_dir / INDEX_FOLDER)
        self.index.defer_merges = self.defer_index_merges
        collector = PausedCollector()
        fresh = self.index.open()
        if fresh:
            collector.resume()  # a cold build runs for minutes beside queries: collect as usual
        summary = ChangeSummary(index_recovered=self.index.recovered)
        if self.access_log is None:
            self.access_log = AccessLog(self.state_dir, self.config.settings.access_log.frequency_window_days)
        self.access_log.defer = self.access_log_defer
        self.access_log.refresh_in_background = self.access_log_background
        self.access_log.lazy_counts = True  # counted by warm_query_caches or the first query, not before ready
        self.access_log.open()
        try:
            if fresh:
                self._cold_build(summary)
            else:
                self.store = MemoryStore.from_items(self._scan_reusing_cache())
                self._bump()
                self._open_block_store()
                summary = self._sync_index(summary)
                self.index.share_strings(self.store.memories.values())  # one copy of each path, id, checksum
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
            self.store.compact(keep_query_values)  # indexed and embedded: bodies and tiers are read back from the files
            self._load_completed = True
            self._parse_fingerprint = parse_cache.fingerprint(self.config)
            if not self._parse_cache_due:
                self._parse_cache_generation = self._generation  # the cache on disk describes this store
            elif not self.defer_parse_cache:
                self.save_parse_cache()
        finally:
            collector.resume()
            self._set_progress(None)
        self._loaded = True
        return summary

    def save_parse_cache(self) -> bool:
        """Write the parse cache the last load left due (a full parse, or files changed since the cache).

        ``load`` calls it unless ``defer_parse_cache`` is set: the daemon sets it
        and calls this after it is ready, on its background thread. At 87,401
        memories the write (pickle, signature, atomic replace of ~45 MB) was a
        few seconds of the warm restart's ready time after a day of changes.
        Entries are checked against each file's mtime and size when read, so a
        memory that changed before the write is simply parsed again next time.
        """
        due, self._parse_cache_due = self._parse_cache_due, False
        return due and self._write_parse_cache()

    def _write_parse_cache(self) -> bool:
        """Write the store's current parses (``MemoryStore.parsed_memories``) under the load's fingerprint."""
        if self.store is None or self.state_dir is None:
            return False
        generation = self._generation  # before the copy: a change meanwhile only makes the next write due
        if not parse_cache.save(self.state_dir, self._parse_fingerprint, self.store.parsed_memories()):
            return False
        self._parse_cache_generation = generation
        return True

    def _save_changed_parse_cache(self) -> None:
        """At close: rewrite the parse cache when the store changed since the cache on disk was written.

        The cache is written after a load; without this, the next start re-parsed
        every file changed, added or moved while this engine ran (in
        ``bench_daemon.py`` ~2,300 of 10,000 files: a warm restart of 1.5-2.0 s
        instead of 1.2-1.4). The store's memories are the current parses
        (``MemoryStore.parsed_memories``: as parsed, before a stem rename), each
        reused next time only if its file's mtime and size still match.
        """
        if not self._load_completed:
            return  # never loaded, or stopped mid-build: the next start scans and parses anyway
        if self._generation == self._parse_cache_generation:
            return  # the cache on disk describes this store
        if parse_cache.fingerprint(self.config) != self._parse_fingerprint:
            return  # the config changed since the files were parsed: the next start parses under the new one
        self._parse_cache_due = False
        self._write_parse_cache()

    def _scan_reusing_cache(self) -> list[Memory | InvalidFile]:
        """Every file, parsed, except those the parse cache still describes (a warm start's main saving).

        The cache is rewritten when anything was parsed afresh, so the next
        start re-parses only what changes from now on.
        """
        state = self._require_state_dir()
        fp = parse_cache.fingerprint(self.config)
        cached = parse_cache.load(state, fp, self.root)
        root = self.root

        def reuse(rel: str) -> Memory | None:
            hit = cached.get(rel)
            return hit if parse_cache.reusable(root, rel, hit) else None

        items = scan_workspace(self.root, self.config, self._reporter("load", READING), reuse)
        fresh = sum(1 for m in items if isinstance(m, Memory) and cached.get(m.rel_path) is not m)
        if fresh or len(cached) != sum(1 for m in items if isinstance(m, Memory)):
            self._parse_cache_due = True  # written by load once released (the next start reads no text)
        self.parse_cache_hits = sum(1 for m in items if isinstance(m, Memory)) - fresh
        return items

    def _builder(self) -> ChunkBuilder:
        """What every chunk of a cold build or rebuild shares; the staging folder is emptied first."""
        staging = self._require_state_dir() / STAGING_FOLDER
        shutil.rmtree(staging, ignore_errors=True)  # segments a killed build left behind
        setting = self.config.settings.semantic.model.strip() or WORDLLAMA
        blocks = self._require_state_dir() / BLOCKS_FOLDER
        clear_folder(blocks)  # the last build's blocks (a store open on them keeps reading its descriptors)
        # Only the packaged model is loaded in builders: a local fastembed / sentence-transformers
        # model would load once per builder (hundreds of MB each), so the engine embeds with it.
        model = setting if setting.lower() == WORDLLAMA else None
        return ChunkBuilder(
            self.root, self.config, staging, model, blocks=blocks, fingerprint=parse_cache.fingerprint(self.config)
        )

    def _open_block_store(self) -> None:
        """A warm start: the blocks the last build stored, if built under this config (services/block_store.py)."""
        old = self._block_store
        folder = self._require_state_dir() / BLOCKS_FOLDER
        self._block_store = BlockStore.open_folder(folder, parse_cache.fingerprint(self.config))
        old.close()

    def _cold_build(self, summary: ChangeSummary) -> None:
        """No usable index: build it in chunks, one commit each (embeddings too).

        Each chunk is parsed, indexed into its own segment and embedded by
        ``build_map`` (the daemon's builder processes; ``map`` in process, see
        ``services/index_build.py``); here it is committed, and its memories,
        their text already released, join the store in path order (duplicate
        ids resolve as in a full scan). Queries may run once the first chunk
        is committed (``_loaded`` is set then, and ``Progress.partial`` tells
        the owner): they see the memories indexed so far, and the store holds
        exactly those.
        """
        problems: list[InvalidFile] = []
        paths = list(iter_memory_paths(self.root, problems))
        total = len(paths)
        index = self._require_index()
        store = MemoryStore()
        self.store = store
        self._bump()
        started = Progress("cold build", INDEXING, 0, total)
        self._set_progress(started)
        done = 0
        builder = self._builder()
        chunks = cold_chunks(paths)
        try:
            for chunk, built in zip(chunks, self.build_map(builder, chunks)):
                changed = store.add_items(built.items)
                if built.segment is not None:
                    index.add_segments([built.segment])
                    self._follow_store(built.segment.indexed, changed)
                if built.blocks_file is not None:  # the old store's files: cleared by _builder, still open
                    self._block_store = self._block_store.with_files([built.blocks_file], builder.fingerprint)
                # The model is loaded once the builders run (not before they start), and each chunk's
                # rows join at its commit: queries mid-build get the semantic signal, nothing is left
                # for the end.
                self._configure_semantic()
                if self.vectors is not None:
                    computed = built.embeddings() if built.model == self.vectors.model.name else None
                    self.vectors.sync(list(store.memories.values()), computed=computed, save=False)
                done += len(chunk)
                self._bump()
                self._loaded = True  # from the first committed chunk on, queries may run
                self._set_progress(Progress("cold build", INDEXING, done, total, partial=True, started=started.started))
                self.stop_flag.check()  # a committed chunk: stop here rather than wait for the next build
        finally:
            shutil.rmtree(builder.staging, ignore_errors=True)
        store.add_items(problems)
        self._sync_index(ChangeSummary())  # a served file shadowed later, say: the index follows the store
        if self.vectors is not None:
            self.vectors.sync(list(store.memories.values()))  # ids the last chunk renamed, say
            self.vectors.flush()  # the builders' rows, into the embedding cache
        self._parse_cache_due = True
        summary.updated = sorted(store.memories)
        summary.paths = sorted(m.rel_path for m in store.memories.values())

    def _follow_store(self, indexed: dict[str, tuple[str, str]], changed: list[str]) -> None:
        """After a chunk's segment is committed: index what the store made of it, if that differs.

        A builder indexes each file under the id it parsed; the store may
        qualify it (a second ``Templates.md``), rename a file of an earlier
        chunk, or not serve it (a duplicate id). Rare, and cheap when nothing
        differs (dict lookups).
        """
        store, index = self.store, self._require_index()
        fix = [m for m in map(store.get, changed) if m is not None and not index.is_current(m)]
        gone = [path for path in indexed if path not in store.by_path]
        if fix or gone:
            index.update(fix, gone)

    def reload_config(self) -> None:
        """Re-read ``_config.yaml`` (the counter and weights take effect on the next query)."""
        fresh = load_config(self.root)
        if not fresh.usable and self._config_ok:
            # Fail closed: a typo must not replace the user's settings (a token, say) with defaults.
            fresh = Config(
                self.config.data,
                error=f"{fresh.error}; keeping the last good configuration",
                usable=True,
                problems=fresh.problems,
                checked=self.config.settings,
            )
        else:
            self._config_ok = self._config_ok or fresh.usable
        self.config = fresh
        self.problems = self.config.problem_lines()  # one line per field that failed (ctxos doctor)
        try:
            counter = get_counter(self.config.settings.tokens.counter)
        except ValueError as exc:
            self.problems.append(f"{exc}; using the heuristic counter")
            counter = default_counter()
        if getattr(counter, "name", None) != getattr(self.counter, "name", None):
            self._token_cache = {}
            self._block_cache.clear()
        self.counter = counter
        if self.access_log is not None:
            self.access_log.window_days = self.config.settings.access_log.frequency_window_days
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
        setting = self.config.settings.semantic.model.strip() or "wordllama"
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
            self.semantic = KeywordOverlapScorer(self.stored_phrase_text)
            return True
        self.vectors = VectorIndex(model, self.state_dir, check=self.stop_flag.check)
        self.semantic = EmbeddingScorer(self.vectors, keywords=KeywordOverlapScorer(self.stored_phrase_text))
        return True

    def close(self) -> None:
        if self.vectors is not None:
            self.vectors.flush()
        try:
            self.save_graph()
        except Exception:  # noqa: BLE001 - a cache: the next start builds the graph, nothing else
            log.exception("saving the link graph at close failed")
        try:
            self._save_changed_parse_cache()
        except Exception:  # noqa: BLE001 - a cache: the next start parses more, nothing else
            log.exception("writing the parse cache at close failed")
        if self.history is not None:
            from ..history import uninstall

            uninstall(self.history)
            self.history = None
        if self.index is not None:
            self.index.close()
        self._block_store.close()
        if self.access_log is not None:
            self.access_log.close()

    def rebuild_index(self) -> ChangeSummary:
        """Rescan every file and rebuild the index from scratch (one commit replaces every segment).

        The chunks are built like a cold build's (``build_map``); the new store
        is swapped in whole and the new segments replace the old ones in one
        commit, so readers never see a half-filled store or index.
        """
        self._require_loaded()
        builder = self._builder()
        try:
            problems: list[InvalidFile] = []
            paths = list(iter_memory_paths(self.root, problems))
            total = len(paths)
            started = Progress("reindex", READING, 0, total)
            self._set_progress(started)
            items: list[Memory | InvalidFile] = []
            staged: list[StagedSegment] = []
            rows: dict[str, np.ndarray] = {}
            block_files: list[Path] = []
            done = 0
            chunks = cold_chunks(paths)
            for chunk, built in zip(chunks, self.build_map(builder, chunks)):
                items += built.items
                if built.segment is not None:
                    staged.append(built.segment)
                if built.blocks_file is not None:
                    block_files.append(built.blocks_file)
                if self.vectors is not None and built.model == self.vectors.model.name:
                    rows.update(built.embeddings())
                done += len(chunk)
                self._set_progress(Progress("reindex", INDEXING, done, total, started=started.started))
            self._set_progress(Progress("reindex", WRITING, total, total, started=started.started))
            store = MemoryStore.from_items([*items, *problems])
            old_blocks = self._block_store
            self.store = store  # swapped whole: readers never see a half-filled store
            self._block_store = BlockStore().with_files(block_files, builder.fingerprint)
            old_blocks.close()  # a query still holding it misses and renders from the files
            self._bump()
            index = self._require_index()
            index.add_segments(staged, replace=True)
            self._sync_index(ChangeSummary())  # ids the store qualified, duplicates it does not serve
            if self.vectors is not None:
                self.vectors.sync(list(store.memories.values()), computed=rows)
            store.compact(keep_query_values)
        finally:
            shutil.rmtree(builder.staging, ignore_errors=True)
            self._set_progress(None)
        self._bump()
        return ChangeSummary(
            updated=sorted(self.store.memories),
            invalid=self.store.invalid_files(),
            paths=sorted(m.rel_path for m in self.store.memories.values()),
        )


def cold_chunks(paths: list[str]) -> list[list[str]]:
    """Chunks of a cold build: one of ``COLD_FIRST_CHUNK`` first, then an even number of equal chunks.

    One builder takes the small one (the first answers come soon) while the other
    starts on the first large one; the rest are at most ``COLD_MAX_CHUNK`` files
    each, an even number so the two builders finish about together, and never more
    than ``COLD_MAX_REST_CHUNKS``: each chunk is a segment, a query's new words are
    read from every segment, and the first save after a build merges small segments
    once ``index.MAX_SEGMENTS`` pile up.
    """
    out = [paths[:COLD_FIRST_CHUNK]] if paths else []
    rest = paths[COLD_FIRST_CHUNK:]
    if rest:
        count = min(COLD_MAX_REST_CHUNKS, -(-len(rest) // COLD_MAX_CHUNK))
        count += count % 2
        size = -(-len(rest) // count)
        out += [rest[at : at + size] for at in range(0, len(rest), size)]
    return out
