"""One daemon per workspace: an exclusive ``flock`` on ``.ctxos/daemon.lock``.

``flock`` locks belong to the open file description, so the kernel drops the
lock when the holder dies, even by SIGKILL: a "stale" lock left by a killed
daemon simply is not held any more and the next daemon takes it. The pid in
the file is only informational (for the refusal message); it is never trusted
to decide whether a daemon runs.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from . import runtime_paths


class DaemonAlreadyRunning(RuntimeError):
    """Another process holds the workspace lock."""

    def __init__(self, root: Path, pid: int | None) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(
            f"a ctxos daemon is already running for workspace {root} ({who}); "
            f"use `ctxos status` to see it or `ctxos stop` to stop it"
        )
        self.root = root
        self.pid = pid


class WorkspaceLock:
    """Hold the daemon lock of one workspace for the life of this object (or process)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.path = runtime_paths.lock_path(self.root)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock without waiting; raise :class:`DaemonAlreadyRunning` if it is held."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DaemonAlreadyRunning(self.root, read_lock_pid(self.root)) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (closing the descriptor releases it). The file stays: removing it would race."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)

    def __enter__(self) -> WorkspaceLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def read_lock_pid(root: Path) -> int | None:
    """The pid written by the lock holder, if any (informational only)."""
    try:
        text = runtime_paths.lock_path(root).read_text(encoding="ascii").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def is_locked(root: Path) -> bool:
    """True when some process holds the workspace lock right now (a daemon is alive)."""
    path = runtime_paths.lock_path(root)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class UserLock:
    """The per-user daemon's ``flock`` (``<runtime dir>/user-daemon.lock``): one such daemon per user.

    Same semantics as the workspace lock: the kernel drops it when the holder dies.
    """

    def __init__(self) -> None:
        self.path = runtime_paths.user_lock_path()
        self._fd: int | None = None

    def acquire(self) -> bool:
        """Take the lock without waiting; False when another process holds it."""
        runtime_paths.ensure_private_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def user_daemon_pid() -> int | None:
    """The pid of the running per-user daemon (-1 if it has not written it yet), or None when none runs."""
    try:
        fd = os.open(runtime_paths.user_lock_path(), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else -1
        return None
    finally:
        os.close(fd)
