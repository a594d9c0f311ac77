"""The parent side of the peer protocol: start a worker process and talk to it.

``Peer`` is what ``bench_peers.py`` drives: one instance per system, started on
one corpus copy, asked to build, update and answer queries. Subclasses only say
how to start their worker (which Python, which script, which environment) and
where their index lives on disk; the operations are the same for every system.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections import deque
from pathlib import Path
from typing import Any

PEERS_DIR = Path(__file__).resolve().parent


class PeerUnavailable(RuntimeError):
    """The system cannot run here (e.g. its install failed); the reason is shown in the table."""


class WorkerError(RuntimeError):
    """The worker answered a request with an error (its traceback is in the message)."""


class WorkerProcess:
    """One worker subprocess speaking newline-delimited JSON (see ``worker_loop``)."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        timeout_s: float | None = None,
    ) -> None:
        # One call (a 50,000-file build by a slow peer) may take long; CTXOS_BENCH_TIMEOUT_S caps it.
        self.timeout_s = timeout_s or float(os.environ.get("CTXOS_BENCH_TIMEOUT_S", "14400"))
        self._stderr_tail: deque[str] = deque(maxlen=60)
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=str(cwd) if cwd else None,
            text=True,
            bufsize=1,
        )
        # Drain stderr in a thread so a chatty library cannot fill the pipe and block the worker.
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        self.ready = self._read_reply()
        self.pid = self.proc.pid

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr_tail.append(line.rstrip("\n"))

    def stderr_tail(self, lines: int = 20) -> str:
        return "\n".join(list(self._stderr_tail)[-lines:])

    def _read_reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        result: dict[str, Any] = {}

        def read() -> None:
            line = self.proc.stdout.readline() if self.proc.stdout else ""
            result["line"] = line

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(self.timeout_s)
        line = result.get("line")
        if reader.is_alive():
            self.kill()
            raise WorkerError(f"worker timed out after {self.timeout_s:.0f} s\n{self.stderr_tail()}")
        if not line:
            self.proc.wait(timeout=10)
            raise WorkerError(f"worker exited (code {self.proc.returncode})\n{self.stderr_tail()}")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise WorkerError(f"{reply.get('error')}\n{reply.get('traceback', '')}")
        return reply

    def call(self, op: str, **params: Any) -> dict[str, Any]:
        """Send one request; return the whole reply (``result``, ``elapsed_s``, RSS figures)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **params}) + "\n")
        self.proc.stdin.flush()
        return self._read_reply()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("exit")
            except (WorkerError, BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def dir_bytes(path: Path) -> int:
    """Bytes on disk of every regular file below ``path`` (apparent size, not blocks)."""
    total = 0
    if path.is_file():
        return path.stat().st_size
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


class Peer:
    """One system under test, driven through its worker process.

    Lifecycle: ``prepare()`` (install, once per run) → ``start(corpus, work)`` →
    ``build()`` → ``update()`` / ``queries()`` → ``index_bytes()`` → ``stop()``.
    ``corpus`` is this system's own copy of the corpus (some systems write into
    their folder); ``work`` is a scratch folder for its index and config.
    """

    name = "peer"
    label = "peer"
    version = ""

    def __init__(self) -> None:
        self.worker: WorkerProcess | None = None
        self.corpus: Path | None = None
        self.work: Path | None = None

    # --- what subclasses provide -------------------------------------------------------
    def prepare(self) -> None:
        """Make the system runnable (e.g. install it); raise ``PeerUnavailable`` if it can't be."""

    def worker_argv(self) -> list[str]:
        raise NotImplementedError

    def worker_env(self) -> dict[str, str]:
        return dict(os.environ)

    def index_paths(self) -> list[Path]:
        """Files/folders holding this system's index (for the size on disk)."""
        raise NotImplementedError

    def build_params(self) -> dict[str, Any]:
        assert self.corpus is not None and self.work is not None
        return {"root": str(self.corpus), "work": str(self.work)}

    # --- the protocol, the same for all ---------------------------------------------------
    def start(self, corpus: Path, work: Path) -> None:
        self.corpus, self.work = Path(corpus), Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.worker = WorkerProcess(self.worker_argv(), env=self.worker_env(), cwd=self.work)

    def call(self, op: str, **params: Any) -> dict[str, Any]:
        """Any operation the worker offers (e.g. ``profile`` for ctxos)."""
        if self.worker is None:
            raise RuntimeError("peer not started")
        return self.worker.call(op, **params)

    def build(self) -> dict[str, Any]:
        """Full index build from the files; returns the reply (``elapsed_s``, ``result.docs``...)."""
        return self.call("build", **self.build_params())

    def update(self, rel_paths: list[str], marker: str | None = None) -> dict[str, Any]:
        """Re-index after these files changed on disk (the system's own incremental path).

        ``marker`` is the new word the edit added; a peer that indexes on its own
        (a daemon watching the folder) waits until a query for it finds the file.
        """
        return self.call("update", paths=rel_paths, marker=marker)

    def queries(self, queries: list[str], k: int, **extra: Any) -> dict[str, Any]:
        """Run each query; ``result`` has ``hits`` (ranked relative paths) and ``latencies_s``."""
        return self.call("queries", queries=queries, k=k, **extra)

    def stats(self) -> dict[str, Any]:
        return self.call("stats")

    def index_bytes(self) -> int:
        return sum(dir_bytes(p) for p in self.index_paths() if p.exists())

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
