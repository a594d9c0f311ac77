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

One module per job:

- ``findings.py``: ``Finding``, its fingerprint, ``GovernanceSettings`` and ``GovernanceInputs``;
- ``analysis.py``: ``analyze``, pure (memories and numbers in, findings out), so
  tests can build exact situations;
- ``dismissals.py``: the findings store, ``.ctxos/dismissed.json``;
- ``report.py``: ``governance_report`` gathers an engine's inputs, analyses, hides
  dismissed findings, saves ``.ctxos/governance.json`` and is kept by the engine;
- ``actions.py``: dismiss, archive, unarchive, set importance, expire scratch.
"""

from __future__ import annotations

from .actions import (
    ActionResult,
    GovernanceError,
    archive,
    dismiss_finding,
    expire_scratch,
    find_archived,
    set_importance,
    unarchive,
)
from .analysis import (
    analyze,
    conflict_findings,
    consolidation_findings,
    decay_findings,
    god_node_findings,
    invalid_file_findings,
    scratch_expired,
    scratch_findings,
    suggest_importance,
)
from .dismissals import (
    DISMISSED_FILENAME,
    dismissed_path,
    is_dismissed,
    load_dismissed,
    save_dismissed,
    subject_checksums,
)
from .findings import KINDS, Finding, GovernanceInputs, GovernanceSettings, finding_fingerprint
from .report import (
    REPORT_FILENAME,
    GovernanceReport,
    build_report,
    centrality,
    gather_inputs,
    governance_report,
    link_graph,
    load_saved_report,
    memory_snapshot,
)

__all__ = [
    "DISMISSED_FILENAME",
    "KINDS",
    "REPORT_FILENAME",
    "ActionResult",
    "Finding",
    "GovernanceError",
    "GovernanceInputs",
    "GovernanceReport",
    "GovernanceSettings",
    "analyze",
    "archive",
    "build_report",
    "centrality",
    "conflict_findings",
    "consolidation_findings",
    "decay_findings",
    "dismiss_finding",
    "dismissed_path",
    "expire_scratch",
    "find_archived",
    "finding_fingerprint",
    "gather_inputs",
    "god_node_findings",
    "governance_report",
    "invalid_file_findings",
    "is_dismissed",
    "link_graph",
    "load_dismissed",
    "load_saved_report",
    "memory_snapshot",
    "save_dismissed",
    "scratch_expired",
    "scratch_findings",
    "set_importance",
    "subject_checksums",
    "suggest_importance",
    "unarchive",
]
