"""Leiden communities over the link graph, persisted in ``.ctxos/communities.json``.

Why a separate module: community detection is the one graph computation that is
too slow for the query path on a large workspace, so it runs after changes
(debounced, by the daemon) and on a schedule, and the query path only reads the
persisted map. The map is stored with a fingerprint of its input (nodes, edges,
seed, resolution) so an unchanged graph is never recomputed.

Determinism: nodes are sorted by id, edges are sorted, Leiden is seeded, and the
communities are renumbered canonically (largest first, ties by smallest member
id), so the same files always give the same numbers across runs and processes.

The igraph graph is built directly from integer edge lists (converting from
networkx costs more than Leiden itself at this size, see docs/DESIGN.md).
"""

from __future__ import annotations

import hashlib
import json
import math
import pickle
import re
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from .atomic import atomic_write_text
from .config import Config
from .workspace import state_dir

COMMUNITIES_FILENAME = "communities.json"
FORMAT_VERSION = 1

# An edge is (source_id, target_id) or (source_id, target_id, weight).
Edge = tuple[str, str] | tuple[str, str, float]


@dataclass
class CommunityMap:
    """Community number per memory id, plus what it was computed from."""

    fingerprint: str
    seed: int
    resolution: float
    communities: dict[str, int] = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)  # sizes[c] = members of community c
    modularity: float = 0.0
    node_count: int = 0
    edge_count: int = 0
    computed_at: str = ""
    elapsed_ms: float = 0.0

    def community_of(self) -> Mapping[str, int]:
        """The mapping the scorer takes (``community_of`` in query/signals)."""
        return self.communities

    def members(self, community: int) -> list[str]:
        return sorted(i for i, c in self.communities.items() if c == community)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "fingerprint": self.fingerprint,
            "seed": self.seed,
            "resolution": self.resolution,
            "modularity": round(self.modularity, 6),
            "node_count": self.node_count,
            "edge_count": self.edge_count,
            "computed_at": self.computed_at,
            "elapsed_ms": round(self.elapsed_ms, 3),
            "sizes": list(self.sizes),
            "communities": dict(sorted(self.communities.items())),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommunityMap:
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"unsupported communities format {data.get('version')!r}")
        communities = {str(k): int(v) for k, v in dict(data.get("communities") or {}).items()}
        return cls(
            fingerprint=str(data["fingerprint"]),
            seed=int(data.get("seed", 0)),
            resolution=float(data.get("resolution", 1.0)),
            communities=communities,
            sizes=[int(s) for s in data.get("sizes") or []],
            modularity=float(data.get("modularity", 0.0)),
            node_count=int(data.get("node_count", len(communities))),
            edge_count=int(data.get("edge_count", 0)),
            computed_at=str(data.get("computed_at", "")),
            elapsed_ms=float(data.get("elapsed_ms", 0.0)),
        )


def communities_path(root: Path) -> Path:
    return state_dir(Path(root)) / COMMUNITIES_FILENAME


def canonical_edges(node_ids: Iterable[str], edges: Iterable[Edge]) -> tuple[list[str], list[tuple[str, str, float]]]:
    """Sorted node ids and sorted undirected edges (a < b), deduplicated, keeping the largest weight.

    Edges to ids that are not nodes (dangling links) and self-loops are dropped:
    they say nothing about which memories belong together.
    """
    nodes = sorted(set(node_ids))
    known = set(nodes)
    best: dict[tuple[str, str], float] = {}
    for edge in edges:
        a, b = edge[0], edge[1]
        weight = float(edge[2]) if len(edge) > 2 else 1.0
        if a == b or a not in known or b not in known or weight <= 0:
            continue
        key = (a, b) if a < b else (b, a)
        if weight > best.get(key, 0.0):
            best[key] = weight
    return nodes, [(a, b, w) for (a, b), w in sorted(best.items())]


