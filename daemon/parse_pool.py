"""A parser process for cold builds: files are parsed on another core while the engine indexes.

``Engine.parse_map`` is ``map`` by default (the engine has no threads or
processes of its own); the daemon hands it :func:`pooled_map` for the initial
load. The first chunk is parsed here at once (the worker process takes a
moment to start), the rest by the worker, in order, while this process
indexes; if the worker breaks, the remaining chunks are parsed here.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import TypeVar

from ctxos.services.stop_flag import Check, never

log = logging.getLogger(__name__)

WAIT_CHECK_S = 0.1  # how often a wait for the parser process looks at the stop flag

T = TypeVar("T")
R = TypeVar("R")


def parse_pool() -> ProcessPoolExecutor | None:
    """One parser process, or None with a single core.

    ``forkserver``: the daemon has threads, and forking a threaded process can
    copy a lock held mid-operation. The worker starts on first use, so a warm
    start (no cold build) costs nothing.
    """
    if (os.cpu_count() or 1) < 2:
        return None
    return ProcessPoolExecutor(max_workers=1, mp_context=process_context())


def process_context() -> ForkServerContext | SpawnContext:
    """``forkserver`` where there is one (never fork a process that has threads), else ``spawn``."""
    try:
        return multiprocessing.get_context("forkserver")
    except ValueError:  # no forkserver (Windows): spawn
        return multiprocessing.get_context("spawn")


def pooled_map(
    pool: ProcessPoolExecutor, check: Check = never
) -> Callable[[Callable[[T], R], Iterable[T]], Iterator[R]]:
    """A ``map`` whose first item runs here and the rest in ``pool`` (results in order).

    While it waits for the worker it calls ``check`` every ``WAIT_CHECK_S`` (the
    engine's stop flag: a SIGTERM mid-build does not wait for the next chunk's parse).
    """

    def run(fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        items = list(items)
        if not items:
            return
        try:
            rest: list[Future[R]] = [pool.submit(fn, item) for item in items[1:]]
        except (BrokenProcessPool, OSError, RuntimeError) as exc:
            log.warning("parser process unavailable (%s); parsing here", exc)
            rest = []
            items_here = items
        else:
            items_here = items[:1]
        for item in items_here:
            yield fn(item)
        done = len(items_here)
        try:
            for future in rest:
                while not wait([future], timeout=WAIT_CHECK_S).done:
                    check()
                yield future.result()
                done += 1
        except (BrokenProcessPool, OSError) as exc:
            log.warning("parser process failed (%s); parsing the remaining %d chunk(s) here", exc, len(items) - done)
            for item in items[done:]:
                yield fn(item)
        finally:
            for future in rest[done - len(items_here) :]:
                future.cancel()  # stopped (or failed): chunks not started yet are not parsed

    return run
