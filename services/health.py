"""The health score: one number 0-100 and, for each part, what would raise it.

Parts and default weights (``health.weights`` in ``_config.yaml``):

- coverage 25%: share of memories loaded (L1/L2) by a context query in the last
  ``health.coverage_days`` (14) days. Memories nobody loads are dead weight.
- efficiency 25%: mean tokens used / budget of those queries; 50-80% is ideal
  (below: budget wasted or memories missing; above: context is being cut).
- freshness 20%: memories updated within ``health.freshness_days``; older ones
  count less the older they get (halving every further ``freshness_days``).
- balance 15%: spread over memory types (normalised Shannon entropy).
- cleanliness 15%: share of files with no open governance finding and no parse error.

The computation is pure (``compute_health``) so tests can move one input at a
time; ``health_inputs`` gathers the numbers from an Engine's access log.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from .config import Config
from .model import Memory
from .ontology import MEMORY_TYPES

DEFAULT_WEIGHTS: dict[str, float] = {
    "coverage": 0.25,
    "efficiency": 0.25,
    "freshness": 0.20,
    "balance": 0.15,
    "cleanliness": 0.15,
}


@dataclass
class HealthPart:
    name: str
    weight: float
    score: float  # 0..1
    detail: str  # what was measured
    advice: str  # what would raise it ("" when nothing would)
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def points(self) -> float:
        return 100.0 * self.weight * self.score

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "weight": self.weight,
            "score": round(self.score, 4),
            "points": round(self.points, 2),
            "max_points": round(100.0 * self.weight, 2),
            "detail": self.detail,
            "advice": self.advice,
            "data": self.data,
        }


@dataclass
class HealthReport:
    score: int
    parts: list[HealthPart]
    memories: int

    def part(self, name: str) -> HealthPart:
        return next(p for p in self.parts if p.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, "memories": self.memories, "parts": [p.to_dict() for p in self.parts]}


@dataclass
class HealthSettings:
    coverage_days: float = 14.0
    freshness_days: float = 90.0
    efficiency_low: float = 0.5
    efficiency_high: float = 0.8
    freshness_exempt_types: tuple[str, ...] = ("rule",)
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))

    @classmethod
    def from_config(cls, config: Config) -> HealthSettings:
        """The typed ``health`` section (checked when the file was loaded: services/settings.py)."""
        h = config.settings.health
        weights = dict(DEFAULT_WEIGHTS)
        weights.update({k: v for k, v in h.weights.items() if k in DEFAULT_WEIGHTS})
        low, high = h.efficiency_ideal
        return cls(
            coverage_days=h.coverage_days,
            freshness_days=h.freshness_days,
            efficiency_low=low,
            efficiency_high=high,
            freshness_exempt_types=tuple(h.freshness_exempt_types),
            weights=weights,
        )


def _few(ids: Sequence[str], n: int = 5) -> str:
    shown = ", ".join(ids[:n])
    return shown + (f" and {len(ids) - n} more" if len(ids) > n else "")


def coverage_part(memories: Sequence[Memory], loaded_ids: Collection[str], s: HealthSettings) -> HealthPart:
    ids = [m.id for m in memories]
    loaded = set(loaded_ids)
    unloaded = sorted(i for i in ids if i not in loaded)
    score = (len(ids) - len(unloaded)) / len(ids) if ids else 0.0
    days = f"{s.coverage_days:g}"
    advice = (
        ""
        if not unloaded
        else (
            f"{len(unloaded)} memories were not loaded by any query in {days} days ({_few(unloaded)}): "
            "archive the obsolete ones, and tag or link the useful ones so queries reach them"
        )
    )
    return HealthPart(
        "coverage",
        s.weights["coverage"],
        score,
        f"{len(ids) - len(unloaded)} of {len(ids)} memories loaded in the last {days} days",
        advice,
        {"loaded": len(ids) - len(unloaded), "total": len(ids), "not_loaded": unloaded[:50]},
    )


def efficiency_part(ratio: float | None, queries: int, s: HealthSettings) -> HealthPart:
    low, high = s.efficiency_low, s.efficiency_high
    if ratio is None or queries == 0:
        return HealthPart(
            "efficiency",
            s.weights["efficiency"],
            0.0,
            f"no context queries in the last {s.coverage_days:g} days",
            "use the workspace (get_context / ctxos simulate) so the budget use can be measured",
            {"ratio": None, "queries": 0},
        )
    if ratio < low:
        score = ratio / low
        advice = (
            f"queries use {ratio:.0%} of their budget (ideal {low:.0%}-{high:.0%}): lower "
            "query.default_budget, or add memories on the topics being asked about"
        )
    elif ratio > high:
        score = max(0.0, 1.0 - 0.5 * (ratio - high) / max(1.0 - high, 1e-9))
        advice = (
            f"queries fill {ratio:.0%} of their budget (ideal {low:.0%}-{high:.0%}), so context is "
            "being cut: raise query.default_budget, or shorten L1 summaries"
        )
    else:
        score, advice = 1.0, ""
    return HealthPart(
        "efficiency",
        s.weights["efficiency"],
        score,
        f"{queries} queries used {ratio:.0%} of their budget on average",
        advice,
        {"ratio": round(ratio, 4), "queries": queries},
    )


def freshness_part(memories: Sequence[Memory], now: datetime, s: HealthSettings) -> HealthPart:
    considered = [m for m in memories if m.type not in s.freshness_exempt_types]
    if not considered:
        return HealthPart(
            "freshness",
            s.weights["freshness"],
            1.0 if memories else 0.0,
            "no memories whose freshness counts",
            "" if memories else "add memories",
            {},
        )
    days = s.freshness_days
    total, stale = 0.0, []
    for memory in considered:
        age = max(0.0, (now - memory.last_modified).total_seconds() / 86400.0)
        if age <= days:
            total += 1.0
        else:
            total += 0.5 ** ((age - days) / days)
            stale.append((age, memory.id))
    score = total / len(considered)
    stale.sort(reverse=True)
    stale_ids = [i for _, i in stale]
    advice = (
        ""
        if not stale
        else (
            f"{len(stale)} memories not updated in {days:g} days; review the oldest ({_few(stale_ids)}): "
            "update what is still true, archive what is not"
        )
    )
    return HealthPart(
        "freshness",
        s.weights["freshness"],
        score,
        f"{len(considered) - len(stale)} of {len(considered)} memories updated within {days:g} days",
        advice,
        {"stale": stale_ids[:50], "considered": len(considered)},
    )


def balance_part(memories: Sequence[Memory], s: HealthSettings) -> HealthPart:
    counts = Counter(m.type for m in memories)
    kinds = [k for k in MEMORY_TYPES if k != "scratch"]
    n = sum(counts[k] for k in kinds)
    if n == 0:
        return HealthPart(
            "balance",
            s.weights["balance"],
            0.0,
            "no memories",
            "add memories of several types",
            {"types": dict(counts)},
        )
    entropy = -sum((counts[k] / n) * math.log(counts[k] / n) for k in kinds if counts[k])
    best = math.log(min(len(kinds), n)) if min(len(kinds), n) > 1 else 1.0
    score = min(1.0, entropy / best) if n > 1 else 0.0
    top, top_n = max(((k, counts[k]) for k in kinds), key=lambda kv: kv[1])
    missing = [k for k in kinds if counts[k] == 0]
    advice = ""
    if score < 0.999:
        advice = f"{top} makes up {top_n / n:.0%} of memories"
        if missing:
            advice += f"; none yet of: {', '.join(missing)}"
        advice += " (record decisions, rules and project context, not only one kind)"
    return HealthPart(
        "balance",
        s.weights["balance"],
        score,
        f"{sum(1 for k in kinds if counts[k])} of {len(kinds)} types in use",
        advice,
        {"types": {k: counts[k] for k in MEMORY_TYPES if counts[k]}},
    )


def cleanliness_part(
    memories: Sequence[Memory], flagged_ids: Collection[str], invalid_count: int, finding_count: int, s: HealthSettings
) -> HealthPart:
    ids = {m.id for m in memories}
    flagged = sorted(ids & set(flagged_ids))
    total = len(ids) + invalid_count
    score = 1.0 - (len(flagged) + invalid_count) / total if total else 0.0
    parts = []
    if flagged:
        parts.append(f"{len(flagged)} memories have open governance findings (ctxos governance)")
    if invalid_count:
        parts.append(f"{invalid_count} files cannot be parsed (ctxos doctor)")
    advice = "; ".join(parts) + ("; act on or dismiss them" if parts else "")
    return HealthPart(
        "cleanliness",
        s.weights["cleanliness"],
        max(0.0, score),
        f"{len(ids) - len(flagged)} of {len(ids)} memories unflagged, {invalid_count} invalid files",
        advice,
        {"flagged": flagged[:50], "invalid": invalid_count, "findings": finding_count},
    )


def compute_health(
    memories: Sequence[Memory],
    *,
    loaded_ids: Collection[str],
    efficiency: float | None,
    queries: int,
    flagged_ids: Collection[str],
    invalid_count: int = 0,
    finding_count: int = 0,
    now: datetime | None = None,
    settings: HealthSettings | None = None,
) -> HealthReport:
    """Combine the five parts into the 0-100 score (weights are normalised to sum to 1)."""
    s = settings or HealthSettings()
    now = now or datetime.now(UTC).replace(tzinfo=None)
    total_weight = sum(s.weights.values()) or 1.0
    s = replace(s, weights={k: v / total_weight for k, v in s.weights.items()})
    parts = [
        coverage_part(memories, loaded_ids, s),
        efficiency_part(efficiency, queries, s),
        freshness_part(memories, now, s),
        balance_part(memories, s),
        cleanliness_part(memories, flagged_ids, invalid_count, finding_count, s),
    ]
    score = int(round(sum(p.points for p in parts)))
    return HealthReport(max(0, min(100, score)), parts, len(memories))


def health_inputs(access_log: Any, settings: HealthSettings) -> Mapping[str, Any]:
    """The access-log numbers ``compute_health`` needs (access_log: ``services.access_log.AccessLog``)."""
    return {
        "loaded_ids": access_log.loaded_ids(settings.coverage_days),
        "efficiency": access_log.efficiency(settings.coverage_days),
        "queries": access_log.query_count(settings.coverage_days),
    }
