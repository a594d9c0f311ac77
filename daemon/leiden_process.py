"""Leiden community detection in a child process, so the daemon keeps answering meanwhile.

leidenalg's optimiser is C++ that holds the interpreter lock from start to end.
At 100,000 memories one run takes minutes on this machine, and for all that time
no other thread of the daemon ran: ``status`` and ``get_context`` did not answer
within 90 s (seen in a gdb backtrace of the stuck daemon, 2026-12-03). The
daemon therefore hands large graphs to a one-off worker process (the input is a
list of ids and weighted edges, the answer a dict; both pickle cheaply) and
keeps small ones in-process, where Leiden takes milliseconds and a process
start would cost more than it saves. The worker exits after each run: no idle
process holds igraph's memory between runs.
"""

from __future__ import annotations

import logging
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ctxos.services.communities import detect_communities

from .parse_pool import process_context

log = logging.getLogger(__name__)

IN_PROCESS_MAX_NODES = 2_000  # below this Leiden takes milliseconds: a process start costs more


def detect_isolated(
    nodes: list[str], edges: list[tuple[str, str, float]], seed: int, resolution: float
) -> tuple[dict[str, int], list[int], float]:
    """``detect_communities``, run in a child process for graphs above ``IN_PROCESS_MAX_NODES``.

    If the child cannot start or dies, the run happens here (slower for the
    other threads, but the map is still computed).
    """
    if len(nodes) < IN_PROCESS_MAX_NODES:
        return detect_communities(nodes, edges, seed=seed, resolution=resolution)
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=process_context()) as pool:
            return pool.submit(detect_communities, nodes, edges, seed, resolution).result()
    except (BrokenProcessPool, OSError) as exc:
        log.warning("community detection process failed (%s); running it in the daemon", exc)
        return detect_communities(nodes, edges, seed=seed, resolution=resolution)
