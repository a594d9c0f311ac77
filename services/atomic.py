"""Atomic file writes: temp file in the same folder, fsync, rename.

A reader (or a crash) sees either the old file or the new one, never half of
one. The directory is fsynced too so the rename survives a power cut.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write_bytes(path: Path, data: bytes | memoryview, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` atomically, creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rename_temp(write_temp(path, data, mode), path)


def write_temp(path: Path, data: bytes | memoryview, mode: int | None = None) -> str:
    """Write ``data`` to a fsynced temp file beside ``path`` and return its name (removed on failure).

    Its mode is ``mode``, else the mode of the file it will replace, else 0644. The
    write gate calls this and ``rename_temp`` separately, to check the target in between.
    """
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp_name, mode)
        elif path.exists():
            os.chmod(tmp_name, path.stat().st_mode & 0o7777)
        else:
            os.chmod(tmp_name, 0o644)
    except BaseException:
        _unlink_quietly(tmp_name)
        raise
    return tmp_name


def rename_temp(tmp_name: str, path: Path, before_rename: Callable[[], None] | None = None) -> None:
    """Rename a ``write_temp`` file over ``path`` (after ``before_rename``, which may refuse), then fsync the folder.

    On any failure the temp file is removed and ``path`` is left as it was.
    """
    try:
        if before_rename is not None:
            before_rename()
        os.replace(tmp_name, path)
    except BaseException:
        _unlink_quietly(tmp_name)
        raise
    _fsync_dir(path.parent)


def _unlink_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except FileNotFoundError:
        pass


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    """Write UTF-8 ``text`` atomically (no newline translation)."""
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def _fsync_dir(folder: Path) -> None:
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
