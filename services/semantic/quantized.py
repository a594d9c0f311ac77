"""Embedding rows kept as small integers with one scale per row (issue 16: the daemon's footprint).

A row ``r`` is held as ``codes = rint(r / scale)`` with ``scale = max|r| / LIMIT``, so
``r ~ codes * scale``. ``CODES`` is int16: half the bytes of the float32 matrix it
replaces (98 -> 49 MiB at 100,000 x 256) and, unlike float16, numpy converts it to
float32 inside einsum's buffer at about the speed of the float32 product itself
(float16 would be ~10x slower: numpy converts it without SIMD). The error per
component is at most ``scale / 2`` (~3e-6 for unit rows of 256 dimensions): centred
cosines move by ~1e-5, below anything a ranking or a rendered score shows in
practice (measured on a 10,000-memory workspace: docs/engine.md, "Idle RSS at
10,000 and 100,000"). int8 was measured too: a quarter of the bytes, but cosines
move by ~3e-3 and the order of the 50 nearest rows changed for 193 of 200 queries.

Every product is computed by ``einsum`` with ``dtype=float32`` and ``casting="unsafe"``:
the codes are converted a buffer at a time (no full-size float32 temporary) and no
BLAS thread is started (see ``dot``).
"""

from __future__ import annotations

import numpy as np

CODES = np.int16
LIMIT = float(np.iinfo(CODES).max)  # 32,767: the largest |component| of a row maps to it


def empty(rows: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Zero codes and zero scales (a zero row: a free slot)."""
    return np.zeros((rows, dim), dtype=CODES), np.zeros(rows, dtype=np.float32)


def quantize(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes and per-row scales of ``rows`` (any float dtype; an all-zero row gets scale 0)."""
    values = np.asarray(rows, dtype=np.float32)
    peak = np.abs(values).max(axis=1) if values.size else np.zeros(len(values), dtype=np.float32)
    scale = (peak / LIMIT).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1.0))
    codes = np.rint(values / safe[:, None]).astype(CODES)
    return codes, scale


def put(codes: np.ndarray, scale: np.ndarray, rows: np.ndarray | list[int], values: np.ndarray) -> None:
    """Write ``values`` (float rows) into ``rows`` of the codes and scales, in place."""
    part_codes, part_scale = quantize(values)
    codes[rows] = part_codes
    scale[rows] = part_scale


def rows_of(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The float32 rows ``codes`` stand for (callers pass a slice: this copies)."""
    out: np.ndarray = codes.astype(np.float32) * scale[:, None]
    return out


def dot(codes: np.ndarray, scale: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """Each row's dot product with ``vector`` (float32).

    Without BLAS: OpenBLAS spreads a matrix-vector product over threads, which on a busy
    2-core machine took 22 ms p50 at 10,000 x 256 instead of 0.3 ms (measured).
    """
    raw: np.ndarray = np.einsum("ij,j->i", codes, vector, dtype=np.float32, casting="unsafe")
    raw *= scale
    return raw


def column_sums(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The sum of the rows (float32), for the mean row."""
    sums: np.ndarray = np.einsum("ij,i->j", codes, scale, dtype=np.float32, casting="unsafe")
    return sums


def squared_norms(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``|row|^2`` per row (float32)."""
    squares: np.ndarray = np.einsum("ij,ij->i", codes, codes, dtype=np.float32, casting="unsafe")
    squares *= scale * scale
    return squares
