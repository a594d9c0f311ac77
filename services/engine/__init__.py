"""``Engine``: everything the engine knows about one workspace, behind one facade.

The daemon, the in-process CLI backend, the MCP server and the benchmarks all
hold an ``Engine``. It owns the configuration, the in-memory store, the Whoosh
index, the access log, the token counter and the (lazily rebuilt) link graph,
and keeps them consistent with the files. It is one class built from parts,
one module each:

- ``state.py``: ``EngineState``, the attributes every part reads, and small helpers;
- ``lifecycle.py``: ``load`` (warm start from the parse cache, or a chunked cold
  build), ``reload_config``, ``rebuild_index``, ``close``;
- ``changes.py``: ``apply_changes`` (paths a watcher reports) and ``reconcile``
  (the whole tree, one stat per file);
- ``derived.py``: what queries derive from the store per generation (link graph,
  communities, pinned / important / recent ids, token counts);
- ``facade.py``: ``Engine`` itself: queries, lookups, served versions, writes, status;
- ``summary.py``: ``ChangeSummary``, what a load or change batch did.

No threads here (see docs/ARCHITECTURE.md): the daemon serialises mutating calls;
queries may run beside one writer. The store replaces dict entries whole, the
index readers see the last commit, and derived caches (graph, pinned ids) are
rebuilt from a snapshot when the store's generation moves on.
"""

from __future__ import annotations

from .facade import AMBIGUOUS_VERSION, Engine
from .summary import ChangeSummary

__all__ = ["AMBIGUOUS_VERSION", "ChangeSummary", "Engine"]
