"""Run a REAL ``ctxos`` daemon process in tests (shared by the daemon, MCP, web, governance and tray tests).

The daemon is started exactly as ``ctxos start`` does (``python -m
ctxos.daemon.main``), on a temporary workspace, with its own
``CTXOS_RUNTIME_DIR`` (a short temp path: socket paths are limited to
104/108 bytes), HTTP off or on a free port, and no tray unless asked. The
helper waits until the daemon answers on its socket (and, by default, until
the workspace is loaded), and the fixture stops it after the test: SIGTERM,
then SIGKILL if it does not exit within a few seconds.

Use it from a test module (``tests/`` is on ``sys.path`` under pytest)::

    from daemon_helpers import daemon_factory, memory_text  # noqa: F401  (daemon_factory is a fixture)

    def test_something(make_workspace, daemon_factory):
        root = make_workspace({"04-skills/deploy.md": memory_text("deploy", "How we deploy")})
        daemon = daemon_factory(root)                   # --no-http --no-tray
        daemon.call("get_context", query="deploy")      # JSON-RPC over the real socket
        (root / "03-projects/new.md").write_text(memory_text("new", "fresh"))
        daemon.wait_for(lambda: daemon.has_memory("new"))

        web = daemon_factory(other_root, http=True)     # HTTP on a free 127.0.0.1 port
        web.http_url                                     # e.g. "http://127.0.0.1:41234"
        auth_headers()                                   # {"Authorization": "Bearer <the stored token>"}

Or without pytest fixtures: ``with running_daemon(root) as daemon: ...``.

HTTP needs a credential by default: ``auth_headers()`` reads the per-user
token the daemon made (tests/conftest.py gives each test its own
``XDG_STATE_HOME``); ``web_helpers.http`` and ``mcp_helpers.mcp_http_client``
send it on their own, so a test only handles the token when it tests auth.

``daemon.output()`` returns the daemon's stdout+stderr so far (include it in
assertion messages); ``daemon.log_file`` is its rotating log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ctxos.client import DaemonClient, DaemonError, RpcCallError
from ctxos.services import runtime_paths

STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (never hard-code 3847 in tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def auth_headers() -> dict[str, str]:
    """``Authorization: Bearer`` with the stored per-user token, or {} when there is none (yet)."""
    from ctxos.services.credentials import read_token

    token = read_token()
    return {"Authorization": f"Bearer {token}"} if token else {}


SCRATCH_ENV = "CTXOS_TEST_SCRATCH"


def scratch_dir() -> Path:
    """The test run's scratch folder (tests/conftest.py makes it in /tmp and removes it at the end)."""
    return Path(os.environ.get(SCRATCH_ENV) or "/tmp")


def short_runtime_dir() -> Path:
    """A fresh private runtime dir with a short path (socket path limit), inside the run's scratch folder."""
    return Path(tempfile.mkdtemp(prefix="ctxrt-", dir=scratch_dir()))


def memory_text(
    memory_id: str,
    body: str,
    *,
    type: str | None = None,
    l0: str | None = None,
    tags: list[str] | None = None,
    **fields: Any,
) -> str:
    """The text of a memory file with frontmatter (values are JSON, which YAML reads as-is)."""
    front: dict[str, Any] = {"id": memory_id}
    if type:
        front["type"] = type
    front["l0"] = l0 or body.strip().splitlines()[0][:120]
    if tags:
        front["tags"] = tags
    front.update(fields)
    lines = ["---", *(f"{key}: {json.dumps(value)}" for key, value in front.items()), "---", body.rstrip(), ""]
    return "\n".join(lines)


def make_special_files(folder: Path) -> dict[str, str]:
    """Symlink loops, a self-link, a FIFO and a Unix socket named ``*.md`` in ``folder``, made for real.

    Returns {file name: a word the doctor reason must contain}; the odd-file and bad-input tests share it.
    """
    (folder / "loop-a.md").symlink_to(folder / "loop-b.md")
    (folder / "loop-b.md").symlink_to(folder / "loop-a.md")
    (folder / "self.md").symlink_to(folder / "self.md")
    os.mkfifo(folder / "pipe.md")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(folder / "sock.md"))
    sock.close()
    return {"loop-a.md": "loop", "loop-b.md": "loop", "self.md": "loop", "pipe.md": "pipe", "sock.md": "socket"}


