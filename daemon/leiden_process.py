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

The waiting thread polls the answer pipe and the engine's stop flag: at SIGTERM
the worker is killed and the job ends with ``stop_flag.Cancelled`` at once,
instead of the daemon waiting minutes for a partition nobody will read.
"""

from __future__ import annotations

import logging
from multiprocessing.connection import Connection
from typing import Any

from ctxos.services.communities import detect_communities
from ctxos.services.stop_flag import Cancelled, StopFlag

from .parse_pool import process_context

log = logging.getLogger(__name__)

IN_PROCESS_MAX_NODES = 2_000  # below this Leiden takes milliseconds: a process start costs more
POLL_S = 0.1  # how often the waiting thread looks at the stop flag

Partition = tuple[dict[str, int], list[int], float]


def _child(send: Connection, nodes: list[str], edges: list[tuple[str, str, float]], seed: int, res: float) -> None:
    """The worker: one Leiden run, its answer (or its error, in words) sent back, then exit."""
    try:
        answer: tuple[str, Any] = ("ok", detect_communities(nodes, edges, seed=seed, resolution=res))
    except Exception as exc:  # noqa: BLE001 - reported to the daemon, which logs the failed job
        answer = ("error", f"{type(exc).__name__}: {exc}")
    send.send(answer)
    send.close()


class IsolatedDetector:
    """A ``communities.Detector`` that runs graphs above ``IN_PROCESS_MAX_NODES`` in a child process.

    If the child cannot start or dies, the run happens here (slower for the
    other threads, but the map is still computed). When ``stop`` is set while
    the child runs, the child is killed and ``Cancelled`` raised.
    """

    def __init__(self, stop: StopFlag) -> None:
        self.stop = stop

    def __call__(
        self, nodes: list[str], edges: list[tuple[str, str, float]], seed: int, resolution: float
    ) -> Partition:
        if len(nodes) < IN_PROCESS_MAX_NODES:
            return detect_communities(nodes, edges, seed=seed, resolution=resolution)
        self.stop.check()
        context = process_context()
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=_child, args=(send, nodes, edges, seed, resolution), daemon=True)
        try:
            child.start()
        except OSError as exc:
            receive.close()
            send.close()
            return self._here(nodes, edges, seed, resolution, f"cannot start: {exc}")
        send.close()  # the child holds the only writing end: its exit is our EOF
        try:
            while not receive.poll(POLL_S):
                if self.stop.stopped:
                    child.kill()
                    raise Cancelled("community detection stopped: the daemon is shutting down")
            try:
                status, value = receive.recv()
            except (EOFError, OSError):
                return self._here(nodes, edges, seed, resolution, f"exited with code {child.exitcode}")
        finally:
            receive.close()
            child.join(5)
            if child.is_alive():
                child.kill()
                child.join()
        if status != "ok":
            raise RuntimeError(f"community detection failed: {value}")
        found: Partition = value
        return found

    @staticmethod
    def _here(
        nodes: list[str], edges: list[tuple[str, str, float]], seed: int, resolution: float, why: str
    ) -> Partition:
        log.warning("community detection process failed (%s); running it in the daemon", why)
        return detect_communities(nodes, edges, seed=seed, resolution=resolution)
