"""igraph_core (services/igraph_core.py) gives igraph's own numbers without importing the package in a fresh process."""

from __future__ import annotations

import random
import subprocess
import sys

from ctxos.services import igraph_core


def _random_graph(seed: int, n: int, m: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(n), rng.randrange(n)) for _ in range(m)]


def test_pagerank_and_components_equal_the_package():
    import igraph

    for seed in range(4):
        edges = _random_graph(seed, 300, 450)
        weights = [random.Random(seed).uniform(0.1, 2.0) for _ in edges]
        package = igraph.Graph(n=300, edges=edges, directed=True)
        assert igraph_core.pagerank(300, edges, damping=0.85) == package.pagerank(directed=True, damping=0.85)
        assert igraph_core.pagerank(300, edges, weights, 0.7) == package.pagerank(
            directed=True, damping=0.7, weights=weights
        )
        undirected = igraph.Graph(n=300, edges=edges)
        assert igraph_core.component_membership(300, edges) == undirected.connected_components().membership


def test_the_core_loads_without_the_package_and_the_package_imports_after_it():
    script = (
        "import sys\n"
        "from ctxos.services import igraph_core\n"
        "ranks = igraph_core.pagerank(3, [(0, 1), (1, 2)])\n"
        "assert 'igraph' not in sys.modules and 'igraph._igraph' in sys.modules, sorted(sys.modules)\n"
        "import igraph\n"
        "assert igraph.Graph(n=3, edges=[(0, 1), (1, 2)], directed=True).pagerank() == ranks\n"
        "assert sys.modules['igraph._igraph'] is igraph_core.core()\n"
        "import leidenalg\n"
        "g = igraph.Graph(n=4, edges=[(0, 1), (1, 2), (2, 0), (3, 2)])\n"
        "assert len(leidenalg.find_partition(g, leidenalg.ModularityVertexPartition, seed=1).membership) == 4\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
