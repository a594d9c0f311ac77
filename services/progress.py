"""What a long engine job (cold build, reindex) is doing right now: phase, n of N.

The engine has no threads, so it cannot show anything itself: it keeps the
current ``Progress`` on ``Engine.progress`` (the daemon's ``status`` reads it
from another thread; a snapshot is replaced whole, never mutated) and calls
``Engine.on_progress`` with each new one (the CLI draws a bar, the daemon
starts answering queries once ``partial`` is set).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

READING = "reading files"
INDEXING = "indexing"
WRITING = "writing the index"
EMBEDDING = "embedding"
UNCOUNTED = (WRITING, EMBEDDING)  # phases without a running count


@dataclass(frozen=True)
class Progress:
    """One step of a long job. ``partial``: queries are answered from what is indexed so far."""

    job: str  # "cold build" | "reindex"
    phase: str  # READING | INDEXING | WRITING | EMBEDDING
    done: int
    total: int
    partial: bool = False
    started: float = field(default_factory=time.time)

    def line(self) -> str:
        """``indexing 2,000 of 10,000`` (what status, the tray and the web view show)."""
        if self.phase in UNCOUNTED:
            return f"{self.phase} ({self.total:,} memories)"
        return f"{self.phase} {self.done:,} of {self.total:,}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.line(), "elapsed_s": round(time.time() - self.started, 1)}


ProgressCallback = Callable[[Progress], None]
