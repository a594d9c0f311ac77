"""The backend of ``ctxos mcp``: the daemon's RPC methods over its Unix socket.

``ctxos mcp`` must serve the same engine state as the daemon (one index, one
write lock, one access log), so it does not open the workspace itself: it
forwards each tool call to the daemon, and starts the daemon first when none
is running. The started daemon is detached (its own session) and writes
nothing to our stdout, which is the MCP wire.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import anyio
from ctxos.client import DaemonClient, DaemonError, DaemonNotRunning, RpcCallError
from ctxos.daemon.mcp_server import BackendError

log = logging.getLogger("ctxos.mcp")

START_TIMEOUT_S = 30.0


class DaemonStartError(RuntimeError):
    """The daemon could not be started (its start log says why)."""


def find_socket(root: Path) -> Path:
    """The daemon's socket: the computed path, else the one the daemon recorded in ``.ctxos/daemon.json``.

    A tool may start ``ctxos mcp`` with another environment than the daemon's
    (a service manager sets ``XDG_RUNTIME_DIR``, a desktop app may not), and
    so compute another runtime dir. The recorded path is used only when it is
    a socket owned by this user.
    """
    import json
    import stat

    from ctxos.daemon import runtime_paths

    default = runtime_paths.socket_path(root)
    if default.exists():
        return default
    try:
        info = json.loads(runtime_paths.info_path(root).read_text(encoding="utf-8"))
        recorded = Path(str(info.get("socket") or ""))
        st = recorded.lstat() if str(recorded) not in ("", ".") else None
    except (OSError, ValueError, AttributeError):
        return default
    if st is not None and stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid():
        return recorded
    return default


def daemon_alive(root: Path) -> bool:
    client = DaemonClient(find_socket(root), timeout=5.0)
    try:
        return client.is_alive()
    finally:
        client.close()


def start_daemon(root: Path, timeout: float = START_TIMEOUT_S) -> None:
    """Have the per-user daemon serve ``root`` (starting it detached if needed); wait until it answers."""
    from ctxos.client.launch import LaunchError, launch, lost_race
    from ctxos.daemon.runtime_paths import start_log_path

    log_file = start_log_path(root)
    # The same start as `ctxos start` (whose output would corrupt our stdout, so not called).
    try:
        launched = launch(root, [], log_file)
    except LaunchError as exc:
        raise DaemonStartError(str(exc)) from exc
    log.info(
        "workspace %s: %s",
        launched.name,
        "per-user daemon started"
        if launched.process
        else f"per-user daemon (pid {launched.signalled_pid}) asked to serve it",
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon_alive(root):
            return
        process = launched.process
        code = process.poll() if process is not None else None
        if code is not None and not daemon_alive(root) and not lost_race(launched):
            raise DaemonStartError(f"the daemon exited with code {code}; see {log_file}")
        time.sleep(0.05)
    raise DaemonStartError(f"the daemon did not answer within {timeout:.0f} s; see {log_file}")


class SocketBackend:
    """``backend.call`` over the socket: one client per worker thread, calls run off the event loop."""

    def __init__(self, root: Path, *, start: bool = True) -> None:
        self.root = Path(root)
        self.start = start
        self._local = threading.local()
        self._clients: list[DaemonClient] = []
        self._lock = threading.Lock()

    def _client(self) -> DaemonClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = DaemonClient(find_socket(self.root))
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def ensure_daemon(self) -> None:
        if daemon_alive(self.root):
            return
        if not self.start:
            raise DaemonNotRunning(f"no ctxos daemon runs for {self.root}; start it with: ctxos daemon")
        start_daemon(self.root)

    def call_sync(self, method: str, params: dict[str, Any]) -> Any:
        client = self._client()
        try:
            try:
                return client.call(method, params)
            except DaemonNotRunning:
                if not self.start:
                    raise
                client.close()
                self.ensure_daemon()  # the daemon went away: bring it back once
                client.socket_path = find_socket(self.root)
                return client.call(method, params)
        except RpcCallError as exc:
            raise BackendError(exc.message, exc.code, exc.data) from exc
        except DaemonError as exc:
            raise BackendError(f"the ctxos daemon did not answer: {exc}") from exc

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        return await anyio.to_thread.run_sync(self.call_sync, method, params)

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()


def connect_daemon_backend(root: Path, *, start: bool = True) -> SocketBackend:
    """A socket backend for ``root``, the daemon started (or found) first."""
    backend = SocketBackend(root, start=start)
    try:
        backend.ensure_daemon()
    except DaemonNotRunning as exc:
        from ctxos.client.cli import CliError

        raise CliError(str(exc)) from exc
    except DaemonStartError as exc:
        from ctxos.client.cli import CliError

        raise CliError(f"could not start the daemon: {exc}") from exc
    return backend
