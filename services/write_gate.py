"""The one gate every file write goes through: check first, replace atomically, or change nothing.

Order, for a memory file (``commit_memory``):

1. the new text is encoded as UTF-8 (a lone surrogate is refused, in user words);
2. it is parsed with the very loader that reads files (``memory_file.parse_memory``
   with ``limits.max_file_bytes``), so a file the daemon would not serve is never
   written: caps are counted in bytes exactly as the loader counts them;
3. under the caller's write lock the file on disk is re-read and its checksum
   compared with the checksum of the version the caller read (``expected_checksum``);
   a difference is a ``WriteConflict`` (a person's edit wins);
4. the text goes to a temp file in the same folder (fsynced); right before the
   rename the on-disk checksum is compared once more; then ``os.replace``;
5. the replaced file stays open across the rename: if an editor without our lock
   wrote into it between the last check and the rename, its text is put back and
   the save is a ``WriteConflict`` (the person's edit wins).

Anything refused leaves the target byte-for-byte untouched. A full disk is
``WriteRefused("disk full ...")`` with the old file still in place, never
"error but written".

``commit_generated`` is the mode for generated files (router files, importers'
non-memory outputs): same atomic replace and disk-full handling, no memory parse.

``after_write`` is the single place where a successful write is final: every
callback registered there runs after the rename, with the workspace-relative path
(issue 17 hooks git/journal history here). A failing callback is logged, never
turned into "error but written".
"""

from __future__ import annotations

import errno
import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .atomic import rename_temp, write_temp
from .config import Config
from .memory_file import MemoryFileError, checksum_bytes, parse_memory
from .model import Memory
from .workspace import folder_type, relative_path

log = logging.getLogger(__name__)

AfterWrite = Callable[[Path, str], None]
"""``callback(root, rel_path)``: called once a write is final (file renamed into place)."""

after_write: list[AfterWrite] = []
before_write: list[AfterWrite] = []
"""``callback(root, rel_path)``: a memory file is about to be replaced (checked, under the write lock);
history keeps the version on disk here when nobody recorded it yet (a person's edit). Same error rule."""

TEMP_NAME_RE = re.compile(r"^\..+\.[A-Za-z0-9_]{6,}\.tmp$")


class WriteRefused(Exception):
    """A write that the safety rules forbid; the message says why and what to do. The file is unchanged."""


class WriteConflict(WriteRefused):
    """The file changed since the writer read it (or no version was named): read it again."""


def encode_text(text: str, what: str) -> bytes:
    """UTF-8 bytes, refusing lone surrogates (they cannot be stored in a UTF-8 file)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise WriteRefused(
            f"{what} contains a lone surrogate character (U+{ord(text[exc.start]):04X} at position {exc.start}); "
            "it cannot be saved as UTF-8 text: remove it or send the real character"
        ) from None


def disk_checksum(path: Path) -> str | None:
    """Checksum of the bytes on disk now, or None when the file is absent."""
    try:
        return checksum_bytes(path.read_bytes())
    except FileNotFoundError:
        return None


def validate_memory_bytes(root: Path, rel_path: str, data: bytes, config: Config) -> Memory:
    """Parse ``data`` exactly as the loader would read it from ``rel_path``; refuse with the reason."""
    max_bytes = config.settings.limits.max_file_bytes
    try:
        return parse_memory(
            data,
            rel_path=rel_path,
            path=Path(root) / rel_path,
            folder_type=folder_type(rel_path),
            mtime=time.time(),
            max_bytes=max_bytes,
        )
    except MemoryFileError as exc:
        raise WriteRefused(f"{rel_path}: the result would not be a valid memory ({exc}); nothing was written") from None


def commit_memory(
    root: Path,
    config: Config,
    rel_path: str,
    text: str,
    *,
    expected_checksum: str | None,
    must_be_new: bool = False,
    validate: Callable[[Memory], None] | None = None,
) -> Memory:
    """Validate and atomically write one memory file. Call under ``writes.write_lock``.

    ``expected_checksum`` is the checksum of the bytes the caller based its change on
    (None with ``must_be_new`` for a create). ``validate`` may refuse the parsed result
    (e.g. tags that would not read back as passed). Returns the parsed new memory.
    """
    data = encode_text(text, rel_path)
    memory = validate_memory_bytes(root, rel_path, data, config)
    if validate is not None:
        validate(memory)
    target = Path(root) / rel_path
    _check_disk(target, rel_path, expected_checksum, must_be_new)
    if not must_be_new:
        _run_hooks(before_write, root, target)
    with _ReplacedInode(target) as replaced:

        def recheck() -> None:
            _check_disk(target, rel_path, expected_checksum, must_be_new)
            replaced.pin(rel_path, expected_checksum)

        _replace(target, data, recheck)
        late = replaced.written_since_pin()
        if late is not None:
            _put_back(target, late, data)
            raise WriteConflict(
                f"{rel_path} was edited on disk while your save was being written (a person's edit wins); "
                "their text is kept and yours was not saved: read the memory again and apply your change to it"
            )
    _finalise(root, target)
    return memory


class _ReplacedInode:
    """Keeps the file being replaced open across the rename, to catch an editor writing into it late.

    An editor that opened the file before our rename and writes after our last check
    writes into the old inode, which the rename unlinks: without this, its text is lost.
    ``pin`` reads the old version through the held descriptor right before the rename;
    ``written_since_pin`` re-reads it right after, so any write in between is noticed.
    (An editor that keeps the file open and writes after that is still not seen: see
    docs/file-format.md, "Write guarantees".)
    """

    def __init__(self, target: Path) -> None:
        self._target = target
        self._handle: BinaryIO | None = None
        self._pinned: bytes | None = None

    def __enter__(self) -> _ReplacedInode:
        try:
            self._handle = open(self._target, "rb")  # noqa: SIM115 (closed in __exit__)
        except OSError:
            self._handle = None  # nothing to replace (a create), or unreadable: the checks say so
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.close()

    def _read(self) -> bytes:
        assert self._handle is not None
        self._handle.seek(0)
        return self._handle.read()

    def pin(self, rel_path: str, expected_checksum: str | None) -> None:
        """Record the old version (it must still be the file at the path, and the one the caller read)."""
        if self._handle is None:
            return
        try:
            same_file = os.path.samestat(os.fstat(self._handle.fileno()), os.stat(self._target))
        except FileNotFoundError:
            same_file = False
        if not same_file:
            raise WriteConflict(
                f"{rel_path} was replaced on disk while your save was being written; "
                "read the memory again and apply your change to it"
            )
        self._pinned = self._read()
        if expected_checksum is not None and checksum_bytes(self._pinned) != expected_checksum:
            raise WriteConflict(
                f"{rel_path} changed on disk since you read it (a person's edit wins); "
                "read the memory again (get_memory) and apply your change to that version"
            )

    def written_since_pin(self) -> bytes | None:
        """The old file's bytes if someone wrote into it after ``pin``, else None."""
        if self._handle is None or self._pinned is None:
            return None
        now = self._read()
        return None if now == self._pinned else now


