"""Positions for the graph view: each community laid out on its own, the communities apart.

A force layout of the whole graph draws a 175-note vault as one tangle: the
communities Leiden found are there, but overlap on screen. Here each community
is laid out alone (igraph's Kamada-Kawai up to 400 members, Fruchterman-Reingold
above, from fixed circle positions and a seeded generator, so the same graph
always gives the same picture) and scaled to a disc whose area
grows with its size; the discs are then placed largest first on a spiral around
the centre, each as close as it fits without touching a placed one. Memories
with no edge (their own one-member communities) go in a grid below.

Cost: a layout per community plus the placement (a spiral for the 120 largest,
rows for the rest); about 0.2 s for the 7,000-page tldr corpus (``bench_governance.py``). The
daemon caches the result per community map (``layout_for``).
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Iterable, Mapping, Sequence

SPACING = 55.0  # distance between neighbouring memories, in layout units (pixels at zoom 1)
GAP = 100.0  # space between two communities' discs
FR_ITERATIONS = 300
KK_MAX_NODES = 400
SPIRAL_MAX = 120  # communities placed on the spiral; smaller ones are packed in rows below
LAYOUT_SEED = 42
_RNG_LOCK = threading.Lock()
_CACHE: dict[str, dict[str, tuple[float, float]]] = {}


def _local_layout(members: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[tuple[float, float]]:
    """Positions of one community's members, centred on 0, fitting in a disc of radius ~ SPACING*sqrt(n)."""
    n = len(members)
    if n == 1:
        return [(0.0, 0.0)]
    import igraph as ig

    index = {m: i for i, m in enumerate(members)}
    pairs = sorted({(min(index[a], index[b]), max(index[a], index[b])) for a, b in edges if a != b})
    graph = ig.Graph(n=n, edges=pairs, directed=False)
    start = [[math.cos(2 * math.pi * i / n), math.sin(2 * math.pi * i / n)] for i in range(n)]
    with _RNG_LOCK:  # the layouts jitter with igraph's RNG: a seeded one, then the default (random module) back
        ig.set_random_number_generator(random.Random(LAYOUT_SEED))
        try:
            if n <= KK_MAX_NODES:  # Kamada-Kawai spreads a dense cluster evenly (O(n^2): small communities only)
                coords = graph.layout_kamada_kawai(seed=start, maxiter=50 * n).coords
            else:
                coords = graph.layout_fruchterman_reingold(
                    seed=start, niter=FR_ITERATIONS, grid="grid" if n > 1000 else "nogrid"
                ).coords
        finally:
            ig.set_random_number_generator(random)
    cx = sum(x for x, _ in coords) / n
    cy = sum(y for _, y in coords) / n
    # Scale by the typical distance from the centre, not the farthest member: one outlier must
    # not squeeze the rest of the community into a clump.
    distances = sorted(math.hypot(x - cx, y - cy) for x, y in coords)
    radius = distances[int(len(distances) * 0.8)] or distances[-1] or 1.0
    target = SPACING * math.sqrt(n) * 0.6
    return [((x - cx) * target / radius, (y - cy) * target / radius) for x, y in coords]


def _place_discs(radii: Sequence[float]) -> list[tuple[float, float]]:
    """Centres for discs of the given radii (largest first), none overlapping.

    The largest ``SPIRAL_MAX`` go on a spiral around the centre (each as close as it
    fits: O(n^2), so only for the ones that matter); the many small rest are packed
    in rows below them, which keeps a 7,000-memory workspace well under a second.
    """
    head = _spiral(radii[:SPIRAL_MAX])
    rest = radii[SPIRAL_MAX:]
    if not rest:
        return head
    left = min(x - r for (x, _), r in zip(head, radii))
    right = max(x + r for (x, _), r in zip(head, radii))
    y = max(y + r for (_, y), r in zip(head, radii)) + GAP
    x, row = left, 0.0
    for r in rest:
        if x > left and x + 2 * r > right:
            x, y, row = left, y + row + GAP, 0.0
        head.append((x + r, y + r))
        x += 2 * r + GAP
        row = max(row, 2 * r)
    return head


def _spiral(radii: Sequence[float]) -> list[tuple[float, float]]:
    placed: list[tuple[float, float, float]] = []
    centres: list[tuple[float, float]] = []
    for r in radii:
        if not placed:
            centre = (0.0, 0.0)
        else:
            angle, distance = 0.0, placed[0][2] + r + GAP
            while True:
                x, y = distance * math.cos(angle), distance * math.sin(angle)
                if all(math.hypot(x - px, y - py) >= pr + r + GAP for px, py, pr in placed):
                    centre = (x, y)
                    break
                angle += max(0.15, (r + GAP) / distance)
                distance += (r + GAP) * 0.04
        placed.append((centre[0], centre[1], r))
        centres.append(centre)
    return centres


def community_layout(
    nodes: Iterable[str], edges: Iterable[tuple[str, str]], communities: Mapping[str, int | None]
) -> dict[str, tuple[float, float]]:
    """``{id: (x, y)}``: communities laid out separately and placed apart (deterministic)."""
    node_list = sorted(set(nodes))
    edge_list = [(a, b) for a, b in edges]
    degree: dict[str, int] = {n: 0 for n in node_list}
    for a, b in edge_list:
        if a in degree and b in degree and a != b:
            degree[a] += 1
            degree[b] += 1
    groups: dict[int, list[str]] = {}
    loners: list[str] = []
    for node in node_list:
        number = communities.get(node)
        if number is None or degree[node] == 0:
            loners.append(node)
        else:
            groups.setdefault(number, []).append(node)
    ordered = sorted(groups, key=lambda c: (-len(groups[c]), c))
    local_edges: dict[int, list[tuple[str, str]]] = {c: [] for c in ordered}
    for a, b in edge_list:
        ca, cb = communities.get(a), communities.get(b)
        if ca is not None and ca == cb and ca in local_edges:
            local_edges[ca].append((a, b))
    positions: dict[str, tuple[float, float]] = {}
    layouts = {c: _local_layout(groups[c], local_edges[c]) for c in ordered}
    radii = [max([math.hypot(x, y) for x, y in layouts[c]] + [SPACING / 2]) for c in ordered]
    for c, (cx, cy) in zip(ordered, _place_discs(radii)):
        for member, (x, y) in zip(groups[c], layouts[c]):
            positions[member] = (round(cx + x, 1), round(cy + y, 1))
    if loners:
        bottom = max((y for _, y in positions.values()), default=0.0) + GAP * 2
        left = min((x for x, _ in positions.values()), default=0.0)
        per_row = max(1, int(math.sqrt(len(loners)) * 2))
        for i, node in enumerate(loners):
            positions[node] = (round(left + (i % per_row) * SPACING, 1), round(bottom + (i // per_row) * SPACING, 1))
    return positions


def layout_for(
    fingerprint: str, nodes: Iterable[str], edges: Iterable[tuple[str, str]], communities: Mapping[str, int | None]
) -> dict[str, tuple[float, float]]:
    """``community_layout`` cached by the community map's fingerprint (same graph, same picture)."""
    cached = _CACHE.get(fingerprint)
    if cached is None:
        cached = community_layout(nodes, edges, communities)
        if len(_CACHE) > 8:
            _CACHE.clear()
        _CACHE[fingerprint] = cached
    return cached
