"""The analysis: pure functions from memories and numbers (loads, centrality) to findings.

Nothing here reads files or an engine, so tests build exact situations.
Overlap is found with a prefix-filtered similarity join (``similarity.py``),
never by comparing every pair.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ..graph import connected_components
from ..model import InvalidFile, Memory
from ..similarity import claims, content_tokens, contradictions, jaccard, shingles, similarity_join
from ..stop_flag import Check, checked, never
from ..tier_source import full_text
from .findings import KINDS, Finding, GovernanceInputs, GovernanceSettings

FILES_PER_CHECK = 256  # files read between two looks at the stop flag (a read is ~0.1 ms)


def _utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _text(memory: Memory) -> str:
    return full_text(memory)  # read from the file, bypassing the render cache (services/tier_source.py)


def analyze(inputs: GovernanceInputs, settings: GovernanceSettings | None = None) -> list[Finding]:
    """All findings, most serious kind first, then by fingerprint (deterministic)."""
    settings = settings or GovernanceSettings()
    now = inputs.now or _utcnow()
    memories = sorted(inputs.memories, key=lambda m: m.id)
    findings: list[Finding] = []
    findings += invalid_file_findings(inputs.invalid)
    findings += conflict_findings(memories, settings, inputs.check)
    findings += consolidation_findings(memories, settings, inputs.check)
    findings += god_node_findings(memories, inputs.centrality, inputs.degree, settings)
    findings += scratch_findings(memories, now, settings)
    findings += decay_findings(memories, inputs.loads, now, settings)
    rank = {kind: n for n, kind in enumerate(KINDS)}
    findings.sort(key=lambda f: (rank.get(f.kind, 99), f.fingerprint))
    return findings


def invalid_file_findings(invalid: Iterable[InvalidFile]) -> list[Finding]:
    return [
        Finding(
            "invalid_file",
            [],
            [bad.rel_path],
            f"{bad.rel_path} is not served: {bad.reason}",
            {"reason": bad.reason},
            {"action": "fix", "path": bad.rel_path, "suggestion": f"fix {bad.rel_path}: {bad.reason}"},
            command="ctxos doctor",
            severity="error",
        )
        for bad in sorted(invalid, key=lambda b: b.rel_path)
    ]


def decay_findings(
    memories: Sequence[Memory], loads: Mapping[str, int], now: datetime, settings: GovernanceSettings
) -> list[Finding]:
    """Not modified for ``decay_days`` and loaded at most ``decay_max_loads`` times in that window."""
    cutoff = now - timedelta(days=settings.decay_days)
    found = []
    for memory in memories:
        if (
            memory.type in settings.decay_exempt_types
            or memory.always_load
            or memory.type == "scratch"
            or memory.is_source
        ):  # accepted references, read-only: archiving one is refused anyway
            continue
        modified = memory.last_modified
        count = int(loads.get(memory.id, 0))
        if modified <= cutoff and count <= settings.decay_max_loads:
            age = (now - modified).days
            found.append(
                Finding(
                    "decay",
                    [memory.id],
                    [memory.rel_path],
                    f"{memory.id} has not changed for {age} days and was loaded {count} time(s) "
                    f"in the last {settings.decay_days} days",
                    {
                        "age_days": age,
                        "modified": modified.isoformat(),
                        "loads": count,
                        "window_days": settings.decay_days,
                        "importance": memory.importance,
                    },
                    {
                        "action": "archive",
                        "ids": [memory.id],
                        "suggestion": "update it if it is still true, archive it if it is not",
                    },
                    command=f"ctxos archive {memory.id}",
                )
            )
    return found


def scratch_findings(memories: Sequence[Memory], now: datetime, settings: GovernanceSettings) -> list[Finding]:
    """Scratch memories older than their TTL (by last modification)."""
    found = []
    for memory in scratch_expired(memories, now, settings.scratch_ttl_days):
        age = (now - memory.last_modified).days
        found.append(
            Finding(
                "scratch_expired",
                [memory.id],
                [memory.rel_path],
                f"scratch {memory.id} is {age} days old, past its {settings.scratch_ttl_days}-day TTL",
                {"age_days": age, "ttl_days": settings.scratch_ttl_days},
                {
                    "action": "archive",
                    "ids": [memory.id],
                    "suggestion": "archive it, or move what is worth keeping into a memory of a lasting type",
                },
                command=f"ctxos archive {memory.id}",
                severity="warning",
            )
        )
    return found


def scratch_expired(memories: Iterable[Memory], now: datetime, ttl_days: int) -> list[Memory]:
    cutoff = now - timedelta(days=ttl_days)
    return [m for m in memories if m.type == "scratch" and not m.protected and m.last_modified <= cutoff]


def conflict_findings(memories: Sequence[Memory], settings: GovernanceSettings, check: Check = never) -> list[Finding]:
    """Overlapping pairs that disagree on type or importance, and pairs that contradict.

    Overlap: Jaccard of content words >= ``conflict_min_text_jaccard`` and, when
    both have tags, at least one shared tag. Contradiction: a sentence in each
    with nearly the same content words and opposite polarity. ``check`` raises
    ``stop_flag.Cancelled`` when the owner shuts down (called between files and inside the joins).
    """
    by_pair: dict[tuple[str, str], dict[str, Any]] = {}
    token_sets = [content_tokens(_text(m)) for m in checked(memories, check, FILES_PER_CHECK)]
    gap = settings.conflict_importance_gap
    types = [m.type for m in memories]
    importance = [m.importance for m in memories]

    def disagree(i: int, j: int) -> bool:
        return types[i] != types[j] or abs(importance[i] - importance[j]) >= gap

    # When no two memories can disagree on type or importance, skip the join altogether.
    can_disagree = len(set(types)) > 1 or (memories and max(importance) - min(importance) >= gap)
    pairs = (
        similarity_join(
            token_sets, settings.conflict_min_text_jaccard, settings.max_posting, accept=disagree, check=check
        )
        if can_disagree
        else []
    )
    for i, j, score in pairs:
        a, b = memories[i], memories[j]
        shared_tags = _shared_tags(a, b)
        if a.tags and b.tags and len(shared_tags) < min(2, len(a.tags), len(b.tags)):
            continue
        problems = []
        if a.type != b.type:
            problems.append(f"types differ ({a.id} is {a.type}, {b.id} is {b.type})")
        if abs(a.importance - b.importance) >= settings.conflict_importance_gap:
            problems.append(f"importance differs ({a.importance:g} vs {b.importance:g})")
        if problems:
            by_pair[(a.id, b.id)] = {"text_overlap": round(score, 3), "shared_tags": shared_tags, "problems": problems}
    all_claims = [
        c
        for m in checked(memories, check, FILES_PER_CHECK)
        for c in claims(m.id, _text(m), settings.contradiction_min_words)
    ]
    position = {m.id: n for n, m in enumerate(memories)}
    found_contradictions = contradictions(
        all_claims, settings.contradiction_min_jaccard, settings.max_posting, check=check
    )
    for pos, neg, score in found_contradictions:
        owners = sorted((str(pos.owner), str(neg.owner)))  # claims are owned by memory ids
        key = (owners[0], owners[1])
        a, b = memories[position[key[0]]], memories[position[key[1]]]
        topic = jaccard(token_sets[position[a.id]], token_sets[position[b.id]])
        if topic < settings.contradiction_min_topic_overlap and len(_shared_tags(a, b)) < 2:
            continue  # same words in one sentence, but the memories are about different things
        entry = by_pair.setdefault(key, {"problems": []})
        statements = entry.setdefault("contradictions", [])
        if len(statements) < 3:
            statements.append({str(pos.owner): pos.text, str(neg.owner): neg.text, "overlap": round(score, 3)})
        if "contradicting statements" not in entry["problems"]:
            entry["problems"].append("contradicting statements")
    by_id = {m.id: m for m in memories}
    found = []
    for (a_id, b_id), evidence in sorted(by_pair.items()):
        a, b = by_id[a_id], by_id[b_id]
        evidence = {
            "types": {a.id: a.type, b.id: b.type},
            "importance": {a.id: a.importance, b.id: b.importance},
            **evidence,
        }
        contradict = "contradictions" in evidence
        found.append(
            Finding(
                "conflict",
                [a.id, b.id],
                [a.rel_path, b.rel_path],
                f"{a.id} and {b.id} overlap but " + "; ".join(evidence["problems"]),
                evidence,
                {
                    "action": "review",
                    "ids": [a.id, b.id],
                    "suggestion": "decide which one is right; edit it, and archive the other if it is wrong",
                },
                command=f"ctxos archive {b.id if a.importance >= b.importance else a.id}",
                severity="warning" if contradict else "info",
            )
        )
    return found


def _shared_tags(a: Memory, b: Memory) -> list[str]:
    return sorted({t.casefold() for t in a.tags} & {t.casefold() for t in b.tags})


def consolidation_findings(
    memories: Sequence[Memory], settings: GovernanceSettings, check: Check = never
) -> list[Finding]:
    """Clusters of near-duplicates (word-shingle Jaccard >= ``duplicate_min_jaccard``), joined transitively."""
    sets = [shingles(_text(m), settings.duplicate_shingle_words) for m in checked(memories, check, FILES_PER_CHECK)]
    pairs = similarity_join(sets, settings.duplicate_min_jaccard, settings.max_posting, check=check)
    component = connected_components(len(memories), [(i, j) for i, j, _ in pairs])
    clusters: dict[int, list[int]] = {}
    for i, j, _ in pairs:
        for k in (i, j):
            members = clusters.setdefault(component[k], [])
            if k not in members:
                members.append(k)
    pair_scores: dict[int, list[tuple[int, int, float]]] = {}
    for i, j, score in pairs:
        pair_scores.setdefault(component[i], []).append((i, j, score))
    found = []
    for root, members in clusters.items():
        group = sorted((memories[k] for k in members), key=lambda m: m.id)
        keep = max(group, key=lambda m: (m.importance, m.last_modified, m.id))
        others = [m.id for m in group if m.id != keep.id]
        top = sorted(pair_scores[root], key=lambda p: -p[2])[:10]
        found.append(
            Finding(
                "consolidation",
                [m.id for m in group],
                [m.rel_path for m in group],
                f"{len(group)} near-duplicate memories: {', '.join(m.id for m in group)}",
                {
                    "similarity": [
                        {"a": memories[i].id, "b": memories[j].id, "overlap": round(s, 3)} for i, j, s in top
                    ],
                    "keep": keep.id,
                },
                {
                    "action": "merge",
                    "into": keep.id,
                    "ids": others,
                    "suggestion": f"merge what is unique into {keep.id}, then archive the rest",
                },
                command="ctxos archive " + " ".join(others),
            )
        )
    return found


def god_node_findings(
    memories: Sequence[Memory], centrality: Mapping[str, float], degree: Mapping[str, int], settings: GovernanceSettings
) -> list[Finding]:
    """Memories much more central than average (PageRank >= ratio x mean) yet marked unimportant."""
    if not centrality or not memories:
        return []
    mean = 1.0 / max(len(memories), 1)
    found = []
    for memory in memories:
        ratio = centrality.get(memory.id, 0.0) / mean
        links = int(degree.get(memory.id, 0))
        if ratio < settings.god_min_ratio or links < settings.god_min_degree:
            continue
        if memory.importance >= settings.god_max_importance:
            continue
        suggested = suggest_importance(ratio, memory.importance)
        found.append(
            Finding(
                "god_node",
                [memory.id],
                [memory.rel_path],
                f"{memory.id} is linked from much of the workspace (centrality {ratio:.1f}x the average, "
                f"{links} links) but has importance {memory.importance:g}",
                {"centrality_ratio": round(ratio, 3), "degree": links, "importance": memory.importance},
                {
                    "action": "set_importance",
                    "id": memory.id,
                    "value": suggested,
                    "suggestion": f"raise its importance to {suggested:g}",
                },
                command=f"ctxos importance {memory.id} {suggested:g}",
            )
        )
    return found


def suggest_importance(centrality_ratio: float, current: float) -> float:
    """0.5 at 2x the average centrality, +0.1 per doubling, capped at 0.9; never below current + 0.1."""
    value = 0.5 + 0.1 * math.log2(max(centrality_ratio, 1.0) / 2.0)
    return round(min(0.9, max(value, current + 0.1)), 2)
