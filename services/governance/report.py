"""The report: gather an engine's inputs, analyse, hide what was dismissed, keep the last one.

``governance_report`` is what the daemon, the scheduler and the commands call;
the result is written to ``.ctxos/governance.json`` and kept by the engine
(``Engine.governance_reports``) while its inputs are unchanged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic import atomic_write_text
from ..graph import LinkGraph, pagerank
from ..model import Memory
from ..workspace import state_dir
from .analysis import analyze
from .dismissals import dismissed_path, is_dismissed, load_dismissed
from .findings import KINDS, Finding, GovernanceInputs, GovernanceSettings

if TYPE_CHECKING:
    from ..engine_view import EngineView

REPORT_FILENAME = "governance.json"


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
    from ..flags import flag_findings  # agents' flags (services/flags.py) join the queue here
    from ..history.sync import sync_findings  # a team sync that stopped on a conflict (history/sync.py)

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


def memory_snapshot(engine: EngineView) -> list[Memory]:
    """The engine's memories, copied in one step (safe while the write thread changes the store)."""
    return sorted(list(engine.store.memories.values()), key=lambda m: m.id)


def link_graph(engine: EngineView) -> LinkGraph:
    """The engine's link graph for its current store."""
    return engine.graph()


def centrality(graph: LinkGraph) -> tuple[dict[str, float], dict[str, int]]:
    """Raw PageRank (sums to 1) over explicit links (weight 1) and shared-tag edges (0.5 each way), and degree.

    ``LinkGraph.authority`` is rescaled 0..1 for scoring; god-node detection needs
    "how many times the average", hence the raw values here.
    """
    degree = {node: len(graph.neighbours(node)) for node in graph.nodes}
    edges = list(graph.explicit_edges())
    weights = [1.0] * len(edges)
    for a, b in graph.implicit_edges():
        edges += [(a, b), (b, a)]
        weights += [0.5, 0.5]
    if not edges:
        return {}, degree
    return pagerank(graph.nodes, edges, weights), degree


def gather_inputs(engine: EngineView, settings: GovernanceSettings, now: datetime | None = None) -> GovernanceInputs:
    check = engine.stop_flag.check
    memories = memory_snapshot(engine)
    check()
    loads = engine.access_log.counts_in_window(settings.decay_days) if engine.access_log is not None else {}
    ranks, degree = centrality(link_graph(engine))
    return GovernanceInputs(
        memories=memories,
        invalid=engine.invalid_files(),
        loads=loads,
        centrality=ranks,
        degree=degree,
        now=now,
        check=check,
    )


def _report_key(engine: EngineView, include_dismissed: bool) -> tuple[Hashable, ...] | None:
    """What a report depends on besides the clock: files (generation), loads (newest query), dismissals, config."""
    access_log = engine.access_log
    if access_log is None:
        return None
    try:
        dismissed = dismissed_path(engine.root).stat().st_mtime_ns
    except OSError:
        dismissed = 0
    from ..flags import flags_mtime
    from ..history.sync import state_mtime

    return (
        engine.generation,
        access_log.last_query_id(),
        dismissed,
        flags_mtime(engine.root),
        state_mtime(engine.root),
        id(engine.config),
        include_dismissed,
    )


def governance_report(
    engine: EngineView, *, include_dismissed: bool = False, now: datetime | None = None, save: bool = True
) -> GovernanceReport:
    """Run governance on an engine's current state; keep the result in ``.ctxos/governance.json``.

    The engine keeps the last report (``engine.governance_reports``) until a file, a
    load, a dismissal, a flag, the sync state or the config changes, and for at most a
    minute (ages and load windows move with the clock), so the health badge, the tray
    and the web view asking in turn cost one run (seconds on a 7,000-file workspace),
    not one each. A report for a given ``now`` is never kept.
    """
    memo = engine.governance_reports
    key = _report_key(engine, include_dismissed) if now is None else None
    cached = memo.get(key) if key is not None else None
    if cached is not None:
        return cached
    report = _compute_report(engine, include_dismissed=include_dismissed, now=now, save=save)
    if key is not None:
        memo.put(key, report)
    return report


def _compute_report(
    engine: EngineView, *, include_dismissed: bool, now: datetime | None, save: bool
) -> GovernanceReport:
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
        data = json.loads((state_dir(Path(root)) / REPORT_FILENAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
