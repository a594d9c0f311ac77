"""A released memory's text, read back from its file when asked for (issue 16, "don't hold what can be read").

The store keeps every memory's hot fields (id, summary line, tags, links,
dates, checksum...) and drops the cold ones once the memory is indexed
(``Memory.release_text``): the tiers ``l1``/``l2`` and the frontmatter dict.
At 10,000 memories that is ~21 of the store's ~38 MiB. Reading a cold field
calls :func:`read_cold`, which

- reads the file and checks its sha256 against ``memory.checksum``. Equal: the
  text is what was indexed. Different: the file changed after it was indexed
  (the watcher is already re-indexing it); the text on disk now is served,
  since it is what the person wrote, and logged at debug. A file that cannot
  be read any more gives empty tiers and an empty frontmatter (it is being
  removed from the index);
- splits the tiers without parsing YAML (the frontmatter is parsed only when
  ``metadata`` itself is asked for: importers, save warnings);
- keeps the last texts read in a byte-bounded LRU (``CACHE_BYTES``; one read
  is ~0.1 ms). Rendered blocks have their own cache in front of this one
  (``services/render_cache.py``), so what reaches here is mostly a candidate's
  first token count and ``get_memory``: 2 MiB, half what it was before that.

A module-level function, so a released memory still pickles (parse cache, the
parse pool) and unpickles with its source.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from typing import Any

from .memory_file import (
    MemoryFileError,
    checksum_bytes,
    decode_memory_bytes,
    parse_frontmatter_mapping,
    split_frontmatter,
    split_tiers,
)
from .model import BOTH_TIERS, Memory

log = logging.getLogger(__name__)

CACHE_BYTES = 2 * 1024 * 1024  # recently read texts kept (by their length in characters)
_MAX_FILE_BYTES = 64 * 1024 * 1024  # the read-back never refuses a file the parse accepted
_READ_SLACK = 4096  # bytes asked beyond the indexed size: an edit that grew the file is read in one call


class _Entry:
    """One file's text as read back: the tiers at once, the frontmatter dict on demand."""

    __slots__ = ("frontmatter_text", "l1", "l2", "meta", "size")

    def __init__(self, frontmatter_text: str, l1: str, l2: str) -> None:
        self.frontmatter_text = frontmatter_text
        self.l1 = l1
        self.l2 = l2
        self.meta: dict[str, Any] | None = None
        self.size = len(frontmatter_text) + len(l1) + len(l2) + 200


_cache: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
_cache_size = 0
_lock = threading.Lock()
_EMPTY = _Entry("", "", "")


def read_cold(memory: Memory, name: str) -> Any:
    """The cold field ``name`` (``l1``, ``l2`` or ``metadata``) of a released memory, from its file;
    ``model.BOTH_TIERS``: ``(l1, l2)``."""
    entry = _entry(memory)
    if name == BOTH_TIERS:
        return entry.l1, entry.l2
    if name == "metadata":
        if entry.meta is None:
            try:
                entry.meta = parse_frontmatter_mapping(entry.frontmatter_text)
            except MemoryFileError:
                entry.meta = {}
        return dict(entry.meta)  # a copy: callers may change theirs
    return entry.l1 if name == "l1" else entry.l2


def full_text(memory: Memory) -> str:
    """The summary line, L1 and L2 joined, for jobs that read every memory once (governance).

    A released memory's file is read without entering the LRU: a pass over
    10,000 files would only push out what queries render, and leave its entries
    scattered through the heap, where they keep freed pages from going back.
    """
    if not memory.released:
        return "\n".join(p for p in (memory.l0, memory.l1, memory.l2) if p)
    with _lock:
        entry = _cache.get((memory.rel_path, memory.checksum))
    if entry is None:
        entry = _read(memory)
    return "\n".join(p for p in (memory.l0, entry.l1, entry.l2) if p)


def clear_cache() -> None:
    """Forget every text read back (tests; a reindex)."""
    global _cache_size
    with _lock:
        _cache.clear()
        _cache_size = 0


def _entry(memory: Memory) -> _Entry:
    key = (memory.rel_path, memory.checksum)  # same bytes, same tiers: no absolute path built per read
    with _lock:
        entry = _cache.get(key)
        if entry is not None:
            _cache.move_to_end(key)
            return entry
    entry = _read(memory)
    if entry is not _EMPTY:
        _remember(key, entry)
    return entry


def _read_file(memory: Memory) -> bytes:
    """The file's bytes: one ``os.read`` of its indexed size plus slack (a third of ``Path.read_bytes``' CPU).

    A read shorter than asked is the end of a regular file; a file that grew
    past the slack is read on to its end.
    """
    fd = os.open(memory.file_name, os.O_RDONLY)  # path text: no Path joined per read
    try:
        want = max(memory.size, 0) + _READ_SLACK
        data = os.read(fd, want)
        if len(data) < want:
            return data
        parts = [data]
        while chunk := os.read(fd, 1 << 20):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def _read(memory: Memory) -> _Entry:
    try:
        raw = _read_file(memory)
    except OSError as exc:
        log.debug("%s: its text could not be read back (%s)", memory.rel_path, exc)
        return _EMPTY
    if checksum_bytes(raw) != memory.checksum:
        log.debug("%s changed since it was indexed: serving the text on disk now", memory.rel_path)
    try:
        split = split_frontmatter(decode_memory_bytes(raw, max(_MAX_FILE_BYTES, len(raw))))
    except MemoryFileError as exc:
        log.debug("%s: its text could not be read back (%s)", memory.rel_path, exc)
        return _EMPTY
    l1, l2 = split_tiers(split.body)
    return _Entry(split.frontmatter_text, l1, l2)


def _remember(key: tuple[str, str], entry: _Entry) -> None:
    global _cache_size
    with _lock:
        if key in _cache:
            return
        _cache[key] = entry
        _cache_size += entry.size
        while _cache_size > CACHE_BYTES and len(_cache) > 1:
            _, old = _cache.popitem(last=False)
            _cache_size -= old.size
