"""The embedding rows' int16 codes (services/semantic/quantized.py): error bounds, exact products, no big copies."""

from __future__ import annotations

import tracemalloc

import numpy as np
from ctxos.services.semantic import quantized


def _unit_rows(n: int, dim: int = 256, seed: int = 7) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    rows[3] = 0.0  # a free slot
    return rows


def test_codes_stand_for_the_rows_within_half_a_step_and_zero_rows_stay_zero():
    rows = _unit_rows(500)
    codes, scale = quantized.quantize(rows)
    assert codes.dtype == np.int16 and scale.dtype == np.float32
    back = quantized.rows_of(codes, scale)
    assert np.all(np.abs(back - rows) <= scale[:, None] * 0.501 + 1e-8)  # half a step, plus float32 rounding
    assert scale[3] == 0.0 and not codes[3].any()
    assert np.all(np.abs(codes).max(axis=1)[np.arange(500) != 3] == 32767)


def test_products_equal_the_float_products_of_the_rows_the_codes_stand_for():
    rows = _unit_rows(300)
    codes, scale = quantized.quantize(rows)
    exact = quantized.rows_of(codes, scale).astype(np.float64)
    vector = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    assert np.allclose(quantized.dot(codes, scale, vector), exact @ vector, atol=1e-5)
    assert np.allclose(quantized.column_sums(codes, scale), exact.sum(axis=0), atol=1e-4)
    assert np.allclose(quantized.squared_norms(codes, scale), (exact * exact).sum(axis=1), atol=1e-5)


def test_a_cache_round_trip_through_float16_gives_the_same_codes():
    """The disk cache is float16: writing the rows and reading them back must not move them (warm restarts)."""
    codes, scale = quantized.quantize(_unit_rows(2000).astype(np.float16))
    again = quantized.quantize(quantized.rows_of(codes, scale).astype(np.float16))
    assert np.array_equal(again[0], codes) and np.array_equal(again[1], scale)


def test_put_writes_rows_in_place():
    codes, scale = quantized.empty(10, 256)
    rows = _unit_rows(4)
    quantized.put(codes, scale, [7, 2, 5, 0], rows)
    assert np.array_equal(codes[[7, 2, 5, 0]], quantized.quantize(rows)[0])
    assert not codes[[1, 3, 4, 6, 8, 9]].any() and scale[1] == 0.0


def test_the_product_over_every_row_makes_no_float_copy_of_the_codes():
    """numpy converts the codes in einsum's buffer: a full float32 copy would be 19.5 MiB here."""
    codes, scale = quantized.quantize(_unit_rows(20_000))
    vector = np.ones(256, dtype=np.float32) / 16
    tracemalloc.start()
    try:
        quantized.dot(codes, scale, vector)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
