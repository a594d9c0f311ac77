"""A builder's segment postings, written one term at a time: the bytes Whoosh's W3 codec writes, in less CPU.

Whoosh's ``SegmentWriter`` counts each document's words through a chain of
generators, puts every posting in a sorting pool, sorts them, and hands them
one by one to the codec, whose postings writer checks, buffers and counts each
posting before it writes a block: in a cold build's builder about half of a
chunk's CPU (docs/engine.md "Cold build"). Here the text field's pre-analysed
tokens are counted with a ``Counter`` (:func:`counted_text_field`), the pool is
a plain list sorted once (:class:`SortedPostings`), and :func:`write_postings`
writes each term's postings at once with the codec's own encoding:
delta-coded ids, minified weights and values, a pickled and zlib-compressed
block, its pickled header, then the term's ``W3TermInfo`` row in the terms
table. The files are byte for byte what Whoosh writes
(``tests/test_segment_postings.py`` compares them), so Whoosh reads them as
its own. Builders write no per-block length bounds (``index.write_segment``
turns ``length_stats`` off) and inline no postings in the terms table (the
codec's default), and neither does this module.
"""

from __future__ import annotations

import zlib
from array import array
from collections import Counter
from itertools import groupby
from operator import itemgetter
from typing import Protocol

from whoosh.analysis import IDTokenizer
from whoosh.codec.whoosh3 import WHOOSH3_HEADER_MAGIC, W3TermInfo
from whoosh.compat import dumps
from whoosh.fields import Schema
from whoosh.filedb.filetables import _lengths as _LENGTHS
from whoosh.formats import Existence, Frequency
from whoosh.system import pack_int, pack_long, pack_uint, pack_ushort
from whoosh.util.numeric import length_to_byte

from .postings_file import PostingsWriter

_NO_LENGTH = length_to_byte(None)  # a block's length bounds without length_stats: never looked up
_NO_LENGTH_MAX = length_to_byte(0)
_TERMINFO = W3TermInfo._struct  # a terms-table row: flags, weight, df, min/max length, max weight, first/last id
Posting = tuple[str, bytes, int, float, bytes | None]  # what add_document hands its pool
_TERM_BYTES = itemgetter(1)  # a posting's term


class FieldWriter(Protocol):
    """The parts of Whoosh's ``W3FieldWriter`` this module drives (its own methods and files)."""

    _fieldid: int
    _postfile: object
    _tindex: object

    def start_field(self, fieldname: str, fieldobj: object) -> None: ...

    def finish_field(self) -> None: ...


class SortedPostings(list[Posting]):
    """Stands in for ``SegmentWriter.pool``: the postings in a list, sorted once when written.

    ``add`` takes the same tuples as Whoosh's ``PostingPool`` (a list append);
    a builder's chunk fits in memory (Whoosh's pool keeps it in memory too
    below its 128 MB limit), so there are no sorted runs on disk to merge,
    and sorting the tuples gives Whoosh's order: field, term, document.
    """

    add = list.append

    def cleanup(self) -> None:
        self.clear()


def counted_text_field(field: object) -> None:
    """Make ``field`` (the staging writer's own TEXT field object) count a pre-analysed token list in one pass.

    Whoosh's ``Field.index`` turns each token of the list into a ``Token``
    through a chain of generators to count it (``Frequency.word_values``); a
    ``Counter`` gives the same (term, frequency, weight, encoded frequency)
    rows: each token's boost is 1.0 and the format's field boost 1.0, so the
    weight is the frequency. Only the writer's schema object is changed (read
    from the staging index's table of contents, never written back).
    """
    fmt = getattr(field, "format", None)
    if type(fmt) is not Frequency or getattr(fmt, "field_boost", None) != 1.0:
        return  # another format or boost: Whoosh's own counting

    def index(value: list[str], **_kwargs: object) -> list[tuple[bytes, int, float, bytes]]:
        return [(word.encode("utf-8"), freq, float(freq), pack_uint(freq)) for word, freq in Counter(value).items()]

    field.index = index  # type: ignore[attr-defined]


def whole_value_field(field: object) -> None:
    """Make an ``ID`` field (the staging writer's own) index its value as one term without Whoosh's token chain.

    ``IDTokenizer`` yields the whole value as one token and ``Existence``
    keeps it once with the field boost as weight and no value bytes: the
    same row, built directly (three such fields a document). Other analyzers,
    formats or boosts keep Whoosh's own path.
    """
    fmt = getattr(field, "format", None)
    if type(fmt) is not Existence or getattr(fmt, "field_boost", None) != 1.0:
        return
    if type(getattr(field, "analyzer", None)) is not IDTokenizer:
        return

    def index(value: str, **_kwargs: object) -> list[tuple[bytes, int, float, bytes]]:
        return [(value.encode("utf-8"), 1, 1.0, b"")]

    field.index = index  # type: ignore[attr-defined]


