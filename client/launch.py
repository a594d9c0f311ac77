"""Bring a workspace under the per-user daemon: register it, then start or tell the daemon.

``ctxos start`` and ``ctxos mcp`` (when no daemon answers) both come here, so
a workspace is always served the same way: registered in the per-user
registry, then either the per-user daemon is started (``python -m
ctxos.daemon.main --all --load NAME``, detached) or, when it already runs, it
is sent SIGHUP to re-read the registry and open the new workspace. Callers
then wait on the workspace's own socket, which that daemon binds.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ctxos.services import runtime_paths
from ctxos.services.daemon_lock import user_daemon_pid
from ctxos.services.workspace_registry import RegistryError, add_workspace

from . import DaemonClient

log = logging.getLogger("ctxos.client")

EXIT_ALREADY_RUNNING = 3  # ctxos.daemon's exit code when its lock is taken
START_TIMEOUT_S = 30.0


class LaunchError(RuntimeError):
    """The workspace could not be registered or the daemon could not be reached/started."""


class DaemonStartError(RuntimeError):
    """The daemon could not be started (its start log says why)."""


@dataclass
class Launch:
    """What :func:`launch` did: the registry name, and the process it spawned (None: signalled a running one)."""

    name: str
    process: subprocess.Popen[bytes] | None
    signalled_pid: int | None = None


def launch(root: Path, flags: list[str], log_file: Path) -> Launch:
    """Register ``root`` and make the per-user daemon serve it (spawning that daemon when none runs)."""
    try:
        name, _added = add_workspace(root)
    except (RegistryError, OSError) as exc:
        raise LaunchError(f"{root} could not be registered: {exc}") from exc
    pid = user_daemon_pid()
    if pid is not None:
        _hangup(pid)
        return Launch(name, None, pid)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "ctxos.daemon.main", "--all", "--load", name, *flags]
    with open(log_file, "ab") as out:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            cwd="/",
        )
    return Launch(name, process)


def notify_user_daemon() -> int | None:
    """SIGHUP the running per-user daemon, if any (after a registry change); its pid or None."""
    pid = user_daemon_pid()
    if pid is None:
        return None
    _hangup(pid)
    return pid


def _hangup(pid: int) -> None:
    """Ask the running per-user daemon to re-read the registry (it opens the workspace just added)."""
    deadline = time.monotonic() + 5.0
    while pid == -1 and time.monotonic() < deadline:  # it holds the lock but has not written its pid yet
        time.sleep(0.05)
        pid = user_daemon_pid() or -1
    if pid <= 0:
        raise LaunchError("the per-user daemon is starting but has not said its pid; try again")
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        pass  # it just exited: the caller's wait times out with its log
    except PermissionError as exc:
        raise LaunchError(f"cannot signal the per-user daemon (pid {pid}): {exc}") from exc


def lost_race(launched: Launch) -> bool:
    """The spawned daemon found another per-user daemon starting first: tell that one instead.

    True when it did (the caller keeps waiting on the workspace's socket).
    """
    process = launched.process
    if process is None or process.poll() != EXIT_ALREADY_RUNNING:
        return False
    pid = user_daemon_pid()
    if pid is None:
        return False
    _hangup(pid)
    launched.process, launched.signalled_pid = None, pid
    return True


def find_socket(root: Path) -> Path:
    """The daemon's socket: the computed path, else the one the daemon recorded in ``.ctxos/daemon.json``.

    A tool may start ``ctxos mcp`` with another environment than the daemon's
    (a service manager sets ``XDG_RUNTIME_DIR``, a desktop app may not), and
    so compute another runtime dir. The recorded path is used only when it is
    a socket owned by this user.
    """
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
    """True when a daemon answers ``status`` on the workspace's socket."""
    client = DaemonClient(find_socket(root), timeout=5.0)
    try:
        return client.is_alive()
    finally:
        client.close()


def start_daemon(root: Path, timeout: float = START_TIMEOUT_S) -> None:
    """Have the per-user daemon serve ``root`` (starting it detached if needed); wait until it answers.

    Writes nothing to stdout (``ctxos mcp``'s stdout is the MCP wire); raises :class:`DaemonStartError`.
    """
    log_file = runtime_paths.start_log_path(root)
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
