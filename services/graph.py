"""The link graph between memories: explicit links, implicit tag edges, authority.

Explicit edges come from ``related``, ``requires``, ``optional`` and
``[[wikilinks]]`` (resolved to ids by the store's loose matching: id, file
stem or title). Implicit, undirected edges join memories that share at least
``min_shared_tags`` tags. Authority is PageRank over the explicit edges (a
memory many others point to is a hub worth loading), rescaled so the least
linked memory gets 0 and the most authoritative 1. Links that name no memory
are kept as ``dangling`` for governance.

Plain data plus igraph's C PageRank: building it for 10,000 memories takes
~220 ms. The engine builds it lazily after changes, and patches it when few
memories changed (``graph_update.py``: an editor's save costs ~15 ms); this
full build is the reference the patch must equal, and the path for bursts.
``communities.py`` (Leiden) reads ``edges()``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from . import igraph_core
from .model import Memory
from .stop_flag import Check, checked, never

EXPLICIT_WEIGHT = 1.0
IMPLICIT_WEIGHT = 0.5
# A tag carried by more memories than this is too generic to link them all
# (and pairing them is quadratic); it is skipped for implicit edges.
MAX_TAG_MEMBERS = 300
DAMPING = 0.85  # PageRank's damping for the authority signal


# One memory's resolved links: (link text, the id it names, or None when it names no memory).
ResolvedLinks = tuple[tuple[str, str | None], ...]


# A memory's neighbours of one kind: sorted, distinct, never empty (a memory with none has no entry).
# A tuple, not a set: most memories have one or two (a set is 216 bytes, a tuple 48-56; the
# neighbour sets were ~18 MiB at 100,000 memories, issue 16).
Neighbours = tuple[str, ...]


def neighbour_tuple(ids: Iterable[str]) -> Neighbours:
    """The stored form of a memory's neighbours (see ``Neighbours``)."""
    return tuple(sorted(ids))


@dataclass
class LinkGraph:
    """Edges and authority for one snapshot of the store."""

    nodes: list[str] = field(default_factory=list)
    outgoing: dict[str, Neighbours] = field(default_factory=dict)  # explicit, directed
    incoming: dict[str, Neighbours] = field(default_factory=dict)
    implicit: dict[str, Neighbours] = field(default_factory=dict)  # shared tags, undirected
    dangling: list[tuple[str, str]] = field(default_factory=list)  # (source id, link text)
    authority: dict[str, float] = field(default_factory=dict)  # 0..1
    skipped_tags: list[str] = field(default_factory=list)

    def neighbours(self, memory_id: str) -> set[str]:
        """Everything one hop away: links out, links in, shared-tag neighbours."""
        return {
            *self.outgoing.get(memory_id, ()),
            *self.incoming.get(memory_id, ()),
            *self.implicit.get(memory_id, ()),
        }

    def explicit_edges(self) -> list[tuple[str, str]]:
        return sorted((src, dst) for src, targets in self.outgoing.items() for dst in targets)

    def implicit_edges(self) -> list[tuple[str, str]]:
        return sorted((a, b) for a, others in self.implicit.items() for b in others if a < b)

    def edges(self) -> list[tuple[str, str, float]]:
        """Weighted undirected edge list for community detection (explicit 1.0, implicit 0.5)."""
        weights: dict[tuple[str, str], float] = {}
        for src, dst in self.explicit_edges():
            key = (src, dst) if src < dst else (dst, src)
            weights[key] = max(weights.get(key, 0.0), EXPLICIT_WEIGHT)
        for a, b in self.implicit_edges():
            weights.setdefault((a, b), IMPLICIT_WEIGHT)
        return [(a, b, w) for (a, b), w in sorted(weights.items())]

    def to_dict(self) -> dict[str, object]:
        return {
            "nodes": len(self.nodes),
            "explicit_edges": [list(e) for e in self.explicit_edges()],
            "implicit_edges": [list(e) for e in self.implicit_edges()],
            "dangling": [{"source": s, "target": t} for s, t in self.dangling],
            "authority": {k: round(v, 6) for k, v in sorted(self.authority.items()) if v > 0},
        }


