"""Governance: what in a workspace needs a person's judgment, and the actions they can take.

Each ``Finding`` carries its kind, the memory ids (or paths) it is about, the
reason in a sentence, the evidence behind it, a suggested action (with the CLI
command that performs it) and a stable fingerprint, so a person can dismiss it
and it stays dismissed until one of its files changes.

Kinds: ``decay`` (old and rarely loaded), ``conflict`` (overlapping memories
whose types or importance disagree, or that contradict each other as far as
text can show), ``consolidation`` (clusters of near-duplicates), ``god_node``
(central in the graph but marked unimportant), ``scratch_expired``,
``invalid_file``, ``flag`` (an agent's flag, ``flags.py``) and ``sync_conflict`` (the scheduled
git sync stopped on a conflict, ``history/sync.py``).

The analysis (``analyze``) is pure: it takes memories and the numbers it needs
(loads per memory, centrality) so tests can build exact situations; the
``Engine``-facing helpers at the bottom gather those inputs and persist
dismissals in ``.ctxos/dismissed.json``. Overlap is found with a prefix-filtered
similarity join (``similarity.py``), never by comparing every pair.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .atomic import atomic_write_text
from .config import Config
from .model import InvalidFile, Memory
from .similarity import claims, content_tokens, contradictions, jaccard, shingles, similarity_join
from .workspace import state_dir

log = logging.getLogger(__name__)

KINDS: tuple[str, ...] = (
    "invalid_file",
    "sync_conflict",
    "flag",
    "conflict",
    "consolidation",
    "god_node",
    "scratch_expired",
    "decay",
)
DISMISSED_FILENAME = "dismissed.json"
_DISMISS_LOCK = threading.Lock()  # dismiss is a read-modify-write of dismissed.json
REPORT_FILENAME = "governance.json"


@dataclass
class Finding:
    """One thing a person should look at."""

    kind: str
    ids: list[str]  # memory ids (empty for an invalid file)
    paths: list[str]  # workspace-relative paths of the files involved
    reason: str
    evidence: dict[str, Any]
    action: dict[str, Any]  # {"action": "archive"|"set_importance"|"merge"|"review"|"fix", ...}
    command: str = ""  # the CLI command that carries out the action, when there is one
    severity: str = "info"  # "info" | "warning" | "error"
    fingerprint: str = ""

    def __post_init__(self) -> None:
        if not self.fingerprint:
            self.fingerprint = finding_fingerprint(self.kind, self.ids or self.paths)

    def subjects(self) -> list[str]:
        """What the fingerprint is about: ids, or paths for findings about unparsable files."""
        return list(self.ids) if self.ids else list(self.paths)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "kind": self.kind,
            "severity": self.severity,
            "ids": list(self.ids),
            "paths": list(self.paths),
            "reason": self.reason,
            "evidence": self.evidence,
            "action": self.action,
            "command": self.command,
        }


def finding_fingerprint(kind: str, subjects: Iterable[str]) -> str:
    """Stable id of a finding: its kind and the sorted things it is about (not the wording)."""
    text = kind + "\0" + "\0".join(sorted(set(subjects)))
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


@dataclass
class GovernanceSettings:
    """``governance.*`` from ``_config.yaml`` (defaults documented in default_config.yaml)."""

    decay_days: int = 90
    decay_max_loads: int = 1
    decay_exempt_types: tuple[str, ...] = ("rule",)
    scratch_ttl_days: int = 7
    conflict_min_text_jaccard: float = 0.5
    conflict_importance_gap: float = 0.3
    contradiction_min_words: int = 4
    contradiction_min_jaccard: float = 0.75
    contradiction_min_topic_overlap: float = 0.2
    duplicate_min_jaccard: float = 0.7
    duplicate_shingle_words: int = 2
    god_min_ratio: float = 3.0
    god_min_degree: int = 4
    god_max_importance: float = 0.5
    max_posting: int = 400

    @classmethod
    def from_config(cls, config: Config) -> GovernanceSettings:
        g = config.section("governance")
        decay, conflict, dup, god = (g.get(k) or {} for k in ("decay", "conflict", "consolidation", "god_nodes"))
        base = cls()
        return cls(
            decay_days=int(decay.get("days", base.decay_days)),
            decay_max_loads=int(decay.get("max_loads", base.decay_max_loads)),
            decay_exempt_types=tuple(decay.get("exempt_types", base.decay_exempt_types) or ()),
            scratch_ttl_days=int(g.get("scratch_ttl_days", base.scratch_ttl_days)),
            conflict_min_text_jaccard=float(conflict.get("min_text_overlap", base.conflict_min_text_jaccard)),
            conflict_importance_gap=float(conflict.get("importance_gap", base.conflict_importance_gap)),
            contradiction_min_words=int(conflict.get("contradiction_min_words", base.contradiction_min_words)),
            contradiction_min_jaccard=float(conflict.get("contradiction_min_overlap", base.contradiction_min_jaccard)),
            contradiction_min_topic_overlap=float(
                conflict.get("contradiction_min_topic_overlap", base.contradiction_min_topic_overlap)
            ),
            duplicate_min_jaccard=float(dup.get("min_overlap", base.duplicate_min_jaccard)),
            duplicate_shingle_words=int(dup.get("shingle_words", base.duplicate_shingle_words)),
            god_min_ratio=float(god.get("min_centrality_ratio", base.god_min_ratio)),
            god_min_degree=int(god.get("min_degree", base.god_min_degree)),
            god_max_importance=float(god.get("max_importance", base.god_max_importance)),
            max_posting=int(g.get("max_posting", base.max_posting)),
        )


@dataclass
class GovernanceInputs:
    """Everything ``analyze`` looks at; built from an Engine by ``gather_inputs``."""

    memories: Sequence[Memory]
    invalid: Sequence[InvalidFile] = ()
    loads: Mapping[str, int] = field(default_factory=dict)  # loads per id within decay_days
    centrality: Mapping[str, float] = field(default_factory=dict)  # PageRank (sums to 1)
    degree: Mapping[str, int] = field(default_factory=dict)  # graph degree (explicit + implicit)
    now: datetime | None = None  # naive UTC; default: now


def _utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _modified(memory: Memory) -> datetime:
    if memory.modified is not None:
        return memory.modified
    return datetime.fromtimestamp(memory.mtime, UTC).replace(tzinfo=None)


def _text(memory: Memory) -> str:
    return "\n".join(p for p in (memory.l0, memory.l1, memory.l2) if p)


# --- the analysis ------------------------------------------------------------------


def analyze(inputs: GovernanceInputs, settings: GovernanceSettings | None = None) -> list[Finding]:
    """All findings, most serious kind first, then by fingerprint (deterministic)."""
    settings = settings or GovernanceSettings()
    now = inputs.now or _utcnow()
    memories = sorted(inputs.memories, key=lambda m: m.id)
    findings: list[Finding] = []
    findings += invalid_file_findings(inputs.invalid)
    findings += conflict_findings(memories, settings)
    findings += consolidation_findings(memories, settings)
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
        modified = _modified(memory)
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
        age = (now - _modified(memory)).days
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
    return [m for m in memories if m.type == "scratch" and not m.protected and _modified(m) <= cutoff]


def conflict_findings(memories: Sequence[Memory], settings: GovernanceSettings) -> list[Finding]:
    """Overlapping pairs that disagree on type or importance, and pairs that contradict.

    Overlap: Jaccard of content words >= ``conflict_min_text_jaccard`` and, when
    both have tags, at least one shared tag. Contradiction: a sentence in each
    with nearly the same content words and opposite polarity.
    """
    by_pair: dict[tuple[str, str], dict[str, Any]] = {}
    token_sets = [content_tokens(_text(m)) for m in memories]
    gap = settings.conflict_importance_gap
    types = [m.type for m in memories]
    importance = [m.importance for m in memories]

    def disagree(i: int, j: int) -> bool:
        return types[i] != types[j] or abs(importance[i] - importance[j]) >= gap

    # When no two memories can disagree on type or importance, skip the join altogether.
    can_disagree = len(set(types)) > 1 or (memories and max(importance) - min(importance) >= gap)
    pairs = (
        similarity_join(token_sets, settings.conflict_min_text_jaccard, settings.max_posting, accept=disagree)
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
    all_claims = [c for m in memories for c in claims(m.id, _text(m), settings.contradiction_min_words)]
    position = {m.id: n for n, m in enumerate(memories)}
    for pos, neg, score in contradictions(all_claims, settings.contradiction_min_jaccard, settings.max_posting):
        key = (min(pos.owner, neg.owner), max(pos.owner, neg.owner))
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


def consolidation_findings(memories: Sequence[Memory], settings: GovernanceSettings) -> list[Finding]:
    """Clusters of near-duplicates (word-shingle Jaccard >= ``duplicate_min_jaccard``), joined transitively."""
    sets = [shingles(_text(m), settings.duplicate_shingle_words) for m in memories]
    pairs = similarity_join(sets, settings.duplicate_min_jaccard, settings.max_posting)
    parent = list(range(len(memories)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j, _ in pairs:
        parent[find(i)] = find(j)
    clusters: dict[int, list[int]] = {}
    for i, j, _ in pairs:
        for k in (i, j):
            members = clusters.setdefault(find(k), [])
            if k not in members:
                members.append(k)
    pair_scores: dict[int, list[tuple[int, int, float]]] = {}
    for i, j, score in pairs:
        pair_scores.setdefault(find(i), []).append((i, j, score))
    found = []
    for root, members in clusters.items():
        group = sorted((memories[k] for k in members), key=lambda m: m.id)
        keep = max(group, key=lambda m: (m.importance, _modified(m), m.id))
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


# --- dismissals -----------------------------------------------------------------


def dismissed_path(root: Path) -> Path:
    return state_dir(Path(root)) / DISMISSED_FILENAME


def load_dismissed(root: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(dismissed_path(root).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_dismissed(root: Path, data: Mapping[str, Any]) -> None:
    atomic_write_text(dismissed_path(root), json.dumps(dict(sorted(data.items())), indent=1) + "\n")


def subject_checksums(root: Path, finding: Finding, checksum_of: Mapping[str, str]) -> dict[str, str]:
    """Current checksum of each file a finding is about (memory checksum, or the raw bytes' sha256)."""
    result: dict[str, str] = {}
    for subject, path in zip(finding.subjects(), finding.paths):
        value = checksum_of.get(subject)
        if value is None:
            try:
                value = hashlib.sha256((Path(root) / path).read_bytes()).hexdigest()
            except OSError:
                value = "missing"
        result[subject] = value
    return result


def is_dismissed(root: Path, finding: Finding, dismissed: Mapping[str, Any], checksum_of: Mapping[str, str]) -> bool:
    """Dismissed, and none of its files changed since (a change brings the finding back)."""
    entry = dismissed.get(finding.fingerprint)
    if not entry:
        return False
    return entry.get("checksums") == subject_checksums(root, finding, checksum_of)


# --- report -----------------------------------------------------------------------


@dataclass
class GovernanceReport:
    findings: list[Finding]
    dismissed: int
    memories: int
    elapsed_ms: float
    generated_at: str

    def counts(self) -> dict[str, int]:
        counts = {kind: 0 for kind in KINDS}
        for finding in self.findings:
            counts[finding.kind] = counts.get(finding.kind, 0) + 1
        return counts

    def flagged_ids(self) -> set[str]:
        return {i for f in self.findings for i in f.ids}

    def to_dict(self) -> dict[str, Any]:
        return {
            "generated_at": self.generated_at,
            "memories": self.memories,
            "elapsed_ms": round(self.elapsed_ms, 3),
            "counts": self.counts(),
            "dismissed": self.dismissed,
            "findings": [f.to_dict() for f in self.findings],
        }


def build_report(
    root: Path, inputs: GovernanceInputs, settings: GovernanceSettings, include_dismissed: bool = False
) -> GovernanceReport:
    """Analyse, then drop dismissed findings whose files have not changed."""
    from .flags import flag_findings  # agents' flags (services/flags.py) join the queue here
    from .history.sync import sync_findings  # a team sync that stopped on a conflict (history/sync.py)

    started = time.perf_counter()
    rank = {kind: n for n, kind in enumerate(KINDS)}
    findings = sorted(
        analyze(inputs, settings) + flag_findings(root, inputs.memories) + sync_findings(root),
        key=lambda f: (rank.get(f.kind, 99), f.fingerprint),
    )
    dismissed = load_dismissed(root)
    checksum_of = {m.id: m.checksum for m in inputs.memories}
    shown, hidden = [], 0
    for finding in findings:
        if not include_dismissed and is_dismissed(root, finding, dismissed, checksum_of):
            hidden += 1
        else:
            shown.append(finding)
    return GovernanceReport(
        shown,
        hidden,
        len(inputs.memories),
        (time.perf_counter() - started) * 1000.0,
        datetime.now(UTC).replace(microsecond=0).isoformat(),
    )


# --- the Engine side: inputs, report, actions ---------------------------------------


def memory_snapshot(engine: Any) -> list[Memory]:
    """The engine's memories, copied in one step (safe while the write thread changes the store)."""
    return sorted(list(engine.store.memories.values()), key=lambda m: m.id)


def link_graph(engine: Any) -> Any:
    """The engine's link graph (``graph.LinkGraph``), or one built from its store."""
    graph = getattr(engine, "graph", None)
    if callable(graph):
        graph = graph()
    if graph is not None:
        return graph
    from .graph import build_graph

    return build_graph(
        engine.store.list(),
        engine.store.resolve_link,
        min_shared_tags=int(engine.config.get("graph.implicit_edge_min_shared_tags", 2)),
    )


def centrality(graph: Any) -> tuple[dict[str, float], dict[str, int]]:
    """Raw PageRank (sums to 1) over explicit links (weight 1) and shared-tag edges (0.5 each way), and degree.

    ``LinkGraph.authority`` is rescaled 0..1 for scoring; god-node detection needs
    "how many times the average", hence the raw values here.
    """
    nodes = list(graph.nodes)
    degree = {node: len(graph.neighbours(node)) for node in nodes}
    position = {node: i for i, node in enumerate(nodes)}
    edges: list[tuple[int, int]] = []
    weights: list[float] = []
    for src, dst in graph.explicit_edges():
        edges.append((position[src], position[dst]))
        weights.append(1.0)
    for a, b in graph.implicit_edges():
        edges += [(position[a], position[b]), (position[b], position[a])]
        weights += [0.5, 0.5]
    if not edges:
        return {}, degree
    import igraph

    g = igraph.Graph(n=len(nodes), edges=edges, directed=True)
    ranks = g.pagerank(directed=True, weights=weights)
    return {node: ranks[i] for node, i in position.items()}, degree


def gather_inputs(engine: Any, settings: GovernanceSettings, now: datetime | None = None) -> GovernanceInputs:
    memories = memory_snapshot(engine)
    loads = engine.access_log.counts_in_window(settings.decay_days)
    ranks, degree = centrality(link_graph(engine))
    return GovernanceInputs(
        memories=memories, invalid=engine.invalid_files(), loads=loads, centrality=ranks, degree=degree, now=now
    )


_REPORT_CACHE: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], GovernanceReport]] = weakref.WeakKeyDictionary()


