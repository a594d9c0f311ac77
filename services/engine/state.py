"""``EngineState``: what an engine holds for one workspace, and the helpers every part of it uses.

The parts of ``Engine`` (lifecycle, change application, derived query state,
the facade) are classes over this one: each reads and replaces these
attributes, none keeps state of its own. Who may touch what from which
thread is in the package docstring.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import graph_cache
from ..access_log import AccessLog
from ..answer_memo import AnswerMemo
from ..block_store import BlockStore
from ..config import Config
from ..graph import DAMPING, MAX_TAG_MEMBERS, LinkGraph
from ..graph_update import GraphTracker
from ..index import MemoryIndex
from ..index_build import BuiltChunk, ChunkBuilder
from ..model import Memory
from ..progress import Progress, ProgressCallback
from ..query_facts import FactsMemo
from ..render import BlockKey
from ..render_cache import BlockCache
from ..semantic import PrototypeClassifier, VectorIndex
from ..signals import KeywordOverlapScorer, SemanticScorer
from ..stop_flag import StopFlag
from ..store import MemoryStore
from ..tokens import TokenCounter, default_counter
from .lists import QueryLists
from .memo import Memo
from .summary import ChangeSummary

if TYPE_CHECKING:
    from ..communities import Detector, Namer
    from ..governance import GovernanceReport
    from ..history import HistoryRecorder

# A governance report depends on the clock too (ages, load windows): reused at most this long.
GOVERNANCE_REPORT_MAX_AGE_S = 60.0
GRAPH_SAVE_INTERVAL_S = 300.0  # save_graph_if_due: at most one save of the graph this often

log = logging.getLogger(__name__)


class EngineState:
    """All state of one workspace's engine (see docs/ARCHITECTURE.md)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser().resolve()
        self.config: Config = Config()
        self._config_ok = False  # a _config.yaml that parsed and validated has been loaded
        self.store = MemoryStore()
        self.state_dir: Path | None = None
        self.index: MemoryIndex | None = None
        self.access_log: AccessLog | None = None
        self.counter: TokenCounter = default_counter()
        self.semantic: SemanticScorer = KeywordOverlapScorer(self.stored_phrase_text)
        self.vectors: VectorIndex | None = None  # embeddings (semantic.model), None for 'lexical'
        self._semantic_setting: str | None = None
        self._semantic_problem: str | None = None
        self.problems: list[str] = []
        # Set by the owner when it shuts down; loads, change batches and background jobs check it
        # between files and raise stop_flag.Cancelled, so a daemon exits in seconds (services/stop_flag.py).
        self.stop_flag = StopFlag()
        # The per-user daemon sets this (daemon/workspaces.py): (name, engine) of each workspace this
        # one federates, in order; queries join their candidates (services/federation.py).
        self.federated: list[tuple[str, EngineState]] = []
        self._generation = 0
        self._derived_lock = threading.Lock()
        self._graph: tuple[int, LinkGraph] | None = None
        self._graph_tracker = GraphTracker()  # what the graph was built from, to patch it (graph_update.py)
        self._saved_graph_tried = False  # the graph saved at the last close is read at most once (graph_cache.py)
        self._graph_saved: tuple[int, float] | None = None  # (generation, monotonic time) of the graph on disk
        # The daemon sets this: queries then use the last built graph and the
        # daemon calls refresh_graph() after each change batch (see graph()).
        self.allow_stale_graph = False
        self._lists: QueryLists | None = None  # pinned, important, recent (engine/lists.py)
        self._classifier: PrototypeClassifier | None = None
        self._communities: tuple[int, Mapping[str, int] | None] | None = None
        self._communities_stamp: tuple[int, int, int] | None = None  # (inode, mtime, size) of the file read
        self._community_override: Mapping[str, int] | None = None
        self._token_cache: dict[BlockKey, int] = {}  # render.block_key -> tokens
        # What recent queries found that only the engine's state changes (services/query_facts.py)
        self.query_facts = FactsMemo()
        # Rendered answers by the blocks they join: a repeated answer is not fetched and counted again
        # (services/answer_memo.py)
        self.answer_memo = AnswerMemo()
        self._block_cache = BlockCache()  # rendered blocks between queries (services/render_cache.py)
        self._block_store = BlockStore()  # blocks the last build's builders rendered (services/block_store.py)
        self._loaded = False
        # (id, version) -> checksum of every version this engine served (get_memory,
        # resources, context): expected_version alone then detects an unversioned edit.
        self._served: dict[tuple[str, int], set[str]] = {}
        self._served_lock = threading.Lock()
        self.removed_temp_files: list[str] = []
        # The last governance report (services/governance/report.py), per engine, not per process.
        self.governance_reports: Memo[GovernanceReport] = Memo(max_age_s=GOVERNANCE_REPORT_MAX_AGE_S)
        self.history: HistoryRecorder | None = None  # the workspace's recorder once loaded (services/history)
        # Long jobs (cold build, reindex): the current step, replaced whole (status reads it from
        # another thread), and a callback for each new one (the CLI's bar, the daemon's readiness).
        self.progress: Progress | None = None
        self.on_progress: ProgressCallback | None = None
        self.parse_cache_hits = 0  # files a warm load took from the parse cache (services/parse_cache)
        self._parse_cache_due = False  # the last load parsed files the cache on disk does not hold
        self._parse_cache_generation: int | None = None  # the store generation the cache on disk describes
        self._load_completed = False  # a load ran to its end (a cold build serves queries before that)
        self._parse_fingerprint = ""  # parse_cache.fingerprint of the config the store was parsed under
        self.defer_parse_cache = False  # the daemon sets it: it writes the cache after ready (save_parse_cache)
        # The daemon sets it: commits leave the index's small segments unmerged and the daemon merges
        # them after the change is searchable (merge_index_segments; MemoryIndex.defer_merges).
        self.defer_index_merges = False
        # How a cold build or rebuild builds its chunks (services/index_build.py: parse, index into
        # a segment, embed): ``map`` here, in this process; the daemon passes a pool of builder
        # processes' ``map``, so the work runs on both cores and outside the daemon's heap.
        self.build_map: Callable[[ChunkBuilder, Iterable[list[str]]], Iterable[BuiltChunk]] = map
        # How Leiden runs (services/communities.Detector): None = in this process; the daemon
        # passes one that uses a child process for large graphs (leidenalg holds the interpreter lock).
        self.community_detector: Detector | None = None
        # How communities are named (services/communities.Namer): None = here; the daemon names
        # large maps in a child process (the pass's temporaries stay out of the daemon's heap).
        self.community_namer: Namer | None = None
        # How the access log writes a due batch (AccessLog.defer): None = by the query; the daemon
        # passes one that runs it on a worker thread, so no get_context waits for SQLite.
        self.access_log_defer: Callable[[Callable[[], None]], None] | None = None
        # How a query runs its GIL-free part beside the rest (query.gather_candidates: the product of
        # the query's embedding with every row, numpy without the interpreter lock): None = in the
        # calling thread, when needed; the daemon passes a helper thread (daemon/query_helper.py), so
        # that ~0.7 ms runs on the second core while the query searches the index.
        self.query_helper: Callable[[Callable[[], Any]], Callable[[], Any]] | None = None
        # Where the access log's hourly recount of its window runs (AccessLog.refresh_in_background):
        # None = in the query that finds it due; the daemon passes its background thread.
        self.access_log_background: Callable[[Callable[[], None]], None] | None = None

    def stored_phrase_text(self, memory: Memory) -> bytes | None:
        """A memory's phrase text (``signals.phrase_text``) from the block store the last build wrote, if it is its own.

        The keyword-overlap signal looks for the query's phrases in the text of ~35
        candidates a distinct query; reading each file back for it was ~1.3 ms of a
        query's ~12 at 10,000 memories, and a stored record is one ``pread``.
        """
        return self._block_store.phrase_text(memory)

    def _graph_settings(self) -> tuple[int, int, float]:
        """What a graph build takes besides the memories (part of the saved graph's key)."""
        return (self.config.settings.graph.implicit_edge_min_shared_tags, MAX_TAG_MEMBERS, DAMPING)

    def save_graph(self) -> bool:
        """Save the current graph for the next start (at close); nothing when it is stale or never built.

        The key is computed from the snapshot the graph was built from (the tracker keeps
        it), not from the store, which a writer may have changed since.
        """
        with self._derived_lock:
            cached = self._graph
            if self.state_dir is None or cached is None or cached[0] != self._generation:
                return False
            if self._graph_saved is not None and self._graph_saved[0] == cached[0]:
                return False  # this generation's graph is the one on disk (saved, or read at the start)
            basis = self._graph_tracker.basis_of(cached[1])
        if basis is None:
            return False
        memories, settings = basis
        key = graph_cache.store_key(memories, settings)
        if key is None:
            return False
        graph_cache.save_graph(graph_cache.graph_path(self.state_dir), key, cached[1])
        self._graph_saved = (cached[0], time.monotonic())
        return True

    def save_graph_if_due(self, interval_s: float = GRAPH_SAVE_INTERVAL_S) -> bool:
        """After a refresh (the daemon, off the query path): save the current graph unless one was saved lately.

        So a daemon that stops right after a change, before its graph catches up, or
        that is killed, leaves a recent graph for the next start: at most one save every
        ``interval_s`` (~0.2-0.3 s of work at 100,000 memories).
        """
        saved = self._graph_saved
        if saved is not None and time.monotonic() - saved[1] < interval_s:
            return False
        return self.save_graph()

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
            self.stop_flag.check()  # every progress step is a safe point to stop at
            self._set_progress(
                Progress(job, phase, base + done, of if of is not None else (total or 0), partial, started)
            )

        return report

    def _require_loaded(self) -> None:
        if not self._loaded:
            raise RuntimeError("Engine.load() has not been called")

    def _bump(self) -> None:
        self._generation += 1

    @property
    def generation(self) -> int:
        """Moves on with every change to the store: a key for caches derived from it."""
        return self._generation

    def _require_index(self) -> MemoryIndex:
        """The open index (``load`` creates it; every caller runs after ``load``)."""
        if self.index is None:
            raise RuntimeError("Engine.load() has not been called")
        return self.index

    def _require_state_dir(self) -> Path:
        """The workspace's ``.ctxos`` folder (``load`` sets it)."""
        if self.state_dir is None:
            raise RuntimeError("Engine.load() has not been called")
        return self.state_dir

    def _sync_index(self, summary: ChangeSummary) -> ChangeSummary:
        """Make the index match the store: re-index differing checksums, drop stale paths."""
        upserts, _changed = self._index_catch_up(summary)
        summary.unchanged = len(self.store.memories) - upserts
        return summary

    def _index_catch_up(self, summary: ChangeSummary) -> tuple[int, bool]:
        """Re-index memories the index holds another checksum for, drop paths the store no longer has.

        What it did is added to ``summary``; returns how many memories were
        re-indexed and whether the index changed at all.
        """
        index = self._require_index()
        indexed = index.checksums()
        upserts = [m for m in self.store.memories.values() if not index.is_current(m)]
        stale = [p for p in indexed if p not in self.store.by_path]
        if upserts or stale:
            index.update(upserts, stale)
            summary.updated = sorted({*summary.updated, *(m.id for m in upserts)})
            summary.paths = sorted({*summary.paths, *(m.rel_path for m in upserts), *stale})
        return len(upserts), bool(upserts or stale)
