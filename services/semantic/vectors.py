"""``VectorIndex``: one embedding per memory, cached on disk, searched in memory.

What is embedded (``embed_text``): the summary line, title, tags and L1 of a
memory (the text an agent first sees of it), cut at ``MAX_TOKENS`` by the
model. Measured on LoCoMo dev (docs/engine.md#what-gets-embedded): for
dialog turns and observations the whole memory is that text anyway; for
sessions, embedding the summary (L1) beat pooling the whole transcript
(static embeddings pooled over thousands of tokens drift to the corpus mean).

Cache: ``<state>/embeddings/<model>.npy`` (float16 rows) and
``<model>.json`` (the content checksum of each row, the model name and
dimension). Keyed by checksum, so a renamed file or one reverted to an
earlier text is not embedded again; a different model name is a different
file (switching models rebuilds, switching back reuses). The cache is
written atomically after a load, then every 200 changed rows or 5 minutes
and when the engine closes; a damaged or mismatching cache is ignored and
rebuilt.

In memory: one row per memory id as int16 codes with a float32 scale per row
(``quantized``: half the bytes of a float32 matrix, a product as fast; float16
products are ~10x slower in numpy).

Similarity is the cosine *around the workspace's mean embedding*
(``_Centre``): mean-pooled static embeddings share a large common
component (function words, the corpus's own topic), so raw cosines of
unrelated texts sit at 0.2-0.4 and differ little. Subtracting the mean of
the rows from both sides removes it (measured on LoCoMo dev, embeddings
alone: dialog turns R@10 50.5 -> 52.7, observations 55.3 -> 57.6;
docs/engine.md#semantic-signal-embeddings-offline). The mean and, per row,
the dot product with it are recomputed by the writer after each change
(O(rows x dim), ~2 ms at 10,000), so a query still costs one
matrix-vector product and the matrix is not copied. Updates write rows in place or
swap in a grown matrix, so a query running beside one writer reads either
the old or the new state of the index (a row being rewritten in place may
be read half-written, as a float row could be: it is that memory's change).
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from ..atomic import atomic_write_bytes
from ..lru import SizedLru
from ..model import Memory
from ..stop_flag import Check, never
from . import quantized
from .models import SemanticModel, bulk_embedding

log = logging.getLogger(__name__)

CACHE_FOLDER = "embeddings"
CACHE_VERSION = 1
EMBED_BATCH = 256
NEAREST_MEMO_MAX = 4_000  # nearest results kept per state, counted in ids (~100 bytes each)
CACHE_COPY_SLICE = 8_192  # cached rows stacked per copy into the matrix (a 4 MB float16 temporary)
SAVE_EVERY_ROWS = 200
SAVE_EVERY_S = 300.0
TOP_BLOCK = 128  # rows per block of the nearest search's threshold (``_best_rows``)
PATCH_CENTRE_SHARE = 8  # the centre is patched (not recomputed) when fewer than 1/8 of the rows changed


def embed_text(memory: Memory) -> str:
    """The text embedded for a memory (see module doc)."""
    parts = [memory.l0, memory.title, " ".join(memory.tags), memory.l1 or ""]
    return "\n".join(p for p in parts if p)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"


class _Centre:
    """The rows' mean and what a centred cosine needs per row (see module doc).

    For unit rows ``m`` and a unit query ``q``, with mean ``mu``:
    ``cos(m - mu, q - mu) = (m.q - m.mu - q.mu + mu.mu) / (|m - mu| |q - mu|)``,
    and ``|m - mu|^2 = |m|^2 - 2 m.mu + mu.mu``: so only ``m.mu`` and
    ``|m - mu|`` are kept per row.

    ``previous`` and ``changed``: the centre before a few rows changed, and
    those rows. The free-row mask and ``|m|^2`` depend on a row alone, so they
    are copied and recomputed for the changed rows only (a row's value is the
    same float either way); the mean and each row's dot with it move with
    every change and are recomputed whole. A single save at 100,000 memories
    recomputed all of it (38 ms).
    """

    free: np.ndarray  # True for a free (zero) row
    squares: np.ndarray  # |m|^2 per row

    def __init__(
        self,
        codes: np.ndarray,
        scale: np.ndarray,
        ids: Sequence[str | None],
        previous: _Centre | None = None,
        changed: Sequence[int] = (),
    ) -> None:
        if previous is not None and len(previous.free) == len(ids) and len(changed) * PATCH_CENTRE_SHARE < len(ids):
            rows = np.asarray(sorted(set(changed)), dtype=np.int64)
            free = previous.free.copy()
            squares = previous.squares.copy()
            free[rows] = np.fromiter((ids[r] is None for r in rows.tolist()), dtype=bool, count=len(rows))
            squares[rows] = quantized.squared_norms(codes[rows], scale[rows])
        else:
            free = np.fromiter((mid is None for mid in ids), dtype=bool, count=len(ids))  # zero rows
            squares = quantized.squared_norms(codes, scale)
        self.free = free
        self.squares = squares
        live = len(ids) - int(self.free.sum())
        self.mean = (quantized.column_sums(codes, scale) / max(1, live)).astype(np.float32)  # free rows are zeros
        self.mean_sq = float(self.mean @ self.mean)
        self.row_dot = quantized.dot(codes, scale, self.mean)
        squared = self.squares - 2.0 * self.row_dot + self.mean_sq
        self.row_norm = np.sqrt(np.maximum(squared, 1e-12)).astype(np.float32)

    def cosines(self, dots: np.ndarray, rows: np.ndarray | slice, query: np.ndarray) -> np.ndarray:
        """Centred cosines of ``rows`` given their plain dot products ``dots`` with ``query``."""
        q_mean = float(query @ self.mean)
        q_norm = max(float(query @ query) - 2.0 * q_mean + self.mean_sq, 1e-12) ** 0.5
        out: np.ndarray = (dots - self.row_dot[rows] - q_mean + self.mean_sq) / (self.row_norm[rows] * q_norm)
        return out


class _NearestMemo:
    """``nearest`` results for one published state (compared by identity), by query row and k."""

    def __init__(self, state: object) -> None:
        self.state = state
        self.results: SizedLru[tuple[bytes, int], list[tuple[str, float]]] = SizedLru(
            NEAREST_MEMO_MAX, lambda found: len(found) + 1
        )


def _top(scores: np.ndarray, ids: Sequence[str | None], k: int) -> list[tuple[str, float]]:
    """The ``k`` best rows of ``scores`` with their ids, best first (free rows, at -inf, left out)."""
    k = min(k, len(scores))
    if k <= 0:
        return []
    top = _best_rows(scores, k)
    return [(ids[i], float(scores[i])) for i in top if ids[i] is not None]


def _best_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """The rows of the ``k`` highest ``scores`` (``0 < k <= len(scores)``), highest first; equal scores, lower row first.

    ``np.argpartition`` over every row took ~125 us at 10,000 rows and ~760 us at
    100,000 (float32, one query each), and chose among equal scores as it went.
    Instead a threshold the ``k`` highest rows reach: with more blocks of
    ``TOP_BLOCK`` rows than ``k``, the ``k``-th highest of the blocks' maxima (the
    ``k`` best blocks each hold a row at or above it, so the ``k``-th highest row
    is too); otherwise the ``k``-th highest score itself. The rows at or above it
    are few (~20 us and ~90 us) and hold every row equal to the ``k``-th, so a
    stable sort of them gives the same rows as a stable sort of all. A nan (never a
    cosine here) reaches no threshold; a nan threshold falls back to that full sort.
    """
    n = len(scores)
    whole = n - n % TOP_BLOCK
    if k < whole // TOP_BLOCK:
        maxima = scores[:whole].reshape(-1, TOP_BLOCK).max(axis=1)
        if whole < n:
            maxima = np.append(maxima, scores[whole:].max())
        threshold = np.partition(maxima, len(maxima) - k)[len(maxima) - k]
    else:
        threshold = np.partition(scores, n - k)[n - k]
    if threshold == threshold:  # not nan
        rows = np.flatnonzero(scores >= threshold)
        if len(rows) >= k:
            return rows[np.argsort(-scores[rows], kind="stable")][:k]
    return np.argsort(-scores, kind="stable")[:k]


class NearestSearch:
    """One query's ``VectorIndex.nearest_and_cosines``, in two parts for two threads.

    ``product`` is the matrix-vector product over every row: one numpy call that runs
    without the interpreter lock, which the query path hands to its helper thread
    (daemon/query_helper.py) while it searches the index. ``result`` does the rest
    (centring, the top ``k``, the memo) in the caller's thread: on the helper, each of
    those short numpy calls first waited for the lock the searching thread held, and
    the job took ~1.6 ms for ~0.9 ms of work (p50, distinct queries at 10,000;
    docs/engine.md "Session 23"). Made from one published state: both parts see the
    same rows.
    """

    __slots__ = ("_index", "_state", "_query", "_k", "_key", "_known", "_dots")

    def __init__(self, index: VectorIndex, query: np.ndarray, k: int) -> None:
        self._index, self._query, self._k = index, query, k
        self._state = state = index._state
        self._dots: np.ndarray | None = None
        self._known: list[tuple[str, float]] | None = None
        self._key = (query.tobytes(), k)
        if k <= 0 or not state[3] or not np.any(query):
            self._known = []
            return
        memo = index._nearest_memo
        if memo.state is state:
            self._known = memo.results.get(self._key)

    def product(self) -> None:
        """Every row's plain dot product with the query (nothing to do when the answer is known)."""
        if self._known is None and self._dots is None:
            codes, scale, _, _ = self._state
            self._dots = quantized.dot(codes, scale, self._query)

    def result(self) -> tuple[list[tuple[str, float]], Callable[[str], float] | None]:
        """``nearest_and_cosines``' answer (the product is computed here when ``product`` did not run)."""
        if self._known is not None:
            return list(self._known), None
        self.product()
        assert self._dots is not None
        codes, scale, ids, row_of = state = self._state
        index = self._index
        centre = index._centre_for(codes, scale, ids)
        scores = centre.cosines(self._dots, slice(None), self._query)
        scores[centre.free[: len(scores)]] = -np.inf
        known = _top(scores, ids, self._k)
        memo = index._nearest_memo
        if memo.state is not state:
            memo = index._nearest_memo = _NearestMemo(state)
        memo.results.put(self._key, known)
        row_at = row_of.get

        def cosine_of(memory_id: str) -> float:
            row = row_at(memory_id)
            return math.nan if row is None else float(scores[row])

        return list(known), cosine_of


