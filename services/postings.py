"""Per-generation posting arrays of the index: BM25F scores summed without Whoosh's matcher tree.

Whoosh's matcher (a Python object per posting step) was most of a query's
cost, so ``PostingCache`` computes each queried term's scores once per index
generation with Whoosh's own scorer and keeps them as numpy arrays;
``top_documents`` sums them and picks the top K. ``MemoryIndex.search``
(services/index.py) uses both; results equal a Whoosh search.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from whoosh.query import Term

POSTING_CACHE_MAX = 2_000_000  # cached postings (12 bytes each) across query terms
TERM_STATS_MAX = 50_000  # cached document frequencies / IDFs per generation (then started afresh)


class Reader(Protocol):
    def generation(self) -> int: ...


class Searcher(Protocol):
    """The part of Whoosh's ``Searcher`` used here (whoosh-reloaded ships no type information)."""

    def reader(self) -> Reader: ...
    def close(self) -> None: ...
    def context(self) -> object: ...
    def doc_count(self) -> int: ...
    def doc_frequency(self, fieldname: str, text: str) -> int: ...
    def idf(self, fieldname: str, text: str) -> float: ...
    def document_number(self, *, path: str) -> int | None: ...
    def stored_fields(self, docnum: int) -> dict[str, str]: ...


Postings = tuple["np.ndarray[Any, np.dtype[np.int32]]", "np.ndarray[Any, np.dtype[np.float64]]"]


def top_documents(postings: Sequence[tuple[tuple[str, ...], float, Postings]], limit: int, docs: int) -> list[int]:
    """The ``limit`` best document numbers by the weighted sum of the terms' scores.

    Ties go to the lower document number. ``np.bincount`` adds in input order,
    term after term, so each sum is the same float as adding one posting at a time.
    """
    used = [(ids, scores, weight) for _, weight, (ids, scores) in postings if len(ids)]
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


class PostingCache:
    """Per index generation: each queried term's BM25F score per document, and stored fields.

    Scores are Whoosh's own (``BM25F`` via the term's matcher, boost 1.0;
    a query multiplies by its weight), so results equal a Whoosh search.
    They depend on corpus statistics (IDF, average length), so the cache is
    dropped whenever the index generation changes. Arrays, not dicts: 12
    bytes per posting. Bounded by ``POSTING_CACHE_MAX`` postings (least
    recently used terms go first). Shared by reader threads: entries are
    only ever added whole, and two threads computing the same term store
    equal values.
    """

    def __init__(self, generation: tuple[int, int]) -> None:
        self.generation = generation
        self._terms: OrderedDict[tuple[str, str], Postings] = OrderedDict()
        self._size = 0
        self._docs: dict[int, tuple[str, str]] = {}
        self._paths: dict[str, int | None] = {}
        self._frequencies: dict[tuple[str, str], int] = {}
        self._idf: dict[str, float] = {}
        self._doc_count: int | None = None
        self._lock = threading.Lock()

    def postings(self, searcher: Searcher, fieldname: str, text: str) -> Postings:
        key = (fieldname, text)
        entry = self._terms.get(key)
        if entry is not None:
            try:
                self._terms.move_to_end(key)
            except KeyError:  # evicted by another thread meanwhile
                pass
            return entry
        ids, scores = array("i"), array("d")
        matcher = Term(fieldname, text).matcher(searcher, searcher.context())
        append_id, append_score = ids.append, scores.append
        while matcher.is_active():
            append_id(matcher.id())
            append_score(matcher.score())
            matcher.next()
        entry = (np.frombuffer(ids, dtype=np.int32), np.frombuffer(scores, dtype=np.float64))
        with self._lock:
            if key not in self._terms:
                self._terms[key] = entry
                self._size += len(ids)
                while self._size > POSTING_CACHE_MAX and len(self._terms) > 1:
                    _, (old_ids, _) = self._terms.popitem(last=False)
                    self._size -= len(old_ids)
        return entry

    def doc_count(self, searcher: Searcher) -> int:
        """Documents in this generation."""
        if self._doc_count is None:
            self._doc_count = searcher.doc_count()
        return self._doc_count

    def doc_frequency(self, searcher: Searcher, fieldname: str, text: str) -> int:
        """Whoosh's document frequency of a term, read once per generation."""
        key = (fieldname, text)
        found = self._frequencies.get(key)
        if found is None:
            if len(self._frequencies) >= TERM_STATS_MAX:
                self._frequencies = {}  # replaced whole: another thread keeps the dict it read
            found = self._frequencies[key] = searcher.doc_frequency(fieldname, text)
        return found

    def idf(self, searcher: Searcher, token: str) -> float:
        """Whoosh's IDF of a text-field token, computed once per generation."""
        found = self._idf.get(token)
        if found is None:
            if len(self._idf) >= TERM_STATS_MAX:
                self._idf = {}
            found = self._idf[token] = float(searcher.idf("text", token))
        return found

    def docnum(self, searcher: Searcher, path: str) -> int | None:
        """The document number of ``path`` in this generation (None when not indexed)."""
        try:
            return self._paths[path]
        except KeyError:
            found = searcher.document_number(path=path)
            self._paths[path] = found
            return found

    def doc(self, searcher: Searcher, docnum: int) -> tuple[str, str]:
        """(id, path) of a document number in this generation."""
        found = self._docs.get(docnum)
        if found is None:
            fields = searcher.stored_fields(docnum)
            found = (fields["id"], fields["path"])
            self._docs[docnum] = found
        return found
