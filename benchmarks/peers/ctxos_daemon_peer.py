"""AI Context OS as an agent meets it: the real daemon, over its Unix socket.

Where this differs from the in-process ``ctxos`` peer, and why it is measured:
- build: time from starting ``python -m ctxos.daemon.main`` (no HTTP, no tray) until
  its ``status`` says ``ready``: interpreter start, imports and the full index build;
  then the worker waits until the daemon has settled (no pending file events, no
  write in flight, no scheduled job running) before anything is measured, and
  reports that wait as ``settle_s``: the daemon runs its jobs (scratch expiry,
  communities) once at start, and on a big workspace they take a while;
- update: the parent edits a file and then asks; this worker polls ``simulate`` for the
  edit's new word until the edited file is served, so the figure is the daemon's
  edit-to-searchable latency (file watcher, its debounce, incremental indexing);
- queries: JSON-RPC ``simulate`` (``get_context`` without recording an access) over
  the socket: the engine's query plus the socket round trip and JSON encoding;
- memory: the daemon process's own peak RSS (watcher, scheduler, RPC included).
The daemon gets its own runtime dir (``CTXOS_RUNTIME_DIR``) in ``/tmp``.

Run as a script, this module is the worker.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

UPDATE_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = float(os.environ.get("CTXOS_BENCH_SETTLE_TIMEOUT_S", "1800"))

if __package__:
    from .client import Peer

    class CtxosDaemonPeer(Peer):
        name = "ctxos-daemon"
        label = "AI Context OS (daemon socket)"

        def __init__(self) -> None:
            super().__init__()
            from .ctxos_peer import CtxosPeer

            self.version = CtxosPeer().version

        def worker_argv(self) -> list[str]:
            return [sys.executable, str(Path(__file__).resolve())]

        def worker_env(self) -> dict[str, str]:
            env = dict(os.environ)
            for key in ("CTXOS_STATE_DIR", "CTXOS_WORKSPACE", "CTXOS_RUNTIME_DIR"):
                env.pop(key, None)
            return env

        def index_paths(self) -> list[Path]:
            assert self.corpus is not None
            return [self.corpus / ".ctxos"]


def _proc_mb(pid: int, field: str) -> float:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def _busy(status: dict[str, Any]) -> str:
    """Why the daemon is not idle yet ('' when it is)."""
    reasons = []
    if status.get("pending_events"):
        reasons.append(f"{status['pending_events']} pending file events")
    if status.get("writes_in_flight"):
        reasons.append(f"{status['writes_in_flight']} writes in flight")
    running = [name for name, job in (status.get("jobs") or {}).items() if isinstance(job, dict) and job.get("running")]
    if running:
        reasons.append("jobs running: " + ", ".join(running))
    return "; ".join(reasons)


class _Worker:
    def __init__(self) -> None:
        self.proc = None
        self.client = None
        self.runtime_dir: Path | None = None

    def build(self, params: dict[str, Any]) -> dict[str, Any]:
        import subprocess
        import tempfile
        import time

        from ctxos.client import DaemonClient, DaemonError
        from ctxos.services import runtime_paths

        root = Path(params["root"]).resolve()
        self.runtime_dir = Path(tempfile.mkdtemp(prefix="ctxbench-", dir="/tmp"))
        log = open(Path(params["work"]) / "daemon.out", "wb")
        env = {**os.environ, "CTXOS_RUNTIME_DIR": str(self.runtime_dir), "PYTHONUNBUFFERED": "1"}
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ctxos.daemon.main", "--workspace", str(root), "--no-http", "--no-tray"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        self.client = DaemonClient(runtime_paths.socket_path(root, self.runtime_dir), timeout=600)
        status: dict[str, Any] = {}
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"daemon exited with {self.proc.returncode}: "
                    f"{(Path(params['work']) / 'daemon.out').read_text()[-2000:]}"
                )
            try:
                status = self.client.call("status", {})
                if status.get("state") == "ready":
                    break
            except (DaemonError, OSError):
                self.client.close()
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        settle_start = time.perf_counter()
        quiet = 0
        while quiet < 2:
            if time.perf_counter() - settle_start > SETTLE_TIMEOUT_S:
                raise TimeoutError(f"daemon not settled after {SETTLE_TIMEOUT_S:.0f} s: {_busy(status)}")
            time.sleep(0.25)
            status = self.client.call("status", {})
            quiet = quiet + 1 if not _busy(status) else 0
        settle = time.perf_counter() - settle_start - 0.5
        archive = root / "_archive"
        archived = sum(1 for _ in archive.rglob("*.md")) if archive.exists() else 0
        return {
            "docs": status.get("memories"),
            "build_s": elapsed,
            "settle_s": round(settle, 3),
            "archived_at_start": archived,
            "proc_rss_mb": _proc_mb(self.proc.pid, "VmRSS"),
            "proc_peak_rss_mb": _proc_mb(self.proc.pid, "VmHWM"),
        }

    def _hits(self, query: str, budget: int | None) -> tuple[list[str], int]:
        params: dict[str, Any] = {"query": query}
        if budget is not None:
            params["budget_tokens"] = int(budget)
        result = self.client.call("simulate", params)
        return ([s["path"] for s in result["selected"] if s["tier"] in ("L1", "L2")], int(result.get("tokens_used", 0)))

    def update(self, params: dict[str, Any]) -> dict[str, Any]:
        import time

        marker = params.get("marker")
        if not marker:
            raise ValueError("the daemon peer measures edit-to-searchable time and needs the edit's marker")
        wanted = set(params["paths"])
        deadline = time.perf_counter() + UPDATE_TIMEOUT_S
        while time.perf_counter() < deadline:
            hits, _ = self._hits(marker, None)
            if wanted & set(hits):
                return {"updated": len(wanted)}
            time.sleep(0.005)
        raise TimeoutError(f"edit not searchable after {UPDATE_TIMEOUT_S:.0f} s")

    def queries(self, params: dict[str, Any]) -> dict[str, Any]:
        import time

        hits, tokens, latencies = [], [], []
        for text in params["queries"]:
            start = time.perf_counter()
            found, used = self._hits(text, params.get("budget"))
            latencies.append(time.perf_counter() - start)
            hits.append(found)
            tokens.append(used)
        return {"hits": hits, "latencies_s": latencies, "tokens_used": tokens}

    def stats(self, params: dict[str, Any]) -> dict[str, Any]:
        pid = self.proc.pid if self.proc else 0
        return {"proc_rss_mb": _proc_mb(pid, "VmRSS"), "proc_peak_rss_mb": _proc_mb(pid, "VmHWM")}

    def shutdown(self) -> None:
        import shutil
        import signal
        import subprocess

        if self.client is not None:
            self.client.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.runtime_dir is not None:
            shutil.rmtree(self.runtime_dir, ignore_errors=True)


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from worker_loop import serve

    worker = _Worker()
    try:
        serve({"build": worker.build, "update": worker.update, "queries": worker.queries, "stats": worker.stats})
    finally:
        worker.shutdown()


if __name__ == "__main__":
    main()