class DaemonProcess:
    """A daemon subprocess plus a socket client to it."""

    def __init__(
        self, root: Path, runtime_dir: Path, proc: subprocess.Popen[bytes], output_path: Path, http_port: int | None
    ) -> None:
        self.root = root
        self.runtime_dir = runtime_dir
        self.proc = proc
        self.output_path = output_path
        self.http_port = http_port
        self.socket_path = runtime_paths.socket_path(root, runtime_dir)
        self.log_file = root / ".ctxos" / "logs" / "daemon.log"
        self._client: DaemonClient | None = None

    # ---------------------------------------------------------------- talking to it

    @property
    def pid(self) -> int:
        return self.proc.pid

    def client(self, timeout: float = 30.0) -> DaemonClient:
        """A new client of this daemon's socket (one per thread)."""
        return DaemonClient(self.socket_path, timeout=timeout)

    def call(self, method: str, **params: Any) -> Any:
        """One JSON-RPC call on a shared connection; raises ``RpcCallError`` on an error reply."""
        if self._client is None:
            self._client = self.client()
        return self._client.call(method, params)

    def status(self) -> dict[str, Any]:
        return self.call("status")

    @property
    def http_url(self) -> str | None:
        """``http://127.0.0.1:PORT`` once the HTTP component listens (from ``status``)."""
        return self.status().get("http")

    def memory_ids(self) -> set[str]:
        return {m["id"] for m in self.call("list")["memories"]}

    def has_memory(self, memory_id: str) -> bool:
        try:
            self.call("get_memory", id=memory_id)
            return True
        except RpcCallError:
            return False

    def context_ids(self, query: str, budget_tokens: int = 4000) -> set[str]:
        """Ids ``get_context`` selects or lists in its catalog for ``query``."""
        result = self.call("get_context", query=query, budget_tokens=budget_tokens)
        return {s["id"] for s in result["selected"]} | set(result["catalog_ids"])

    # ---------------------------------------------------------------- waiting

    def wait_for(
        self, predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.02, message: str = "condition"
    ) -> Any:
        """Poll ``predicate`` until it returns something truthy; fail with the daemon's output otherwise."""
        deadline = time.monotonic() + timeout
        last_exc: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"daemon exited with {self.proc.returncode} while waiting for {message}\n{self.output()}"
                )
            try:
                value = predicate()
                if value:
                    return value
            except (DaemonError, OSError) as exc:
                last_exc = exc
            time.sleep(interval)
        raise AssertionError(
            f"timed out after {timeout} s waiting for {message} (last error: {last_exc})\n{self.output()[-4000:]}"
        )

    def wait_settled(self, timeout: float = 15.0) -> dict[str, Any]:
        """Wait until the workspace is loaded and no file event is pending or being applied.

        Checks twice, a debounce period apart, because an inotify event for a
        write made just before the call may not have reached the daemon yet.
        """

        def settled() -> dict[str, Any] | None:
            status = self.status()
            if status.get("state") != "ready" or status.get("pending_events", 1):
                return None
            return status

        self.wait_for(settled, timeout, message="settled index")
        time.sleep(0.3)
        return self.wait_for(settled, timeout, message="settled index")

    # ---------------------------------------------------------------- stopping

    def output(self) -> str:
        try:
            return self.output_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        self.close_client()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def kill(self) -> int:
        """SIGKILL (no clean-up at all), as a crash or the OOM killer would."""
        self.close_client()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)
        return self.proc.returncode


def start_daemon(
    root: Path,
    *,
    runtime_dir: Path | None = None,
    http: bool = False,
    http_port: int | None = None,
    tray: bool = False,
    debounce_ms: int | None = None,
    extra_args: list[str] | tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    wait_ready: bool = True,
    timeout: float = STARTUP_TIMEOUT_S,
    output_path: Path | None = None,
) -> DaemonProcess:
    """Start ``python -m ctxos.daemon.main`` on ``root`` and wait until it answers (and is loaded).

    ``runtime_dir`` defaults to ``$CTXOS_RUNTIME_DIR`` (tests/conftest.py sets a
    temp one per test) or a new short temp dir. With ``http=True`` the daemon
    serves HTTP on ``http_port`` or on a free port.
    """
    root = Path(root).resolve()
    if runtime_dir is None:
        runtime_dir = (
            Path(os.environ["CTXOS_RUNTIME_DIR"]) if os.environ.get("CTXOS_RUNTIME_DIR") else short_runtime_dir()
        )
    command = [sys.executable, "-m", "ctxos.daemon.main", "--workspace", str(root)]
    port: int | None = None
    if http:
        port = http_port if http_port is not None else free_port()
        command += ["--http-port", str(port)]
    else:
        command.append("--no-http")
    command.append("--tray" if tray else "--no-tray")
    if debounce_ms is not None:
        command += ["--debounce-ms", str(debounce_ms)]
    command += list(extra_args)
    full_env = {**os.environ, "CTXOS_RUNTIME_DIR": str(runtime_dir), "PYTHONUNBUFFERED": "1", **(env or {})}
    if output_path is None:
        fd, name = tempfile.mkstemp(prefix="daemon-", suffix=".out", dir=scratch_dir())
        os.close(fd)
        output_path = Path(name)
    with open(output_path, "wb") as out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=full_env)
    daemon = DaemonProcess(root, runtime_dir, proc, output_path, port)

    def answering() -> bool:
        status = daemon.status()
        return status.get("state") == "ready" if wait_ready else True

    try:
        daemon.wait_for(answering, timeout, message="the daemon to answer")
    except BaseException:
        daemon.stop()
        raise
    return daemon


@contextlib.contextmanager
def running_daemon(root: Path, **kwargs: Any) -> Iterator[DaemonProcess]:
    """``with running_daemon(root) as daemon:`` starts a daemon and always stops it."""
    daemon = start_daemon(root, **kwargs)
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
def daemon_factory() -> Iterator[Callable[..., DaemonProcess]]:
    """Fixture: ``daemon_factory(root, **start_daemon_kwargs) -> DaemonProcess``; all are stopped after the test."""
    started: list[DaemonProcess] = []

    def factory(root: Path, **kwargs: Any) -> DaemonProcess:
        daemon = start_daemon(root, **kwargs)
        started.append(daemon)
        return daemon

    yield factory
    for daemon in started:
        daemon.stop()


def lexical_workspace(root: Path) -> Path:
    """An empty workspace at ``root`` whose config turns embeddings off (engine tests that need no model run faster)."""
    from ctxos.services.workspace import init_workspace

    init_workspace(root, seed_examples=False)
    (root / "_config.yaml").write_text("semantic:\n  model: lexical\n", encoding="utf-8")
    return root
