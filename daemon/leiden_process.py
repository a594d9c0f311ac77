"""Leiden community detection and community naming in a child process, so the daemon keeps answering.

leidenalg's optimiser is C++ that holds the interpreter lock from start to end.
At 100,000 memories one run takes minutes on this machine, and for all that time
no other thread of the daemon ran: ``status`` and ``get_context`` did not answer
within 90 s (seen in a gdb backtrace of the stuck daemon, 2026-12-03). The
daemon therefore hands large graphs to a one-off worker process (the input is a
list of ids and weighted edges, the answer a dict; both pickle cheaply) and
keeps small ones in-process, where Leiden takes milliseconds and a process
start would cost more than it saves. The worker exits after each run: no idle
process holds igraph's memory between runs.

Naming the communities (``communities.named_bytes``, for the router files and
``simulate``) goes the same way for the heap's sake: the pass makes ~100,000
short-lived objects at 10,000 memories, and the few that outlive it kept ~6 MiB
of the daemon's interpreter arenas after every router run (issue 16). In the
child, the daemon only builds the plain input rows and keeps one bytes object.

The waiting thread polls the answer pipe and the engine's stop flag: at SIGTERM
the worker is killed and the job ends with ``stop_flag.Cancelled`` at once,
instead of the daemon waiting minutes for a partition nobody will read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from ctxos.services.communities import NamingRow, detect_communities, named_bytes
from ctxos.services.stop_flag import Cancelled, StopFlag

from .parse_pool import process_context

log = logging.getLogger(__name__)

IN_PROCESS_MAX_NODES = 2_000  # below this Leiden (or naming) takes milliseconds: a process start costs more
POLL_S = 0.1  # how often the waiting thread looks at the stop flag

Partition = tuple[dict[str, int], list[int], float]
R = TypeVar("R")


class ChildFailed(Exception):
    """The child process could not start or died without an answer (the job then runs in the daemon)."""


def _child(send: Connection, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """The worker: one call, its answer (or its error, in words) sent back, then exit."""
    try:
        answer: tuple[str, Any] = ("ok", fn(*args))
    except Exception as exc:  # noqa: BLE001 - reported to the daemon, which logs the failed job
        answer = ("error", f"{type(exc).__name__}: {exc}")
    send.send(answer)
    send.close()


def run_in_child(stop: StopFlag, what: str, fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` in a one-off child process (``fn`` and the args must pickle).

    Raises ``ChildFailed`` when the child cannot start or dies, ``Cancelled`` (the
    child killed) when ``stop`` is set meanwhile, ``RuntimeError`` when ``fn`` raised.
    """
    stop.check()
    context = process_context()
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, fn, args), daemon=True)
    try:
        child.start()
    except OSError as exc:
        receive.close()
        send.close()
        raise ChildFailed(f"cannot start: {exc}") from exc
    send.close()  # the child holds the only writing end: its exit is our EOF
    try:
        while not receive.poll(POLL_S):
            if stop.stopped:
                child.kill()
                raise Cancelled(f"{what} stopped: the daemon is shutting down")
        try:
            status, value = receive.recv()
        except (EOFError, OSError):
            raise ChildFailed(f"exited with code {child.exitcode}") from None
    finally:
        receive.close()
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join()
    if status != "ok":
        raise RuntimeError(f"{what} failed: {value}")
    found: R = value
    return found


def in_child_unless_small(stop: StopFlag, what: str, small: bool, fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` here when ``small`` (a process start would cost more), else in a child process.

    A child that cannot start or dies means running it here after all (slower for the
    other threads, but the job is done); ``Cancelled`` and ``fn``'s own error propagate.
    """
    if small:
        return fn(*args)
    try:
        return run_in_child(stop, what, fn, *args)
    except ChildFailed as exc:
        log.warning("%s process failed (%s); running it in the daemon", what, exc)
        return fn(*args)


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
        return in_child_unless_small(
            self.stop,
            "community detection",
            len(nodes) < IN_PROCESS_MAX_NODES,
            detect_communities,
            nodes,
            edges,
            seed,
            resolution,
        )


class IsolatedNamer:
    """A ``communities.Namer`` that names maps of ``IN_PROCESS_MAX_NODES`` memories or more in a child process.

    Same fallbacks as ``IsolatedDetector``: a child that cannot start or dies means naming here.
    """

    def __init__(self, stop: StopFlag, in_process_max: int = IN_PROCESS_MAX_NODES) -> None:
        self.stop = stop
        self.in_process_max = in_process_max

    def __call__(self, rows: list[NamingRow], communities: dict[str, int], rank: dict[str, float]) -> bytes:
        return in_child_unless_small(
            self.stop, "community naming", len(rows) < self.in_process_max, named_bytes, rows, communities, rank
        )