def _report_key(engine: Any, include_dismissed: bool) -> tuple[Any, ...] | None:
    """What a report depends on: files (generation), loads (newest query), dismissals, config, the minute."""
    generation = getattr(engine, "generation", None)
    access_log = getattr(engine, "access_log", None)
    if generation is None or access_log is None:
        return None
    try:
        dismissed = dismissed_path(engine.root).stat().st_mtime_ns
    except OSError:
        dismissed = 0
    from .flags import flags_mtime
    from .history.sync import state_mtime

    minute = int(time.time() // 60)
    return (
        generation,
        access_log.last_query_id(),
        dismissed,
        flags_mtime(engine.root),
        state_mtime(engine.root),
        id(engine.config),
        include_dismissed,
        minute,
    )


def governance_report(
    engine: Any, *, include_dismissed: bool = False, now: datetime | None = None, save: bool = True
) -> GovernanceReport:
    """Run governance on an engine's current state; keep the result in ``.ctxos/governance.json``.

    Reports are cached per engine until a file, a load, a dismissal, the config or the
    minute changes, so the health badge, the tray and the web view asking in turn cost
    one run (seconds on a 7,000-file workspace), not one each.
    """
    key = _report_key(engine, include_dismissed) if now is None else None
    cached = _REPORT_CACHE.get(engine) if key is not None else None
    if cached is not None and cached[0] == key:
        return cached[1]
    report = _compute_report(engine, include_dismissed=include_dismissed, now=now, save=save)
    if key is not None:
        _REPORT_CACHE[engine] = (key, report)
    return report


def _compute_report(engine: Any, *, include_dismissed: bool, now: datetime | None, save: bool) -> GovernanceReport:
    settings = GovernanceSettings.from_config(engine.config)
    started = time.perf_counter()
    report = build_report(engine.root, gather_inputs(engine, settings, now), settings, include_dismissed)
    report.elapsed_ms = (time.perf_counter() - started) * 1000.0
    if save and not include_dismissed:
        atomic_write_text(state_dir(engine.root) / REPORT_FILENAME, json.dumps(report.to_dict(), indent=1) + "\n")
    return report


def load_saved_report(root: Path) -> dict[str, Any] | None:
    """The last report the scheduler (or a command) saved, as a dict; None when there is none."""
    try:
        return json.loads((state_dir(Path(root)) / REPORT_FILENAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class GovernanceError(Exception):
    """A governance action that cannot be done (unknown id or fingerprint); the message says why."""


def dismiss_finding(engine: Any, fingerprint: str) -> dict[str, Any]:
    """Hide a finding until one of its files changes (its checksums are stored with it)."""
    report = governance_report(engine, include_dismissed=True, save=False)
    finding = next((f for f in report.findings if f.fingerprint == fingerprint), None)
    if finding is None:
        raise GovernanceError(f"no current finding with fingerprint {fingerprint!r} (see: ctxos governance)")
    checksum_of = {m.id: m.checksum for m in memory_snapshot(engine)}
    with _DISMISS_LOCK:
        dismissed = load_dismissed(engine.root)
        dismissed[fingerprint] = {
            "kind": finding.kind,
            "subjects": finding.subjects(),
            "checksums": subject_checksums(engine.root, finding, checksum_of),
            "dismissed_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "reason": finding.reason,
        }
        save_dismissed(engine.root, dismissed)
    return {"dismissed": fingerprint, "kind": finding.kind, "ids": finding.ids, "paths": finding.paths}


@dataclass
class ActionResult:
    """What a governance action did (``data``), and the engine's ChangeSummary for change listeners."""

    data: dict[str, Any]
    summary: Any = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)


def archive(engine: Any, memory_id: str) -> ActionResult:
    """Move a memory to ``_archive/<its path>`` (excluded from context; ``unarchive`` undoes it)."""
    from .writes import archive_memory

    src, dst = archive_memory(engine.root, engine.store, memory_id)
    summary = engine.apply_changes([src])
    return ActionResult({"archived": memory_id, "from": src, "to": dst}, summary)


def find_archived(engine: Any, ref: str) -> str:
    """The ``_archive/...`` path of an archived memory named by id, file stem, or path."""
    from .ontology import ARCHIVE_FOLDER
    from .workspace import load_memory
    from .writes import list_archived

    paths = list_archived(engine.root)
    wanted = ref if ref.startswith(ARCHIVE_FOLDER + "/") else f"{ARCHIVE_FOLDER}/{ref}"
    if wanted in paths:
        return wanted
    for rel in paths:
        loaded = load_memory(engine.root, rel, engine.config)
        if isinstance(loaded, Memory) and loaded.id == ref:
            return rel
    stems = [rel for rel in paths if rel.rsplit("/", 1)[-1].rsplit(".", 1)[0] == ref]
    if len(stems) == 1:
        return stems[0]
    raise GovernanceError(f"no archived memory {ref!r} under {ARCHIVE_FOLDER}/")


def unarchive(engine: Any, ref: str) -> ActionResult:
    """Move an archived memory back to where it was."""
    from .writes import unarchive_memory

    src, dst = unarchive_memory(engine.root, find_archived(engine, ref))
    summary = engine.apply_changes([dst])
    memory = engine.store.get_by_path(dst)
    return ActionResult({"unarchived": memory.id if memory else ref, "from": src, "to": dst}, summary)


def set_importance(engine: Any, memory_id: str, value: float) -> ActionResult:
    """Rewrite a memory's ``importance`` in its frontmatter (atomic; version bumped)."""
    from .writes import set_importance as write_importance

    rel = write_importance(engine.root, engine.store, engine.config, memory_id, value)
    summary = engine.apply_changes([rel])
    return ActionResult({"id": memory_id, "importance": round(float(value), 3), "path": rel}, summary)


def expire_scratch(engine: Any, now: datetime | None = None) -> list[dict[str, Any]]:
    """Archive scratch memories past ``governance.scratch_ttl_days`` (the scheduled scratch expiry)."""
    from .writes import WriteRefused, archive_memory

    settings = GovernanceSettings.from_config(engine.config)
    done, moved = [], []
    for memory in scratch_expired(memory_snapshot(engine), now or _utcnow(), settings.scratch_ttl_days):
        try:
            src, dst = archive_memory(engine.root, engine.store, memory.id)
        except WriteRefused as exc:  # changed or gone meanwhile: the next run sees it again
            log.warning("scratch expiry: %s", exc)
            continue
        moved.append(src)
        done.append({"archived": memory.id, "from": src, "to": dst})
    if moved:
        # One index update for the whole run: thousands of expired notes cost one commit, not one each.
        engine.apply_changes(moved)
    return done
