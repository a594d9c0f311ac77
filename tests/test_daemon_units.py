"""Daemon building blocks without a daemon process: paths, lock, event filter, JSON-RPC handling."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ctxos.daemon.context import DaemonContext
from ctxos.daemon.rpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RpcError,
    RpcRegistry,
    check_known,
    encode_reply,
    handle_payload,
    param,
)
from ctxos.daemon.watcher import WatchFilter, is_editor_temp
from ctxos.services import runtime_paths
from ctxos.services.daemon_lock import DaemonAlreadyRunning, WorkspaceLock, is_locked, read_lock_pid

# ---------------------------------------------------------------- runtime paths


def test_socket_path_is_short_and_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = Path(os.environ["CTXOS_RUNTIME_DIR"]) / "sub"
    monkeypatch.setenv("CTXOS_RUNTIME_DIR", str(runtime))
    deep = tmp_path / ("x" * 150) / ("y" * 80)
    path = runtime_paths.socket_path(deep)
    assert path.parent == runtime
    assert len(os.fsencode(str(path))) <= runtime_paths.SOCKET_PATH_MAX
    assert path == runtime_paths.socket_path(deep)  # stable
    assert path != runtime_paths.socket_path(tmp_path)
    runtime_paths.ensure_private_dir(runtime)
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o700
    os.chmod(runtime, 0o755)
    runtime_paths.ensure_private_dir(runtime)  # loosened permissions are tightened
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o700


def test_socket_path_falls_back_when_runtime_dir_is_too_long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXOS_RUNTIME_DIR", str(tmp_path / ("r" * 120)))
    path = runtime_paths.socket_path(tmp_path)
    assert str(path).startswith(f"/tmp/ctxos-{os.getuid()}/")
    assert len(os.fsencode(str(path))) <= runtime_paths.SOCKET_PATH_MAX


def test_runtime_dir_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CTXOS_RUNTIME_DIR", str(tmp_path / "explicit"))
    assert runtime_paths.runtime_dir() == tmp_path / "explicit"
    monkeypatch.delenv("CTXOS_RUNTIME_DIR")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert runtime_paths.runtime_dir() == tmp_path / "ctxos"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert runtime_paths.runtime_dir().name == f"ctxos-{os.getuid()}"


# ---------------------------------------------------------------- lock


def test_lock_is_exclusive_and_names_the_holder(tmp_path: Path) -> None:
    first = WorkspaceLock(tmp_path)
    first.acquire()
    assert is_locked(tmp_path)
    assert read_lock_pid(tmp_path) == os.getpid()
    with pytest.raises(DaemonAlreadyRunning, match=f"pid {os.getpid()}"):
        WorkspaceLock(tmp_path).acquire()
    first.release()
    assert not is_locked(tmp_path)
    with WorkspaceLock(tmp_path):
        assert is_locked(tmp_path)


def test_lock_of_a_killed_process_is_recovered(tmp_path: Path) -> None:
    """SIGKILL leaves the lock file (and a pid) behind, but the kernel dropped the flock."""
    code = (
        "import sys, time; from ctxos.services.daemon_lock import WorkspaceLock; "
        f"WorkspaceLock({str(tmp_path)!r}).acquire(); print('locked', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"locked"
        assert is_locked(tmp_path)
        with pytest.raises(DaemonAlreadyRunning):
            WorkspaceLock(tmp_path).acquire()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(5)
    assert read_lock_pid(tmp_path) == child.pid  # stale content ...
    assert not is_locked(tmp_path)  # ... but no holder
    with WorkspaceLock(tmp_path):
        assert read_lock_pid(tmp_path) == os.getpid()


# ---------------------------------------------------------------- watch filter


@pytest.mark.parametrize(
    "name",
    [
        "4913",
        "x.md~",
        ".x.md.swp",
        ".x.md.swx",
        "x.md.tmp",
        "#x.md#",
        ".#x.md",
        "x.md___jb_tmp___",
        "x.md___jb_old___",
        ".x.md.a1b2c3.tmp",
    ],
)
def test_editor_temp_files_are_ignored(name: str, tmp_path: Path) -> None:
    assert is_editor_temp(name)
    assert WatchFilter(tmp_path).relevant(str(tmp_path / "03-projects" / name), False) is None


def test_watch_filter_keeps_memories_folders_and_config(tmp_path: Path) -> None:
    f = WatchFilter(tmp_path)
    assert f.relevant(str(tmp_path / "03-projects" / "a.md"), False) == "03-projects/a.md"
    assert f.relevant(str(tmp_path / "03-projects" / "sub"), True) == "03-projects/sub"
    assert f.relevant(str(tmp_path / "_config.yaml"), False) == "_config.yaml"
    for ignored in (
        ".ctxos/index/x.md",
        ".git/objects/ab",
        ".git/HEAD",
        "claude.md",
        "AGENTS.md",
        "03-projects/image.png",
        "inbox/draft.md",
    ):
        assert f.relevant(str(tmp_path / ignored), False) is None, ignored
    for ignored_dir in (".ctxos", ".ctxos/index", ".git", ".git/refs"):
        assert f.relevant(str(tmp_path / ignored_dir), True) is None, ignored_dir
    assert f.relevant("/elsewhere/x.md", False) is None


# ---------------------------------------------------------------- JSON-RPC


class _NoEngine:
    """The RPC layer under test never touches the engine; a context needs something in that slot."""

    config = None


def _ctx() -> DaemonContext:
    ctx = DaemonContext(Path("/nonexistent"), _NoEngine())
    ctx.rpc.register("echo", lambda c, p: {"got": p})
    ctx.rpc.register("add", lambda c, p: param(p, "a", int) + param(p, "b", int, 0))
    ctx.rpc.register("boom", lambda c, p: 1 / 0)
    ctx.rpc.register("strict", lambda c, p: check_known(p, {"x"}) or "ok")
    ctx.rpc.register("weird", lambda c, p: {"value": object()})
    ctx.mark_ready()
    return ctx


def _run(ctx: DaemonContext, payload: bytes | str):
    return asyncio.run(handle_payload(ctx, ctx.rpc, payload))


def test_jsonrpc_errors_are_replies_not_crashes() -> None:
    ctx = _ctx()
    try:
        assert _run(ctx, b"{not json")["error"]["code"] == PARSE_ERROR
        assert _run(ctx, b"\xff\xfe")["error"]["code"] == PARSE_ERROR
        assert _run(ctx, "[]")["error"]["code"] == INVALID_REQUEST
        assert _run(ctx, "42")["error"]["code"] == INVALID_REQUEST
        assert _run(ctx, '{"id": 1, "method": "echo"}')["error"]["code"] == INVALID_REQUEST  # no jsonrpc
        assert _run(ctx, '{"jsonrpc": "2.0", "id": 1}')["error"]["code"] == INVALID_REQUEST
        assert _run(ctx, '{"jsonrpc": "2.0", "id": {}, "method": "echo"}')["error"]["code"] == INVALID_REQUEST
        reply = _run(ctx, '{"jsonrpc": "2.0", "id": 7, "method": "nope"}')
        assert reply["id"] == 7 and reply["error"]["code"] == METHOD_NOT_FOUND
        assert "echo" in reply["error"]["data"]["available"]
        assert (
            _run(ctx, '{"jsonrpc": "2.0", "id": 1, "method": "add", "params": [1, 2]}')["error"]["code"]
            == INVALID_PARAMS
        )
        assert (
            _run(ctx, '{"jsonrpc": "2.0", "id": 1, "method": "add", "params": {"a": "1"}}')["error"]["code"]
            == INVALID_PARAMS
        )
        assert (
            _run(ctx, '{"jsonrpc": "2.0", "id": 1, "method": "add", "params": {"a": true}}')["error"]["code"]
            == INVALID_PARAMS
        )
        assert (
            _run(ctx, '{"jsonrpc": "2.0", "id": 1, "method": "add", "params": {}}')["error"]["message"]
            == "missing required parameter 'a'"
        )
        strict = _run(ctx, '{"jsonrpc": "2.0", "id": 1, "method": "strict", "params": {"y": 1}}')
        assert strict["error"]["code"] == INVALID_PARAMS and strict["error"]["data"] == {"allowed": ["x"]}
        boom = _run(ctx, '{"jsonrpc": "2.0", "id": "b", "method": "boom"}')
        assert boom["id"] == "b" and "ZeroDivisionError" in boom["error"]["message"]
        weird = json.loads(encode_reply(_run(ctx, '{"jsonrpc": "2.0", "id": 9, "method": "weird"}')))
        assert weird["id"] == 9 and weird["error"]["code"] == INTERNAL_ERROR
        batch = json.loads(
            encode_reply(
                _run(
                    ctx,
                    '[{"jsonrpc": "2.0", "id": 1, "method": "weird"},'
                    '{"jsonrpc": "2.0", "id": 2, "method": "add", "params": {"a": 1}}]',
                )
            )
        )
        assert batch[0]["error"]["code"] == INTERNAL_ERROR and batch[1]["result"] == 1
    finally:
        ctx.shutdown_executors()


def test_jsonrpc_results_notifications_and_batches() -> None:
    ctx = _ctx()
    try:
        assert _run(ctx, '{"jsonrpc": "2.0", "id": 1, "method": "add", "params": {"a": 2, "b": 3}}') == {
            "jsonrpc": "2.0",
            "id": 1,
            "result": 5,
        }
        assert _run(ctx, '{"jsonrpc": "2.0", "method": "add", "params": {"a": 2}}') is None  # notification
        batch = _run(
            ctx,
            json.dumps(
                [
                    {"jsonrpc": "2.0", "id": 1, "method": "add", "params": {"a": 1}},
                    {"jsonrpc": "2.0", "method": "echo"},
                    {"jsonrpc": "2.0", "id": 2, "method": "nope"},
                    5,
                ]
            ),
        )
        assert [r.get("id") for r in batch] == [1, 2, None]
        assert batch[0]["result"] == 1 and batch[1]["error"]["code"] == METHOD_NOT_FOUND
    finally:
        ctx.shutdown_executors()


def test_registry_refuses_duplicates_and_call_sync_takes_write_lock() -> None:
    registry = RpcRegistry()
    registry.register("x", lambda c, p: 1)
    with pytest.raises(ValueError):
        registry.register("x", lambda c, p: 2)
    ctx = DaemonContext(Path("/nonexistent"), _NoEngine(), rpc=registry)
    try:
        seen = []
        registry.register("w", lambda c, p: seen.append(c.writes_in_flight) or "done", write=True)
        assert registry.call_sync(ctx, "w", {}) == "done" and seen == [1]
        with pytest.raises(RpcError):
            registry.call_sync(ctx, "missing", {})
    finally:
        ctx.shutdown_executors()


def test_the_heap_is_trimmed_once_queries_stop_not_while_they_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16: after a burst of reads the daemon gives freed heap back, at most once per interval.

    The real ``malloc_trim`` runs; it is only wrapped to count the calls (its effect on RSS
    is measured by benchmarks/bench_daemon.py, too noisy for a unit test).
    """
    from ctxos.daemon import context as context_module
    from ctxos.daemon import malloc_tune

    calls: list[int] = []
    real_trim = malloc_tune.trim

    def counted_trim() -> None:
        calls.append(ctx._reads_in_flight)
        real_trim()

    monkeypatch.setattr(malloc_tune, "trim", counted_trim)
    monkeypatch.setattr(context_module, "READ_TRIM_INTERVAL_S", 2.0)
    ctx = DaemonContext(Path("/nonexistent"), _NoEngine())

    async def until(count: int, timeout: float = 10.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while len(calls) < count and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    async def burst() -> None:
        await asyncio.gather(*(ctx.run_read(sum, range(1000)) for _ in range(20)))  # the pool stays busy
        await until(1)
        assert len(calls) == 1, "one trim after the burst, none per read"
        await asyncio.gather(*(ctx.run_read(sum, range(1000)) for _ in range(5)))
        await asyncio.sleep(0.1)
        assert len(calls) == 1, "the next idle moment within the interval waits"
        await until(2)
        assert len(calls) == 2, "and trims once the interval has passed"

    try:
        asyncio.run(burst())
    finally:
        ctx.shutdown_executors()
    assert calls == [0, 0]  # never while a read was in flight


_MMAP_PROBE = """
import ctypes, sys
from ctxos.daemon import malloc_tune

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Mallinfo2
libc.malloc.restype = ctypes.c_void_p
if sys.argv[1] == "tuned":
    assert malloc_tune.configure_heap()
libc.free(ctypes.c_void_p(libc.malloc(8 << 20)))  # an 8 MiB block, mapped and freed: glibc's own rule raises its threshold
before = libc.mallinfo2().hblks
block = libc.malloc(600 << 10)  # 600 KiB: its own mapping only while the threshold stays at 128 KiB
print(libc.mallinfo2().hblks - before)
libc.free(ctypes.c_void_p(block))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_the_daemons_heap_keeps_large_blocks_in_their_own_mappings() -> None:
    """Issue 16: after a large block is freed, later large temporaries still get their own mapping.

    Real glibc in fresh processes (the setting is process-wide): without ``configure_heap``
    a 600 KiB block comes from the heap once an 8 MiB one was freed, with it from a mapping
    that ``free`` returns at once.
    """
    run = [sys.executable, "-c", _MMAP_PROBE]
    env = {**os.environ, "CTXOS_MALLOC_TUNING": "1"}
    plain = subprocess.run([*run, "plain"], capture_output=True, text=True, env=env, timeout=60)
    tuned = subprocess.run([*run, "tuned"], capture_output=True, text=True, env=env, timeout=60)
    assert plain.returncode == 0 and tuned.returncode == 0, plain.stderr + tuned.stderr
    assert (plain.stdout.strip(), tuned.stdout.strip()) == ("0", "1")


def test_interpreter_tuning_sets_switching_and_the_collector_unless_turned_off() -> None:
    """Run in a fresh interpreter each time: these settings are process-wide."""
    probe = (
        "import gc, sys; from ctxos.daemon import interpreter_tune as t; "
        "t.configure_switching(); t.settle_loaded_heap(); "
        "print(gc.get_threshold()[0], gc.get_freeze_count() > 0, sys.getswitchinterval())"
    )

    def run(**env: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run() == "10000 True 0.01"
    assert run(CTXOS_INTERPRETER_TUNING="0") == "700 True 0.005"  # CPython's own settings; the freeze stays


def test_the_query_helper_runs_a_job_on_its_thread_unless_busy_or_closed() -> None:
    """daemon/query_helper.py: the job's result (or error) comes back either way; inline when busy or closed."""
    import threading

    from ctxos.daemon.query_helper import QueryHelper

    busy = False
    helper = QueryHelper(busy=lambda: busy)
    where: list[str] = []

    def job() -> int:
        where.append(threading.current_thread().name)
        return 42

    assert helper(job)() == 42 and where[-1].startswith("ctxos-query-helper")
    busy = True
    assert helper(job)() == 42 and where[-1] == threading.current_thread().name  # run when asked, here
    busy = False

    def failing() -> int:
        raise ValueError("no rows")

    with pytest.raises(ValueError, match="no rows"):
        helper(failing)()
    assert helper.status() == {"jobs_started": 2}
    helper.close()
    assert helper(job)() == 42 and where[-1] == threading.current_thread().name
