"""Where the daemon keeps its socket, lock, pid file and logs.

Kept free of asyncio and of the engine so the thin client can import it
cheaply. The socket lives outside the workspace (a runtime dir private to the
user) because Unix socket paths are limited to 104 (macOS) / 108 (Linux)
bytes, and a workspace path can be arbitrarily long; the lock, pid file and
logs live under ``.ctxos/`` so they belong to exactly one workspace.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from . import private_dir, user_dirs

STATE_DIR = ".ctxos"
LOCK_NAME = "daemon.lock"
INFO_NAME = "daemon.json"
LOG_DIR = "logs"
LOG_NAME = "daemon.log"
START_LOG_NAME = "daemon-start.log"

# sun_path is 104 bytes on macOS/BSD and 108 on Linux, including the NUL.
SOCKET_PATH_MAX = 103


class RuntimeDirError(RuntimeError):
    """The runtime directory is unusable (owned by someone else, or not private)."""


def runtime_dir() -> Path:
    """``$CTXOS_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/ctxos``, else ``/tmp/ctxos-$UID``."""
    explicit = os.environ.get("CTXOS_RUNTIME_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return Path(xdg) / "ctxos"
    return Path(tempfile.gettempdir()) / f"ctxos-{os.getuid()}"


def workspace_key(root: Path) -> str:
    """A short, stable name for a workspace: the first 16 hex digits of sha1(resolved path)."""
    resolved = str(Path(root).expanduser().resolve())
    return hashlib.sha1(resolved.encode("utf-8")).hexdigest()[:16]


def socket_path(root: Path, runtime: Path | None = None) -> Path:
    """The socket for ``root``: ``<runtime dir>/<key>.sock``.

    When the runtime dir itself is so long that the socket path would not fit
    in ``sun_path``, fall back to ``/tmp/ctxos-$UID`` (which always fits) so the
    daemon can still start; both client and daemon compute the same answer.
    ``runtime`` overrides the runtime dir (tests that start a daemon with their own).
    """
    candidate = Path(runtime or runtime_dir()) / f"{workspace_key(root)}.sock"
    if len(os.fsencode(str(candidate))) <= SOCKET_PATH_MAX:
        return candidate
    return Path("/tmp") / f"ctxos-{os.getuid()}" / f"{workspace_key(root)}.sock"


def ensure_private_dir(folder: Path) -> Path:
    """Create ``folder`` with mode 0700, or check an existing one is ours and private.

    A pre-existing folder owned by another user could let that user replace our
    socket, so it is refused rather than used; a folder of ours with looser
    permissions is tightened to 0700.
    """
    try:
        return private_dir.ensure_private_dir(folder)
    except private_dir.PrivateDirError as exc:
        raise RuntimeDirError(f"runtime dir: {exc}") from None


def state_dir(root: Path) -> Path:
    """The workspace's derived-state folder, as the engine decides it (normally ``<root>/.ctxos``).

    Delegates to ``ctxos.services.workspace.state_dir`` so ``CTXOS_STATE_DIR``
    and read-only workspaces put the lock and logs where the index lives.
    """
    try:
        from .workspace import state_dir as engine_state_dir
    except ImportError:  # pragma: no cover - engine not importable: fall back to the documented place
        return Path(root) / STATE_DIR
    return engine_state_dir(Path(root))


def lock_path(root: Path) -> Path:
    return state_dir(root) / LOCK_NAME


def info_path(root: Path) -> Path:
    """``.ctxos/daemon.json``: pid, socket, http address and start time of the running daemon."""
    return state_dir(root) / INFO_NAME


def log_dir(root: Path) -> Path:
    return state_dir(root) / LOG_DIR


def log_path(root: Path) -> Path:
    return log_dir(root) / LOG_NAME


def start_log_path(root: Path) -> Path:
    """Where ``ctxos start`` sends the background daemon's stdout/stderr (crashes before logging is set up)."""
    return log_dir(root) / START_LOG_NAME


# ---------------------------------------------------------------- the per-user daemon

USER_LOCK_NAME = "user-daemon.lock"
USER_INFO_NAME = "user-daemon.json"


def user_lock_path(runtime: Path | None = None) -> Path:
    """The per-user daemon's lock, in the private runtime dir (one such daemon per user)."""
    return Path(runtime or runtime_dir()) / USER_LOCK_NAME


def user_info_path(runtime: Path | None = None) -> Path:
    """``user-daemon.json``: pid, HTTP address and workspaces of the running per-user daemon."""
    return Path(runtime or runtime_dir()) / USER_INFO_NAME


def user_log_path() -> Path:
    """``$XDG_STATE_HOME/ctxos/logs/daemon.log``: the per-user daemon's log (it serves many workspaces)."""
    return user_dirs.user_state_dir() / LOG_DIR / LOG_NAME
