"""State the query path derives from the store, cached per store generation.

The link graph, the community map, the pinned / important / recent lists and
token counts are rebuilt from a snapshot of the store when its generation
moves on, and swapped in with one assignment, so queries may read them beside
the one writer.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping

from .. import graph_cache
from ..graph import LinkGraph
from ..index import heading_tokens
from ..model import Memory
from ..render import block_heading, block_key, catalog_line, catalog_line_tokens, l1_block_tokens, memory_block
from ..render_cache import CATALOG, RenderedBlock
from ..semantic import PrototypeClassifier
from ..tokens import default_counter, heuristic_floor, join_count
from . import lists
from .state import EngineState

log = logging.getLogger(__name__)

TOKEN_CACHE_MAX = 200_000
FLOOR_L2 = "L2>="  # the token cache's key for an L2 block's lower bound (``block_tokens_at_least``)
STALE_GENERATION = -1  # the generation of a saved graph of other files: never current, so it is rebuilt
WARM_LIST_SIZE = 64  # warm_query_caches: important/recent lists this long (queries ask for <= 40)


class DerivedState(EngineState):
    """The graph, communities, candidate lists and token counts the query path reads."""

    def graph(self, *, stale_ok: bool = False) -> LinkGraph:
        """The link graph for the current store (rebuilt lazily after changes).

        ``stale_ok`` (the query path passes it) with ``allow_stale_graph``
        (the daemon sets it): a graph built for an older generation is served
        as is, and the owner calls ``refresh_graph()`` off the query path
        after each change batch. A query then never pays for the rebuild, at
        the price of neighbours and authority lagging a change by one refresh
        (BM25 and the memories themselves are always current, and ids the
        store no longer holds are skipped). Every other caller (communities,
        graph views, governance) gets the current graph. Right after a start
        such a query serves the graph saved at the last close (``_adopt_saved_graph``)
        rather than build one.
        """
        cached = self._graph
        if cached is not None and (cached[0] == self._generation or (stale_ok and self.allow_stale_graph)):
            return cached[1]
        if cached is None and stale_ok and self.allow_stale_graph:
            adopted = self._adopt_saved_graph()
            if adopted is not None:
                return adopted
        return self.refresh_graph()

    def _adopt_saved_graph(self) -> LinkGraph | None:
        """The first graph from the file saved at the last close, without a build; None when there is none.

        A graph of exactly this store is this generation's. In the daemon
        (``allow_stale_graph``) one of other files is kept as a stale graph, like
        the graph a change leaves behind: queries serve it while ``refresh_graph``
        (the daemon runs it right after ready) builds the current one.
        """
        with self._derived_lock:
            if self._graph is None:
                self._install_saved_graph(self._generation)
            cached = self._graph
            return cached[1] if cached is not None else None

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
            # The first graph after a start: the one saved at the last close when the store is the
            # same (services/graph_cache.py). Otherwise patched from the last graph when a few
            # memories changed (an editor's save), built in full otherwise (services/graph_update.py);
            # the same graph every way.
            graph = self._install_saved_graph(generation) if cached is None else None
            if graph is None:
                min_shared, max_members, damping = self._graph_settings()
                graph = self._graph_tracker.graph_for(
                    self.store.memories,
                    self.store,
                    min_shared_tags=min_shared,
                    max_tag_members=max_members,
                    damping=damping,
                    check=self.stop_flag.check,
                )
            self._graph = (generation, graph)
        if self.allow_stale_graph and self._community_override is None:
            self._load_communities()
        return graph

    def _install_saved_graph(self, generation: int) -> LinkGraph | None:
        """Under ``_derived_lock``, with no graph yet: install the graph saved at the last close (read once).

        A graph of exactly this store becomes ``generation``'s and is returned. In the
        daemon (``allow_stale_graph``) one of other files is installed as a stale graph,
        which queries serve while the current one is built; elsewhere it is ignored.
        None unless the installed graph is current.
        """
        if self.state_dir is None or self._saved_graph_tried:
            return None
        self._saved_graph_tried = True
        saved = graph_cache.load_graph(graph_cache.graph_path(self.state_dir))
        if saved is None:
            return None
        exact = saved.key == graph_cache.store_key(dict(self.store.memories), self._graph_settings())
        log.info(
            "link graph read from %s (%d memories, %s)",
            graph_cache.GRAPH_FILENAME,
            len(saved.graph.nodes),
            "these files" if exact else "other files: served until the current one is built",
        )
        if not exact:
            if self.allow_stale_graph:
                self._graph = (STALE_GENERATION, saved.graph)
            return None
        self._graph = (generation, saved.graph)
        self._graph_saved = (generation, time.monotonic())
        return saved.graph

    def pinned_ids(self) -> list[str]:
        """Rules and always_load memories: always candidates, rendered first."""
        return self._query_lists(0).pinned

    def important_ids(self, limit: int) -> list[str]:
        """The ``limit`` most important memories (then most recent), candidates for every query.

        Seed §4.2: high-importance memories are loaded even when less directly
        relevant; the composite still decides whether they earn a place.
        """
        if limit <= 0:
            return []
        return self._query_lists(limit).important[:limit]

    def recent_ids(self, limit: int) -> list[str]:
        """The ``limit`` most recently changed memories (for the catalog), cached per generation."""
        if limit <= 0:
            return []
        return self._query_lists(limit).recent[:limit]

    def warm_query_caches(self) -> None:
        """Compute the per-generation lists every query needs (pinned, important, recent) now.

        The daemon calls this off the query path after each change batch and once
        it is ready, so the first query after an editor's save (or a restart) does
        not pay for it; after a few changes they are patched, not recomputed
        (``engine/lists.py``). The access log's frequency counts, which the load
        leaves uncounted, are counted here too (a no-op once counted).
        """
        self._query_lists(WARM_LIST_SIZE)
        if self.access_log is not None:
            self.access_log.frequency_counts()  # left by the load (AccessLog.lazy_counts): counted here once

    def _query_lists(self, limit: int) -> lists.QueryLists:
        """The lists for the current generation (patched from the last ones when few memories changed)."""
        cached = self._lists
        generation = self._generation
        if cached is not None and cached.generation == generation and limit <= cached.size:
            return cached
        size = max(limit, lists.LIST_SIZE)
        fresh = lists.patch(cached, self.store.memories, generation, size) if cached is not None else None
        if fresh is None:
            fresh = lists.compute(self.store.memories, generation, size)
        self._lists = fresh
        return fresh

    def intent_classifier(self) -> PrototypeClassifier | None:
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
        self._community_override = self._held_communities(mapping)

    def _held_communities(self, mapping: Mapping[str, int] | None) -> dict[str, int] | None:
        """``mapping`` as the engine keeps it: keyed by the store's own id strings, one int per community.

        Read from ``communities.json``, every key was a fresh copy of an id the store holds
        already, and every community number past 256 an int of its own: ~6 MiB at 100,000
        memories, held as long as the map (issue 16). Ids the store does not know keep theirs.
        """
        if mapping is None:
            return None
        memories = self.store.memories
        numbers: dict[int, int] = {}
        held: dict[str, int] = {}
        for mid, community in mapping.items():
            memory = memories.get(mid)
            held[memory.id if memory is not None and memory.id == mid else mid] = numbers.setdefault(
                community, community
            )
        return held

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
        """Read the community map from disk, unless the file is the one read last time.

        The daemon calls this after every change batch (``refresh_graph``): parsing the
        ~10,000-entry JSON again was ~10 ms per editor save beside the probe query, while
        the file changes only when the communities job rewrites it (atomically: a new inode).
        """
        from ..communities import communities_path, load_communities

        generation = self._generation
        try:
            info = os.stat(communities_path(self.root))
            stamp: tuple[int, int, int] | None = (info.st_ino, info.st_mtime_ns, info.st_size)
        except OSError:
            stamp = None
        cached = self._communities
        if stamp is not None and cached is not None and self._communities_stamp == stamp:
            self._communities = (generation, cached[1])
            return cached[1]
        mapping: Mapping[str, int] | None = None
        try:
            cmap = load_communities(self.root)
            mapping = self._held_communities(cmap.community_of()) if cmap is not None else None
        except Exception as exc:  # a damaged cache file must not break queries
            log.warning("communities unavailable: %s", exc)
        self._communities, self._communities_stamp = (generation, mapping), stamp
        return mapping

    def catalog_tokens(self, memory: Memory) -> int:
        """Tokens of a memory's catalog line (cached like ``block_tokens``)."""
        return self.block_tokens(memory, CATALOG)

    def heading_tokens(self, memory: Memory) -> tuple[str, ...]:
        """Analysed tokens of a memory's summary line, title, id and tags (``index.heading_tokens``: kept per parse)."""
        return heading_tokens(memory)

    def block_tokens(self, memory: Memory, tier: str) -> int:
        """Tokens of a memory's rendered block at a tier (or ``CATALOG``), cached per ``render.block_key`` and counter.

        Under the default counter the L1 block and the catalog line are counted once
        per parse and kept on the memory (``render.l1_block_tokens``); L2 blocks (a
        few per query: the upgrades) and any other counter's counts are cached here.

        An L2 block under the default counter is counted from its rendering in the block
        cache (``join_count`` of its piece costs: the same number): the planner asks for
        the L2s it may upgrade (the best few relevant memories), which the query then
        mostly shows, so the text is fetched once instead of twice (on a miss, one read of
        the block store, which holds the L2 block and its costs since session 23). Other
        tiers are counted, not rendered into the block cache: the planner costs ~155
        L1 blocks a query, and filling the cache with the ones it does not show cost more
        than rendering the shown ones again (A/B at 10,000).
        """
        default = self.counter is default_counter()
        if default:  # the L1 block and the catalog line are counted once per parse
            if tier == "L1":
                return l1_block_tokens(memory)
            if tier == CATALOG:
                return catalog_line_tokens(memory)
        key = block_key(memory, tier)
        value = self._token_cache.get(key)
        if value is None:
            if len(self._token_cache) > TOKEN_CACHE_MAX:
                self._token_cache = {}
            costs = self.rendered_block(memory, tier).costs if default and tier == "L2" else None
            if costs is not None:
                value = join_count([(costs, 0)])
            else:
                text = catalog_line(memory) if tier == CATALOG else memory_block(memory, tier)
                value = self.counter.count(text)
            self._token_cache[key] = value
        return value

    def block_tokens_at_least(self, memory: Memory, tier: str) -> int:
        """A lower bound of ``block_tokens(memory, tier)``: the count itself when it is cheap or known.

        An L2 block not yet counted under the default counter is bounded by its
        whitespace-separated runs (``tokens.heuristic_floor``): the tier planner tries
        the L2 of every relevant memory until three upgrades fit (~7.6 a distinct query
        at 10,000 for ~2.8 upgrades) and most of the rest do not fit by far, so their
        ~1,000 characters need no tokenizing. The text's part of the bound comes from
        the block store when the last build stored it for this file (one ``pread``);
        otherwise the text is read (the LRU in ``tier_source`` keeps it for the count
        when it may fit). The bound is kept in the token cache beside the counts
        (pseudo-tier ``L2>=``), so a query seen again neither reads nor splits the text.
        """
        if tier != "L2" or self.counter is not default_counter():
            return self.block_tokens(memory, tier)
        cache = self._token_cache
        value = cache.get(block_key(memory, tier))
        if value is None:
            key = block_key(memory, FLOOR_L2)
            value = cache.get(key)
            if value is None:
                if len(cache) > TOKEN_CACHE_MAX:
                    cache = self._token_cache = {}
                stored = self._block_store.l2_text_floor(memory)  # one pread instead of reading the file back
                if stored is not None:
                    value = heuristic_floor(block_heading(memory, tier)) + stored
                else:
                    value = heuristic_floor(memory_block(memory, tier))
                cache[key] = value
        return value

    def rendered_block(self, memory: Memory, tier: str) -> RenderedBlock:
        """A memory's block at a tier (or ``render_cache.CATALOG``: its catalog line), text and piece costs.

        From a bounded LRU of recently rendered blocks, so a query reads back and
        tokenizes only the texts it did not render lately; under the default counter
        a missed L1 or L2 block or catalog line comes from the block store the last build
        wrote (services/block_store.py) when it holds this memory's.
        """
        counter = self.counter
        store = self._block_store if counter is default_counter() else None
        return self._block_cache.block(memory, tier, counter, store)
