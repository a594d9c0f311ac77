"""basic-memory (PyPI ``basic-memory``), installed into its own venv and driven in-process.

How it is run, and why:
- Installed by the benchmark into ``benchmarks/.cache/venvs/basic-memory`` (it needs
  Python >= 3.12 and brings its own stack); nothing of it enters the project venv.
- All its state stays inside the run's scratch folder: ``BASIC_MEMORY_CONFIG_DIR``
  (config.json, memory.db, log), ``BASIC_MEMORY_HOME`` and ``HOME`` point there; auto
  update and promos are off. It indexes its own copy of the corpus because its sync
  writes into the notes (``ensure_frontmatter_on_sync`` adds frontmatter by default).
- The project is registered with its own CLI (``bm project add NAME DIR --no-wait``),
  which is set-up, not timed. The build is then timed inside a long-lived worker
  process running what ``bm project add`` / ``bm project index`` run
  (``_reindex(search=True, embeddings=True, full=False)`` and the draining of the
  background tasks the CLI waits for), so CLI start-up (several seconds) is not
  charged to its indexing or its queries.
- Incremental update goes through its file watcher's own entry point
  (``WatchService.handle_changes`` with the changed paths), the path its MCP server
  takes on a file event.
- Queries go through its MCP tool ``search_notes`` (what an agent calls), JSON output,
  default search type. Semantic search is unavailable here: this Python build cannot
  load SQLite extensions (sqlite-vec), and its embedding model would have to be
  downloaded at run time. basic-memory detects that itself and falls back to
  keyword-only (SQLite FTS5) search, which is what is measured; the worker records the
  mode it ran in.

Run as a script, this module is the worker (inside basic-memory's venv).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BASIC_MEMORY_REQUIREMENT = "basic-memory==0.24.1"
PROJECT = "bench"

if __package__:
    from .client import Peer, PeerUnavailable
    from .venvs import ensure_venv

    class BasicMemoryPeer(Peer):
        name = "basic-memory"
        label = "basic-memory"

        def __init__(self) -> None:
            super().__init__()
            self.python: Path | None = None
            self.version = BASIC_MEMORY_REQUIREMENT.split("==")[1]

        def prepare(self) -> None:
            self.python = ensure_venv("basic-memory", [BASIC_MEMORY_REQUIREMENT], minimum_python=(3, 12))

        def worker_env(self) -> dict[str, str]:
            assert self.work is not None
            env = dict(os.environ)
            for key in list(env):
                if key.startswith("BASIC_MEMORY_") or key in ("VIRTUAL_ENV", "PYTHONPATH"):
                    env.pop(key)
            env.update(
                {
                    "BASIC_MEMORY_CONFIG_DIR": str(self.work / "bm-config"),
                    "BASIC_MEMORY_HOME": str(self.work / "bm-home"),
                    "HOME": str(self.work / "home"),
                    "BASIC_MEMORY_AUTO_UPDATE": "false",
                    "BASIC_MEMORY_CLOUD_PROMO_OPT_OUT": "true",
                    "BASIC_MEMORY_NO_PROMOS": "1",
                    "LOGFIRE_IGNORE_NO_CONFIG": "1",
                    "HF_HUB_OFFLINE": "1",
                    "COLUMNS": "120",
                }
            )
            return env

        def start(self, corpus: Path, work: Path) -> None:
            self.corpus, self.work = Path(corpus), Path(work)
            self.work.mkdir(parents=True, exist_ok=True)
            for sub in ("bm-config", "bm-home", "home"):
                (self.work / sub).mkdir(exist_ok=True)
            assert self.python is not None
            cli = Path(self.python).parent / "basic-memory"
            out = subprocess.run(
                [str(cli), "project", "add", PROJECT, str(self.corpus), "--no-wait"],
                env=self.worker_env(),
                cwd=self.work,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if out.returncode != 0:
                raise PeerUnavailable(f"basic-memory project add failed: {(out.stdout + out.stderr)[-800:]}")
            super().start(corpus, work)

        def worker_argv(self) -> list[str]:
            assert self.python is not None
            return [str(self.python), str(Path(__file__).resolve())]

        def index_paths(self) -> list[Path]:
            assert self.work is not None
            config = self.work / "bm-config"
            return [config / name for name in ("memory.db", "memory.db-wal", "memory.db-shm")]


class _Worker:
    """One asyncio loop for the worker's life; each op runs a coroutine on it."""

    def __init__(self) -> None:
        import asyncio

        self.loop = asyncio.new_event_loop()
        self.root: Path | None = None
        self.watch = None
        self.project = None
        self.mode = "unknown"

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def build(self, params: dict[str, Any]) -> dict[str, Any]:
        self.root = Path(params["root"])
        return self.run(self._build())

    async def _build(self) -> dict[str, Any]:
        from basic_memory.cli.commands.db import _reindex
        from basic_memory.config import ConfigManager
        from basic_memory.index.local_schedulers import drain_background_tasks
        from basic_memory.index.note_content_materialization import drain_pending_materializations

        config = ConfigManager().config
        await _reindex(config, search=True, embeddings=True, full=False, project=PROJECT)
        await drain_pending_materializations()
        await drain_background_tasks()
        await self._open_watch(config)
        docs = await self._count_entities()
        return {"docs": docs, "search_mode": self.mode}

    async def _open_watch(self, config) -> None:
        from basic_memory import db
        from basic_memory.index.watch_service import WatchService
        from basic_memory.repository import ProjectRepository
        from basic_memory.repository.search_repository import create_search_repository

        _engine, session_maker = await db.get_or_create_db(
            db_path=config.database_path, db_type=db.DatabaseType.FILESYSTEM
        )
        repo = ProjectRepository()
        async with db.scoped_session(session_maker) as session:
            projects = await repo.get_active_projects(session)
        self.project = next(p for p in projects if p.name == PROJECT)
        self.watch = WatchService(app_config=config, project_repository=repo, session_maker=session_maker, quiet=True)
        search_repo = create_search_repository(session_maker, project_id=self.project.id, app_config=config)
        await search_repo.init_search_index()
        enabled = await search_repo.semantic_effectively_enabled()
        self.mode = "hybrid (semantic + FTS5)" if enabled else "keyword-only (SQLite FTS5)"
        self.session_maker = session_maker

    async def _count_entities(self) -> int:
        from basic_memory import db
        from sqlalchemy import text

        async with db.scoped_session(self.session_maker) as session:
            row = await session.execute(
                text("SELECT count(*) FROM entity WHERE project_id = :p"), {"p": self.project.id}
            )
            return int(row.scalar_one())

    def update(self, params: dict[str, Any]) -> dict[str, Any]:
        from watchfiles import Change

        assert self.root is not None and self.watch is not None
        changes = set()
        for rel in params["paths"]:
            path = self.root / rel
            changes.add((Change.modified if path.exists() else Change.deleted, str(path)))
        self.run(self.watch.handle_changes(self.project, changes))
        return {"updated": len(changes), "errors": self.watch.state.error_count}

    def queries(self, params: dict[str, Any]) -> dict[str, Any]:
        import time

        from basic_memory.mcp.tools import search_notes

        k = int(params["k"])
        hits: list[list[str]] = []
        latencies: list[float] = []
        errors = 0
        for text in params["queries"]:
            start = time.perf_counter()
            result = self.run(search_notes(query=text, project=PROJECT, output_format="json", page_size=k))
            latencies.append(time.perf_counter() - start)
            found: list[str] = []
            if isinstance(result, dict):
                for item in result.get("results", []):
                    path = item.get("file_path")
                    if path and path not in found:
                        found.append(path)
            else:  # a string is its error message (e.g. a query FTS5 cannot parse)
                errors += 1
            hits.append(found[:k])
        return {"hits": hits, "latencies_s": latencies, "errors": errors}

    def stats(self, params: dict[str, Any]) -> dict[str, Any]:
        import importlib.metadata

        return {"version": importlib.metadata.version("basic-memory"), "search_mode": self.mode}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from worker_loop import serve

    worker = _Worker()
    serve({"build": worker.build, "update": worker.update, "queries": worker.queries, "stats": worker.stats})


if __name__ == "__main__":
    main()