class VectorIndex:
    """Embeddings of the store's memories for one model (see module doc)."""

    def __init__(self, model: SemanticModel, state_dir: Path | None, check: Check = never) -> None:
        self.model = model
        self.check = check  # the engine's stop flag: embedding 100,000 memories stops at a shutdown
        self.folder = Path(state_dir) / CACHE_FOLDER if state_dir is not None else None
        # (codes, scales, ids, row_of): swapped as one tuple so readers never see a torn state
        self._state: tuple[np.ndarray, np.ndarray, list[str | None], dict[str, int]] = (
            *quantized.empty(0, model.dim),
            [],
            {},
        )
        # Per row, the content checksum its codes were computed from (None: a free row). A list beside
        # ``ids`` rather than a dict by id: 8 bytes a row instead of ~50 (~4 MiB at 100,000). The writer's.
        self._checksums: list[str | None] = []
        self.embedded = 0  # rows computed (not from cache) since creation
        self._dirty = 0  # rows changed since the cache file was written
        self._saved_at = time.monotonic()
        self.cache_problem: str | None = None
        self._centre = _Centre(self._state[0], self._state[1], [])
        self._nearest_memo = _NearestMemo(self._state)
        # Moves on with every state published: what is derived from the rows keys on it (query_facts.py)
        self.version = 0

    @property
    def name(self) -> str:
        return self.model.name

    def __len__(self) -> int:
        return len(self._state[3])

    # --- disk cache ---------------------------------------------------------------
    def _paths(self) -> tuple[Path, Path] | None:
        if self.folder is None:
            return None
        slug = _slug(self.model.name)
        return self.folder / f"{slug}.npy", self.folder / f"{slug}.json"

    def _read_cache(self) -> dict[str, np.ndarray]:
        paths = self._paths()
        if paths is None or not paths[0].exists() or not paths[1].exists():
            return {}
        try:
            meta = json.loads(paths[1].read_text(encoding="utf-8"))
            rows = np.load(paths[0], allow_pickle=False)
            checksums = meta["checksums"]
            if (
                meta.get("version") != CACHE_VERSION
                or meta.get("model") != self.model.name
                or rows.dtype != np.float16
                or rows.shape != (len(checksums), self.model.dim)
            ):
                raise ValueError("cache does not match the model")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.cache_problem = f"embedding cache ignored and rebuilt: {exc}"
            log.warning("%s (%s)", self.cache_problem, paths[0])
            return {}
        return {c: rows[i] for i, c in enumerate(checksums)}

    def save(self) -> None:
        """Write the cache (float16 rows + checksums) atomically."""
        paths = self._paths()
        self._dirty = 0
        self._saved_at = time.monotonic()
        if paths is None:
            return
        codes, scale = self._state[0], self._state[1]
        live = [(row, checksum) for row, checksum in enumerate(self._checksums) if checksum is not None]
        rows = np.empty((len(live), self.model.dim), dtype=np.float16)
        for start in range(0, len(live), 2048):  # converted in slices: no float32 copy of all rows
            part = [row for row, _ in live[start : start + 2048]]
            rows[start : start + len(part)] = quantized.rows_of(codes[part], scale[part])
        buffer = io.BytesIO()
        np.save(buffer, rows, allow_pickle=False)
        meta = {
            "version": CACHE_VERSION,
            "model": self.model.name,
            "dim": self.model.dim,
            "checksums": [checksum for _, checksum in live],
        }
        try:
            atomic_write_bytes(paths[0], buffer.getbuffer())
            atomic_write_bytes(paths[1], json.dumps(meta).encode("utf-8"))
        except OSError as exc:  # a cache that cannot be written only costs time at the next start
            log.warning("could not write the embedding cache %s: %s", paths[0], exc)

    # --- keeping rows in step with the store ------------------------------------
    def sync(self, memories: Iterable[Memory], computed: dict[str, np.ndarray] | None = None, save: bool = True) -> int:
        """Make the rows match exactly ``memories`` (load); returns how many were embedded here.

        ``computed`` (checksum -> row) are rows a cold build's builder processes
        embedded with this model (``services/index_build.py``): used like cache
        hits, and the cache file is written with them (now, or at ``flush``
        with ``save=False``: a cold build syncs after every chunk).
        """
        memories = list(memories)
        cached = self._read_cache() if not self._state[3] else {}
        fresh: set[str] = set()
        if computed:
            fresh = computed.keys() - cached.keys()
            cached = {**cached, **computed}
            self._dirty += len(fresh)  # not on disk yet: the save after this sync writes them
        keep = {m.id for m in memories}
        gone = [mid for mid in self._state[3] if mid not in keep]
        embedded = self._apply(memories, gone, cached, save=save)
        self.embedded += sum(1 for m in memories if m.checksum in fresh)  # computed for this load, elsewhere
        return embedded

    def update(self, memories: Sequence[Memory], removed_ids: Sequence[str]) -> int:
        """Re-embed changed memories and drop removed ids (apply_changes); returns how many were embedded.

        The cache file is rewritten only every ``SAVE_EVERY_ROWS`` changed rows or
        ``SAVE_EVERY_S`` seconds (and on ``flush``/engine close): rewriting 5 MB
        after every single save cost ~40 ms per file event at 10,000 memories, and
        a lost tail only costs re-embedding those rows at the next start.
        """
        if not memories and not removed_ids:
            return 0
        embedded = self._apply(memories, removed_ids, {}, save=False)
        self._dirty += len(memories) + len(removed_ids)
        if self._dirty >= SAVE_EVERY_ROWS or time.monotonic() - self._saved_at >= SAVE_EVERY_S:
            self.save()
        return embedded

    def flush(self) -> None:
        """Write the cache if rows changed since the last write."""
        if self._dirty:
            self.save()

    def _apply(
        self, memories: Sequence[Memory], removed: Iterable[str], cached: dict[str, np.ndarray], save: bool
    ) -> int:
        codes, scale, ids, row_of = self._state
        ids = list(ids)
        row_of = dict(row_of)
        sums = list(self._checksums)
        freed: list[int] = []
        for mid in removed:
            row = row_of.pop(mid, None)
            if row is not None:
                ids[row] = sums[row] = None
                freed.append(row)
        todo = [m for m in memories if (row := row_of.get(m.id)) is None or sums[row] != m.checksum]
        if not todo and not removed:
            return 0
        previous = self._centre  # the writer's last centre: its free mask describes these rows (before ``freed``)
        if len(previous.free) == len(ids):
            free = sorted(set(np.flatnonzero(previous.free).tolist()) | set(freed))
        else:
            free = [i for i, mid in enumerate(ids) if mid is None]
        free.reverse()  # pop() from the end takes the lowest free row
        new_rows = sum(1 for m in todo if m.id not in row_of)
        if new_rows > len(free):
            grow = new_rows - len(free)
            capacity = max(len(ids) + grow, int(len(ids) * 1.25) + 16)
            bigger, bigger_scale = quantized.empty(capacity, self.model.dim)
            bigger[: len(ids)] = codes[: len(ids)]
            bigger_scale[: len(ids)] = scale[: len(ids)]
            free = list(range(capacity - 1, len(ids) - 1, -1)) + free
            sums.extend([None] * (capacity - len(ids)))
            ids.extend([None] * (capacity - len(ids)))
            codes, scale = bigger, bigger_scale
        rows: list[int] = []
        missing: list[int] = []
        checksums: list[tuple[int, str]] = []  # recorded once the rows are in (a stopped run leaves none)
        hit_rows: list[int] = []
        hits: list[np.ndarray] = []
        for i, memory in enumerate(todo):
            row = row_of.get(memory.id)
            if row is None:
                row = free.pop()
                row_of[memory.id] = row
                ids[row] = memory.id
            rows.append(row)
            hit = cached.get(memory.checksum)
            if hit is None:
                missing.append(i)
            else:
                hit_rows.append(row)
                hits.append(hit)
            checksums.append((row, memory.checksum))
        # Cached rows copied in slices (a warm start: every row; one assignment per row was ~1 s at 100,000)
        for start in range(0, len(hit_rows), CACHE_COPY_SLICE):
            part = hit_rows[start : start + CACHE_COPY_SLICE]
            quantized.put(codes, scale, part, np.stack(hits[start : start + CACHE_COPY_SLICE]))
        # written straight into the matrix, one batch at a time (no full-size temporary)
        with bulk_embedding(self.model, len(missing)):
            for start in range(0, len(missing), EMBED_BATCH):
                self.check()
                chunk = missing[start : start + EMBED_BATCH]
                batch = self.model.embed([embed_text(todo[i]) for i in chunk])
                quantized.put(codes, scale, [rows[i] for i in chunk], batch)
        for row, checksum in checksums:
            sums[row] = checksum
        self.embedded += len(missing)
        for row in freed:
            if ids[row] is None:
                codes[row] = 0
                scale[row] = 0.0
        # The centre first: a reader that sees the new state also sees its centre, so what
        # ``nearest`` keeps for that state was computed with it.
        self._centre = _Centre(codes, scale, ids, previous, rows + freed)
        self._state = (codes, scale, ids, row_of)
        self.version += 1
        self._checksums = sums
        if save and (missing or freed or self._dirty or self._cache_has_extras(cached, todo, missing)):
            self.save()  # a warm start whose rows all came from the cache does not rewrite it
        return len(missing)

    @staticmethod
    def _cache_has_extras(cached: dict[str, np.ndarray], todo: Sequence[Memory], missing: Sequence[int]) -> bool:
        """True when the cache read at load holds rows no memory used (rewriting it drops them)."""
        if not cached:
            return False
        skipped = set(missing)
        used = {memory.checksum for i, memory in enumerate(todo) if i not in skipped}
        return len(used) != len(cached)

    # --- queries ------------------------------------------------------------------
    def embed_query(self, text: str) -> np.ndarray:
        row: np.ndarray = self.model.embed([text])[0]  # numpy types indexing as Any
        return row

    def similarities(self, query: np.ndarray, ids: Iterable[str]) -> dict[str, float]:
        """Centred cosine (module doc) of each known id's row with ``query`` (unknown ids are left out)."""
        codes, scale, row_ids, row_of = self._state
        centre = self._centre_for(codes, scale, row_ids)
        pairs = [(mid, row_of[mid]) for mid in ids if mid in row_of]
        if not pairs:
            return {}
        rows = np.fromiter((r for _, r in pairs), dtype=np.int64, count=len(pairs))
        values = centre.cosines(quantized.dot(codes[rows], scale[rows], query), rows, query)
        return {mid: float(v) for (mid, _), v in zip(pairs, values.tolist())}

    def nearest(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The ``k`` memories whose rows are most similar to ``query``, best first.

        Kept per state (``_NearestMemo``): the product over every row is ~1 ms at
        10,000 memories, and agents ask the same questions again; any change to the
        rows publishes a new state, and with it an empty memo.
        """
        return self.nearest_and_cosines(query, k)[0]

    def nearest_and_cosines(
        self, query: np.ndarray, k: int
    ) -> tuple[list[tuple[str, float]], Callable[[str], float] | None]:
        """``nearest``, and each id's centred cosine from the product over every row when this call computed it.

        The query path takes its candidates' cosines from that product instead of
        computing them again for ~150 rows (``similarities``): ~0.3 ms of a distinct
        query at 10,000. The product is one matrix-vector product whichever rows are
        asked for, and for the shipped 256-dimension model the values are the floats
        ``similarities`` gives (18,513 candidates of 120 queries compared). The second
        item is None when the answer came from the memo (no product was computed); the
        function gives nan for an id without a row, as ``similarities`` leaves it out.
        The query path runs the same in two parts (``nearest_search``).
        """
        search = NearestSearch(self, query, k)
        search.product()
        return search.result()

    def nearest_search(self, query: np.ndarray, k: int) -> NearestSearch:
        """``nearest_and_cosines`` in two parts: the product (for a helper thread), then the result."""
        return NearestSearch(self, query, k)

    def _centre_for(self, codes: np.ndarray, scale: np.ndarray, ids: Sequence[str | None]) -> _Centre:
        """The centre of the rows (a reader that caught a grown matrix before its centre computes its own)."""
        centre = self._centre
        return centre if len(centre.row_norm) == len(codes) else _Centre(codes, scale, ids)

    def memory_bytes(self) -> int:
        """Bytes held by the rows' codes and scales (the model is counted separately)."""
        return int(self._state[0].nbytes + self._state[1].nbytes)
