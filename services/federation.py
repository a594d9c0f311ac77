"""Federation: other workspaces' memories join this one's candidates, read-only.

A workspace lists others in ``_config.yaml`` (``federate: [global]``, names
from the per-user registry). The daemon that serves them all (the per-user
daemon, ``daemon/workspaces.py``) gives this engine the list of their loaded
engines as ``engine.federated`` (``[(name, engine), ...]``); this module has no
other way to reach them and never writes to them.

The seam in the one query path (``services/query.py``) is one call: after the
local candidates are gathered, :func:`join_federated` asks each federated
engine for *its* best candidates with the same gathering step (BM25, rules and
always_load memories, graph neighbours) and adds them, marked with their
workspace. From there they are scored, tiered and rendered like local ones,
so a federated rule comes first like a local rule, and ``simulate`` shows each
memory's workspace. A local id wins over the same id elsewhere; only direct
federation counts (what ``global`` federates is not pulled in).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

log = logging.getLogger(__name__)

CONFIG_KEY = "federate"


def federate_names(config: Any) -> list[str]:
    """The workspace names ``_config.yaml`` federates (validated by ``config.validate``)."""
    value = config.get(CONFIG_KEY) or []
    return [str(name) for name in value] if isinstance(value, list) else []


def check_federate(value: Any) -> str | None:
    """Why ``federate:`` cannot be used, or None (``config.validate`` reports it with the line)."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        return "must be a list of registered workspace names (ctxos workspace list)"
    return None


def federated_engines(engine: Any) -> Iterable[tuple[str, Any]]:
    """``(name, engine)`` of the federated workspaces that are loaded (a loading one joins once loaded)."""
    for name, other in list(getattr(engine, "federated", None) or ()):
        if other is not engine and getattr(other, "_loaded", False) and getattr(other, "index", None) is not None:
            yield name, other


def join_federated(engine: Any, candidates: dict[str, Any], gather: Callable[[Any], Mapping[str, Any]]) -> None:
    """Add each federated engine's candidates (``gather(other_engine)``) to ``candidates``, marked.

    A failure in one federated workspace is logged and skipped: the local
    answer never fails because of another workspace.
    """
    for name, other in federated_engines(engine):
        try:
            found = gather(other)
        except Exception:  # noqa: BLE001 - another workspace's fault stays there
            log.exception("federated workspace %s: gathering candidates failed; skipped", name)
            continue
        for memory_id, cand in found.items():
            if memory_id in candidates:
                continue
            cand.workspace = name
            candidates[memory_id] = cand
