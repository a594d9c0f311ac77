"""``ChangeSummary``: what one load, change batch, reconcile or rebuild did to the store and index."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import InvalidFile


@dataclass
class ChangeSummary:
    """What a load / apply_changes / reconcile / rebuild changed.

    ``updated`` and ``removed`` are memory ids (a promoted duplicate counts as
    updated); ``paths`` are the workspace-relative files that were looked at
    and differed; ``invalid`` are files now skipped, with reasons.
    """

    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    invalid: list[InvalidFile] = field(default_factory=list)
    unchanged: int = 0
    paths: list[str] = field(default_factory=list)
    index_recovered: str | None = None

    @property
    def changed(self) -> bool:
        return bool(self.updated or self.removed or self.invalid or self.paths)

    def to_dict(self) -> dict[str, Any]:
        return {
            "updated": list(self.updated),
            "removed": list(self.removed),
            "invalid": [f.to_dict() for f in self.invalid],
            "unchanged": self.unchanged,
            "paths": list(self.paths),
            "changed": self.changed,
            "index_recovered": self.index_recovered,
        }
