"""What governance reports: ``Finding`` (with its stable fingerprint), the settings and the inputs of a run."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..config import Config
from ..model import InvalidFile, Memory
from ..stop_flag import Check, never

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
        """The typed ``governance`` section (checked when the file was loaded: services/settings.py)."""
        g = config.settings.governance
        decay, conflict, dup, god = g.decay, g.conflict, g.consolidation, g.god_nodes
        return cls(
            decay_days=int(decay.days),
            decay_max_loads=decay.max_loads,
            decay_exempt_types=tuple(decay.exempt_types),
            scratch_ttl_days=int(g.scratch_ttl_days),
            conflict_min_text_jaccard=conflict.min_text_overlap,
            conflict_importance_gap=conflict.importance_gap,
            contradiction_min_words=conflict.contradiction_min_words,
            contradiction_min_jaccard=conflict.contradiction_min_overlap,
            contradiction_min_topic_overlap=conflict.contradiction_min_topic_overlap,
            duplicate_min_jaccard=dup.min_overlap,
            duplicate_shingle_words=dup.shingle_words,
            god_min_ratio=god.min_centrality_ratio,
            god_min_degree=god.min_degree,
            god_max_importance=god.max_importance,
            max_posting=g.max_posting,
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
    check: Check = never  # raises stop_flag.Cancelled when the owner shuts down (the engine's stop flag)
