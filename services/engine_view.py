"""``EngineView``: what the use cases and transports need from the engine, as a typed Protocol.

The engine (``services/engine/``) is one class built from several parts; the
seams around it (``services/api``, the daemon's context, the CLI's in-process
backend) need only this part of it, so they are typed on it rather than on
``Any`` or on the whole class. It is structural: ``Engine`` satisfies it as it
is, and a test double would have to provide exactly this much. Nothing here
is probed with ``getattr``: a member the seams use is listed, or it is not used.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover - types only: the engine imports most of services
    from .access_log import AccessLog
    from .config import Config
    from .engine import ChangeSummary
    from .engine.memo import Memo
    from .governance.report import GovernanceReport
    from .graph import LinkGraph
    from .index import MemoryIndex
    from .model import ContextResult, InvalidFile, Memory
    from .progress import Progress
    from .skill_lookup import SkillMatch
    from .stop_flag import StopFlag
    from .store import MemoryStore
    from .tokens import TokenCounter


class EngineView(Protocol):
    """The engine as the use-case layer sees it: its state, the one query path and the write rules."""

    @property
    def root(self) -> Path: ...
    @property
    def config(self) -> Config: ...
    @property
    def store(self) -> MemoryStore: ...
    @property
    def index(self) -> MemoryIndex | None:
        """None until the engine has loaded (:func:`loaded_index` says so in words)."""
        ...

    @property
    def access_log(self) -> AccessLog | None: ...
    @property
    def counter(self) -> TokenCounter: ...
    @property
    def progress(self) -> Progress | None: ...
    @property
    def problems(self) -> list[str]: ...
    @property
    def generation(self) -> int:
        """Changes with every applied change batch: keys caches of derived data."""
        ...

    @property
    def governance_reports(self) -> Memo[GovernanceReport]: ...
    @property
    def stop_flag(self) -> StopFlag:
        """Set by the owner at shutdown; long jobs check it (services/stop_flag.py)."""
        ...

    # reads
    def execute_context_query(
        self, query: str, budget_tokens: int | None = None, intent: str | None = None, *, record_access: bool = True
    ) -> ContextResult: ...
    def get_memory(self, memory_id: str) -> Memory | None: ...
    def list_memories(self, type: str | None = None) -> list[Memory]: ...
    def find_skill(self, name: str) -> SkillMatch: ...
    def invalid_files(self) -> list[InvalidFile]: ...
    def note_served(self, memory: Memory) -> None: ...
    def note_served_all(self, memories: Iterable[Memory]) -> None: ...
    def graph(self, *, stale_ok: bool = False) -> LinkGraph: ...
    def status(self) -> dict[str, Any]: ...

    # writes (the write gate inside) and index upkeep
    def save_memory(self, **fields: Any) -> Memory: ...
    def log_session(self, event: str, details: str | None = None) -> str: ...
    def apply_changes(self, paths: Iterable[Path | str]) -> ChangeSummary: ...
    def reconcile(self) -> ChangeSummary: ...
    def rebuild_index(self) -> ChangeSummary: ...


class NotLoaded(RuntimeError):
    """A part of the engine that exists only once it has loaded was asked for before that."""


def loaded_index(engine: EngineView) -> MemoryIndex:
    """The engine's index; :class:`NotLoaded` before the engine has loaded."""
    if engine.index is None:
        raise NotLoaded("the workspace is still loading: its index is not open yet")
    return engine.index


def loaded_access_log(engine: EngineView) -> AccessLog:
    """The engine's access log; :class:`NotLoaded` before the engine has loaded."""
    if engine.access_log is None:
        raise NotLoaded("the workspace is still loading: its access log is not open yet")
    return engine.access_log
