"""A builder segment's searched postings as plain arrays, in one file beside the segment (issue 16).

A distinct query's words are mostly read for the first time: each (word, field) is
looked up in every segment's Whoosh term table (~12 us inside a query) and, when
found, its posting blocks are unpickled one by one (~36 us): 0.51 ms of a 6.6 ms
distinct query at 10,000 memories (docs/engine.md, "Session 24"). A cold build's
builder holds each term's postings when it writes them
(``segment_postings.write_postings``), so it also writes those of the searched fields
here: the document numbers as little-endian int32 and the weights as float32, the
values ``postings.read_term`` decodes from Whoosh's blocks, under a hash table of
(field, term) keys. A lookup is then one ``pread`` of a few slots and one of the
item, and the arrays come from ``np.frombuffer``.

``<segment id>.post`` beside the segment's own files: a builder writes it in its
staging folder, where ``Segment.list_files`` lists it with the segment's files, so
it is moved into the index with them; Whoosh's clean-up removes it with its
segment, as it does the ``.docs`` sidecar. Segments written otherwise (the
daemon's own commits of single files, merges) have none, and their postings are
read from Whoosh's blocks as before.

Layout: ``MAGIC``, the slot count (a power of two), the term count, the table's
offset and the fields held (comma-joined); the items, each the CRC-32 of what
follows it, the key length, the posting count, the key (field name, NUL, the
term's bytes), the document numbers and the weights; then the table, one slot per
(CRC-32 of a key, the slot's check, item offset), offset 0 for an empty slot,
probed linearly; the check is a CRC-32 of the slot's number, hash and offset.

A cache, never the truth: a file that does not start as expected is not opened;
a slot whose check or an item whose CRC does not hold (or any read error) makes
``get`` answer None, so the caller reads Whoosh's own postings. Slots carry their
own check rather than the table one CRC: checking a whole table at open (~4 MB a
segment at 100,000 memories) fell on the first queries after a start.
"""

from __future__ import annotations

import io
import logging
import os
import struct
import zlib
from array import array
from collections.abc import Iterable
from pathlib import Path
from sys import byteorder
from typing import Any, Final

import numpy as np

from .atomic import atomic_write_bytes

log = logging.getLogger(__name__)

SUFFIX = ".post"
MAGIC = b"CTXPST1\n"
SEARCHED_FIELDS = ("tags", "text")  # the fields ``MemoryIndex.search`` looks words up in
_HEADER = struct.Struct("<8sIIQH")  # magic, slots, terms, table offset, length of the fields' names
_ITEM = struct.Struct("<IHI")  # CRC-32 of the rest, key length, postings
_SLOT = struct.Struct("<IIQ")  # key hash, the slot's check (``_slot_check``), item offset (0: empty)
_SLOTS_READ = 4  # slots read at once: mostly the whole probe
_ITEM_READ = 2048  # bytes read at an item: its key and up to ~250 postings
ABSENT: Final = ()  # ``get``: the file says the segment holds no such term


def _key(fieldname: str, tbytes: bytes) -> bytes:
    return fieldname.encode("utf-8") + b"\0" + tbytes


def _slot_check(slot: int, keyhash: int, offset: int) -> int:
    """CRC-32 of a slot's number, hash and offset: a damaged slot, or a zeroed one, fails it (never read as empty)."""
    return zlib.crc32(struct.pack("<IIQ", slot, keyhash, offset))


def _little(values: array[Any]) -> bytes:
    if byteorder != "little":
        values.byteswap()
    return values.tobytes()


class PostingsWriter:
    """Collects a segment's postings of ``fields`` term by term, then writes the file once."""

    def __init__(self, fields: Iterable[str] = SEARCHED_FIELDS) -> None:
        self.fields = frozenset(fields)
        self._body = bytearray()
        self._hashes: list[int] = []
        self._offsets: list[int] = []

    def add(self, fieldname: str, tbytes: bytes, ids: tuple[int, ...], weights: tuple[float, ...]) -> None:
        """One term's postings, as ``write_postings`` writes them (document order)."""
        key = _key(fieldname, tbytes)
        rest = _ITEM.pack(0, len(key), len(ids))[4:] + key + _little(array("i", ids)) + _little(array("f", weights))
        self._hashes.append(zlib.crc32(key))
        self._offsets.append(len(self._body))
        self._body += zlib.crc32(rest).to_bytes(4, "little")
        self._body += rest

    def write(self, path: Path) -> bool:
        """Write the file (``atomic.atomic_write_bytes``); False when it could not be written (no file then)."""
        names = ",".join(sorted(self.fields)).encode("utf-8")
        start = _HEADER.size + len(names)
        slots = 8
        while slots < 2 * len(self._hashes):
            slots *= 2
        mask = slots - 1
        entries: list[tuple[int, int]] = [(0, 0)] * slots
        for keyhash, offset in zip(self._hashes, self._offsets):
            slot = keyhash & mask
            while entries[slot][1]:
                slot = (slot + 1) & mask
            entries[slot] = (keyhash, start + offset)
        rows = b"".join(
            _SLOT.pack(keyhash, _slot_check(slot, keyhash, offset), offset)
            for slot, (keyhash, offset) in enumerate(entries)
        )
        header = _HEADER.pack(MAGIC, slots, len(self._hashes), start + len(self._body), len(names)) + names
        try:
            atomic_write_bytes(path, b"".join((header, self._body, rows)))
            return True
        except OSError as exc:
            log.debug("%s not written (%s): its segment's postings are read from Whoosh's blocks", path, exc)
            return False


