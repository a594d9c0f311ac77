"""igraph's C core (the ``igraph._igraph`` extension) without the Python package around it.

The daemon needs two of igraph's C routines: PageRank (PRPACK, for
``graph.authority`` at every graph build) and connected components
(governance). ``import igraph`` also runs the package's ~70 Python modules
(plotting for cairo, matplotlib and plotly, file formats, layouts) that it
never uses: +6.8 MiB RSS after ``malloc_trim``, against +2.4 MiB for the
extension alone (issue 16: the daemon's idle RSS at 10,000 memories). Leiden
(``communities.py``, in a child process past 2,000 memories) and the graph
layout of the web page still import the package; it then reuses this module,
which is loaded from the package's own file under its own name.

The calls below are the ones the package's ``Graph.pagerank`` and
``Graph.connected_components`` make, so the numbers are the same
(``tests/test_igraph_core.py`` compares them).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType

_NAME = "igraph._igraph"
_LOCK = threading.Lock()  # two graph builds on two threads must not load the extension twice


def core() -> ModuleType:
    """The extension module: the one already imported, else loaded from the installed package's folder."""
    loaded = sys.modules.get(_NAME)
    if loaded is not None:
        return loaded
    with _LOCK:
        loaded = sys.modules.get(_NAME)
        if loaded is None:
            loaded = _load() or importlib.import_module(_NAME)  # not where this igraph keeps it: the package
        return loaded


def _load() -> ModuleType | None:
    package = importlib.util.find_spec("igraph")  # finds the package without running it
    folders = package.submodule_search_locations if package is not None else None
    for folder in folders or ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder) / f"_igraph{suffix}"
            if path.is_file():
                loader = importlib.machinery.ExtensionFileLoader(_NAME, str(path))
                spec = importlib.util.spec_from_file_location(_NAME, path, loader=loader)
                if spec is None:
                    return None
                module = importlib.util.module_from_spec(spec)
                sys.modules[_NAME] = module
                try:
                    loader.exec_module(module)
                except BaseException:
                    del sys.modules[_NAME]
                    raise
                return module
    return None


def pagerank(
    n: int, edges: Sequence[tuple[int, int]], weights: Sequence[float] | None = None, damping: float = 0.85
) -> list[float]:
    """PageRank of a directed graph on vertices ``0..n-1`` (PRPACK), as ``igraph.Graph.pagerank`` gives it."""
    igraph = core()
    graph = igraph.GraphBase(n, list(edges), True)  # as Graph.__init__ calls it
    # Graph.pagerank's own call: every vertex, directed, no reset vector, PRPACK.
    ranks: list[float] = graph.personalized_pagerank(
        None, True, damping, None, None, list(weights) if weights is not None else None, igraph.arpack_options, "prpack"
    )
    return ranks


def component_membership(n: int, pairs: Iterable[tuple[int, int]]) -> list[int]:
    """The component number of each vertex of an undirected graph, as ``Graph.connected_components`` numbers them."""
    membership: list[int] = core().GraphBase(n, list(pairs), False).connected_components("strong")
    return membership
