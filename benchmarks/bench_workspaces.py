"""What a registered workspace costs the per-user daemon: RSS idle (not loaded yet) and loaded.

A real per-user daemon (``python -m ctxos.daemon.main --all --no-tray
--http-port 0``) serves N registered workspaces, each made by ``ctxos init``
with its example memories. Measured from outside (``/proc/<pid>/status``):

* RSS once every workspace answers ``status`` (all idle: lock, socket, an
  MCP app under ``/w/<name>/``, no engine loaded);
* RSS after every workspace was asked one ``get_context`` (all loaded:
  engine, index, watcher, scheduler each);
* for comparison, one single-workspace daemon (``--workspace``), loaded, which
  is what each workspace cost before (one process each).

    python benchmarks/bench_workspaces.py           # N = 1, 10, 30
    python benchmarks/bench_workspaces.py --small   # N = 1, 4; what tests run
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_common_args, current_rss_mb, print_table, write_results  # noqa: E402
from ctxos.client import DaemonClient, DaemonError  # noqa: E402
from ctxos.services.workspace import init_workspace  # noqa: E402

FULL = {"counts": [1, 10, 30], "settle_s": 3.0}
SMALL = {"counts": [1, 4], "settle_s": 1.0}
START_TIMEOUT_S = 120.0


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def _answers(root: Path) -> bool:
    client = DaemonClient.for_workspace(root, timeout=5)
    try:
        client.call("status")
        return True
    except (DaemonError, OSError):
        return False
    finally:
        client.close()


def _query(root: Path) -> None:
    with DaemonClient.for_workspace(root, timeout=120) as client:
        client.call("get_context", {"query": "how do I write a good memory"})


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(count: int, base: Path, env: dict[str, str], settle_s: float) -> dict[str, Any]:
    """RSS of the per-user daemon serving ``count`` registered workspaces, idle and loaded."""
    from ctxos.services.workspace_registry import add_workspace

    home = base / f"n{count}"
    env = {**env, "XDG_CONFIG_HOME": str(home / "config"), "CTXOS_RUNTIME_DIR": tempfile.mkdtemp(prefix="ctxbw-")}
    roots = []
    for i in range(count):
        root = home / f"ws{i:02d}"
        init_workspace(root, seed_examples=True)
        roots.append(root)
    old = {k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "CTXOS_RUNTIME_DIR")}
    os.environ.update({k: env[k] for k in old})
    try:
        for root in roots:
            add_workspace(root)
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxos.daemon.main", "--all", "--no-tray", "--http-port", "0"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            started = time.monotonic()
            _wait(lambda: all(_answers(r) for r in roots), START_TIMEOUT_S, f"{count} workspaces to answer")
            start_s = time.monotonic() - started
            time.sleep(settle_s)
            idle = current_rss_mb(proc.pid)
            loaded_at = time.monotonic()
            for root in roots:
                _query(root)
            load_s = time.monotonic() - loaded_at
            time.sleep(settle_s)
            loaded = current_rss_mb(proc.pid)
        finally:
            _stop(proc)
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(env["CTXOS_RUNTIME_DIR"], ignore_errors=True)
    return {
        "workspaces": count,
        "idle_rss_mb": round(idle, 1),
        "loaded_rss_mb": round(loaded, 1),
        "start_s": round(start_s, 2),
        "load_all_s": round(load_s, 2),
    }


def single_daemon(base: Path, env: dict[str, str], settle_s: float) -> float:
    """RSS of one single-workspace daemon with its workspace loaded (the old cost per workspace)."""
    root = base / "single"
    init_workspace(root, seed_examples=True)
    env = {**env, "CTXOS_RUNTIME_DIR": tempfile.mkdtemp(prefix="ctxbw-")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxos.daemon.main", "--workspace", str(root), "--no-tray", "--http-port", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    old = os.environ.get("CTXOS_RUNTIME_DIR")
    os.environ["CTXOS_RUNTIME_DIR"] = env["CTXOS_RUNTIME_DIR"]
    try:
        _wait(lambda: _answers(root), START_TIMEOUT_S, "the single daemon")
        _query(root)
        time.sleep(settle_s)
        return round(current_rss_mb(proc.pid), 1)
    finally:
        _stop(proc)
        if old is None:
            os.environ.pop("CTXOS_RUNTIME_DIR", None)
        else:
            os.environ["CTXOS_RUNTIME_DIR"] = old
        shutil.rmtree(env["CTXOS_RUNTIME_DIR"], ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    args = parser.parse_args(argv)
    settings = SMALL if args.small else FULL
    base = Path(tempfile.mkdtemp(prefix="ctxos-bench-ws-"))
    env = {**os.environ, "XDG_STATE_HOME": str(base / "state"), "XDG_CACHE_HOME": str(base / "cache")}
    try:
        rows = [measure(n, base, env, settings["settle_s"]) for n in settings["counts"]]
        single = single_daemon(base, env, settings["settle_s"])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    first, last = rows[0], rows[-1]
    extra = max(1, last["workspaces"] - first["workspaces"])
    per_idle = round((last["idle_rss_mb"] - first["idle_rss_mb"]) / extra, 2)
    per_loaded = round((last["loaded_rss_mb"] - first["loaded_rss_mb"]) / extra, 2)
    print_table(
        ["workspaces", "idle RSS MB", "all loaded RSS MB", "start s", "load all s"],
        [[r["workspaces"], r["idle_rss_mb"], r["loaded_rss_mb"], r["start_s"], r["load_all_s"]] for r in rows],
    )
    print(
        f"\nper extra idle workspace: {per_idle} MB; per extra loaded workspace: {per_loaded} MB; "
        f"one single-workspace daemon (loaded): {single} MB"
    )
    write_results(
        "bench_workspaces",
        {
            "settings": settings,
            "rows": rows,
            "per_idle_workspace_mb": per_idle,
            "per_loaded_workspace_mb": per_loaded,
            "single_daemon_rss_mb": single,
        },
        args.json,
        small=args.small,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
