"""Builder processes for cold builds and rebuilds: chunks are parsed, indexed and embedded on both cores.

``Engine.build_map`` is ``map`` by default (the engine has no threads or
processes of its own); the daemon hands it :func:`pooled_map` for the initial
load and for ``reindex``. Every chunk runs in a builder
(``services/index_build.py``), none in the daemon: the daemon only commits
the finished segments and copies the released memories and embedding rows,
so the text analysis and the model's work never touch its heap. If the
builders break, the remaining chunks run here.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext, SpawnContext
from pathlib import Path
from typing import Any, TypeVar

from ctxos.services.index_layout import index_looks_built
from ctxos.services.stop_flag import Cancelled, Check, never

log = logging.getLogger(__name__)

WAIT_CHECK_S = 0.1  # how often a wait for a builder process looks at the stop flag

T = TypeVar("T")
R = TypeVar("R")

MIN_CHUNKS_FOR_BUILDERS = 3  # fewer chunks (at most 500 files) are built in this process
BUILDERS = 2  # the daemon's own thread mostly waits meanwhile; more processes than cores only add switching


def parse_pool() -> ProcessPoolExecutor | None:
    """Builder processes (one per core, at most ``BUILDERS``), or None with a single core.

    ``forkserver``: the daemon has threads, and forking a threaded process can
    copy a lock held mid-operation. The workers start on first use, so a warm
    start (no cold build) costs nothing.
    """
    cores = os.cpu_count() or 1
    if cores < 2:
        return None
    return ProcessPoolExecutor(max_workers=min(BUILDERS, cores), mp_context=process_context())


BUILDER_MODULES = ("ctxos.services.builder_preload",)  # the builders' code and model, loaded once in the forkserver
# Each builder runs the daemon's entry module (``python -m ctxos.daemon.main``) again as ``__mp_main__``,
# multiprocessing's rule; preloading that module itself makes runpy warn on every builder's stderr, so
# the forkserver preloads what it imports instead, and a builder only runs its body (milliseconds).
ENTRY_IMPORTS = (
    "asyncio",
    "ctxos.daemon.components",
    "ctxos.daemon.context",
    "ctxos.daemon.logging_setup",
    "ctxos.daemon.malloc_tune",
    "ctxos.services.daemon_lock",
    "ctxos.services.runtime_paths",
)
_started_early = False  # start_builders_early started the forkserver; stop_early_builders stops it


def start_builders_early(root: Path) -> bool:
    """Start the forkserver now, importing the daemon's and the builders' modules, if a cold build is coming.

    Called on the daemon's first line (``daemon/main.py``), before its own
    imports: on a cold start the builders' imports (Whoosh, numpy, the
    daemon's modules, which every worker otherwise imports again as
    ``__mp_main__``) and the packaged model (``services/builder_preload.py``)
    then load on the other core while the daemon imports and walks the tree,
    and the builders fork from the ready server when the first chunk is
    handed out. Only when ``index_layout.index_looks_built`` says no
    index is there (a warm start starts nothing) and there are two cores.
    Measured in docs/engine.md "Cold start: builders start with the daemon".
    """
    global _started_early
    if (os.cpu_count() or 1) < 2 or index_looks_built(root):
        return False
    try:
        context = multiprocessing.get_context("forkserver")
    except ValueError:  # no forkserver (Windows): builders start on demand
        return False
    context.set_forkserver_preload([*ENTRY_IMPORTS, *BUILDER_MODULES])
    try:
        forkserver.ensure_running()
    except OSError as exc:
        log.debug("forkserver not started early (%s)", exc)
        return False
    _started_early = True
    return True


def stop_early_builders() -> threading.Thread | None:
    """Stop the forkserver ``start_builders_early`` started, on a thread of its own (returned; None: nothing to stop).

    Left running it would hold the daemon's and the builders' modules beside
    the daemon all day; a later rebuild or job starts a plain one on demand
    (the default preload is restored here, at once). Stopping waits for the
    cold build's builders to exit (they hold the server's liveness pipe): up
    to ~0.1-0.3 s on a loaded machine, so the daemon does not wait for it to
    be ready. A process started meanwhile (a job after ready) either waits on
    multiprocessing's forkserver lock and gets a fresh server, or is forked by
    this one, which then lives until that process exits: both are sound.
    """
    global _started_early
    if not _started_early:
        return None
    _started_early = False
    forkserver.set_forkserver_preload(["__main__"])
    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)  # CPython's; no public way
    if not callable(stop):
        return None

    def run() -> None:
        try:
            stop()
        except OSError as exc:
            log.debug("stopping the forkserver: %s", exc)

    thread = threading.Thread(target=run, name="ctxos-forkserver-stop", daemon=True)
    thread.start()
    return thread


def process_context() -> ForkServerContext | SpawnContext:
    """``forkserver`` where there is one (never fork a process that has threads), else ``spawn``."""
    try:
        return multiprocessing.get_context("forkserver")
    except ValueError:  # no forkserver (Windows): spawn
        return multiprocessing.get_context("spawn")


def pooled_map(
    pool: ProcessPoolExecutor, check: Check = never
) -> Callable[[Callable[[T], R], Iterable[T]], Iterator[R]]:
    """A ``map`` that runs every item in ``pool`` (results in order); here only if the pool breaks.

    While it waits for a builder it calls ``check`` every ``WAIT_CHECK_S`` (the
    engine's stop flag: a SIGTERM mid-build does not wait for the next chunk).
    """

    def run(fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        items = list(items)
        if not items:
            return
        try:
            pending: list[Future[R]] = [pool.submit(fn, item) for item in items]
        except (BrokenProcessPool, OSError, RuntimeError) as exc:
            log.warning("builder processes unavailable (%s); building here", exc)
            pending = []
        done = 0
        try:
            for future in pending:
                while not wait([future], timeout=WAIT_CHECK_S).done:
                    check()
                yield future.result()
                done += 1
        except (BrokenProcessPool, OSError) as exc:
            log.warning("builder process failed (%s); building the remaining %d chunk(s) here", exc, len(items) - done)
        finally:
            for future in pending[done:]:
                future.cancel()  # stopped (or failed): chunks not started yet are not built
        for item in items[done:]:
            check()
            yield fn(item)

    return run


def building_map(check: Check = never) -> Callable[[Callable[[T], R], Iterable[T]], Iterator[R]]:
    """``Engine.build_map`` for the daemon: each cold build or rebuild gets builder processes of its own.

    They start at the first chunk and end with the job (the daemon keeps no
    idle builders between rebuilds). With a single core, or a workspace of
    two chunks or less (500 files: starting the builders costs about what
    they would save), the chunks run here.
    """

    def run(fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        items = list(items)
        pool = parse_pool() if len(items) >= MIN_CHUNKS_FOR_BUILDERS else None
        if pool is None:
            for item in items:
                check()
                yield fn(item)
            return
        try:
            yield from pooled_map(pool, check)(fn, items)
        except Cancelled:
            stop_workers(pool)  # a chunk in flight would run to its end: the daemon's exit waited for it
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    return run


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Kill a stopped build's builder processes now (SIGTERM mid-build: exit in seconds, not after a chunk).

    ``ProcessPoolExecutor`` has no public way to stop a task that is running
    before Python 3.14 (``terminate_workers``); older versions' workers are
    killed through the pool's process table. Whatever a killed builder was
    writing is in the staging folder, which the next build empties first.
    """
    terminate = getattr(pool, "terminate_workers", None)
    if callable(terminate):
        terminate()
        return
    processes: dict[int, Any] = getattr(pool, "_processes", None) or {}
    for process in list(processes.values()):
        process.kill()