def build_graph(
    memories: Iterable[Memory],
    resolve: Callable[[str, str], str | None],
    *,
    min_shared_tags: int = 2,
    max_tag_members: int = MAX_TAG_MEMBERS,
    damping: float = DAMPING,
    check: Check = never,
) -> LinkGraph:
    """Build the graph for ``memories``; ``resolve(link text, linking file's path)`` gives an id or None
    (the path matters: Obsidian prefers a note in the linking note's folder).

    ``check`` is called every 1,024 memories and between the steps (the engine's
    stop flag: at 100,000 memories a build takes seconds, and a daemon stopping
    must not wait for it).
    """
    memories = list(memories)
    links = resolve_all_links(memories, {m.id for m in memories}, resolve, check)
    return graph_from_links(
        memories, links, min_shared_tags=min_shared_tags, max_tag_members=max_tag_members, damping=damping, check=check
    )


def graph_from_links(
    memories: list[Memory],
    links: dict[str, ResolvedLinks],
    *,
    min_shared_tags: int = 2,
    max_tag_members: int = MAX_TAG_MEMBERS,
    damping: float = DAMPING,
    check: Check = never,
) -> LinkGraph:
    """``build_graph`` once the links are resolved (``resolve_all_links``; the incremental update keeps them)."""
    graph = LinkGraph(nodes=sorted(m.id for m in memories))
    add_explicit_edges(graph, links)
    check()
    if min_shared_tags > 0:
        _add_implicit_edges(graph, memories, min_shared_tags, max_tag_members)
    check()
    graph.authority = authority(graph, damping)
    return graph


def resolve_links(
    memory: Memory,
    known: set[str],
    resolve: Callable[[str, str], str | None],
    cache: dict[tuple[str, str], str | None],
) -> ResolvedLinks:
    """What each of ``memory.links`` names: an id in ``known``, or None (dangling).

    A link text that is itself a known id names it; anything else goes to
    ``resolve``. ``cache`` keeps one lookup per link text and folder (the
    answer depends on the linking note's folder only).
    """
    folder = memory.rel_path.rpartition("/")[0]
    out: list[tuple[str, str | None]] = []
    for target in memory.links:
        resolved: str | None
        if target in known:
            resolved = target
        else:
            key = (target, folder)
            try:
                resolved = cache[key]
            except KeyError:
                resolved = cache[key] = resolve(target, memory.rel_path)
        out.append((target, resolved if resolved is not None and resolved in known else None))
    return tuple(out)


def resolve_all_links(
    memories: Iterable[Memory], known: set[str], resolve: Callable[[str, str], str | None], check: Check = never
) -> dict[str, ResolvedLinks]:
    """``resolve_links`` for every memory that has links, by id."""
    cache: dict[tuple[str, str], str | None] = {}
    resolved: dict[str, ResolvedLinks] = {}
    for memory in checked(memories, check):
        links = resolve_links(memory, known, resolve, cache)
        if links:
            resolved[memory.id] = links
    return resolved


def add_explicit_edges(graph: LinkGraph, resolved: dict[str, ResolvedLinks]) -> None:
    """Fill ``outgoing``, ``incoming`` and ``dangling`` from every memory's resolved links."""
    outgoing: dict[str, set[str]] = defaultdict(set)
    incoming: dict[str, set[str]] = defaultdict(set)
    for source, links in resolved.items():
        for _, found in links:
            if found is not None and found != source:
                outgoing[source].add(found)
                incoming[found].add(source)
    graph.outgoing = {mid: neighbour_tuple(ids) for mid, ids in outgoing.items()}
    graph.incoming = {mid: neighbour_tuple(ids) for mid, ids in incoming.items()}
    graph.dangling = dangling_links(resolved)


def dangling_links(resolved: dict[str, ResolvedLinks]) -> list[tuple[str, str]]:
    """Every (source id, link text) that names no memory, sorted."""
    return sorted((source, target) for source, links in resolved.items() for target, found in links if found is None)