def graph_fingerprint(
    nodes: Sequence[str], edges: Sequence[tuple[str, str, float]], seed: int, resolution: float
) -> str:
    """Hash of the canonical input: equal fingerprints mean Leiden would give the same answer."""
    digest = hashlib.sha256()
    digest.update(f"v{FORMAT_VERSION}|seed={seed}|res={resolution!r}\n".encode())
    for node in nodes:
        digest.update(node.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    digest.update(b"\n")
    for a, b, w in edges:
        digest.update(f"{a}\0{b}\0{w:.6g}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def detect_communities(
    nodes: Sequence[str], edges: Sequence[tuple[str, str, float]], seed: int = 42, resolution: float = 1.0
) -> tuple[dict[str, int], list[int], float]:
    """Run seeded Leiden on canonical input; return (community per id, sizes, modularity).

    ``resolution`` 1.0 is plain modularity; other values use the RB configuration
    model (higher gives smaller communities).
    """
    import igraph as ig  # imported here: the query path never needs it
    import leidenalg

    if not nodes:
        return {}, [], 0.0
    position = {node: i for i, node in enumerate(nodes)}
    graph = ig.Graph(n=len(nodes), edges=[(position[a], position[b]) for a, b, _ in edges], directed=False)
    weights = [w for _, _, w in edges]
    if edges:
        graph.es["weight"] = weights
    if resolution == 1.0:
        partition = leidenalg.find_partition(
            graph, leidenalg.ModularityVertexPartition, weights="weight" if edges else None, n_iterations=-1, seed=seed
        )
    else:
        partition = leidenalg.find_partition(
            graph,
            leidenalg.RBConfigurationVertexPartition,
            weights="weight" if edges else None,
            resolution_parameter=resolution,
            n_iterations=-1,
            seed=seed,
        )
    groups = [sorted(nodes[v] for v in members) for members in partition]
    groups = [g for g in groups if g]
    groups.sort(key=lambda g: (-len(g), g[0]))
    mapping = {node: number for number, group in enumerate(groups) for node in group}
    modularity = graph.modularity([mapping[n] for n in nodes], weights="weight" if edges else None) if edges else 0.0
    return mapping, [len(g) for g in groups], float(modularity)


def load_communities(root: Path) -> CommunityMap | None:
    """The persisted map, or None when missing or unreadable (it is a cache: recompute)."""
    path = communities_path(root)
    try:
        return CommunityMap.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_communities(root: Path, cmap: CommunityMap) -> None:
    atomic_write_text(communities_path(root), json.dumps(cmap.to_dict(), indent=1, sort_keys=False) + "\n")


Detector = Callable[[list[str], list[tuple[str, str, float]], int, float], tuple[dict[str, int], list[int], float]]
"""How Leiden is run: ``detect_communities`` itself (the default), or the daemon's
``daemon/isolated.py``, which runs it in a child process: leidenalg holds the
interpreter lock for the whole optimisation (minutes at 100,000 memories), which
froze every other thread of the daemon, ``status`` and queries included."""


def _in_process(
    nodes: list[str], canon: list[tuple[str, str, float]], seed: int, resolution: float
) -> tuple[dict[str, int], list[int], float]:
    return detect_communities(nodes, canon, seed=seed, resolution=resolution)


def _run(
    nodes: list[str],
    canon: list[tuple[str, str, float]],
    fingerprint: str,
    seed: int,
    resolution: float,
    detect: Detector = _in_process,
) -> CommunityMap:
    started = time.perf_counter()
    mapping, sizes, modularity = detect(nodes, canon, seed, resolution)
    return CommunityMap(
        fingerprint=fingerprint,
        seed=seed,
        resolution=resolution,
        communities=mapping,
        sizes=sizes,
        modularity=modularity,
        node_count=len(nodes),
        edge_count=len(canon),
        computed_at=datetime.now(UTC).replace(microsecond=0).isoformat(),
        elapsed_ms=(time.perf_counter() - started) * 1000.0,
    )


def compute_communities(
    node_ids: Iterable[str], edges: Iterable[Edge], *, seed: int = 42, resolution: float = 1.0
) -> CommunityMap:
    """Compute a fresh map (no I/O)."""
    nodes, canon = canonical_edges(node_ids, edges)
    return _run(nodes, canon, graph_fingerprint(nodes, canon, seed, resolution), seed, resolution)


def ensure_communities(
    root: Path,
    node_ids: Iterable[str],
    edges: Iterable[Edge],
    *,
    seed: int = 42,
    resolution: float = 1.0,
    force: bool = False,
    detect: Detector = _in_process,
) -> tuple[CommunityMap, bool]:
    """Return the map for this graph, recomputing (and saving) only if the input changed.

    Returns ``(map, recomputed)``. With ``force`` the map is recomputed even when
    the fingerprint matches. ``detect`` runs Leiden (see ``Detector``).
    """
    nodes, canon = canonical_edges(node_ids, edges)
    fingerprint = graph_fingerprint(nodes, canon, seed, resolution)
    current = load_communities(root)
    if current is not None and current.fingerprint == fingerprint and not force:
        return current, False
    cmap = _run(nodes, canon, fingerprint, seed, resolution, detect)
    save_communities(root, cmap)
    return cmap, True


def community_settings(config: Config) -> tuple[int, float]:
    """(seed, resolution) from ``graph.leiden_seed`` and ``graph.leiden_resolution``."""
    graph = config.settings.graph
    return graph.leiden_seed, graph.leiden_resolution


def refresh_communities(engine: Any, force: bool = False) -> tuple[CommunityMap, bool]:
    """Recompute an engine's communities if its graph changed, persist them, and hand them to its scorer.

    Called by the daemon (debounced after changes, and on schedule) and by
    ``ctxos graph``; never by the query path, which only reads the result.
    """
    seed, resolution = community_settings(engine.config)
    graph = engine.graph()
    detect = getattr(engine, "community_detector", None) or _in_process
    cmap, recomputed = ensure_communities(
        engine.root, graph.nodes, graph.edges(), seed=seed, resolution=resolution, force=force, detect=detect
    )
    setter = getattr(engine, "set_community_of", None)
    if callable(setter):
        setter(cmap.communities)  # the engine keeps its own copy, keyed by its ids (set_community_of)
    return cmap, recomputed


# --- names: what each community is about ---------------------------------------------

NAME_TERMS = 3  # terms in a community's name
TOP_MEMBERS = 5
_WORD_RE = re.compile(r"[^\W\d_][\w'-]*[^\W_]|[^\W\d_]", re.UNICODE)
# Per engine: (map fingerprint, store generation) -> the names, pickled. One bytes object
# (~0.4 MB at 10,000 memories; read back in ~5 ms by the router and simulate) instead of
# ~27,000 small objects: made amid the naming pass's temporaries, those kept ~8 MiB of
# the interpreter's arenas from being returned after the pass (RSS, issue 16). The
# daemon names large maps in a child process (``Namer``), which hands back these bytes.
_NAMES_CACHE: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], bytes]] = weakref.WeakKeyDictionary()


