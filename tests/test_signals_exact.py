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


def test_a_second_pass_gives_the_floats_of_scoring_the_whole_pool_once():
    """``score_candidates`` on candidates it scored before (their recency, importance and frequency kept, the
    rest computed again) equals one pass over fresh candidates: the pool grew by neighbours that move the
    best BM25 and the cosine range, and the seeds changed."""
    from ctxos.services.intent import expand_query
    from ctxos.services.signals import Candidate, KeywordOverlapScorer, build_query_terms, score_candidates

    rng = random.Random(7)
    now = datetime(2026, 12, 1)
    memories = [
        Memory(
            id=f"m{i}",
            type=("decision", "resource", "task")[i % 3],
            rel_path=f"m{i}.md",
            path=Path(f"m{i}.md"),
            l0=f"retry backoff note {i}" if i % 2 else f"note {i}",
            l1=f"Paragraph {i} about retry and backoff." if i % 3 else "Other words.",
            l2="More.",
            importance=rng.random(),
            modified=now - timedelta(days=rng.randint(0, 400)),
        )
        for i in range(40)
    ]
    terms = build_query_terms(expand_query("retry backoff", {}), lambda w: [w.lower()], lambda t: 1.0)
    links = {f"m{i}": {f"m{(i + 1) % 40}", f"m{(i + 7) % 40}"} for i in range(40)}
    options = dict(
        terms=terms,
        weights={"semantic": 0.3, "bm25": 0.3, "graph": 0.1, "recency": 0.1, "importance": 0.1, "frequency": 0.1},
        semantic=KeywordOverlapScorer(),
        authority={f"m{i}": rng.random() for i in range(40)},
        neighbours=lambda mid: links.get(mid, set()),
        half_lives={"task": 30},
        now=now,
        community_of={f"m{i}": i % 4 for i in range(40)},
    )
    frequency = {f"m{i}": rng.random() for i in range(0, 40, 3)}
    raw = {
        m.id: (rng.random() * 10 if i < 30 else 20.0 + i, frozenset({"retry"}) if i % 2 else frozenset())
        for i, m in enumerate(memories)
    }

    def fresh(ms):
        return [Candidate(m, bm25_raw=raw[m.id][0], matched=raw[m.id][1], heading=raw[m.id][1]) for m in ms]

    pool = fresh(memories[:30])
    score_candidates(pool, frequency=frequency, graph_seeds=None, **options)
    pool += fresh(memories[30:])  # neighbours with a higher BM25 than any first one
    score_candidates(pool, frequency=frequency, graph_seeds=["m3", "m5"], **options)
    once = fresh(memories)
    score_candidates(once, frequency=frequency, graph_seeds=["m3", "m5"], **options)
    assert [(c.memory.id, c.signals, c.score) for c in pool] == [(c.memory.id, c.signals, c.score) for c in once]
