"""L1 blocks, catalog lines and phrase texts made by a cold build's builders, read back by offset (issue 16).

A query at 10,000 memories shows ~110 L1 blocks and ~15 catalog lines. When
the block cache (``services/render_cache.py``) misses, rendering one meant
reading its file back (open, read, sha256, tier split) and tokenizing the block
for its piece costs: ~60 misses a query for distinct queries, about two thirds
of ``select_and_render``'s CPU (docs/engine.md, "Render path, session 9").
The builders already hold every memory's text and tokenize its L1 block and
catalog line to count them (``render.keep_counts``), so they write the block,
the line and their piece costs here at no extra tokenizing, and a miss becomes
one ``os.pread`` (two for records longer than ``_FIRST_READ``). The same holds
for the keyword-overlap signal's phrase text (``signals.phrase_text``: the
memory's text lowercased), which a distinct query read back from ~35 files,
and for the L2 block: the tier planner counts the L2 of the ~3 memories a query
may show in full, which meant reading each file back and tokenizing ~1,500
characters (~0.2 ms each, ~5 % of a distinct query). That one is not free: the
builders tokenize every L2 section for it (only the section: its costs are joined
to the L1 block's, ``_l2_costs``), ~0.35 s more of a cold start at 10,000
memories, and the files grow by ~1.1 KB a memory (docs/engine.md "Session 23").

One file per build chunk (``<folder>/<name>.blk``), written once by its
builder and never changed: ``MAGIC`` and the parse fingerprint of the settings
it was built under (``parse_cache.fingerprint``: a file of other parse settings is
not opened), the records, then a table of (hash of a memory's id, offset of its
records) sorted by hash, and a trailer saying where the table is, with its
CRC-32. A memory's records lie side by side (L1 block, catalog line, phrase
text, then the L2 block, the largest and the least asked for), so the table
holds one entry per memory and one read mostly brings the first three. A record
is the CRC-32 and length of its body, then the body: lengths, the memory's id
and checksum, the tier, the text (UTF-8) and the piece costs (none for the
phrase text). Costs are exact float64 values: a text's costs take a few dozen
distinct values (the counter's tables), so they are stored as a table of those
values and one byte per piece (``_CODED``), or as one float64 per piece when a
text has more than 256 distinct costs. ``BlockStore`` merges the files'
tables into one sorted array (16 bytes an entry) and keeps one descriptor per
file; pages are read with ``pread``, not mapped, so they never count in the
process's RSS.

A cache, never the truth: a record is served only when its CRC-32 matches and
its id, checksum and tier equal the memory asked for (a file edited since the
build has a new checksum; an id the store qualified differs) and its text is
the memory's own: a catalog line equal to ``render.catalog_line`` of it, an L1
or L2 block under its ``render.block_heading`` (a file moved into ``sources/`` keeps
its bytes but not its label), a phrase text starting with the memory's summary
line, title and tags as they are now. Anything else
(a damaged or truncated file, a missing one, a hash collision) is a miss, and
the caller reads the file as before. Files of the first format (``FIRST_MAGIC``:
one table entry per record, no phrase texts; an earlier release's build) are
still read, by their own keys, and files of the second (``SECOND_MAGIC``: float64
costs only, no L2 blocks) as they are, until the next cold build replaces them;
an earlier release does not open a file of this format (its magic differs), so it
never reads one-byte costs as float64. Files of an
older build are removed when a new build starts. Only the default (heuristic)
counter's costs are stored: the engine asks for blocks only when that counter is in use.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import struct
import uuid
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from pathlib import Path
from sys import byteorder
from typing import NamedTuple

import numpy as np

from .model import Memory
from .render import block_heading, catalog_line, memory_block
from .signals import lower_utf8, phrase_head, phrase_text
from .tokens import JoinableCounter, PieceCosts, default_counter, heuristic_floor, is_joinable, join_count, joined_costs

log = logging.getLogger(__name__)

FOLDER = "blocks"  # under the workspace's state folder
SUFFIX = ".blk"
MAGIC = b"CTXBLK3\n"  # 3: costs coded as one byte per piece (``_CODED``), L2 blocks stored
SECOND_MAGIC = b"CTXBLK2\n"  # the second format: one table entry per memory, float64 costs only
FIRST_MAGIC = b"CTXBLK1\n"  # the first format: one table entry per record (an earlier release's build)
_MAGICS = (MAGIC, SECOND_MAGIC, FIRST_MAGIC)
_FINGERPRINT_BYTES = 64  # a sha256 in hex
_HEADER = len(MAGIC) + _FINGERPRINT_BYTES
_TRAILER = struct.Struct("<QQI8s")  # entries, table offset, CRC-32 of the table, MAGIC again
_HEAD = struct.Struct("<II")  # CRC-32 of the body, body length
_BODY = struct.Struct("<HHIBc")  # id bytes, checksum bytes, text bytes, flags, tier code
_OPEN_END = 1  # flags: the costs' open_end
_FROM_L0 = 2  # flags: an L1 block whose text is the summary line (the memory has no L1 text)
_CODED = 4  # flags: the costs are a count byte, that many + 1 float64 values, then one index byte per piece
L1_CODE = b"1"
L2_CODE = b"2"
CATALOG_CODE = b"c"
PHRASE_CODE = b"p"  # the memory's ``signals.phrase_text`` (lowercased UTF-8), then its L2 text's floor
_FLOOR = struct.Struct("<I")  # ``tokens.heuristic_floor`` of the memory's L2 text (``Memory.tier_text``)
_MAX_BODY = 16 * 1024 * 1024  # a length beyond this is damage, not a block
_INTERN_MAX = 4096  # distinct cost values interned (the cost tables hold a few dozen)
_FIRST_READ = 4096  # bytes read at a memory's offset: mostly all of its records (~1.7 KB at 10,000)
_RECORDS_MAX = 4  # records per memory: its L1 block, catalog line, phrase text and L2 block
# An L2 block whose L2 section is longer than this is not stored (rendered from the file when asked):
# 98.7 % of the L2 blocks 400 distinct queries counted at 10,000 had shorter sections (the planner
# counts only the L2s that may fit beside the relevant L1s), while the longer ones are a third of the
# text the builders would tokenize for it (~5 % of the memories).
L2_STORED_MAX_CHARS = 2048


class StoredBlock(NamedTuple):
    """A block as the builder rendered it: text and piece costs (``render_cache.RenderedBlock``'s fields)."""

    text: str
    costs: PieceCosts


def key_hash(memory_id: str) -> int:
    """The table key of a memory's records: 64 bits of BLAKE2b over its id (stable across processes)."""
    digest = hashlib.blake2b(memory_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def first_key_hash(memory_id: str, code: bytes) -> int:
    """The first format's key of one record: 64 bits of BLAKE2b over the id and the tier code."""
    digest = hashlib.blake2b(memory_id.encode("utf-8") + b"\0" + code, digest_size=8).digest()
    return int.from_bytes(digest, "little")


def encode_record(
    memory_id: str, checksum: str, code: bytes, text: str, costs: PieceCosts, from_l0: bool = False, coded: bool = False
) -> bytes:
    """One block's record (see module doc); ``coded``: its costs as a table and index bytes when they fit."""
    tail, coded = _cost_bytes(costs.costs) if coded else (_float_bytes(costs.costs), False)
    flags = costs.open_end * _OPEN_END | from_l0 * _FROM_L0 | coded * _CODED
    return _encode(memory_id, checksum, code, text.encode("utf-8"), tail, flags)


def _cost_bytes(costs: tuple[float, ...]) -> tuple[bytes, bool]:
    """The costs as stored, and whether coded: their distinct values and an index byte per piece when
    there are at most 256 of them (an L2 block's ~400 costs take ~700 bytes instead of ~3,200)."""
    distinct = list(dict.fromkeys(costs))
    if 0 < len(distinct) <= 256:
        index = dict(zip(distinct, range(len(distinct))))
        return bytes((len(distinct) - 1,)) + _float_bytes(distinct) + bytes(map(index.__getitem__, costs)), True
    return _float_bytes(costs), False


def _float_bytes(values: Iterable[float]) -> bytes:
    packed = array("d", values)
    if byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def _encode(memory_id: str, checksum: str, code: bytes, text: bytes, tail: bytes, flags: int) -> bytes:
    mid, check = memory_id.encode("utf-8"), checksum.encode("ascii")
    body = b"".join((_BODY.pack(len(mid), len(check), len(text), flags, code), mid, check, text, tail))
    return _HEAD.pack(zlib.crc32(body), len(body)) + body


def write_file(folder: Path, fingerprint: str, records: Iterable[tuple[int, bytes]]) -> Path | None:
    """Write (key hash, record) pairs as one chunk file in ``folder``; its path (None when there was nothing).

    Written under a temporary name and renamed, so a reader never opens half a file.
    """
    keys: list[int] = []
    offsets: list[int] = []
    parts = [MAGIC, _fingerprint_bytes(fingerprint)]
    at = _HEADER
    for key, record in records:
        keys.append(key)
        offsets.append(at)
        parts.append(record)
        at += len(record)
    if not keys:
        return None
    order = np.argsort(np.array(keys, dtype=np.uint64), kind="stable")
    table = np.stack([np.array(keys, dtype=np.uint64)[order], np.array(offsets, dtype=np.uint64)[order]])
    table_bytes = table.astype("<u8").tobytes()
    parts += [table_bytes, _TRAILER.pack(len(keys), at, zlib.crc32(table_bytes), MAGIC)]
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    temp, final = folder / f".{name}.tmp", folder / f"{name}{SUFFIX}"
    temp.write_bytes(b"".join(parts))
    os.replace(temp, final)
    return final


def clear_folder(folder: Path) -> None:
    """Remove every chunk file (a new build starts; open descriptors keep reading their old files)."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if path.suffix in (SUFFIX, ".tmp"):
            try:
                path.unlink()
            except OSError as exc:
                log.debug("%s: not removed (%s)", path, exc)


class BlockStore:
    """The chunk files' blocks, by (memory id, tier); immutable once built (``with_files`` returns a new one)."""

    def __init__(
        self,
        files: tuple[io.FileIO, ...] = (),
        keys: np.ndarray | None = None,
        places: np.ndarray | None = None,
        first_format: bool = False,
    ):
        # A workspace built by an earlier release keeps its files until the next cold build: their
        # blocks are still served (looked up by the first format's keys), their phrase texts read back.
        self._first_format = first_format
        self._files = files  # shared by the stores ``with_files`` makes; closed when the last one goes
        self._keys = keys if keys is not None else np.empty(0, dtype=np.uint64)
        # file index << 40 | record offset, in the order of ``_keys``
        self._places = places if places is not None else np.empty(0, dtype=np.uint64)
        # The same arrays seen as Python ints (no copy): ``bisect`` over them and an item read cost
        # ~1.5 us against ~5 us for ``searchsorted`` and two numpy scalars per lookup (~45 a query).
        self._key_view = self._keys.data
        self._place_view = self._places.data
        self._intern: dict[float, float] = {}

    def __len__(self) -> int:
        return len(self._keys)

    @classmethod
    def open_folder(cls, folder: Path, fingerprint: str) -> BlockStore:
        """The store of every chunk file in ``folder`` built under ``fingerprint`` (empty when there is none)."""
        files = sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []
        return cls().with_files(files, fingerprint)

    def with_files(self, paths: Iterable[Path], fingerprint: str) -> BlockStore:
        """A new store: this one's files and ``paths`` (a file of other parse settings or unreadable is left out)."""
        files = list(self._files)
        keys = [self._keys]
        places = [self._places]
        first_format = self._first_format
        for path in paths:
            table = _read_table(path, fingerprint)
            if table is None:
                continue
            first_format |= table[2]
            try:
                handle = open(path, "rb", buffering=0)  # noqa: SIM115 - held open for pread, closed by close()
            except OSError as exc:
                log.debug("%s: not opened (%s)", path, exc)
                continue
            keys.append(table[0])
            places.append(table[1] | np.uint64(len(files) << 40))
            files.append(handle)
        all_keys, all_places = np.concatenate(keys), np.concatenate(places)
        order = np.argsort(all_keys, kind="stable")
        return BlockStore(tuple(files), all_keys[order], all_places[order], first_format)

    def get(self, memory: Memory, code: bytes) -> StoredBlock | None:
        """``memory``'s stored block at tier ``code`` (``L1_CODE``, ``CATALOG_CODE``, ``L2_CODE``) when it is its own; else None."""
        found = self._lookup(memory, code)
        if found is None:
            return None
        try:
            block = self._decode(*found)
        except (UnicodeDecodeError, ValueError, IndexError) as exc:  # damaged (past its CRC: a writer's fault)
            log.debug("block of %s not read back (%s): rendered instead", memory.id, exc)
            return None
        if not _is_own(block, memory, code):
            return None
        return StoredBlock(block.text, block.costs)

    def phrase_text(self, memory: Memory) -> bytes | None:
        """``memory``'s ``signals.phrase_text`` as its build stored it, when it is its own; else None.

        Its own: the record's id and checksum are the memory's (the tiers are the
        checksummed file's) and it starts with the memory's summary line, title and
        tags as they are now (``signals.phrase_head``).
        """
        found = self._lookup(memory, PHRASE_CODE)
        if found is None:
            return None
        body, at, length, _flags = found
        text = body[at : at + length]
        return text if text.startswith(lower_utf8(phrase_head(memory))) else None

    def l2_text_floor(self, memory: Memory) -> int | None:
        """``tokens.heuristic_floor`` of ``memory``'s L2 text (without its heading) as its build counted it; else None.

        The text is the checksummed file's, so the record's id and checksum are
        enough. The L2 block's floor is this plus its heading's: the floor counts
        whitespace-separated runs, and the block joins heading and text with a newline.
        """
        found = self._lookup(memory, PHRASE_CODE)
        if found is None:
            return None
        body, at, length, _flags = found
        tail = body[at + length :]
        return _FLOOR.unpack(tail)[0] if len(tail) == _FLOOR.size else None

    def _lookup(self, memory: Memory, code: bytes) -> tuple[bytes, int, int, int] | None:
        """The record of ``memory`` at ``code`` as ``_find`` gives it (None: none stored, or not its own)."""
        keys = self._key_view
        if not len(keys):
            return None
        memory_id = memory.id
        key = key_hash(memory_id)
        at = bisect_left(keys, key)  # the view's items are exact Python ints (unsigned 64-bit)
        if (at >= len(keys) or keys[at] != key) and self._first_format:
            key = first_key_hash(memory_id, code)
            at = bisect_left(keys, key)
        if at >= len(keys) or keys[at] != key:
            return None
        place = self._place_view[at]
        try:
            fd = self._files[place >> 40].fileno()  # ValueError once closed
            return _find(fd, place & ((1 << 40) - 1), memory_id, memory.checksum, code)
        except (OSError, ValueError, IndexError, UnicodeDecodeError, struct.error) as exc:  # damaged, or closed
            log.debug("record %r of %s not read back (%s)", code, memory_id, exc)
            return None

    def _decode(self, body: bytes, at: int, text_len: int, flags: int) -> _Found:
        text = body[at : at + text_len].decode("utf-8")
        tail = at + text_len
        intern = self._intern if len(self._intern) < _INTERN_MAX else {}
        # the same float objects for the same costs: a cached block then holds 8 bytes a piece, as a fresh count's
        if flags & _CODED:
            values_end = tail + 1 + 8 * (body[tail] + 1)
            table = _floats(body[tail + 1 : values_end])
            costs = tuple(map(tuple(map(intern.setdefault, table, table)).__getitem__, body[values_end:]))
        else:
            values = _floats(body[tail:])
            costs = tuple(map(intern.setdefault, values, values))
        return _Found(text, PieceCosts(costs, bool(flags & _OPEN_END)), bool(flags & _FROM_L0))

    def close(self) -> None:
        """Close the files (the engine closes; a query still holding this store then misses)."""
        files, self._files = self._files, ()
        self._keys = np.empty(0, dtype=np.uint64)
        self._key_view = self._keys.data
        for handle in files:
            handle.close()


def _floats(raw: bytes) -> array[float]:
    """Little-endian float64 values (``_float_bytes``); ValueError when ``raw`` is not a whole number of them."""
    values = array("d", raw)
    if byteorder != "little":
        values.byteswap()
    return values


def _find(fd: int, offset: int, memory_id: str, checksum: str, code: bytes) -> tuple[bytes, int, int, int] | None:
    """``memory_id``'s record at ``code`` among its records at ``offset``, when its CRC holds and it is at ``checksum``.

    Returns (body, where its text starts, the text's length, flags); None for anything else.
    A record of another tier is stepped over by its length; one of another memory
    (a damaged length, or a hash collision) ends the search.
    """
    data = os.pread(fd, _FIRST_READ, offset)  # mostly all of the memory's records in one call
    start = 0
    wanted = memory_id.encode("utf-8")
    for _ in range(_RECORDS_MAX):
        if start + _HEAD.size + _BODY.size > len(data):  # the next head is beyond what was read
            data, start, offset = os.pread(fd, _FIRST_READ, offset + start), 0, offset + start
        crc, length = _HEAD.unpack_from(data, start)
        if length > _MAX_BODY:
            return None
        head_end = start + _HEAD.size
        id_len, check_len, text_len, flags, tier = _BODY.unpack_from(data, head_end)
        at = head_end + _BODY.size
        if at + id_len > len(data):  # a long id across the end of what was read
            data, start, offset = os.pread(fd, _FIRST_READ + id_len, offset + start), 0, offset + start
            head_end, at = _HEAD.size, _HEAD.size + _BODY.size
        if data[at : at + id_len] != wanted:
            return None
        if tier == code:
            end = head_end + length
            body = data[head_end:end] if end <= len(data) else os.pread(fd, length, offset + head_end)
            if len(body) != length or zlib.crc32(body) != crc:
                return None
            at = _BODY.size + id_len
            if body[at : at + check_len].decode("ascii") != checksum:
                return None
            return body, at + check_len, text_len, flags
        start = head_end + length
    return None


class _Found(NamedTuple):
    text: str
    costs: PieceCosts
    from_l0: bool


def _is_own(found: _Found, memory: Memory, code: bytes) -> bool:
    """Whether a record's text is what ``memory`` renders (its id and checksum already matched).

    A catalog line and a summary-line block are checked whole (the summary line is a
    hot field); an L1 or L2 text block by its heading, its text being the checksummed file's.
    """
    text = found.text
    if code == CATALOG_CODE:
        return text == catalog_line(memory)
    heading = block_heading(memory, "L2" if code == L2_CODE else "L1")
    if found.from_l0:
        l0 = memory.l0.strip()
        return text == (f"{heading}\n{l0}" if l0 else heading)
    return text.startswith(heading) and len(text) > len(heading) and text[len(heading)] == "\n"


def records_for(memory: Memory) -> list[tuple[int, bytes]]:
    """A builder's records of ``memory`` (text still held), as one table entry: its L1 block and catalog
    line with their costs, its phrase text (``signals.phrase_text``), then its L2 block with its costs
    when it has an L2 section (``Memory.has_l2``: the planner asks for no other's) of at most ``L2_STORED_MAX_CHARS``.

    Counts both onto the memory as ``render.keep_counts`` does, from the same piece
    costs (``join_count`` of one text is ``count`` of it), so nothing is tokenized twice.
    """
    counter = default_counter()
    out: list[bytes] = []
    from_l0 = not memory.l1  # the L1 block shows the summary line (Memory.tier_text)
    l1_block = memory_block(memory, "L1")
    l1_costs: PieceCosts | None = None
    for code, text in ((L1_CODE, l1_block), (CATALOG_CODE, catalog_line(memory))):
        costs = counter.piece_costs(text) if is_joinable(counter) else None
        tokens = join_count([(costs, 0)]) if costs is not None else counter.count(text)
        if code == L1_CODE:
            memory.l1_tokens, l1_costs = tokens, costs
        else:
            memory.catalog_tokens = tokens
        if costs is not None:
            out.append(encode_record(memory.id, memory.checksum, code, text, costs, from_l0 and code == L1_CODE))
    l2_text = memory.tier_text("L2").strip()
    phrase, floor = phrase_text(memory, memory.l1, memory.l2), heuristic_floor(l2_text)
    out.append(_encode(memory.id, memory.checksum, PHRASE_CODE, phrase, _FLOOR.pack(floor), 0))
    section = memory.l2.strip()
    if section and len(section) <= L2_STORED_MAX_CHARS and is_joinable(counter):  # a section: Memory.has_l2
        block = memory_block(memory, "L2")
        costs = _l2_costs(memory, section, block, l1_block, l1_costs, counter)
        if costs is not None:
            out.append(encode_record(memory.id, memory.checksum, L2_CODE, block, costs, coded=True))
    return [(key_hash(memory.id), b"".join(out))]


def _l2_costs(
    memory: Memory, section: str, block: str, l1_block: str, l1_costs: PieceCosts | None, counter: JoinableCounter
) -> PieceCosts | None:
    """The L2 block's piece costs, tokenizing only its L2 section when the block is the L1 block and that section
    joined by a blank line (``tokens.joined_costs``: the pieces a text splits into do not cross the newlines
    between texts); the whole block otherwise. The two headings differ only in the tier's digit, one piece of
    the same cost (``tests/test_block_store.py`` checks the joined costs against the whole block's on real files)."""
    if l1_costs is not None and memory.l1:
        heading, l2_heading = block_heading(memory, "L1"), block_heading(memory, "L2")
        if block == f"{l2_heading}{l1_block[len(heading) :]}\n\n{section}":
            rest = counter.piece_costs(section)
            if rest is not None:
                return joined_costs(l1_costs, rest)
    return counter.piece_costs(block)


def _fingerprint_bytes(fingerprint: str) -> bytes:
    return fingerprint.encode("ascii")[:_FINGERPRINT_BYTES].ljust(_FINGERPRINT_BYTES, b" ")


def _read_table(path: Path, fingerprint: str) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """A chunk file's (sorted keys, offsets, whether it is of the first format), checked against its trailer.

    None when damaged, of another parse fingerprint, or of neither format.
    """
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size < _HEADER + _TRAILER.size:
                return None
            handle.seek(0)
            header = handle.read(_HEADER)
            version = header[: len(MAGIC)]
            if version not in _MAGICS or header[len(MAGIC) :] != _fingerprint_bytes(fingerprint):
                return None
            handle.seek(size - _TRAILER.size)
            entries, table_at, crc, magic = _TRAILER.unpack(handle.read(_TRAILER.size))
            if magic != version or table_at + 16 * entries + _TRAILER.size != size or entries >= 1 << 32:
                return None
            handle.seek(table_at)
            raw = handle.read(16 * entries)
    except OSError as exc:
        log.debug("%s: not read (%s)", path, exc)
        return None
    if zlib.crc32(raw) != crc:
        log.debug("%s: its table is damaged; its blocks are rendered instead", path)
        return None
    table = np.frombuffer(raw, dtype="<u8").astype(np.uint64).reshape(2, entries)
    if entries and (table[1].max() >= table_at or table[1].max() >= 1 << 40):
        return None
    return table[0], table[1], version == FIRST_MAGIC
