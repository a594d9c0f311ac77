"""PageRank on the memory link graph: igraph (the engine's choice) against networkx.

Why this exists (issue 14): networkx was declared and never imported while PageRank,
components and Leiden ran on igraph. This measures the two libraries on the same graph,
the engine's own link graph of a workspace built from the shared corpora
(``corpora.build_workspace``), and checks they agree:

- authority: PageRank over explicit links (``graph.pagerank``, what the graph signal uses);
- centrality: PageRank over explicit links plus shared-tag edges at weight 0.5 each way
  (what governance's god-node check uses).

networkx is measured only when it is installed (it is not a dependency): its ``pagerank``
needs scipy, which is not installed either, so the pure-Python power iteration networkx ships
(``_pagerank_python``, timed at its default tolerance, compared at 1e-12) stands in. Prints a table and writes JSON.

    python benchmarks/bench_graph_libs.py [--small] [--json PATH] [--memories N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_common_args, peak_rss_mb, print_table, write_results  # noqa: E402
from corpora import build_workspace  # noqa: E402
from ctxos.services.engine import Engine  # noqa: E402
from ctxos.services.graph import LinkGraph, pagerank  # noqa: E402

REPEATS = 5


def _median_ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(REPEATS):
        started = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result


def _edge_sets(graph: LinkGraph) -> dict[str, tuple[list[tuple[str, str]], list[float] | None]]:
    explicit = list(graph.explicit_edges())
    weighted = list(explicit)
    weights = [1.0] * len(explicit)
    for a, b in graph.implicit_edges():
        weighted += [(a, b), (b, a)]
        weights += [0.5, 0.5]
    return {"authority": (explicit, None), "centrality": (weighted, weights)}


def _networkx_pagerank(
    nodes: list[str], edges: list[tuple[str, str]], weights: list[float] | None, tol: float = 1e-6
) -> dict[str, float]:
    import networkx as nx
    from networkx.algorithms.link_analysis.pagerank_alg import _pagerank_python

    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    for (a, b), w in zip(edges, weights or [1.0] * len(edges)):
        # the same edge twice (explicit and tag) adds up, as igraph's parallel edges do
        g.add_edge(a, b, weight=g[a][b]["weight"] + w if g.has_edge(a, b) else w)
    return _pagerank_python(g, alpha=0.85, weight="weight", tol=tol, max_iter=1000)


def run(n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ctxos-bench-graph-") as tmp:
        root = Path(tmp) / "ws"
        build_workspace(root, n)
        (root / "_config.yaml").write_text("semantic:\n  model: lexical\n", encoding="utf-8")
        engine = Engine(root)
        engine.load()
        try:
            graph = engine.graph()
        finally:
            engine.close()
    nodes = list(graph.nodes)
    out: dict[str, Any] = {"memories": len(nodes), "explicit_edges": len(graph.explicit_edges())}
    out["implicit_edges"] = len(graph.implicit_edges())
    try:
        import networkx

        out["networkx"] = networkx.__version__
    except ImportError:
        out["networkx"] = None
    for name, (edges, weights) in _edge_sets(graph).items():
        row: dict[str, Any] = {"edges": len(edges)}
        row["igraph_ms"], ours = _median_ms(lambda e=edges, w=weights: pagerank(nodes, e, w))
        if out["networkx"]:
            row["networkx_ms"], _ = _median_ms(lambda e=edges, w=weights: _networkx_pagerank(nodes, e, w))
            # Compared at a tight tolerance: the difference is then the libraries', not where networkx's
            # power iteration stopped (its default stops at an L1 error of n x 1e-6).
            theirs = _networkx_pagerank(nodes, edges, weights, tol=1e-12)
            row["max_abs_diff"] = max(abs(ours[k] - theirs[k]) for k in nodes)
            row["max_rank"] = max(ours.values())
        out[name] = row
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--memories", type=int, default=None, help="workspace size (default 10000; --small: 300)")
    args = parser.parse_args(argv)
    n = args.memories or (300 if args.small else 10_000)
    result = run(n)
    rows = [
        [
            name,
            result[name]["edges"],
            f"{result[name]['igraph_ms']:.1f}",
            f"{result[name]['networkx_ms']:.1f}" if "networkx_ms" in result[name] else "not installed",
            f"{result[name]['max_abs_diff']:.1e}" if "max_abs_diff" in result[name] else "-",
        ]
        for name in ("authority", "centrality")
    ]
    print(f"{result['memories']} memories, median of {REPEATS} runs")
    print_table(["PageRank", "edges", "igraph ms", "networkx ms", "max |diff|"], rows)
    write_results("graph_libs", result, args.json, small=args.small)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
