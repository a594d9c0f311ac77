"""``Engine``: the facade the daemon, the CLI, the MCP server and the benchmarks hold.

It joins the parts (``Lifecycle``, ``ChangeApplication``, ``DerivedState``)
and adds what callers ask of a loaded workspace: context queries, lookups,
the versions served to clients, the two writes and the status.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import Any

from .. import writes
from ..model import ContextResult, InvalidFile, Memory
from ..query import ScoredQuery, score_query
from ..query import execute_context_query as _execute_context_query
from ..skill_lookup import SkillMatch, find_skill
from ..workspace import load_memory
from .changes import ChangeApplication
from .derived import DerivedState
from .lifecycle import Lifecycle

log = logging.getLogger(__name__)

# A version number served with two different contents (a person edited without bumping
# ``version``): ``expected_version`` alone no longer says which one the caller read.
AMBIGUOUS_VERSION = "ambiguous"


class Engine(Lifecycle, ChangeApplication, DerivedState):
    """The facade that holds all state for one workspace (see docs/ARCHITECTURE.md)."""

    # --- queries -----------------------------------------------------------------------
    def execute_context_query(
        self, query: str, budget_tokens: int | None = None, intent: str | None = None, *, record_access: bool = True
    ) -> ContextResult:
        self._require_loaded()
        return _execute_context_query(self, query, budget_tokens, intent, record_access=record_access)

    def score_query(self, query: str, intent: str | None = None, **kwargs: Any) -> ScoredQuery:
        """Candidates with signals, best first (no budget, nothing logged); for benchmarks and tools."""
        self._require_loaded()
        return score_query(self, query, intent, **kwargs)

    def note_served(self, memory: Memory) -> None:
        """Remember the checksum of a version handed to a client (bounded)."""
        self.note_served_all((memory,))

    def note_served_all(self, memories: Iterable[Memory]) -> None:
        """``note_served`` for each of ``memories`` under one lock (a context answer serves ~125)."""
        with self._served_lock:
            served = self._served
            if len(served) > 200_000:
                served.clear()
            for memory in memories:
                key = (memory.id, memory.version)
                seen = served.get(key)
                if seen is None:
                    served[key] = {memory.checksum}
                else:
                    seen.add(memory.checksum)

    def served_checksum(self, memory_id: str, version: int) -> str | None:
        """The checksum served for this version; ``AMBIGUOUS`` when one version was served with two contents."""
        with self._served_lock:
            seen = self._served.get((memory_id, version))
        if not seen:
            return None
        return next(iter(seen)) if len(seen) == 1 else AMBIGUOUS_VERSION

    def get_memory(self, memory_id: str) -> Memory | None:
        return self.store.get(memory_id)

    def list_memories(self, type: str | None = None) -> list[Memory]:
        return self.store.list(type)

    def invalid_files(self) -> list[InvalidFile]:
        return self.store.invalid_files()

    def get_skill(self, name: str) -> Memory:
        """The skill named exactly ``name`` (id, file name or title, any case); see skill_lookup.py.

        Raises ``SkillLookupError`` (with the closest skills by name) instead of
        ever answering with a different memory.
        """
        return self.find_skill(name).memory

    def find_skill(self, name: str) -> SkillMatch:
        """Like :meth:`get_skill`, and says which key matched."""
        self._require_loaded()
        return find_skill(self.store.list(), name)

    # --- writes (see writes.py for the safety rules) -------------------------------------
    def save_memory(self, **fields: Any) -> Memory:
        self._require_loaded()
        mid, version = fields.get("id"), fields.get("expected_version")
        if (
            not fields.get("expected_checksum")
            and isinstance(mid, str)
            and isinstance(version, int)
            and not isinstance(version, bool)
        ):
            known = self.store.get(mid.strip())
            served = self.served_checksum(known.id, version) if known is not None else None
            if served is not None:
                fields["expected_checksum"] = served
        result = writes.save_memory(self.root, self.store, self.config, **fields)
        self._index_after_write(result.rel_path)
        memory = self.store.get_by_path(result.rel_path)
        if memory is None:
            invalid = self.store.invalid.get(result.rel_path)
            raise writes.WriteRefused(
                f"saved {result.rel_path} but it did not load: {invalid.reason if invalid else 'unknown reason'}"
            )
        self.note_served(memory)
        return memory

    def log_session(self, event: str, details: str | None = None) -> str:
        self._require_loaded()
        rel_path = writes.log_session(self.root, self.config, event, details)
        self._index_after_write(rel_path)
        return rel_path

    def _index_after_write(self, rel_path: str) -> None:
        """Index a file the gate just made final. The write stands even if the index cannot be
        updated (e.g. the disk filled up in between): the store serves it, the next re-sync indexes it,
        and the caller is never told "failed" about a file that was written."""
        try:
            self.apply_changes([rel_path])
        except OSError as exc:
            log.warning("%s was saved but the index could not be updated (%s); the next re-sync retries", rel_path, exc)
            if rel_path not in self.store.by_path:
                loaded = load_memory(self.root, rel_path, self.config)
                if isinstance(loaded, Memory):
                    self.store.put(loaded)
                    self._bump()

    # --- status ------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        by_type = Counter(m.type for m in list(self.store.memories.values()))
        return {
            "workspace": str(self.root),
            "memories": len(self.store),
            "by_type": dict(sorted(by_type.items())),
            "invalid": len(self.store.invalid),
            "index": self.index.info() if self.index is not None else None,
            "state_dir": str(self.state_dir) if self.state_dir else None,
            "token_counter": getattr(self.counter, "name", type(self.counter).__name__),
            "semantic_scorer": getattr(self.semantic, "name", type(self.semantic).__name__),
            "embeddings": len(self.vectors) if self.vectors is not None else None,
            "config_problems": list(self.problems),
            "queries_logged": self.access_log.query_count() if self.access_log is not None else 0,
        }