def _naming_stemmer() -> Callable[[str], list[str]]:
    """The index's analysis of one word, memoised for one naming pass only.

    Not ``index.analyze``: its analyzer keeps every stem in Whoosh's process-wide
    cache, and a naming pass over 10,000 memories put ~12,000 long-lived entries
    in between its own temporary dicts, so the freed heap could not be given back
    (RSS +10 MiB at 10,000 after ``malloc_trim``; issue 16). This memo dies with the pass.
    """
    from whoosh.analysis import StemmingAnalyzer

    analyzer = StemmingAnalyzer(cachesize=0)  # the index's analyzer (analysis.ANALYZER) without its cache
    memo: dict[str, list[str]] = {}

    def stems(word: str) -> list[str]:
        found = memo.get(word)
        if found is None:
            found = memo[word] = [token.text for token in analyzer(word)]
        return found

    return stems


def _terms(memory: Any, stems_of: Callable[[str], list[str]] | None = None) -> list[tuple[str, str, float]]:
    """(stem, surface form, weight): tags count 2, title and folder words 1, l0 words 0.5.

    Folders are included because vaults that use no tags (Obsidian's own help) file
    notes by topic in folders; a folder name is a person's own label for its notes.
    """
    from .analysis import analyze

    stem_fn = stems_of if stems_of is not None else analyze

    out: list[tuple[str, str, float]] = []

    def add(text: str, weight: float) -> None:
        for word in _WORD_RE.findall(text):
            if len(word) < 3 or word.lower() in _NAME_STOP:
                continue
            stems = stem_fn(word)
            if stems:
                out.append((stems[0], word.lower(), weight))

    for tag in memory.tags:
        add(str(tag).replace("/", " ").replace("-", " ").replace("_", " "), 2.0)
    add(memory.display_title, 1.0)
    folders = memory.rel_path.split("/")[:-1]
    add(" ".join(f for f in folders if not re.match(r"^\d\d-", f)), 1.0)
    add(memory.l0, 0.5)
    return out


_NAME_STOP = frozenset(
    """the and for with your you this that from into use using how what are was
were has have had not but can will its it's our their about page pages note notes new more also
other all any each one two md""".split()
)


