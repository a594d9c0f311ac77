"""round6 (services/rounding.py) must give exactly what round(v, 6) gives, value for value and type for type."""

from __future__ import annotations

import math
import random

import orjson
from ctxos.services.model import ContextResult, SelectedMemory, selected_dicts
from ctxos.services.rounding import round6


def _same(values: list[float]) -> None:
    got, want = round6(values), [round(v, 6) for v in values]
    assert orjson.dumps(got) == orjson.dumps(want)  # same digits, signed zeros included
    assert [type(v) for v in got] == [type(v) for v in want]


def test_random_values_in_the_signal_range_and_beyond() -> None:
    rng = random.Random(16)
    values = [rng.random() * rng.choice((1.0, 1e-3, 0.5, 7.0, 3e4)) * rng.choice((1, -1)) for _ in range(5_000)]
    _same(values)


def test_exact_ties_and_their_neighbours() -> None:
    # 2**-7 = 0.0078125 is an exact tie at six decimals (round half to even gives 0.007812)
    ties = [k / 2**7 for k in range(1, 128, 2)] + [(k + 0.5) / 1e6 for k in range(0, 5000)]
    values = []
    for tie in ties:
        values += [tie, math.nextafter(tie, 0.0), math.nextafter(tie, 1.0)]
    _same(values)
    assert round6(ties)[0] == round(0.0078125, 6) == 0.007812


def test_zeros_huge_and_non_finite_values() -> None:
    values = [0.0, -0.0, -1e-9, 1e-9, 1e5, 123456.7891234, 1e300, -1e300, math.inf, -math.inf] + [0.5] * 40
    got = round6(values)
    want = [round(v, 6) for v in values]
    assert got == want and [math.copysign(1, v) for v in got] == [math.copysign(1, v) for v in want]
    nan = round6([math.nan] * 40)
    assert all(math.isnan(v) for v in nan)


def test_ints_keep_their_type() -> None:
    values = [0.25] * 40 + [1]
    assert round6(values)[-1] == 1 and type(round6(values)[-1]) is int


def test_context_answer_rounds_each_selected_memory_as_before() -> None:
    rng = random.Random(3)
    names = ("semantic", "bm25", "graph", "recency", "importance", "frequency")
    selected = [
        SelectedMemory(
            id=f"m{i}",
            type="project",
            path=f"03-projects/m{i}.md",
            tier="L1",
            tokens=40,
            score=rng.random(),
            signals={k: rng.random() for k in names},
            shares={k: rng.random() / 6 for k in names[: 3 + i % 4]},  # lists of different lengths
            reason="scored",
            workspace="other" if i % 5 == 0 else None,
            sources=["bm25"],
        )
        for i in range(60)
    ]
    old = [
        {
            "id": s.id,
            "type": s.type,
            "path": s.path,
            "tier": s.tier,
            "tokens": s.tokens,
            "score": round(s.score, 6),
            "signals": {k: round(v, 6) for k, v in s.signals.items()},
            "shares": {k: round(v, 6) for k, v in s.shares.items()},
            "reason": s.reason,
            "sources": list(s.sources),
            **({"workspace": s.workspace} if s.workspace else {}),
        }
        for s in selected
    ]
    assert orjson.dumps(selected_dicts(selected)) == orjson.dumps(old)
    assert [s.to_dict() for s in selected] == old
    result = ContextResult("q", "general", [], 4000, 100, selected, [], 0, "text")
    assert orjson.dumps(result.to_dict()["selected"]) == orjson.dumps(old)
