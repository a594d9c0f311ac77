"""How a client reaches the engine: :class:`Backend`, one :class:`SocketBackend`, and :func:`open_backend`.

When a daemon runs for the workspace, calls go through its socket (warm index,
no start-up cost, and writes are serialised with the watcher's). When none
runs, a *read-only* CLI command still works: it loads the engine in this
process and calls the very same use cases (``services/api``), so the answer has
the same shape and the same content, and it says so on stderr. A write with no
daemon fails with a clear message, unless the caller opts in to
``in_process_writes`` (it then holds the workspace lock so no daemon can start
underneath it).

:class:`SocketBackend` is the one socket backend of every client: the CLI, the
``ctxos mcp`` stdio server (which may start the daemon, ``start=True``) and the
tray's process mode. It keeps one connection per thread, so worker threads can
share it. Both backends raise :class:`~ctxos.client.RpcCallError` for error replies.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ctxos.services import api
from ctxos.services.daemon_lock import WorkspaceLock
from ctxos.services.engine import Engine
from ctxos.services.engine_view import EngineView
from ctxos.services.jsonrpc import INVALID_PARAMS, RpcError, as_json

from . import DEFAULT_TIMEOUT_S, DaemonClient, DaemonError, DaemonNotRunning, RpcCallError
from .launch import find_socket, start_daemon

T = TypeVar("T")
R = TypeVar("R")

CLIENT_PARAM = "_client"  # who is asking (history attribution); not an operation's parameter
IN_PROCESS_CLIENT = "ctxos CLI (in-process)"


class Backend(Protocol):
    """A synchronous way to call an operation by name with its params (a dict, checked by its model)."""

    kind: str  # "daemon" or "in-process"

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any: ...

    def close(self) -> None: ...


class SocketBackend:
    """Operations over the daemon's Unix socket: one connection per calling thread.

    ``start=True``: when no daemon answers, have the per-user daemon serve the
    workspace (``launch.start_daemon``) and retry once, which is what ``ctxos mcp``
    needs when an agent starts it before the daemon.
    """

    kind = "daemon"

    def __init__(self, root: Path | str, *, timeout: float | None = DEFAULT_TIMEOUT_S, start: bool = False) -> None:
        self.root = Path(root).expanduser().resolve()
        self.timeout = timeout
        self.start = start
        self._local = threading.local()
        self._clients: list[DaemonClient] = []
        self._lock = threading.Lock()

    def _client(self) -> DaemonClient:
        client: DaemonClient | None = getattr(self._local, "client", None)
        if client is None:
            client = DaemonClient(find_socket(self.root), timeout=self.timeout)
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def alive(self) -> bool:
        """True when a daemon answers ``status`` for the workspace."""
        try:
            self._client().call("status")
            return True
        except (DaemonError, OSError):
            return False

    def ensure_daemon(self) -> None:
        """A daemon answers for the workspace, started first when ``start`` allows; else DaemonNotRunning."""
        if self.alive():
            return
        if not self.start:
            raise DaemonNotRunning(f"no ctxos daemon runs for {self.root}; start it with: ctxos start")
        start_daemon(self.root)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        client = self._client()
        try:
            return client.call(method, params or {})
        except DaemonNotRunning:
            if not self.start:
                raise
            client.close()
            start_daemon(self.root)  # the daemon went away: bring it back once
            client.socket_path = find_socket(self.root)
            return client.call(method, params or {})

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()

    def __enter__(self) -> SocketBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalHost:
    """The use cases' :class:`~ctxos.services.api.host.Host` in the CLI's own process.

    One thread, no listeners (nobody watches a CLI run: the next daemon's start
    reconciles with the files), and a status that says it is in-process.
    """

    def __init__(self, root: Path, engine: EngineView, load_summary: dict[str, Any] | None) -> None:
        self.root = root
        self.engine = engine
        self.ready = True
        self.load_error: str | None = None
        self.load_summary = load_summary
        self.status_extra: dict[str, Any] = {}
        self._started = time.time()

    def daemon_status(self) -> dict[str, Any]:
        return {
            "mode": "in-process",
            "pid": os.getpid(),
            "workspace": str(self.root),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._started)),
            "uptime_s": round(time.time() - self._started, 3),
            "state": "ready",
            "socket": None,
            "http": None,
            "components": {},
            "writes_in_flight": 0,
            "extra": {},
        }

    def publish_change(self, summary: object) -> None:
        """Nobody listens in-process."""


def builder_map(fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
    """``Engine.build_map`` for the CLI: a cold build or ``ctxos reindex`` of 3+ chunks uses two builder processes.

    The same split as the daemon's (daemon/parse_pool.py, which the client
    does not import): chunks are parsed, indexed and embedded on both cores.
    Smaller workspaces, a single core or no ``forkserver`` run them here.
    """
    chunks = list(items)
    try:
        context = multiprocessing.get_context("forkserver")  # never fork: the backend may hold threads
    except ValueError:
        context = None
    if len(chunks) < 3 or (os.cpu_count() or 1) < 2 or context is None:
        yield from map(fn, chunks)
        return
    # The forkserver imports this command and the builders' code and model once
    # (services/builder_preload.py); both builders fork from it ready.
    context.set_forkserver_preload(["__main__", "ctxos.services.builder_preload"])
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        yield from pool.map(fn, chunks)


class InProcessBackend:
    """The engine loaded in this process, behind the same use cases the daemon serves."""

    kind = "in-process"

    def __init__(
        self, root: Path, *, hold_lock: bool = False, on_progress: Callable[[Any], None] | None = None
    ) -> None:
        self._lock: WorkspaceLock | None = None
        if hold_lock:
            self._lock = WorkspaceLock(root)
            self._lock.acquire()  # raises DaemonAlreadyRunning if a daemon appeared meanwhile
        engine = Engine(root)
        engine.on_progress = on_progress  # a cold build or a reindex shows its progress
        engine.build_map = builder_map
        try:
            summary = engine.load()
        except BaseException:
            engine.close()
            self._release()
            raise
        self.engine = engine
        self.host = LocalHost(Path(root), engine, summary.to_dict())

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        params = dict(params or {})
        client = params.pop(CLIENT_PARAM, None)
        try:
            _own_workspace(params)
            result = api.call(self.host, method, params, client=client or IN_PROCESS_CLIENT)
        except RpcError as exc:
            raise RpcCallError(exc.code, exc.message, exc.data) from None
        return as_json(result)  # the same JSON the socket would deliver

    def close(self) -> None:
        try:
            self.engine.close()
        finally:
            self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> InProcessBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _own_workspace(params: dict[str, Any]) -> None:
    """``workspace`` routes a call to another workspace, which only the per-user daemon can do."""
    name = params.pop("workspace", None)
    if name not in (None, ""):
        raise RpcError(
            INVALID_PARAMS,
            f"no workspace named {name!r} is served here"
            " (only the per-user daemon, `ctxos start`, serves several workspaces)",
        )


def daemon_backend(root: Path) -> SocketBackend | None:
    """A socket backend when a daemon answers for ``root``, else None."""
    backend = SocketBackend(root)
    if backend.alive():
        return backend
    backend.close()
    return None


def open_backend(
    root: Path | str,
    read_only: bool,
    *,
    in_process_writes: bool = False,
    quiet: bool = False,
    on_progress: Callable[[Any], None] | None = None,
) -> Backend:
    """The daemon if it runs; else in-process for reads (noted on stderr); else DaemonNotRunning."""
    root = Path(root).expanduser().resolve()
    backend = daemon_backend(root)
    if backend is not None:
        return backend
    if not read_only and not in_process_writes:
        raise DaemonNotRunning(
            f"no ctxos daemon is running for {root}; start it with `ctxos start` (or run `ctxos daemon`)"
        )
    if not quiet:
        print(
            f"ctxos: no daemon running for {root}; working in-process (`ctxos start` keeps the index warm)",
            file=sys.stderr,
        )
    return InProcessBackend(root, hold_lock=not read_only, on_progress=on_progress)


__all__ = ["Backend", "InProcessBackend", "LocalHost", "SocketBackend", "daemon_backend", "open_backend"]