class PostingsFile:
    """One segment's file, opened for lookups (see module doc)."""

    __slots__ = ("_handle", "_slots", "_table", "fields")

    def __init__(self, handle: io.FileIO, slots: int, table: int, fields: frozenset[str]) -> None:
        self._handle = handle
        self._slots = slots
        self._table = table
        self.fields = fields

    @classmethod
    def open(cls, path: Path) -> PostingsFile | None:
        """The file at ``path`` when it is one of this format; None otherwise (a missing file is usual)."""
        try:
            handle = open(path, "rb", buffering=0)  # noqa: SIM115 - held for pread, closed by close()
        except OSError:
            return None
        try:
            size = os.fstat(handle.fileno()).st_size
            head = os.pread(handle.fileno(), _HEADER.size + 256, 0)
            magic, slots, terms, table, names_len = _HEADER.unpack_from(head)
            names = head[_HEADER.size : _HEADER.size + names_len].decode("utf-8")
            ok = (
                magic == MAGIC
                and slots >= 8
                and slots & (slots - 1) == 0
                and terms <= slots
                and table + slots * _SLOT.size == size
            )
        except (OSError, struct.error, UnicodeDecodeError) as exc:
            log.debug("%s not read (%s)", path, exc)
            ok = False
        if not ok:
            handle.close()
            return None
        return cls(handle, slots, table, frozenset(names.split(",")) if names else frozenset())

    def get(self, fieldname: str, tbytes: bytes) -> tuple[np.ndarray, np.ndarray] | tuple[()] | None:
        """The term's (int32 document numbers, float32 weights); ``ABSENT`` when the segment lacks it;
        None when this file cannot say (a field it does not hold, damage, a read error)."""
        if fieldname not in self.fields:
            return None
        key = _key(fieldname, tbytes)
        keyhash = zlib.crc32(key)
        mask = self._slots - 1
        slot = keyhash & mask
        try:
            fd = self._handle.fileno()  # ValueError once closed (its number may be another file's by then)
            for _ in range(0, self._slots, _SLOTS_READ):
                count = min(_SLOTS_READ, self._slots - slot)  # never past the table's end: wrap next time
                raw = os.pread(fd, count * _SLOT.size, self._table + slot * _SLOT.size)
                for n, at in enumerate(range(0, len(raw) - _SLOT.size + 1, _SLOT.size)):
                    found_hash, check, offset = _SLOT.unpack_from(raw, at)
                    if check != _slot_check(slot + n, found_hash, offset):
                        raise ValueError("a slot's check does not hold")
                    if not offset:
                        return ABSENT
                    if found_hash == keyhash:
                        item = self._item(fd, offset, key)
                        if item is not None:
                            return item
                slot = (slot + count) & mask
        except (OSError, ValueError, struct.error) as exc:  # ValueError: closed, or arrays of a torn item
            log.debug("postings file: %r not read (%s)", key, exc)
            return None
        return None  # a full table without the key or an empty slot: not a file this module wrote

    def _item(self, fd: int, offset: int, key: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        """The arrays of the item at ``offset`` when it is ``key``'s; None for another key's (a hash collision).

        ValueError when the item is damaged (its CRC, or lengths past the items): a damaged
        key must not pass for a collision, which would make its term look absent.
        """
        data = os.pread(fd, _ITEM_READ, offset)
        crc, key_len, count = _ITEM.unpack_from(data)
        start = _ITEM.size + key_len
        end = start + 8 * count
        if offset + end > self._table:
            raise ValueError("an item runs past the items")
        if end > len(data):
            data += os.pread(fd, end - len(data), offset + len(data))
        if len(data) < end or zlib.crc32(memoryview(data)[4:end]) != crc:
            raise ValueError("an item's CRC does not hold")
        if data[_ITEM.size : start] != key:
            return None
        ids = np.frombuffer(data, dtype="<i4", count=count, offset=start)
        weights = np.frombuffer(data, dtype="<f4", count=count, offset=start + 4 * count)
        return ids.astype(np.int32), weights.astype(np.float32)

    def close(self) -> None:
        self._handle.close()


def path_for(folder: Path, segment_id: str) -> Path:
    return folder / f"{segment_id}{SUFFIX}"
