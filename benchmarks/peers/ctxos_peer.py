"""AI Context OS itself, through the real ``Engine`` (and, optionally, its daemon socket).

The worker runs in the project's own interpreter and venv (``sys.executable``):
- build: ``Engine(root).load()`` on a workspace with no ``.ctxos/`` yet (full index build);
- update: ``Engine.apply_changes(paths)`` (what the daemon's watcher calls on a file event);
- queries, mode ``context`` (default): ``Engine.execute_context_query(q, budget,
  record_access=False)``, the one query path an agent gets (scoring, tiers and
  rendering included); its hits are the memories delivered at L1/L2 (rules, which are
  always delivered, included), in order;
- queries, mode ``rank``: ``services.query.score_query`` (the same candidates and
  composite score, no rendering) for recall@k, top ``k`` non-pinned memories.
The index size is the whole derived-state folder ``.ctxos/`` (index, access log,
communities): everything the system keeps besides the files.

Run as a script, this module is the worker.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if __package__:
    from .client import Peer

    class CtxosPeer(Peer):
        name = "ctxos"
        label = "AI Context OS"

        def __init__(self) -> None:
            super().__init__()
            try:
                from importlib.metadata import version

                self.version = version("ai-context-os")
            except Exception:  # not installed as a distribution: running from a checkout
                self.version = "checkout"

        def worker_argv(self) -> list[str]:
            return [sys.executable, str(Path(__file__).resolve())]

        def worker_env(self) -> dict[str, str]:
            import os

            env = dict(os.environ)
            env.pop("CTXOS_STATE_DIR", None)
            env.pop("CTXOS_WORKSPACE", None)
            return env

        def index_paths(self) -> list[Path]:
            assert self.corpus is not None
            return [self.corpus / ".ctxos"]


class _Worker:
    def __init__(self) -> None:
        self.engine = None
        self.helper = None  # one QueryHelper for every engine this worker opens

    def _open(self, root: Path) -> Any:
        """Load an engine on ``root`` and give it the helper thread the daemon gives its engine
        (daemon/query_helper.py: a query's embedding product beside its index search); the load's summary."""
        from ctxos.daemon.query_helper import QueryHelper
        from ctxos.services.engine import Engine

        self.engine = Engine(root)
        summary = self.engine.load()
        self.helper = self.helper or QueryHelper()
        self.engine.query_helper = self.helper
        return summary

    def build(self, params: dict[str, Any]) -> dict[str, Any]:
        from ctxos.daemon.interpreter_tune import settle_loaded_heap

        summary = self._open(Path(params["root"]))
        settle_loaded_heap()  # what the daemon does once loaded (daemon/interpreter_tune.py): measured as it serves
        status = self.engine.status()
        return {
            "docs": len(self.engine.list_memories()),
            "invalid": len(self.engine.invalid_files()),
            "changed": len(getattr(summary, "updated", []) or []),
            "status": {k: v for k, v in status.items() if isinstance(v, (int, float, str, bool))},
        }

    def reopen(self, params: dict[str, Any]) -> dict[str, Any]:
        """Close and load again on the existing index: the daemon's restart cost."""
        if self.engine is not None:
            self.engine.close()
        summary = self._open(Path(params["root"]))
        return {"docs": len(self.engine.list_memories()), "changed": len(getattr(summary, "updated", []) or [])}

    def update(self, params: dict[str, Any]) -> dict[str, Any]:
        assert self.engine is not None
        summary = self.engine.apply_changes(params["paths"])
        return {"updated": len(summary.updated), "removed": len(summary.removed)}

    def queries(self, params: dict[str, Any]) -> dict[str, Any]:
        import time

        from ctxos.services.query import score_query

        assert self.engine is not None
        k = int(params["k"])
        mode = params.get("mode", "context")
        budget = params.get("budget")
        hits: list[list[str]] = []
        tokens: list[int] = []
        latencies: list[float] = []
        for text in params["queries"]:
            start = time.perf_counter()
            if mode == "rank":
                scored = score_query(self.engine, text)
                found = [c.memory.rel_path for c in scored.candidates if c.reason not in ("rule", "always_load")][:k]
                used = 0
            else:
                result = self.engine.execute_context_query(text, budget, record_access=False)
                found = [s.path for s in result.selected if s.tier in ("L1", "L2")]
                used = result.tokens_used
            latencies.append(time.perf_counter() - start)
            hits.append(found if mode != "rank" else found[:k])
            tokens.append(used)
        return {"hits": hits, "latencies_s": latencies, "tokens_used": tokens}

    def profile(self, params: dict[str, Any]) -> dict[str, Any]:
        """Run the queries under pyinstrument (if installed) and save its text report."""
        try:
            from pyinstrument import Profiler
        except ImportError:
            return {"error": "pyinstrument is not installed"}
        assert self.engine is not None
        profiler = Profiler(interval=0.0005)
        profiler.start()
        for text in params["queries"]:
            self.engine.execute_context_query(text, params.get("budget"), record_access=False)
        profiler.stop()
        out = Path(params["out"])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".txt").write_text(
            profiler.output_text(unicode=False, color=False, show_all=False), encoding="utf-8"
        )
        return {"text": str(out.with_suffix(".txt")), "queries": len(params["queries"])}

    def stats(self, params: dict[str, Any]) -> dict[str, Any]:
        return {}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from worker_loop import serve

    worker = _Worker()
    serve(
        {
            "build": worker.build,
            "reopen": worker.reopen,
            "update": worker.update,
            "queries": worker.queries,
            "profile": worker.profile,
            "stats": worker.stats,
        }
    )


if __name__ == "__main__":
    main()
