"""The link graph kept current by patching it for the memories a change batch touched.

A full ``build_graph`` at 10,000 memories is ~220 ms on a quiet machine
(resolving ~11,000 links, grouping ~25,000 tags, PageRank). The daemon
rebuilt it after every editor save, beside the first query that looked for
the saved file. ``GraphTracker`` keeps the last graph with what it was built
from and, when few memories changed, builds the next one from it:

- the changed memories are found by identity (the store replaces a memory's
  object whenever its file, id or name changes), so no change summary has to
  be threaded through;
- their own links are resolved again, and so are the other memories' links
  whose answer may have moved: each link remembers the catalog entries its
  resolution read (``MemoryStore.link_lookups``: an id, a file stem, a loose
  name), and a changed memory names the entries it is found under
  (``MemoryStore.memory_lookups``), before and after the change;
- implicit (shared-tag) edges of a changed memory are found through a
  tag -> members map; when a tag crosses ``max_tag_members`` (its edges all
  appear or vanish) the graph is built in full;
- PageRank runs again only when the nodes or the explicit edges changed.

The result equals ``build_graph`` on the same store (tests/test_graph_update.py
checks this after sequences of edits, renames and deletes on real files);
``build_graph`` stays the reference and the path for bursts. The previous
graph is never modified: queries on other threads may still read it, so every
set that changes is a new set in a shallow copy of the maps.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Protocol

from . import groups
from .graph import (
    DAMPING,
    MAX_TAG_MEMBERS,
    LinkGraph,
    ResolvedLinks,
    authority,
    graph_from_links,
    neighbour_tuple,
    patch_dangling,
    resolve_all_links,
    resolve_links,
    tag_set,
)
from .model import Memory
from .stop_flag import Check, never

# A batch changing more memories than this rebuilds the graph in full: a burst (git checkout)
# touches thousands of links, and one full build then costs less than the patching.
MAX_CHANGED = 64


class Catalog(Protocol):
    """What the tracker needs from the store (``services/store.MemoryStore``)."""

    def resolve_link(self, target: str, source: str | None = None) -> str | None: ...

    def link_lookups(self, target: str, source: str | None = None) -> set[str]: ...

    def memory_lookups(self, memory: Memory) -> set[str]: ...


class GraphTracker:
    """The last link graph and what it was built from; ``graph_for`` patches or rebuilds it.

    Not thread-safe: one caller at a time (the engine holds its derived-state lock).
    """

    def __init__(self) -> None:
        self._graph: LinkGraph | None = None
        self._settings: tuple[int, int, float] = (0, 0, 0.0)
        self._memories: dict[str, Memory] = {}  # id -> the object the graph was built from
        self._links: dict[str, ResolvedLinks] = {}  # source id -> its resolved links
        # Compact groups (groups.py, as in the store), not sets: most entries hold one or two ids, and at
        # 10,000 memories ~19,000 entries plus ~5,000 tags held ~5 MiB more as sets.
        # hash(catalog entry) -> sources whose links read it. Keyed by the entry's hash, not its text: an
        # int is half a ~67-byte entry string (~3.5 MiB at 100,000 memories, issue 16); two entries
        # sharing a hash only make a patch re-resolve a few more links, to the same answers.
        self._dependents: dict[int, groups.Group] = {}
        self._members: dict[str, groups.Group] = {}  # tag -> ids carrying it (tag_set)
        self.last_update = "none"  # what the last call did: "full", "patched" or "unchanged"

    def graph_for(
        self,
        memories: Mapping[str, Memory],
        catalog: Catalog,
        *,
        min_shared_tags: int = 2,
        max_tag_members: int = MAX_TAG_MEMBERS,
        damping: float = DAMPING,
        check: Check = never,
    ) -> LinkGraph:
        """The graph for ``memories`` (id -> memory: a snapshot of what ``catalog`` serves)."""
        settings = (min_shared_tags, max_tag_members, damping)
        snapshot = dict(memories)
        previous = self._graph
        if previous is not None and settings == self._settings:
            old = self._memories
            changed = {mid for mid, memory in snapshot.items() if old.get(mid) is not memory}
            changed.update(mid for mid in old if mid not in snapshot)
            if not changed:
                self.last_update = "unchanged"
                return previous
            if len(changed) <= MAX_CHANGED:
                try:
                    patched = self._patch(previous, snapshot, changed, catalog)
                except BaseException:
                    self._graph = None  # maps half moved: the next call builds in full
                    raise
                if patched is not None:
                    self.last_update = "patched"
                    return patched
        return self._full(snapshot, catalog, settings, check)

    def basis_of(self, graph: LinkGraph) -> tuple[Mapping[str, Memory], tuple[int, int, float]] | None:
        """The snapshot of memories and the settings ``graph`` was built from, if it is this tracker's last graph.

        What a saved graph's key is computed from (``graph_cache``): the store itself may
        already hold a newer change than the graph.
        """
        if graph is not self._graph:
            return None
        return self._memories, self._settings

    # --- full build --------------------------------------------------------------------
    def _full(
        self, memories: dict[str, Memory], catalog: Catalog, settings: tuple[int, int, float], check: Check
    ) -> LinkGraph:
        # What a patch needs goes before the build, not after it: a full build after a burst
        # (a checkout, the start-up scratch expiry) otherwise held both generations' maps at its
        # peak (~5 MiB at 10,000 memories), and the new maps were placed in fresh arenas (issue 16).
        self._graph = None
        self._memories, self._links, self._dependents, self._members = {}, {}, {}, {}
        min_shared, max_members, damping = settings
        values = list(memories.values())
        links = resolve_all_links(values, set(memories), catalog.resolve_link, check)
        graph = graph_from_links(
            values, links, min_shared_tags=min_shared, max_tag_members=max_members, damping=damping, check=check
        )
        dependents: dict[int, dict[str, None]] = defaultdict(dict)
        for source, resolved in links.items():
            rel_path = memories[source].rel_path
            for target, _ in resolved:
                for key in catalog.link_lookups(target, rel_path):
                    dependents[hash(key)][source] = None
        members: dict[str, list[str]] = defaultdict(list)
        if min_shared > 0:
            for memory in values:
                for tag in tag_set(memory):
                    members[tag].append(memory.id)
        self._links = links
        self._dependents = {key: groups.of(list(ids)) for key, ids in dependents.items()}
        self._members = {tag: groups.of(ids) for tag, ids in members.items()}
        self._memories, self._settings, self._graph = memories, settings, graph
        self.last_update = "full"
        return graph

    # --- patch -------------------------------------------------------------------------
    def _patch(
        self, previous: LinkGraph, memories: dict[str, Memory], changed: set[str], catalog: Catalog
    ) -> LinkGraph | None:
        """The next graph from ``previous`` for the ``changed`` ids; None when it must be built in full."""
        min_shared, max_members, damping = self._settings
        old = self._memories
        skipped = set(previous.skipped_tags)
        if min_shared > 0 and not self._move_tags(old, memories, changed, max_members, skipped):
            return None
        touched: set[str] = set()
        for mid in changed:
            before, after = old.get(mid), memories.get(mid)
            if before is not None and after is not None and _found_alike(before, after):
                continue  # an edit that keeps how the memory is found: no other link's answer moves
            for memory in (before, after):
                if memory is not None:
                    touched |= catalog.memory_lookups(memory)
        sources = set(changed)
        for key in touched:
            sources.update(groups.members(self._dependents.get(hash(key))))
        known = set(memories)
        nodes_changed = len(known) != len(old) or not known.issuperset(old)
        graph = LinkGraph(
            nodes=sorted(known) if nodes_changed else previous.nodes,
            outgoing=dict(previous.outgoing),
            incoming=dict(previous.incoming),
            implicit=dict(previous.implicit),
            skipped_tags=previous.skipped_tags,
        )
        edges_changed = self._relink(graph, previous, memories, sources, changed, known, catalog)
        graph.dangling = patch_dangling(previous.dangling, self._links, sources)
        if min_shared > 0:
            _patch_implicit(graph, previous, memories, changed, self._members, min_shared, skipped)
        graph.authority = authority(graph, damping) if nodes_changed or edges_changed else previous.authority
        self._memories, self._graph = memories, graph
        return graph

    def _move_tags(
        self,
        old: Mapping[str, Memory],
        memories: Mapping[str, Memory],
        changed: set[str],
        max_members: int,
        skipped: set[str],
    ) -> bool:
        """Move the changed memories in the tag -> members map; False when a tag crossed ``max_members``."""
        members = self._members
        moved: set[str] = set()
        for mid in changed:
            before, after = old.get(mid), memories.get(mid)
            old_tags = set(tag_set(before)) if before is not None else set()
            new_tags = set(tag_set(after)) if after is not None else set()
            for tag in old_tags - new_tags:
                groups.discard(members, tag, mid)
                moved.add(tag)
            for tag in new_tags - old_tags:
                groups.add(members, tag, mid)
                moved.add(tag)
        crossed = False
        for tag in moved:
            crossed = crossed or (len(groups.members(members.get(tag))) > max_members) != (tag in skipped)
        return not crossed  # the caller builds in full, which refills the map

    def _relink(
        self,
        graph: LinkGraph,
        previous: LinkGraph,
        memories: Mapping[str, Memory],
        sources: set[str],
        changed: set[str],
        known: set[str],
        catalog: Catalog,
    ) -> bool:
        """Resolve the links of ``sources`` again and move their edges; True if an explicit edge changed."""
        gained: dict[str, set[str]] = defaultdict(set)
        lost: dict[str, set[str]] = defaultdict(set)
        cache: dict[tuple[str, str], str | None] = {}
        for source in sources:
            memory = memories.get(source)
            links = resolve_links(memory, known, catalog.resolve_link, cache) if memory is not None else ()
            if source in changed:  # its link texts or its folder may differ: move its catalog entries
                self._move_dependents(source, self._memories.get(source), memory, links, catalog)
            if links:
                self._links[source] = links
            else:
                self._links.pop(source, None)
            before = set(previous.outgoing.get(source, ()))
            after = {found for _, found in links if found is not None and found != source}
            if after == before:
                continue
            for target in before - after:
                lost[target].add(source)
            for target in after - before:
                gained[target].add(source)
            if after:
                graph.outgoing[source] = neighbour_tuple(after)
            else:
                graph.outgoing.pop(source, None)
        for target in gained.keys() | lost.keys():
            incoming = (set(previous.incoming.get(target, ())) - lost.get(target, set())) | gained.get(target, set())
            if incoming:
                graph.incoming[target] = neighbour_tuple(incoming)
            else:
                graph.incoming.pop(target, None)
        return bool(gained or lost)

    def _move_dependents(
        self, source: str, before: Memory | None, after: Memory | None, links: ResolvedLinks, catalog: Catalog
    ) -> None:
        dependents = self._dependents
        if before is not None:
            for target, _ in self._links.get(source, ()):
                for key in catalog.link_lookups(target, before.rel_path):
                    groups.discard(dependents, hash(key), source)
        if after is not None:
            for target, _ in links:
                for key in catalog.link_lookups(target, after.rel_path):
                    groups.add(dependents, hash(key), source)


def _found_alike(before: Memory, after: Memory) -> bool:
    """Does ``resolve_link`` find both versions of a memory the same way (id, path, names, explicit id)?"""
    return (
        before.id == after.id
        and before.rel_path == after.rel_path
        and before.explicit_id == after.explicit_id
        and before.title == after.title
        and before.frontmatter_title == after.frontmatter_title
    )


def _patch_implicit(
    graph: LinkGraph,
    previous: LinkGraph,
    memories: Mapping[str, Memory],
    changed: set[str],
    members: Mapping[str, groups.Group],
    min_shared: int,
    skipped: set[str],
) -> None:
    """Move the shared-tag edges of the changed memories (each entry that changes is a new tuple)."""
    now: dict[str, set[str]] = {}
    for mid in changed:
        memory = memories.get(mid)
        now[mid] = _tag_neighbours(memory, members, min_shared, skipped) if memory is not None else set()
    dirty: set[str] = set()
    for mid in changed:
        dirty.update(previous.implicit.get(mid, ()))
        dirty.update(now[mid])
    for other in dirty - changed:
        fresh = {n for n in previous.implicit.get(other, ()) if n not in changed}
        fresh.update(mid for mid in changed if other in now[mid])
        if fresh:
            graph.implicit[other] = neighbour_tuple(fresh)
        else:
            graph.implicit.pop(other, None)
    for mid in changed:
        if now[mid]:
            graph.implicit[mid] = neighbour_tuple(now[mid])
        else:
            graph.implicit.pop(mid, None)


def _tag_neighbours(
    memory: Memory, members: Mapping[str, groups.Group], min_shared: int, skipped: set[str]
) -> set[str]:
    """Ids sharing at least ``min_shared`` of ``memory``'s tags, ``skipped`` (too common) tags left out.

    The same pairs ``graph._add_implicit_edges`` joins: two memories share a
    ``min_shared``-subset of kept tags exactly when they share that many kept tags.
    """
    kept = [tag for tag in tag_set(memory) if tag not in skipped]
    if len(kept) < min_shared:
        return set()
    counts: dict[str, int] = defaultdict(int)
    for tag in kept:
        for other in groups.members(members.get(tag)):
            counts[other] += 1
    found = {other for other, n in counts.items() if n >= min_shared}
    found.discard(memory.id)
    return found
