"""A segment's term table (Whoosh's on-disk hash, ``filetables.HashReader``) read with direct reads.

A distinct query looks up each of its words in every segment, in the text and
the tags fields (~36 lookups at 10,000 memories in 6 segments). Whoosh's lookup
(``W3TermsReader.term_info``) reads the slot, the key's lengths, the key and the
value as four reads, each through three layers of Python file objects
(``StructFile`` -> ``SubFile`` -> the open file), and raises ``TermNotFound``
for a word a segment lacks: 1.8 ms of a distinct query's ~20 ms of CPU
(gen-10000, load ~4.7). ``TermTable`` probes the same slots in the same order
(``HashReader.ranges_for_key``) with one ``os.pread`` on the segment file's
descriptor per slot, reads lengths, key and (mostly) value together, and
returns None for a miss, so it finds the same bytes. ``pread`` rather than
seek and read on the buffered file: a seek empties the buffer, so each read
then filled 8 KB for the 12 to 60 bytes wanted (4.1 against 5.6 us a lookup,
gen-10000), and it leaves the file's position alone. ``of`` gives None when the
reader is not laid out as expected (another codec, an mmap'd compound file):
the caller then uses Whoosh's own lookup.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable
from typing import Any

from whoosh.filedb.compound import SubFile

_POINTER = struct.Struct("!Iq")  # a hash slot: the key's hash, the item's position (filetables._pointer)
_LENGTHS = struct.Struct("!ii")  # before each item: key length, value length (filetables._lengths)
_KEY_PREFIX = struct.Struct("!H")  # a term's key: the field number, then the term bytes (W3TermsReader._keycoder)
_NO_FIELD = 65535  # the field number Whoosh uses for a field the segment does not know
_VALUE_GUESS = 64  # bytes read after a key for its value: a term info is ~30 (longer ones take a second read)


def _region(structfile: Any) -> tuple[io.BufferedReader, int, int] | None:
    """The open segment file under one of Whoosh's ``StructFile`` regions, with the region's offset and length;
    None when it is laid out otherwise (another codec, an mmap'd compound file)."""
    sub: Any = getattr(structfile, "file", None)
    if type(sub) is not SubFile or not isinstance(sub._file, io.BufferedReader):
        return None
    return sub._file, sub._offset, sub._length


def pread_of(structfile: Any) -> Callable[[int, int], bytes] | None:
    """``structfile.get`` (a region of a segment file) as one ``os.pread``, when it is laid out as expected.

    Whoosh's ``get`` seeks the segment's buffered file and reads through three layers
    of Python file objects: the buffer is emptied at each seek and refilled with 8 KB
    for a posting list of a few hundred bytes (paired over distinct queries at 10,000:
    0.992-0.997 of the time, answers identical). ``pread`` takes the bytes at an offset
    without moving the file's position. None when the file is another kind (the caller
    uses ``get``).
    """
    region = _region(structfile)
    if region is None:
        return None
    file, base, size = region
    fd = file.fileno()

    def read(position: int, length: int) -> bytes:
        return os.pread(fd, max(0, min(length, size - position)), base + position)

    return read


class TermTable:
    """Lookups in one segment reader's term table (see module doc); one per lookup is fine (no reads to make one)."""

    __slots__ = ("_file", "_base", "_tables", "_hash", "_fields")

    def __init__(self, file: io.BufferedReader, base: int, hashreader: Any, fields: dict[str, int]) -> None:
        self._file = file
        self._base = base
        self._tables: list[tuple[int, int]] = hashreader.tables
        self._hash = hashreader.hashfn
        self._fields = fields

    @classmethod
    def of(cls, terms: Any) -> TermTable | None:
        """The table of a ``W3TermsReader`` read through a plain file, else None."""
        hashreader = getattr(terms, "_tindex", None)
        region = _region(getattr(hashreader, "dbfile", None))
        fields = getattr(terms, "_fieldmap", None)
        if region is None or not isinstance(fields, dict) or not hasattr(hashreader, "tables"):
            return None
        file, base, _ = region
        return cls(file, base, hashreader, fields)

    def key(self, fieldname: str, tbytes: bytes) -> bytes:
        """The table key of a term (``W3TermsReader._keycoder``)."""
        return _KEY_PREFIX.pack(self._fields.get(fieldname, _NO_FIELD)) + tbytes

    def get(self, key: bytes) -> bytes | None:
        """The value stored for ``key`` (the first one, as ``HashReader.__getitem__``), None when absent."""
        keyhash = self._hash(key)
        start, slots = self._tables[keyhash & 255]
        if not slots:
            return None
        fd, base = self._file.fileno(), self._base
        size = _POINTER.size
        end = start + slots * size
        slot = start + ((keyhash >> 8) % slots) * size
        want = len(key)
        at = _LENGTHS.size + want  # where the value starts, after its lengths and key
        for _ in range(slots):
            slothash, item = _POINTER.unpack(os.pread(fd, size, base + slot))
            if not item:
                return None
            if slothash == keyhash:
                head = os.pread(fd, at + _VALUE_GUESS, base + item)
                keylen, datalen = _LENGTHS.unpack_from(head)
                if keylen == want and head[_LENGTHS.size : at] == key:
                    value = head[at : at + datalen]  # the value follows its key
                    return value if len(value) == datalen else os.pread(fd, datalen, base + item + at)
            slot += size
            if slot == end:
                slot = start
        return None
