"""Posting arrays of the index, read per segment and scored with BM25F in numpy, without Whoosh's matcher.

Whoosh's matcher (a Python object per posting step, then a scorer call and
a field-length lookup per posting) was most of a query's cost. Here a term's
postings are read per segment as arrays: the whole posting list in one read,
one ``pickle.loads`` per block of 128 postings (Whoosh's W3 codec layout),
document numbers delta-decoded with ``np.cumsum`` (``read_term``); a segment a
cold build's builder wrote also has them as plain arrays in its postings file
(``services/postings_file.py``), read first, one ``np.frombuffer`` each. BM25F is
then computed over the arrays with Whoosh's own formula, parameters and
statistics (IDF, average field length), in the same operation order, so each
score is the same float Whoosh's matcher gives (``bm25``).

Two levels, because they change at different times:

- ``SegmentCache`` (kept across commits): per segment, each read term's
  local document numbers and weights, the field-length bytes, and the
  stored (id, path) of each document. A segment's files never change once
  written, so a commit that adds one small segment (an edit) keeps all of it;
  entries of segments a merge dropped are pruned.
- ``Generation`` (one per committed index generation): which segments are
  live, their document-number offsets and deleted documents, and the
  corpus statistics BM25 depends on. Cheap to make: no posting is read.

``top_documents`` sums terms' scores and picks the top K.
"""

from __future__ import annotations

import io
import math
import pickle
import threading
import zlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from whoosh.codec.whoosh3 import LENGTHS_COLUMN, WHOOSH3_HEADER_MAGIC, W3TermInfo, W3TermsReader, _lenfield
from whoosh.util.numeric import byte_to_length

from .lru import SizedLru
from .postings_file import PostingsFile
from .postings_file import path_for as postings_path
from .segment_sidecar import read_stored_fields
from .term_table import TermTable, pread_of

POSTING_CACHE_MAX = 2_000_000  # cached postings (8 bytes each) across terms and segments
SCORED_CACHE_MAX = 500_000  # scored postings (16 bytes each) kept per index generation
DOCNUM_CACHE_MAX = 20_000  # paths whose document number a generation keeps (~100 bytes each)
# Search results a generation keeps, counted in hits and in the restricted paths of their keys (~200
# bytes each): an agent asks the same questions again and again, and a result only changes with the index.
RESULT_CACHE_MAX = 8_000
# Whoosh stores a field's length per document as one byte (lossy); this is its decoding table.
_LENGTH_OF_BYTE = np.array([float(byte_to_length(b) or 0) for b in range(256)], dtype=np.float64)

Postings = tuple["np.ndarray[Any, np.dtype[np.int64]]", "np.ndarray[Any, np.dtype[np.float64]]"]


class Reader(Protocol):
    """The part of Whoosh's ``IndexReader`` used here (whoosh-reloaded ships no type information)."""

    def generation(self) -> int: ...
    def leaf_readers(self) -> list[tuple[Any, int]]: ...


class Searcher(Protocol):
    """The part of Whoosh's ``Searcher`` used here."""

    weighting: Any

    def reader(self) -> Reader: ...
    def close(self) -> None: ...
    def doc_count(self) -> int: ...
    def doc_count_all(self) -> int: ...
    def avg_field_length(self, fieldname: str, default: Any = None) -> float: ...


@dataclass(frozen=True)
class SegmentTerm:
    """One term's postings in one segment, as stored: local document numbers (sorted) and weights.

    ``df`` is the segment's document frequency from the term info (deleted
    documents included, as in Whoosh's IDF).
    """

    ids: np.ndarray[Any, np.dtype[np.int32]]
    weights: np.ndarray[Any, np.dtype[np.float32]]  # Whoosh writes weights as float32: exact here
    df: int


_ABSENT = SegmentTerm(np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32), 0)
_UNOPENED = object()  # ``SegmentCache._files``: a segment whose postings file was not looked for yet


