"""``DaemonContext``: what every daemon component and RPC handler shares.

One engine per workspace, one RPC registry, and the thread model from
docs/ARCHITECTURE.md: the engine has no threads of its own, so the daemon runs
engine calls on worker threads. Reads go to a small pool and may run
concurrently with each other and with one writer; every mutating call goes
through a single-thread write executor *and* a lock, so writes are serialised
whether they come from the watcher, an RPC, the scheduler or (in-process mode)
the calling thread. The event loop itself never touches the disk.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ctxos.services.stop_flag import Cancelled

from . import malloc_tune
from .query_helper import QueryHelper
from .rpc import RpcRegistry

if TYPE_CHECKING:  # pragma: no cover
    from ctxos.services.config import Config
    from ctxos.services.engine import Engine

log = logging.getLogger(__name__)

T = TypeVar("T")
ChangeListener = Callable[[Any], "None | Awaitable[None]"]
StatusProvider = Callable[[], dict[str, Any]]

# Queries are CPU-bound Python: with 2 cores and one interpreter lock, more than a couple
# of query threads only add lock hand-offs and per-thread searcher caches (measured:
# 8 workers p95 80 ms and 636 MiB after a burst, 2 workers 74 ms and 336 MiB, 8 clients at
# 10,000 memories). Slow background reads get their own thread (run_background), so a
# governance run never takes a query's place.
READ_WORKERS = 2
READ_TRIM_INTERVAL_S = 1.0  # at most one malloc_trim per second after queries (see _trim_after_reads)
INDEX_MERGE_DELAY_S = 1.0  # the index's small segments are merged this long after the last change batch


@dataclass
class DaemonOptions:
    """Command-line choices for one daemon run (config values are read from ``ctx.config``)."""

    http: bool = True  # --no-http turns the HTTP component off
    http_port: int | None = None  # --http-port overrides config daemon.http_port (0 = any free port)
    tray: bool | None = None  # --tray / --no-tray; None = try, and run without it if no display
    verbose: bool = False
    debounce_ms: int | None = None  # overrides config daemon.debounce_ms (tests, benchmarks)


def _then_trim(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    finally:
        malloc_tune.trim()


class DaemonContext:
    """Shared state of a running daemon (or of an in-process backend when ``mode='in-process'``)."""

    def __init__(
        self,
        root: Path,
        engine: Engine,
        *,
        options: DaemonOptions | None = None,
        rpc: RpcRegistry | None = None,
        mode: str = "daemon",
    ) -> None:
        self.root = Path(root)
        self.engine = engine
        self.options = options or DaemonOptions()
        self.rpc = rpc or RpcRegistry()
        self.mode = mode
        self.pid = os.getpid()
        self.started_at = time.time()
        self.socket_path: Path | None = None
        self.http_url: str | None = None  # set by the HTTP component once it listens
        self.status_extra: dict[str, Any] = {}  # free-form status (scheduler: last job runs, ...)
        self.components: dict[str, str] = {}  # name -> "running" | "disabled" | "failed: ..."
        self.load_summary: dict[str, Any] | None = None
        self.load_error: str | None = None
        self._status_providers: dict[str, StatusProvider] = {}
        self._listeners: list[ChangeListener] = []
        self._write_lock = threading.Lock()
        self._writes_in_flight = 0
        self._read_pool = ThreadPoolExecutor(max_workers=READ_WORKERS, thread_name_prefix="ctxos-read")
        self._reads_in_flight = 0  # run_read calls not yet answered (event-loop thread only)
        self._read_trim_pending = False
        self._last_read_trim = 0.0
        self._write_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxos-write")
        self._background_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxos-background")
        # A query's embedding product beside its index search, unless other reads keep both cores busy
        self._query_helper = QueryHelper(busy=lambda: self._reads_in_flight > 1)
        self._ready_flag = threading.Event()
        self._ready_event: asyncio.Event | None = None
        self._serving_flag = threading.Event()  # a cold build has indexed its first chunk
        self._serving_event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._graph_refresh: asyncio.Task | None = None
        self._graph_refresh_again = False
        self._index_merge: asyncio.Task | None = None
        self._index_merge_timer: asyncio.TimerHandle | None = None
        # Set by the per-user daemon (daemon/workspaces.py): this workspace's registry name, the
        # holder of every served workspace, and what loads this one on first use (lazy loading).
        self.name: str | None = None
        self.workspaces: Any = None
        self._activator: Callable[[], None] | None = None
        if mode == "daemon" and hasattr(engine, "allow_stale_graph"):
            # Queries serve the last link graph; it is rebuilt after each change batch
            # (schedule_graph_refresh), so no query pays for the rebuild.
            engine.allow_stale_graph = True
        if mode == "daemon" and hasattr(engine, "defer_index_merges"):
            # A save's commit leaves the small segments unmerged; they are merged after the change
            # is searchable (schedule_index_merge), so no save waits for a merge.
            engine.defer_index_merges = True
        if mode == "daemon" and hasattr(engine, "access_log_defer"):
            # The access log's batch writes (~20-90 ms each) run on a read worker, not in a get_context.
            engine.access_log_defer = self._defer_access_write
            # Its hourly recount of the window (~1.5 s at 10,000 logged queries) on the background
            # thread: no get_context waits for it and no read worker is taken.
            engine.access_log_background = self._defer_background
        if mode == "daemon" and hasattr(engine, "query_helper"):
            engine.query_helper = self._query_helper  # daemon/query_helper.py
            self.add_status_provider("query_helper", self._query_helper.status)
        if mode == "daemon" and hasattr(engine, "community_detector"):
            from .leiden_process import IsolatedDetector, IsolatedNamer

            # Leiden holds the interpreter lock for its whole run: large graphs go to a child process
            # (killed at shutdown: the detector watches the engine's stop flag). Naming them too: its
            # temporaries would otherwise stay in this heap as arenas pinned by a few survivors.
            engine.community_detector = IsolatedDetector(engine.stop_flag)
            engine.community_namer = IsolatedNamer(engine.stop_flag)

    # ------------------------------------------------------------ config

    @property
    def config(self) -> Config:
        """The engine's current ``Config`` (it changes when ``_config.yaml`` is reloaded)."""
        return self.engine.config

    def http_port(self) -> int:
        """The HTTP port to bind: ``--http-port`` if given, else config ``daemon.http_port``."""
        if self.options.http_port is not None:
            return int(self.options.http_port)
        return self.config.settings.daemon.http_port

    def debounce_seconds(self) -> float:
        given = self.options.debounce_ms
        ms = float(given) if given is not None else self.config.settings.daemon.debounce_ms
        return max(0.0, ms) / 1000.0

    # ------------------------------------------------------------ readiness

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._ready_event = asyncio.Event()
        self._serving_event = asyncio.Event()
        if self._ready_flag.is_set():
            self._ready_event.set()
        if self._serving_flag.is_set():
            self._serving_event.set()

    @property
    def ready(self) -> bool:
        """True once the initial load (scan + reconcile) has finished."""
        return self._ready_flag.is_set()

    @property
    def serving(self) -> bool:
        """True once reads can be answered: the load is done, or a cold build has indexed a first chunk."""
        return self._serving_flag.is_set() or self._ready_flag.is_set()

    def mark_serving(self) -> None:
        """Thread-safe: reads marked ``partial_ok`` may run from now on (while the build goes on)."""
        if self._serving_flag.is_set():
            return
        self._serving_flag.set()
        loop, event = self._loop, self._serving_event
        if loop is not None and event is not None and not loop.is_closed():
            loop.call_soon_threadsafe(event.set)

    def on_engine_progress(self, progress: Any) -> None:
        """The engine's progress callback (write thread): a partial index means reads may start."""
        if getattr(progress, "partial", False):
            self.mark_serving()

    def mark_ready(self) -> None:
        self._ready_flag.set()
        self._serving_flag.set()
        if self._ready_event is not None:
            self._ready_event.set()
        if self._serving_event is not None:
            self._serving_event.set()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.schedule_graph_refresh)  # build the first graph before a query needs it

    def set_activator(self, activate: Callable[[], None]) -> None:
        """Lazy loading: ``activate()`` (on the loop) starts loading; the first call that needs the engine runs it."""
        self._activator = activate

    @property
    def idle(self) -> bool:
        """True while a lazily served workspace has not been loaded (nothing has asked for it yet)."""
        return self._activator is not None and not self._ready_flag.is_set()

    @property
    def state(self) -> str:
        """``idle`` (lazy, not loaded yet), ``loading``, ``indexing`` (a cold build answering from what is
        indexed so far), ``ready`` or ``failed``."""
        if self.load_error:
            return "failed"
        if self.ready:
            return "ready"
        return "idle" if self.idle else ("indexing" if self.serving else "loading")

    def activate(self) -> None:
        """Start loading a lazily served workspace now (idempotent; on the loop)."""
        activate, self._activator = self._activator, None
        if activate is not None:
            activate()

    async def wait_serving(self) -> None:
        """Until reads can be answered (see :attr:`serving`); the load's error if it failed."""
        if not self.serving:
            self.activate()
            if self._serving_event is None:
                self.bind_loop(asyncio.get_running_loop())
            assert self._serving_event is not None
            await self._serving_event.wait()
        if self.load_error:
            from .rpc import INTERNAL_ERROR, RpcError

            raise RpcError(INTERNAL_ERROR, f"workspace failed to load: {self.load_error}")

    async def wait_ready(self) -> None:
        if self._ready_flag.is_set():
            return
        self.activate()
        if self._ready_event is None:
            self.bind_loop(asyncio.get_running_loop())
        assert self._ready_event is not None
        await self._ready_event.wait()
        if self.load_error:
            from .rpc import INTERNAL_ERROR, RpcError

            raise RpcError(INTERNAL_ERROR, f"workspace failed to load: {self.load_error}")

    # ------------------------------------------------------------ running engine calls

    def _defer_access_write(self, job: Callable[[], None]) -> None:
        """Run the access log's due batch write on a read worker (raises once the pools shut down)."""
        self._read_pool.submit(job)

    def _defer_background(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the background thread, then trim the heap (raises once the pools shut down)."""
        self._background_pool.submit(_then_trim, job)

    async def run_read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a read-only call on the read pool (concurrent with other reads and one write)."""
        loop = asyncio.get_running_loop()
        self._reads_in_flight += 1
        try:
            return await loop.run_in_executor(self._read_pool, functools.partial(fn, *args, **kwargs))
        finally:
            self._reads_in_flight -= 1
            if self._reads_in_flight == 0:
                self._trim_after_reads(loop)

    def _trim_after_reads(self, loop: asyncio.AbstractEventLoop) -> None:
        """Give the heap back once no query is running (at most every ``READ_TRIM_INTERVAL_S``).

        Queries allocate and free ~20-40 MiB of short-lived objects each burst, and glibc
        keeps the freed memory of its heaps: at 10,000 memories in one process, 400 queries
        left RSS +39-42 MiB, +22-25 after ``malloc_trim`` (issue 16). A trim costs ~0.1 ms
        (3 ms at most, measured) and runs on a read worker after the answer is sent; while
        queries keep coming the pool is rarely idle, so it runs between bursts, not per query.
        """
        if self._read_trim_pending:
            return
        wait = self._last_read_trim + READ_TRIM_INTERVAL_S - time.monotonic()

        def trim_if_idle() -> None:
            self._read_trim_pending = False
            if self._reads_in_flight:
                return  # the next idle moment schedules it again
            self._last_read_trim = time.monotonic()
            try:
                self._read_pool.submit(malloc_tune.trim)
            except RuntimeError:  # the pools are shutting down
                pass

        self._read_trim_pending = True
        if wait <= 0:
            loop.call_soon(trim_if_idle)
        else:
            loop.call_later(wait, trim_if_idle)

    async def run_background(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a slow read-only job (scheduled jobs, graph refresh) on its own thread, off the query pool.

        These jobs allocate a lot and keep little: the heap is trimmed after each (see malloc_tune).
        """
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._background_pool, functools.partial(_then_trim, fn, *args, **kwargs))

    async def run_write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a mutating call on the write thread, holding the write lock (one at a time, FIFO)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._write_pool, functools.partial(self.write_sync, fn, *args, **kwargs))

    def write_sync(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` in the calling thread under the write lock (used by run_write and in-process mode)."""
        with self._write_lock:
            self._writes_in_flight += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._writes_in_flight -= 1

    @property
    def writes_in_flight(self) -> int:
        return self._writes_in_flight

    # ------------------------------------------------------------ change listeners

    def add_change_listener(self, callback: ChangeListener) -> None:
        """``callback(summary)`` runs on the event loop after each applied batch that changed something.

        ``summary`` is the engine's ``ChangeSummary``. A callback may be sync or
        async; it should be quick, and hand engine work to ``run_write``/``run_read``.
        Exceptions are logged, never propagated. The initial load is not a
        change: await :meth:`wait_ready` for that.
        """
        self._listeners.append(callback)

    def remove_change_listener(self, callback: ChangeListener) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def schedule_graph_refresh(self) -> None:
        """On the loop: rebuild the engine's link graph (and warm the per-generation query lists,
        ``warm_query_caches``) on the background thread, off the query path.

        Coalesced: one refresh runs at a time, and changes that arrive while it
        runs cause exactly one more. Only when the engine serves a stale graph.
        """
        graph = getattr(self.engine, "refresh_graph", None)
        if not getattr(self.engine, "allow_stale_graph", False) or not callable(graph):
            return
        warm = getattr(self.engine, "warm_query_caches", None)
        save = getattr(self.engine, "save_graph_if_due", None)

        def refresh() -> None:
            if callable(warm):
                warm()  # cheap lists first: the next query needs them at once
            graph()
            if callable(save):
                save()  # a recent graph on disk for the next start, even after a kill (graph_cache.py)

        if self._graph_refresh is not None and not self._graph_refresh.done():
            self._graph_refresh_again = True
            return
        self._graph_refresh = asyncio.get_running_loop().create_task(self._refresh_graph_loop(refresh))

    async def _refresh_graph_loop(self, refresh: Callable[[], Any]) -> None:
        while True:
            self._graph_refresh_again = False
            if self.stopping():
                return
            try:
                await self.run_background(refresh)
            except Cancelled:  # shutting down (services/stop_flag.py)
                return
            except Exception:  # noqa: BLE001 - queries keep the old graph; the next change retries
                log.exception("refreshing the link graph failed")
            if not self._graph_refresh_again:
                return

    def schedule_index_merge(self) -> None:
        """On the loop: merge the index's small segments on the write thread once changes pause.

        The engine's commits do not merge (``defer_index_merges``), so a save is
        searchable without waiting for a merge. The merge runs
        ``INDEX_MERGE_DELAY_S`` after the last change batch that left it due,
        so it competes with neither that save nor the queries that look for it
        right after; then behind the write lock like any write. A commit past
        ``index.HARD_MAX_SEGMENTS`` merges anyway (a stream of saves that never pauses).
        """
        index = getattr(self.engine, "index", None)
        due = getattr(index, "merge_due", None)
        if not callable(getattr(self.engine, "merge_index_segments", None)) or not callable(due) or not due():
            return
        if self._index_merge_timer is not None:
            self._index_merge_timer.cancel()
        loop = asyncio.get_running_loop()
        self._index_merge_timer = loop.call_later(INDEX_MERGE_DELAY_S, self._start_index_merge)

    def _start_index_merge(self) -> None:
        self._index_merge_timer = None
        if self._index_merge is not None and not self._index_merge.done():
            return  # the running merge leaves nothing due, or the next change batch schedules again
        self._index_merge = asyncio.get_running_loop().create_task(self._merge_index())

    async def _merge_index(self) -> None:
        if self.stopping():
            return
        try:
            await self.run_write(self.engine.merge_index_segments)
        except Cancelled:  # shutting down (services/stop_flag.py)
            return
        except Exception:  # noqa: BLE001 - a commit past HARD_MAX_SEGMENTS merges anyway
            log.exception("merging the index's small segments failed")

    async def notify_change(self, summary: Any) -> None:
        """Call every listener with ``summary`` (on the loop; in registration order)."""
        self.schedule_graph_refresh()
        self.schedule_index_merge()
        for callback in list(self._listeners):
            try:
                result = callback(summary)
                if inspect.isawaitable(result):
                    await result
            except Exception:  # noqa: BLE001 - one listener must not break the others
                log.exception("change listener %r failed", callback)

    def publish_change(self, summary: Any) -> None:
        """Thread-safe: schedule :meth:`notify_change` from any thread (e.g. an RPC write handler)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if not self._listeners:
            loop.call_soon_threadsafe(self.schedule_graph_refresh)
            return

        def _schedule() -> None:
            loop.create_task(self.notify_change(summary))

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            _schedule()
        else:
            loop.call_soon_threadsafe(_schedule)

    # ------------------------------------------------------------ status

    def add_status_provider(self, name: str, provider: StatusProvider) -> None:
        """Add a section to ``status``: ``provider()`` is called (from a worker thread) on each request."""
        self._status_providers[name] = provider

    def daemon_status(self) -> dict[str, Any]:
        """The daemon's own part of ``status`` (the engine adds its counts)."""
        data: dict[str, Any] = {
            "mode": self.mode,
            "pid": self.pid,
            "workspace": str(self.root),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_at)),
            "uptime_s": round(time.time() - self.started_at, 3),
            "state": self.state,
            "socket": str(self.socket_path) if self.socket_path else None,
            "http": self.http_url,
            "components": dict(self.components),
            "writes_in_flight": self._writes_in_flight,
        }
        if self.load_error:
            data["load_error"] = self.load_error
        if self.name is not None:
            data["name"] = self.name
        for name, provider in list(self._status_providers.items()):
            try:
                data[name] = provider()
            except Exception as exc:  # noqa: BLE001
                data[name] = {"error": f"{type(exc).__name__}: {exc}"}
        data["extra"] = dict(self.status_extra)
        return data

    # ------------------------------------------------------------ shutdown

    def stopping(self) -> bool:
        """True once ``request_stop`` was called (a change announced during shutdown starts no job)."""
        flag = getattr(self.engine, "stop_flag", None)
        return bool(flag is not None and flag.stopped)

    def request_stop(self) -> None:
        """Ask the engine's long work (load, change batch, background job) to stop at its next safe point.

        Called at SIGTERM, before the components stop: with 100,000 memories a job in
        flight otherwise ran on for a minute (services/stop_flag.py). Idempotent.
        """
        flag = getattr(self.engine, "stop_flag", None)
        if flag is not None:
            flag.stop()

    def shutdown_executors(self) -> None:
        """Stop the engine's long work, wait for the write in flight (and queued reads), then stop the pools."""
        self.request_stop()
        self._write_pool.shutdown(wait=True, cancel_futures=False)
        self._read_pool.shutdown(wait=True, cancel_futures=True)
        self._query_helper.close()  # after the reads: a running one may be waiting for its job
        self._background_pool.shutdown(wait=True, cancel_futures=True)