def patch_dangling(
    previous: list[tuple[str, str]], resolved: Mapping[str, ResolvedLinks], sources: Iterable[str]
) -> list[tuple[str, str]]:
    """``dangling_links(resolved)`` from ``previous`` when only the links of ``sources`` were resolved again.

    A source's entries are one run of the sorted list, so each is replaced where it
    lies (found by bisection) and the rest is copied in slices: a save re-sorted
    every link of the workspace before (~48 ms of each graph patch at 100,000 memories).
    """
    out: list[tuple[str, str]] = []
    start = 0
    for source in sorted(set(sources)):
        low = bisect_left(previous, (source,), start)
        out.extend(previous[start:low])
        high = low
        while high < len(previous) and previous[high][0] == source:
            high += 1
        out.extend(sorted((source, target) for target, found in resolved.get(source, ()) if found is None))
        start = high
    out.extend(previous[start:])
    return out


def tag_set(memory: Memory) -> list[str]:
    """A memory's tags as implicit edges compare them: trimmed, lower-cased, unique, sorted."""
    return sorted({t.strip().lower() for t in memory.tags if t and t.strip()})


def _add_implicit_edges(graph: LinkGraph, memories: list[Memory], min_shared: int, max_members: int) -> None:
    """Join memories sharing at least ``min_shared`` tags (tags with more than ``max_members`` skipped).

    Two memories share ``min_shared`` tags exactly when both carry some
    ``min_shared``-subset of tags, so memories are grouped by each such subset
    of their own tags and every group is joined pairwise. The cost follows
    the tags per memory and the edges made, not the pairs sharing just one
    common tag (counting every pair per tag took most of a rebuild at 10,000
    memories).
    """
    tag_sets: list[tuple[str, list[str]]] = []
    members: dict[str, int] = defaultdict(int)
    for memory in memories:
        tags = tag_set(memory)
        tag_sets.append((memory.id, tags))
        for tag in tags:
            members[tag] += 1
    skipped = {tag for tag, count in members.items() if count > max_members}
    graph.skipped_tags = sorted(skipped)
    groups: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for mid, tags in tag_sets:
        kept = [t for t in tags if t not in skipped] if skipped else tags
        if len(kept) >= min_shared:
            for subset in combinations(kept, min_shared):
                groups[subset].append(mid)
    implicit: dict[str, set[str]] = {}
    for ids in groups.values():
        if len(ids) < 2:
            continue
        for a in ids:
            others = implicit.get(a)
            if others is None:
                others = implicit[a] = set()
            others.update(ids)
    graph.implicit = {a: neighbour_tuple(others - {a}) for a, others in implicit.items()}


def authority(graph: LinkGraph, damping: float) -> dict[str, float]:
    """PageRank over explicit links, rescaled to 0..1 (0 for everyone when there are no links)."""
    edges = graph.explicit_edges()
    if not edges:
        return {node: 0.0 for node in graph.nodes}
    ranks = pagerank(graph.nodes, edges, damping=damping)
    low, high = min(ranks.values()), max(ranks.values())
    if high - low <= 1e-12:
        return {node: 0.0 for node in graph.nodes}
    # One float object per distinct value: most memories share a handful of low ranks (at 100,000,
    # 7,309 distinct values, 62,000 of them 0.0), ~2 MiB of separate floats otherwise (issue 16).
    shared: dict[float, float] = {}
    scaled: dict[str, float] = {}
    for node, rank in ranks.items():
        value = (rank - low) / (high - low)
        scaled[node] = shared.setdefault(value, value)
    return scaled


# Graph algorithms: igraph (C) for all of them, through its C core alone (igraph_core.py: the package's
# Python modules cost the daemon ~4 MiB it never uses). networkx is not a dependency: its PageRank needs
# scipy and is slower at 10,000 memories (docs/engine.md#graph-library), and igraph is already
# here for Leiden (communities.py).


def pagerank(
    nodes: Sequence[str],
    edges: Sequence[tuple[str, str]],
    weights: Sequence[float] | None = None,
    *,
    damping: float = DAMPING,
) -> dict[str, float]:
    """Raw PageRank of a directed graph (sums to 1 over ``nodes``): igraph's PRPACK (its C core only)."""
    position = {node: i for i, node in enumerate(nodes)}
    ranks = igraph_core.pagerank(len(nodes), [(position[a], position[b]) for a, b in edges], weights, damping)
    return {node: ranks[i] for node, i in position.items()}


def connected_components(n: int, pairs: Iterable[tuple[int, int]]) -> list[int]:
    """The component number of each of ``n`` items joined by undirected ``pairs`` (igraph's C core)."""
    return igraph_core.component_membership(n, pairs)