def write_postings(
    fields: FieldWriter, schema: Schema, pool: SortedPostings, codec: object, arrays: PostingsWriter | None = None
) -> None:
    """Every term of ``pool`` in (field, term) order, as ``FieldWriter.add_postings`` over a sorted pool writes it.

    Sorted per field by term bytes alone (a stable sort keeps each term's
    postings in document order, as they were added): comparing whole tuples
    was most of the sort's cost. ``arrays`` gets the postings of the fields it
    collects as well (``services/postings_file.py``).
    """
    blocklimit: int = getattr(codec, "_blocklimit")  # noqa: B009 - the codec's settings have no public names
    compression: int = getattr(codec, "_compression")  # noqa: B009
    inlinelimit: int = getattr(codec, "_inlinelimit")  # noqa: B009
    if getattr(codec, "length_stats", True):
        raise ValueError("write_postings writes no per-block length bounds: turn the codec's length_stats off")
    if inlinelimit > 1:  # Whoosh's own inlining fails too (W3TermInfo has no set_inline in whoosh-reloaded)
        raise ValueError("write_postings does not inline postings in the terms table: use inlinelimit 1")
    by_field: dict[str, list[Posting]] = {}
    for posting in pool:
        by_field.setdefault(posting[0], []).append(posting)
    pool.clear()
    for fieldname in sorted(by_field):
        postings = by_field.pop(fieldname)
        postings.sort(key=_TERM_BYTES)
        fieldobj = schema[fieldname]
        fields.start_field(fieldname, fieldobj)
        out = _Output(fields, pack_ushort(fields._fieldid))
        fixedsize = fieldobj.format.fixed_value_size()
        collect = arrays.add if arrays is not None and fieldname in arrays.fields else None
        for btext, group in groupby(postings, key=_TERM_BYTES):
            _, _, ids, weights, values = zip(*group)
            out.term(btext, _blocks(ids, weights, values, fixedsize, blocklimit, compression))
            if collect is not None:
                collect(fieldname, btext, ids, weights)
        fields.finish_field()


class _Output:
    """Appends a field's posting blocks and terms-table rows (``OrderedHashWriter.add``), tracking both offsets.

    Both files are written through their raw file objects; each position is
    kept here rather than asked of the file (a ``tell`` per row was a tenth of
    the writing). Keys arrive in order, as the terms table requires.
    """

    def __init__(self, fields: FieldWriter, prefix: bytes) -> None:
        self.fields = fields
        self.prefix = prefix
        self.table = fields._tindex
        self.posts = fields._postfile.file  # type: ignore[attr-defined]  # the raw file under Whoosh's StructFile
        self.rows = self.table.dbfile.file  # type: ignore[attr-defined]
        self.positions = self.table.index  # type: ignore[attr-defined]
        self.buckets = self.table.buckets  # type: ignore[attr-defined]
        self.hash = self.table.hashfn  # type: ignore[attr-defined]
        self.post_at: int = self.posts.tell()
        self.row_at: int = self.rows.tell()

    def term(self, btext: bytes, blocks: tuple[bytes, bytes]) -> None:
        data, info = blocks
        key = self.prefix + btext
        row = info + pack_long(self.post_at) + pack_int(len(data))
        self.posts.write(data)
        self.post_at += len(data)
        pos = self.row_at
        self.positions.append(pos)
        record = _LENGTHS.pack(len(key), len(row)) + key + row
        self.rows.write(record)
        self.row_at += len(record)
        h = self.hash(key)
        self.buckets[h & 255].append((h, pos))
        self.table.lastkey = key  # type: ignore[attr-defined]


def _blocks(
    ids: tuple[int, ...],
    weights: tuple[float, ...],
    values: tuple[bytes | None, ...],
    fixedsize: int | None,
    blocklimit: int,
    compression: int,
) -> tuple[bytes, bytes]:
    """One term's posting blocks (``W3PostingsWriter._write_block``'s bytes) and its terms-table row, less the extent."""
    out = [WHOOSH3_HEADER_MAGIC]
    count = len(ids)
    total = 0.0
    term_max: float = 0
    for start in range(0, count, blocklimit):
        end = min(start + blocklimit, count)
        block_ids = ids[start:end] if count > blocklimit else ids
        block_weights = array("f", weights[start:end])  # the codec buffers weights as 32-bit floats
        top = max(weights[start:end])
        block_max = top if top > 0 else 0  # the codec's running maximum starts at the int 0
        total += sum(block_weights)
        term_max = max(term_max, block_max)
        block_values = [v for v in values[start:end] if v]  # the codec buffers only non-empty values
        data = (_delta(block_ids), _mini_weights(block_weights), _mini_values(block_values, fixedsize))
        databytes = dumps(data, 2)
        if compression:
            databytes = zlib.compress(databytes, compression)
        header = dumps((end - start, block_ids[-1], block_max, compression, _NO_LENGTH, _NO_LENGTH_MAX), 2)
        size = len(header) + len(databytes)
        out += (pack_int(-size if end == count else size), header, databytes)
    info: bytes = _TERMINFO.pack(False, total, count, 0, _NO_LENGTH_MAX, term_max, ids[0], ids[-1])
    return b"".join(out), info


def _delta(ids: tuple[int, ...]) -> tuple[int, ...]:
    if len(ids) == 1:
        return (ids[0],)
    return (ids[0], *[b - a for a, b in zip(ids, ids[1:])])


def _mini_weights(weights: array[float]) -> tuple[float, ...] | float | None:
    first = weights[0]
    if weights.count(first) == len(weights):
        return None if first == 1.0 else first
    return tuple(weights)


def _mini_values(values: list[bytes], fixedsize: int | None) -> tuple[bytes, ...] | bytes | None:
    if fixedsize is None or fixedsize < 0:
        return tuple(values)
    if fixedsize == 0:
        return None
    return b"".join(values)