def _put_back(target: Path, late: bytes, ours: bytes) -> None:
    """Put a person's late edit back in place of our just-written version (unless someone replaced ours)."""

    def still_ours() -> None:
        if disk_checksum(target) != checksum_bytes(ours):
            raise WriteConflict(f"{target.name} was replaced again meanwhile; leaving the newest version")

    try:
        rename_temp(write_temp(target, late), target, before_rename=still_ours)
    except WriteConflict:
        pass
    except OSError:
        log.exception("could not put a late edit of %s back; it is in the log below", target)
        log.error("late edit of %s (%d bytes): %r", target, len(late), late[:4096])


def commit_generated(path: Path, text: str, *, root: Path | None = None, mode: int | None = None) -> None:
    """Atomically write a generated (non-memory) file such as a router file; disk full is refused cleanly."""
    path = Path(path)
    _replace(path, encode_text(text, path.name), None, mode=mode)
    if root is not None:
        _finalise(root, path)


def _check_disk(target: Path, rel_path: str, expected_checksum: str | None, must_be_new: bool) -> None:
    now = disk_checksum(target)
    if must_be_new:
        if now is not None or target.is_symlink():
            raise WriteConflict(f"{rel_path} was created by someone else meanwhile; read it and update it instead")
        return
    if now is None:
        raise WriteConflict(f"{rel_path} was deleted or moved on disk since you read it; nothing was written")
    if expected_checksum is not None and now != expected_checksum:
        raise WriteConflict(
            f"{rel_path} changed on disk since you read it (a person's edit wins); "
            "read the memory again (get_memory) and apply your change to that version"
        )


def _replace(target: Path, data: bytes, recheck: Callable[[], None] | None, mode: int | None = None) -> None:
    """``atomic``'s temp-then-rename, with OS errors while writing the temp file turned into refusals."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp_name = write_temp(target, data, mode)
    except OSError as exc:
        raise _os_refusal(exc, target) from None
    rename_temp(tmp_name, target, before_rename=recheck)


def _os_refusal(exc: OSError, target: Path) -> WriteRefused:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return WriteRefused(
            f"disk full: {target.name} was not written (the previous version, if any, is unchanged); "
            "free some space and try again"
        )
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return WriteRefused(f"{target.name} cannot be written ({exc.strerror}); nothing was changed")
    return WriteRefused(f"{target.name} could not be written ({exc.strerror or exc}); nothing was changed")


def notify_before_write(root: Path, path: Path) -> None:
    """Run the ``before_write`` hooks for a file about to be moved (an archive move, under the write
    lock): history keeps a person's uncommitted edit to it first, so the move carries only the move."""
    _run_hooks(before_write, root, path)


def notify_written(root: Path, path: Path) -> None:
    """Run the ``after_write`` hooks for a change the gate did not write itself (an archive move:
    called for the old path and the new one, under the write lock, once the move is final)."""
    _finalise(root, path)


def _finalise(root: Path, target: Path) -> None:
    _run_hooks(after_write, root, target)


def _run_hooks(hooks: list[AfterWrite], root: Path, target: Path) -> None:
    rel = relative_path(root, target) or target.name
    for callback in list(hooks):
        try:
            callback(Path(root), rel)
        except Exception:  # a history hook failing must not turn a write into an error
            log.exception("write hook %r failed for %s", callback, rel)


def remove_orphan_temps(root: Path, *, min_age_s: float = 0.0) -> list[str]:
    """Delete ``.name.XXXX.tmp`` files left by a crash mid-write (call under the write lock at start).

    Returns the workspace-relative paths removed. Hidden folders other than the
    workspace's own state dir are left alone.
    """
    removed: list[str] = []
    now = time.time()
    root = Path(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = relative_path(root, dirpath) or ""
        dirnames[:] = [d for d in dirnames if not d.startswith(".") or (rel_dir == "" and d == ".ctxos")]
        for name in filenames:
            if not TEMP_NAME_RE.match(name):
                continue
            path = Path(dirpath) / name
            try:
                if path.is_symlink() or not path.is_file() or now - path.stat().st_mtime < min_age_s:
                    continue
                path.unlink()
            except OSError:
                continue
            removed.append(f"{rel_dir}/{name}".lstrip("/"))
    return removed
