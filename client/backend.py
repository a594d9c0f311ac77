"""``open_backend(root, read_only)``: how a CLI command reaches the engine.

When a daemon runs for the workspace, commands go through its socket (warm
index, no start-up cost, and writes are serialised with the watcher's). When
none runs, a *read-only* command still works: it loads the engine in this
process and calls the very same RPC handlers (``daemon/rpc_methods.py``), so
the answer has the same shape and the same content, and it says so on
stderr. A write with no daemon fails with a clear message, unless the caller
opts in to ``in_process_writes`` (it then holds the workspace lock so no
daemon can start underneath it).

Both backends raise :class:`~ctxos.client.RpcCallError` for error replies.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from . import DaemonClient, DaemonError, DaemonNotRunning, RpcCallError


class Backend(Protocol):
    kind: str  # "daemon" or "in-process"

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any: ...

    def close(self) -> None: ...


class SocketBackend:
    """RPC over the daemon's Unix socket."""

    kind = "daemon"

    def __init__(self, client: DaemonClient) -> None:
        self.client = client

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.client.call(method, params or {})

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> SocketBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InProcessBackend:
    """The engine loaded in this process, behind the daemon's own RPC handlers."""

    kind = "in-process"

    def __init__(
        self, root: Path, *, hold_lock: bool = False, on_progress: Callable[[Any], None] | None = None
    ) -> None:
        from ctxos.daemon.components import register_rpc_methods
        from ctxos.daemon.context import DaemonContext
        from ctxos.daemon.lock import WorkspaceLock
        from ctxos.services.engine import Engine

        self._lock = None
        if hold_lock:
            self._lock = WorkspaceLock(root)
            self._lock.acquire()  # raises DaemonAlreadyRunning if a daemon appeared meanwhile
        engine = Engine(root)
        engine.on_progress = on_progress  # a cold build or a reindex shows its progress
        try:
            summary = engine.load()
        except BaseException:
            engine.close()
            self._release()
            raise
        self.ctx = DaemonContext(root, engine, mode="in-process")
        self.ctx.load_summary = summary.to_dict() if hasattr(summary, "to_dict") else None
        register_rpc_methods(self.ctx.rpc)
        self.ctx.mark_ready()

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        from ctxos.daemon.rpc import RpcError, encode_message

        try:
            result = self.ctx.rpc.call_sync(self.ctx, method, params or {})
        except RpcError as exc:
            raise RpcCallError(exc.code, exc.message, exc.data) from None
        # The same JSON the socket would deliver (tuples become lists, dates strings ...).
        return json.loads(encode_message(result))

    def close(self) -> None:
        try:
            self.ctx.write_sync(self.ctx.engine.close)
            self.ctx.shutdown_executors()
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


def daemon_backend(root: Path) -> SocketBackend | None:
    """A socket backend when a daemon answers for ``root``, else None."""
    client = DaemonClient.for_workspace(root)
    try:
        client.call("status")
    except (DaemonError, OSError):
        client.close()
        return None
    return SocketBackend(client)


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


__all__ = ["Backend", "InProcessBackend", "SocketBackend", "daemon_backend", "open_backend"]
