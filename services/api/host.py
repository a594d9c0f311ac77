"""``Host``: what a use case needs from whoever runs it, and nothing about how it runs.

The daemon's context (``daemon/context.py``) runs use cases on worker threads,
behind its write lock, and fans change notes out to the router, the web page's
event stream and the graph refresh; the CLI's in-process backend
(``client/backend.py``) runs them in the calling thread with nobody listening.
Both satisfy this Protocol structurally; the use cases never import either, so
``services/`` stays free of sockets, threads and event loops.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..engine_view import EngineView

if TYPE_CHECKING:  # pragma: no cover
    from ..engine import ChangeSummary


class Host(Protocol):
    """The engine the use cases work on, the runner's state for ``status``, and where change notes go."""

    @property
    def engine(self) -> EngineView: ...

    @property
    def ready(self) -> bool:
        """The engine has finished loading (``status`` reports counts only then)."""
        ...

    @property
    def load_error(self) -> str | None: ...

    @property
    def load_summary(self) -> dict[str, Any] | None: ...

    @property
    def status_extra(self) -> dict[str, Any]:
        """Free-form status the runner adds (the scheduler's last jobs, under ``jobs``)."""
        ...

    def daemon_status(self) -> dict[str, Any]:
        """The runner's own part of ``status``: mode, pid, uptime, components ..."""
        ...

    def publish_change(self, summary: ChangeSummary | Mapping[str, Any]) -> None:
        """Tell listeners (router files, the web page, the graph refresh) what a write changed."""
        ...