def _block_arrays(data: tuple[Any, Any, Any], count: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """One posting block's (delta-encoded ids, minified weights) as arrays (``W3PostingsWriter`` layout)."""
    ids = np.cumsum(np.asarray(data[0], dtype=np.int64))
    weights = data[1]
    if weights is None:
        w = np.ones(count, dtype=np.float32)
    elif isinstance(weights, float):
        w = np.full(count, weights, dtype=np.float32)
    else:
        w = np.asarray(weights, dtype=np.float32)
    return ids, w


def _read_blocks(postfile: Any, offset: int, length: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Every block of a posting list in one read: [magic][int length, pickled info, (zlib) pickled data]...

    The same parse as ``W3LeafMatcher._goto`` and ``_read_data``, but whole:
    a negative block length marks the last block. The read is one ``pread`` on the
    segment file when it is laid out as Whoosh writes it (``term_table.pread_of``).
    """
    pread = pread_of(postfile)
    raw = pread(offset, length) if pread is not None else postfile.get(offset, length)
    if raw[:4] != WHOOSH3_HEADER_MAGIC:
        raise ValueError(f"posting list at {offset} does not start with whoosh3's block tag")
    stream = io.BytesIO(raw)
    stream.seek(4)
    id_parts, weight_parts = [], []
    while True:
        start = stream.tell()
        size = int.from_bytes(stream.read(4), "big", signed=True)
        last = size < 0
        end = start + 4 + abs(size)
        count, _maxid, _maxweight, compression, _mn, _mx = pickle.load(stream)
        data = raw[stream.tell() : end]
        if compression:
            data = zlib.decompress(data)
        ids, weights = _block_arrays(pickle.loads(data), count)
        id_parts.append(ids)
        weight_parts.append(weights)
        if last or end >= len(raw):
            break
        stream.seek(end)
    return np.concatenate(id_parts), np.concatenate(weight_parts)


def _read_by_matcher(reader: Any, fieldname: str, tbytes: bytes) -> SegmentTerm:
    """Step Whoosh's own matcher (any codec): the slow path ``read_term`` avoids."""
    matcher = reader._terms.matcher(fieldname, tbytes, reader.schema[fieldname].format)
    ids, weights = [], []
    while matcher.is_active():
        ids.append(matcher.id())
        weights.append(matcher.weight())
        matcher.next()
    df = reader.doc_frequency(fieldname, tbytes)
    return SegmentTerm(np.array(ids, dtype=np.int32), np.array(weights, dtype=np.float32), df)


def read_term(reader: Any, fieldname: str, text: str) -> SegmentTerm:
    """A term's postings in one segment reader (deleted documents included), as arrays."""
    if fieldname not in reader.schema:
        return _ABSENT
    try:
        tbytes = reader.schema[fieldname].to_bytes(text)
    except ValueError:
        return _ABSENT
    terms = reader._terms
    table = TermTable.of(terms) if isinstance(terms, W3TermsReader) else None
    if table is not None:  # the same lookup as Whoosh's, with fewer reads (services/term_table.py)
        value = table.get(table.key(fieldname, tbytes))
        if value is None:
            return _ABSENT
        info = W3TermInfo.from_bytes(value)
    else:
        try:
            info = terms.term_info(fieldname, tbytes)
        except Exception as exc:  # TermNotFound (a KeyError underneath in some readers)
            if type(exc).__name__ in ("TermNotFound", "KeyError"):
                return _ABSENT
            raise
        if not isinstance(terms, W3TermsReader):  # another codec
            return _read_by_matcher(reader, fieldname, tbytes)
    df = int(info.doc_frequency())
    if info.is_inlined():
        ids_t, weights_t, _ = info.inlined_postings()
        return SegmentTerm(np.array(ids_t, dtype=np.int32), np.array(weights_t, dtype=np.float32), df)
    offset, length = info.extent()
    if isinstance(length, tuple):  # W3TermInfo.from_bytes keeps struct.unpack's tuple (Whoosh never reads it)
        length = length[0]
    ids, weights = _read_blocks(terms._postfile, offset, length)
    return SegmentTerm(ids.astype(np.int32), weights, df)


def read_lengths(reader: Any, fieldname: str) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The field-length byte of every document in a segment (0 where the field is empty)."""
    count = reader.doc_count_all()
    out = np.zeros(count, dtype=np.uint8)
    column = reader._perdoc._cached_reader(_lenfield(fieldname), LENGTHS_COLUMN)
    if column is None:
        return out
    stored = min(count, column._count)  # the column ends at the last document with a length
    out[:stored] = np.frombuffer(column._dbfile.get(column._basepos, stored), dtype=np.uint8)
    return out


@dataclass
class SegmentDocs:
    """The stored (id, path) of every document of one segment, by local document number (deleted ones too)."""

    ids: list[str]
    paths: list[str]
    where: dict[str, int]  # path -> its local document number (the last one)
    more: dict[str, list[int]]  # the few paths with several (a path updated within one writer): all of them

    @classmethod
    def of(cls, ids: list[str], paths: list[str]) -> SegmentDocs:
        where: dict[str, int] = {}
        more: dict[str, list[int]] = {}
        for docnum, path in enumerate(paths):
            if path in where:
                more.setdefault(path, [where[path]]).append(docnum)
            where[path] = docnum
        return cls(ids, paths, where, more)

    def docnums(self, path: str) -> Sequence[int]:
        found = self.more.get(path)
        if found is not None:
            return found
        local = self.where.get(path)
        return () if local is None else (local,)

    @classmethod
    def read(cls, reader: Any) -> SegmentDocs:
        stored = read_stored_fields(reader)
        return cls.of(stored.ids, stored.paths)


class SegmentCache:
    """Per segment (by Whoosh's segment id): term postings, field lengths and stored ids, kept across commits.

    A segment's files are immutable, so nothing here depends on the index
    generation: only which segments are live and which of their documents are
    deleted does (``Generation``). Term postings are bounded by
    ``POSTING_CACHE_MAX`` (least recently used terms go first); ``prune``
    drops everything of segments no longer in the index. Shared by reader
    threads: entries are only ever added whole, and two threads reading the
    same term store equal values.
    """

    def __init__(self, folder: Path | None = None) -> None:
        self._terms: SizedLru[tuple[str, str, str], SegmentTerm] = SizedLru(POSTING_CACHE_MAX, lambda t: len(t.ids))
        self._lengths: dict[tuple[str, str], np.ndarray[Any, np.dtype[np.uint8]]] = {}
        self._docs: dict[str, SegmentDocs] = {}
        self._lock = threading.Lock()
        # The index folder, where a builder's segment has its postings file (services/postings_file.py);
        # per segment id, the open file or None (none, or not usable: Whoosh's blocks are read).
        self.folder = folder
        self._files: dict[str, PostingsFile | None] = {}

    def term(self, segid: str, reader: Any, fieldname: str, text: str) -> SegmentTerm:
        key = (segid, fieldname, text)
        entry = self._terms.get(key)
        if entry is None:
            entry = self._from_file(segid, reader, fieldname, text)
            if entry is None:
                entry = read_term(reader, fieldname, text)
            self._terms.put(key, entry)
        return entry

    def _from_file(self, segid: str, reader: Any, fieldname: str, text: str) -> SegmentTerm | None:
        """The term's postings from the segment's postings file; None when it has none or it cannot say."""
        if self.folder is None:
            return None
        postings = self._files.get(segid, _UNOPENED)
        if postings is _UNOPENED:
            opened = PostingsFile.open(postings_path(self.folder, segid))
            with self._lock:
                postings = self._files.setdefault(segid, opened)
            if postings is not opened and opened is not None:
                opened.close()  # another thread opened it first
        if postings is None or not isinstance(postings, PostingsFile):
            return None
        try:
            tbytes = reader.schema[fieldname].to_bytes(text)
        except (KeyError, ValueError):
            return None  # as read_term decides
        found = postings.get(fieldname, tbytes)
        if found is None:
            return None
        if not found:
            return _ABSENT
        ids, weights = found
        return SegmentTerm(ids, weights, len(ids))  # a builder's segment: the term info's df is its postings

    def lengths(self, segid: str, reader: Any, fieldname: str) -> np.ndarray[Any, np.dtype[np.uint8]]:
        key = (segid, fieldname)
        found = self._lengths.get(key)
        if found is None:
            found = self._lengths[key] = read_lengths(reader, fieldname)
        return found

    def docs(self, segid: str, reader: Any) -> SegmentDocs:
        found = self._docs.get(segid)
        if found is None:
            found = self._docs[segid] = SegmentDocs.read(reader)
        return found

    def put_docs(self, segid: str, docs: SegmentDocs) -> None:
        """Stored fields already read elsewhere (the index's open reads every document once)."""
        self._docs[segid] = docs

    def all_docs(self) -> list[tuple[str, SegmentDocs]]:
        return list(self._docs.items())

    def prune(self, live: set[str]) -> None:
        """Forget segments a merge or rebuild removed from the index."""
        self._terms.drop(lambda key: key[0] in live)
        with self._lock:
            self._lengths = {k: v for k, v in self._lengths.items() if k[0] in live}
            self._docs = {k: v for k, v in self._docs.items() if k in live}
            gone = [f for segid, f in self._files.items() if segid not in live and f is not None]
            self._files = {k: v for k, v in self._files.items() if k in live}
        for postings in gone:
            postings.close()

    def close(self) -> None:
        """Close the segments' postings files (the index closes; a query still holding them reads Whoosh's)."""
        with self._lock:
            files, self._files = self._files, {}
        for postings in files.values():
            if postings is not None:
                postings.close()


@dataclass
class TermView:
    """A term across the live segments of one generation: global document numbers and what BM25 needs."""

    ids: np.ndarray[Any, np.dtype[np.int64]]  # sorted, live documents only
    weights: np.ndarray[Any, np.dtype[np.float64]]
    lengths: np.ndarray[Any, np.dtype[np.float64]]
    idf: float
    avgfl: float
    b: float
    k1: float

    def scores(self) -> np.ndarray[Any, np.dtype[np.float64]]:
        """Whoosh's ``bm25`` per posting, the same operations in the same order (so the same floats)."""
        tf, fl = self.weights, self.lengths
        b, k1 = self.b, self.k1
        return self.idf * ((tf * (k1 + 1)) / (tf + k1 * ((1 - b) + b * fl / self.avgfl)))


def _idf(documents: int, df: int) -> float:
    """Whoosh's ``WeightingModel.idf`` (1.0 for an empty index, where Whoosh's log would fail)."""
    return math.log(documents / (df + 1)) + 1 if documents else 1.0


def _leaves(searcher: Searcher) -> list[tuple[Any, int]]:
    """The searcher's segment readers and their offsets (an empty index has a reader without a segment)."""
    return [(r, offset) for r, offset in searcher.reader().leaf_readers() if r.segment() is not None]


@dataclass(frozen=True)
class _Segment:
    segid: str
    offset: int
    count: int  # documents, deleted ones included
    alive: np.ndarray[Any, np.dtype[np.bool_]] | None  # None: nothing deleted


class Generation:
    """One committed generation of the index: live segments, offsets, deletions and corpus statistics.

    Made from a searcher without reading any posting; terms are read through
    the shared ``SegmentCache`` with the calling thread's own searcher (Whoosh
    readers must not be shared between threads), whose leaf readers are in the
    same order as this generation's segments.
    """

    def __init__(self, key: tuple[int, int], searcher: Searcher, segments: SegmentCache) -> None:
        self.key = key
        self.cache = segments
        self.segments: list[_Segment] = []
        for reader, offset in _leaves(searcher):
            segment = reader.segment()
            deleted = list(segment.deleted_docs()) if segment.has_deletions() else []
            alive = None
            count = reader.doc_count_all()
            if deleted:
                alive = np.ones(count, dtype=bool)
                alive[np.array(deleted, dtype=np.int64)] = False
            self.segments.append(_Segment(segment.segment_id(), offset, count, alive))
        self.offsets = np.array([s.offset for s in self.segments], dtype=np.int64)
        self.doc_count = searcher.doc_count()
        self.doc_count_all = searcher.doc_count_all()
        weighting = searcher.weighting
        if not (hasattr(weighting, "B") and hasattr(weighting, "K1")):
            raise TypeError(f"the index searcher's weighting is {type(weighting).__name__}, not BM25F")
        self._field_b: dict[str, float] = dict(getattr(weighting, "_field_B", {}))
        self._b, self._k1 = float(weighting.B), float(weighting.K1)
        self._avgfl: dict[str, float] = {}
        self._df: dict[tuple[str, str], int] = {}
        self._searchers: dict[int, tuple[Searcher, list[Any]]] = {}
        self._scored: SizedLru[tuple[str, str], Postings] = SizedLru(SCORED_CACHE_MAX, lambda p: len(p[0]))
        self._docnum_of: dict[str, int | None] = {}  # path -> live document number, as looked up (docnum)
        # search results of this generation by (terms, limit, restricted paths), each with its size in
        # RESULT_CACHE_MAX units: see MemoryIndex.search
        self.results: SizedLru[Hashable, tuple[Any, int]] = SizedLru(RESULT_CACHE_MAX, lambda kept: kept[1])
        segments.prune({s.segid for s in self.segments})

    def _readers(self, searcher: Searcher) -> list[Any]:
        """The searcher's segment readers, listed once per searcher (Whoosh builds the list on every call)."""
        known = self._searchers.get(id(searcher))
        if known is not None and known[0] is searcher:
            return known[1]
        readers = [r for r, _ in _leaves(searcher)]
        if len(readers) != len(self.segments):
            raise RuntimeError("searcher and generation disagree on the index's segments")
        # The searcher is kept with its list (so its id is not reused); one per reader thread.
        self._searchers = {**self._searchers, id(searcher): (searcher, readers)}
        return readers

    def _parts(self, searcher: Searcher, fieldname: str, text: str) -> list[tuple[_Segment, Any, SegmentTerm]]:
        return [
            (seg, reader, self.cache.term(seg.segid, reader, fieldname, text))
            for seg, reader in zip(self.segments, self._readers(searcher))
        ]

    def doc_frequency(self, searcher: Searcher, fieldname: str, text: str) -> int:
        """Whoosh's document frequency of a term (deleted documents included), summed over segments."""
        key = (fieldname, text)
        found = self._df.get(key)
        if found is None:
            found = self._df[key] = sum(part.df for _, _, part in self._parts(searcher, fieldname, text))
        return found

    def idf(self, searcher: Searcher, fieldname: str, text: str) -> float:
        """Whoosh's ``WeightingModel.idf``: log(all documents / (df + 1)) + 1."""
        return _idf(self.doc_count_all, self.doc_frequency(searcher, fieldname, text))

    def avg_field_length(self, searcher: Searcher, fieldname: str) -> float:
        found = self._avgfl.get(fieldname)
        if found is None:
            found = self._avgfl[fieldname] = searcher.avg_field_length(fieldname) or 1
        return found

    def scored(self, searcher: Searcher, fieldname: str, text: str) -> Postings:
        """The term's live document numbers and BM25F scores, kept for this generation.

        Bounded by ``SCORED_CACHE_MAX`` postings (least recently used terms go
        first): a repeated word costs a dict lookup instead of gathering its
        segments' arrays and scoring them again.
        """
        key = (fieldname, text)
        entry = self._scored.get(key)
        if entry is None:
            view = self.term(searcher, fieldname, text)
            entry = (view.ids, view.scores())
            self._scored.put(key, entry)
        return entry

    def term(self, searcher: Searcher, fieldname: str, text: str) -> TermView:
        """The term's live postings in global document numbers, with their weights and field lengths."""
        ids, weights, lengths = [], [], []
        df = 0
        for seg, reader, part in self._parts(searcher, fieldname, text):
            df += part.df
            if not len(part.ids):
                continue
            local, w = part.ids, part.weights
            if seg.alive is not None:
                keep = seg.alive[local]
                local, w = local[keep], w[keep]
            ids.append(local.astype(np.int64) + seg.offset)
            weights.append(w.astype(np.float64))
            lengths.append(_LENGTH_OF_BYTE[self.cache.lengths(seg.segid, reader, fieldname)[local]])
        self._df.setdefault((fieldname, text), df)
        idf = _idf(self.doc_count_all, df)
        b = float(self._field_b.get(fieldname, self._b))
        avgfl = self.avg_field_length(searcher, fieldname)
        if not ids:
            empty = np.zeros(0)
            return TermView(np.zeros(0, dtype=np.int64), empty, empty, idf, avgfl, b, self._k1)
        # Segments are in offset order and each list is sorted, so the concatenation is sorted.
        return TermView(np.concatenate(ids), np.concatenate(weights), np.concatenate(lengths), idf, avgfl, b, self._k1)

    # --- document numbers <-> (id, path) ------------------------------------------------
    def _alive(self, seg: _Segment, local: int) -> bool:
        return seg.alive is None or bool(seg.alive[local])

    def docnum(self, searcher: Searcher, path: str) -> int | None:
        """The live document number of ``path`` (None when not indexed), kept for the generation.

        Extra candidates (nearest embeddings, important memories, graph neighbours)
        recur from query to query, and finding one meant a lookup per segment.
        """
        known = self._docnum_of
        if path in known:
            return known[path]
        found = next(
            (
                seg.offset + local
                for seg, reader in zip(self.segments, self._readers(searcher))
                for local in self.cache.docs(seg.segid, reader).docnums(path)
                if self._alive(seg, local)
            ),
            None,
        )
        if len(known) < DOCNUM_CACHE_MAX:
            known[path] = found
        return found

    def docs(self, searcher: Searcher, docnums: Sequence[int]) -> list[tuple[str, str]]:
        """(id, path) of global document numbers (one ``searchsorted`` for all of them)."""
        readers = self._readers(searcher)
        where = np.searchsorted(self.offsets, np.asarray(docnums, dtype=np.int64), side="right") - 1
        known: dict[int, SegmentDocs] = {}
        out = []
        for docnum, at in zip(docnums, where.tolist()):
            seg = self.segments[at]
            docs = known.get(at)
            if docs is None:
                docs = known[at] = self.cache.docs(seg.segid, readers[at])
            local = docnum - seg.offset
            out.append((docs.ids[local], docs.paths[local]))
        return out


def top_documents(postings: Sequence[tuple[float, Postings]], limit: int, docs: int) -> list[int]:
    """The ``limit`` best document numbers by the weighted sum of the terms' scores.

    Ties go to the lower document number. ``np.bincount`` adds in input order,
    term after term, so each sum is the same float as adding one posting at a time.
    """
    used = [(ids, scores, weight) for weight, (ids, scores) in postings if len(ids)]
    if not used:
        return []
    ids = np.concatenate([i for i, _, _ in used])
    weighted = np.concatenate([s * w for _, s, w in used])
    size = max(docs, int(ids.max()) + 1)
    totals = np.bincount(ids, weights=weighted, minlength=size)
    present = np.zeros(size, dtype=bool)
    present[ids] = True
    found = np.flatnonzero(present)
    values = totals[found]
    if len(found) > limit:
        kth = np.partition(values, len(values) - limit)[len(values) - limit]
        keep = values >= kth  # the best ``limit`` and any ties with the last of them
        found, values = found[keep], values[keep]
    order = np.lexsort((found, -values))[:limit]
    return [int(d) for d in found[order].tolist()]