def name_communities(
    memories: Iterable[Any], communities: Mapping[str, int], rank: Mapping[str, float] | None = None
) -> list[dict[str, Any]]:
    """``[{id, name, terms, size, top_members}]``, largest first, named by class-based TF-IDF.

    c-TF-IDF (as in BERTopic): each community is one document made of its members'
    terms; a term's weight is its frequency in the community times
    ``log(1 + A / f)``, where ``A`` is the average community length in terms and
    ``f`` the term's frequency over all communities. A term every community uses
    scores low, one concentrated in a community high. The name joins the top
    three terms (each term shown in its most common spelling); ``top_members``
    are the most central members (``rank``, e.g. authority), then by id.
    """
    rank = rank or {}
    by_community: dict[int, list[Any]] = {}
    for memory in memories:
        number = communities.get(memory.id)
        if number is not None:
            by_community.setdefault(number, []).append(memory)
    tf: dict[int, dict[str, float]] = {}
    surface: dict[str, dict[str, float]] = {}
    total: dict[str, float] = {}
    stems_of = _naming_stemmer()
    for number, members in by_community.items():
        counts: dict[str, float] = {}
        for memory in members:
            for stem, word, weight in _terms(memory, stems_of):
                counts[stem] = counts.get(stem, 0.0) + weight
                forms = surface.setdefault(stem, {})
                forms[word] = forms.get(word, 0.0) + weight
        tf[number] = counts
        for stem, value in counts.items():
            total[stem] = total.get(stem, 0.0) + value
    average = (sum(sum(c.values()) for c in tf.values()) / len(tf)) if tf else 0.0
    # A term found in nearly every community names none of them (the vault's own name, say).
    spread: dict[str, int] = {}
    for counts in tf.values():
        for stem in counts:
            spread[stem] = spread.get(stem, 0) + 1
    groups = sum(1 for members in by_community.values() if len(members) > 1)
    common = {stem for stem, n in spread.items() if groups >= 4 and n >= 0.8 * groups}
    out = []
    for number in sorted(by_community, key=lambda n: (-len(by_community[n]), n)):
        members = by_community[number]
        counts = tf[number]
        length = sum(counts.values()) or 1.0
        scored = [
            ((value / length) * math.log(1.0 + average / total[stem]), stem)
            for stem, value in counts.items()
            if stem not in common
        ]
        scored.sort(key=lambda item: (-item[0], item[1]))
        words = [max(surface[stem].items(), key=lambda kv: (kv[1], -len(kv[0])))[0] for _, stem in scored[:NAME_TERMS]]
        top = sorted(members, key=lambda m: (-rank.get(m.id, 0.0), m.id))[:TOP_MEMBERS]
        name = " · ".join(words) if words else (top[0].display_title if top else f"community {number}")
        if len(members) == 1:
            name = members[0].display_title  # a lone memory is called by its own title
        out.append(
            {"id": number, "name": name, "terms": words, "size": len(members), "top_members": [m.id for m in top]}
        )
    return out


class NamingRow(NamedTuple):
    """What naming reads of one memory (``_terms``, ``name_communities``): plain values that pickle cheaply."""

    id: str
    tags: tuple[Any, ...]
    display_title: str
    rel_path: str
    l0: str


# How a naming pass runs: (rows, community per id, rank per id) -> ``named_bytes``. None on the
# engine = here; the daemon passes one that names large maps in a child process (daemon/leiden_process.py).
Namer = Callable[[list[NamingRow], dict[str, int], dict[str, float]], bytes]


def naming_rows(memories: Iterable[Any]) -> list[NamingRow]:
    """The naming input of ``memories`` (hot fields only: a released memory reads no file for them)."""
    return [NamingRow(m.id, tuple(m.tags), m.display_title, m.rel_path, m.l0) for m in memories]


def named_bytes(rows: list[NamingRow], communities: dict[str, int], rank: dict[str, float]) -> bytes:
    """``name_communities`` of the rows, pickled: what a ``Namer`` returns and the names cache holds.

    A module-level function of plain values, so a child process can run it: at 10,000 memories
    the pass's temporaries, amid the few objects that outlive it, kept ~6 MiB of the daemon's
    interpreter arenas (RSS after ``malloc_trim``) on every router run.
    """
    return pickle.dumps(name_communities(rows, communities, rank), protocol=pickle.HIGHEST_PROTOCOL)


def community_names(engine: Any, cmap: CommunityMap | None = None) -> list[dict[str, Any]]:
    """Named communities of an engine's current map (cached per map and store generation).

    The pass runs where ``engine.community_namer`` says (a child process in the daemon).
    """
    cmap = cmap if cmap is not None else load_communities(Path(engine.root))
    if cmap is None:
        return []
    key = (cmap.fingerprint, getattr(engine, "generation", None))
    entry = _NAMES_CACHE.get(engine)
    if entry is not None and entry[0] == key:
        return list(pickle.loads(entry[1]))
    graph = engine.graph(stale_ok=True) if _takes_stale_ok(engine) else engine.graph()
    namer: Namer = getattr(engine, "community_namer", None) or named_bytes
    data = namer(naming_rows(list(engine.store.memories.values())), cmap.communities, graph.authority)
    try:
        _NAMES_CACHE[engine] = (key, data)
    except TypeError:  # an engine stand-in that cannot be weakly referenced: no cache
        pass
    return list(pickle.loads(data))


def _takes_stale_ok(engine: Any) -> bool:
    import inspect

    try:
        return "stale_ok" in inspect.signature(engine.graph).parameters
    except (TypeError, ValueError):
        return False


def community_of_memory(engine: Any, memory_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{memory id: {"community": n, "community_name": name}}`` for the given ids (simulate, router)."""
    cmap = load_communities(Path(engine.root))
    if cmap is None:
        return {}
    names = {c["id"]: c["name"] for c in community_names(engine, cmap)}
    out = {}
    for memory_id in memory_ids:
        number = cmap.communities.get(memory_id)
        if number is not None:
            out[memory_id] = {"community": number, "community_name": names.get(number, f"community {number}")}
    return out
