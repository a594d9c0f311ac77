"""The scoring loop's shortcuts give the very floats of the expressions they replace (issue 16, scoring CPU)."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from ctxos.services.model import Memory
from ctxos.services.signals import DEFAULT_HALF_LIFE_DAYS, Recency, clamp01


def _reference_recency(memory: Memory, now: datetime, half_lives) -> float:
    """``recency_signal`` as it was written before ``Recency`` (the definition)."""
    when = memory.modified
    if when is None:
        when = datetime.fromtimestamp(memory.mtime, tz=UTC).replace(tzinfo=None) if memory.mtime else None
    if when is None:
        return 0.0
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    age_days = max(0.0, (now - when).total_seconds() / 86400.0)
    try:
        half_life = float(half_lives.get(memory.type, DEFAULT_HALF_LIFE_DAYS))
    except (TypeError, ValueError):
        half_life = DEFAULT_HALF_LIFE_DAYS
    if half_life <= 0:
        return 0.0
    return math.pow(0.5, age_days / half_life)


def test_clamp01_is_max_of_min_for_every_kind_of_float():
    rng = random.Random(7)
    values = [float("nan"), -0.0, 0.0, 1.0, -1.0, 2.0, float("inf"), -float("inf"), 1e-300, 1 - 1e-16, 5e-324]
    values += [rng.uniform(-2, 3) for _ in range(500)]
    for value in values:
        assert repr(clamp01(value)) == repr(max(0.0, min(1.0, value))), value


def test_recency_equals_the_reference_for_dates_types_and_half_lives():
    rng = random.Random(11)
    now = datetime(2026, 12, 4, 12, 30, 15, 123456)
    half_lives = {"daily": 14, "rule": 0, "bad": "soon", "text": "30", "future": -5}
    kinds = ["daily", "rule", "bad", "text", "future", "resource"]
    recency = Recency(now, half_lives)
    plus_two = timezone(timedelta(hours=2))
    checked = 0
    for i in range(400):
        modified = now - timedelta(microseconds=rng.randrange(-(10**12), 10**15))
        if i % 7 == 0:
            modified = modified.replace(tzinfo=plus_two)
        memory = Memory(
            id=f"m{i}",
            type=kinds[i % len(kinds)],
            rel_path=f"m{i}.md",
            path=Path(f"/ws/m{i}.md"),
            l0="",
            l1="",
            l2="",
            modified=None if i % 5 == 0 else modified,
            mtime=0.0 if i % 10 == 0 else 1.7e9 + rng.random() * 1e7,
        )
        assert repr(recency(memory)) == repr(_reference_recency(memory, now, half_lives)), memory
        checked += 1
    assert checked == 400
