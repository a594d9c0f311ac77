"""``ctxos daemon`` (foreground), ``ctxos start`` / ``stop`` (background), ``ctxos status``.

``daemon`` is what systemd/launchd run. ``start`` spawns the same thing
detached (``python -m ctxos.daemon.main``) and returns once it answers on its
socket, so the next command can use it. ``stop`` sends SIGTERM (the daemon
finishes the write in flight) and waits until the workspace lock is released.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ctxos.client import DaemonClient, DaemonError
from ctxos.client.cli import CliError, require_workspace, resolve_workspace
from ctxos.client.launch import Launch, LaunchError, launch, lost_race
from ctxos.services import runtime_paths
from ctxos.services.daemon_lock import is_locked, read_lock_pid, user_daemon_pid
from ctxos.services.daemon_options import add_daemon_arguments, daemon_flags

EXIT_NOT_RUNNING = 3
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
HTTP_SETTLE_S = 5.0  # how long `start` waits, once the workspace is ready, for HTTP to come up


def register(sub: argparse._SubParsersAction) -> None:
    daemon = sub.add_parser("daemon", help="run the daemon in the foreground (what systemd/launchd start)")
    add_daemon_arguments(daemon)
    daemon.set_defaults(func=cmd_daemon)

    start = sub.add_parser("start", help="start the daemon in the background; returns once it answers")
    add_daemon_arguments(start)
    start.add_argument("--timeout", type=float, default=START_TIMEOUT_S, help="seconds to wait (default 30)")
    start.set_defaults(func=cmd_start)

    stop = sub.add_parser("stop", help="stop the daemon (it finishes the write in flight)")
    stop.add_argument("--timeout", type=float, default=STOP_TIMEOUT_S, help="seconds to wait (default 30)")
    stop.add_argument("--force", action="store_true", help="SIGKILL it if it has not stopped by the timeout")
    stop.set_defaults(func=cmd_stop)

    status = sub.add_parser("status", help="daemon status: pid, uptime, memories, pending events, index lag, jobs")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=cmd_status)


# ---------------------------------------------------------------- helpers


def query_status(root: Path, timeout: float = 5.0) -> dict[str, Any] | None:
    """The daemon's ``status`` reply, or None when no daemon answers."""
    client = DaemonClient.for_workspace(root, timeout=timeout)
    try:
        return client.call("status")
    except (DaemonError, OSError, ValueError):
        return None
    finally:
        client.close()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days}d"] * bool(days) + [f"{hours}h"] * bool(hours) + [f"{minutes}m"] * bool(minutes)
    return " ".join(parts + [f"{secs}s"]) if not days else " ".join(parts)


# ---------------------------------------------------------------- commands


def cmd_daemon(args: argparse.Namespace) -> int:
    """Run the daemon in the foreground: this process becomes ``python -m ctxos.daemon.main`` (same pid,
    so systemd/launchd supervise the daemon itself; the thin client never imports it)."""
    if args.all:
        target = ["--all", *[arg for name in args.load for arg in ("--load", name)]]
    else:
        target = ["--workspace", str(require_workspace(resolve_workspace(args.workspace)))]
    command = [sys.executable, "-m", "ctxos.daemon.main", *target, *daemon_flags(args)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)
    return 0  # pragma: no cover - execv does not return


def cmd_start(args: argparse.Namespace) -> int:
    root = require_workspace(resolve_workspace(args.workspace))
    current = query_status(root)
    if current is not None:
        print(f"ctxos daemon already running for {root} (pid {current.get('pid')})")
        return 0
    launched: Launch | None = None
    log_file = runtime_paths.start_log_path(root)
    if not is_locked(root):
        # The per-user daemon serves it: started now, or told (SIGHUP) to open it.
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_bytes(b"")
        try:
            launched = launch(root, daemon_flags(args), log_file)
        except LaunchError as exc:
            raise CliError(str(exc), exit_code=1) from None
    # else: a daemon holds the lock but does not answer yet (it is starting): wait for it too.
    deadline = time.monotonic() + args.timeout
    delay = 0.02
    status: dict[str, Any] | None = None
    http_wait: float | None = None
    while time.monotonic() < deadline:
        proc = launched.process if launched is not None else None
        if launched is not None and proc is not None and proc.poll() is not None and not lost_race(launched):
            raise CliError(
                f"the daemon exited with code {proc.returncode} while starting:\n{_tail(log_file)}", exit_code=1
            )
        status = query_status(root, timeout=2.0)
        if status is not None and status.get("state") == "idle":
            _load_now(root)
            continue
        if status is not None and status.get("state") != "loading":
            # The socket answers before the HTTP component has started: give it a moment, so the
            # address (or the loud warning) printed below is the real one.
            if "http" in (status.get("components") or {}) or status.get("http"):
                break
            http_wait = http_wait or time.monotonic() + HTTP_SETTLE_S
            if time.monotonic() > http_wait:
                break
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)
    if status is None:
        raise CliError(
            f"the daemon did not answer within {args.timeout:.0f} s; see {log_file} and {runtime_paths.log_path(root)}",
            exit_code=1,
        )
    if status.get("state") == "failed":
        raise CliError(f"the daemon failed to load the workspace: {status.get('load_error')}", exit_code=1)
    state = (
        ""
        if status.get("state") == "ready"
        else f" (building the index: {(status.get('indexing') or {}).get('text', '...')}; queries answer from "
        "what is indexed so far)"
        if status.get("state") == "indexing"
        else " (still loading the workspace)"
    )
    http = f", http {status['http']}" if status.get("http") else ""
    served = (status.get("workspaces") or {}).get("count")
    shared = (
        f"; the per-user daemon serves {served} workspace(s): ctxos workspace list"
        if launched is not None and launched.process is None and served
        else ""
    )
    if launched is not None and launched.process is None and daemon_flags(args):
        shared += "; the options given apply when the per-user daemon starts, not to the running one"
    print(f"ctxos daemon started for {root} (pid {status.get('pid')}{http}){state}{shared}")
    http_state = str((status.get("components") or {}).get("http", ""))
    if http_state.startswith("failed"):
        # Loud: a tool configured for this workspace's HTTP address would otherwise reach nothing,
        # or another workspace's daemon on that port.
        print(
            f"ctxos: WARNING: this daemon serves NO HTTP (MCP /mcp, REST, web view): {http_state[len('failed: ') :]}",
            file=sys.stderr,
        )
    if (status.get("http_server") or {}).get("auth") == "none":
        print(f"ctxos: WARNING: {NO_AUTH_WARNING}", file=sys.stderr)
    elif status.get("http"):
        print("web view: run `ctxos open`")
    return 0


def _load_now(root: Path) -> None:
    """Ask the per-user daemon to load an idle workspace now (it loads on first use otherwise)."""
    client = DaemonClient.for_workspace(root, timeout=2.0)
    try:
        client.call("load_workspace")
    except (DaemonError, OSError, ValueError):
        pass  # still loading after 2 s: the caller keeps polling status
    finally:
        client.close()


NO_AUTH_WARNING = (
    "HTTP needs NO credential (daemon.http_auth: none): any local user or program "
    "can read and write this workspace's memories"
)


def cmd_stop(args: argparse.Namespace) -> int:
    root = require_workspace(resolve_workspace(args.workspace))
    status = query_status(root)
    pid = status.get("pid") if status else (read_lock_pid(root) if is_locked(root) else None)
    if not pid:
        print(f"ctxos daemon is not running for {root}")
        return 0
    try:
        os.kill(int(pid), signal.SIGTERM)
    except ProcessLookupError:
        print(f"ctxos daemon is not running for {root}")
        return 0
    except PermissionError as exc:
        raise CliError(f"cannot signal pid {pid}: {exc}") from None
    served = ((status or {}).get("workspaces") or {}).get("count")
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        # The per-user daemon: done when the whole process is (its other workspaces close after this one).
        if not is_locked(root) and not (served and user_daemon_pid() == int(pid)):
            print(
                f"ctxos daemon stopped (pid {pid})"
                + (f"; it served {served} workspace(s), all stopped" if served and served > 1 else "")
            )
            return 0
        time.sleep(0.05)
    if args.force:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
        print(f"ctxos daemon killed (pid {pid}) after {args.timeout:.0f} s; the next start reconciles the index")
        return 0
    raise CliError(
        f"the daemon (pid {pid}) has not stopped after {args.timeout:.0f} s; use `ctxos stop --force` to kill it",
        exit_code=1,
    )


def cmd_status(args: argparse.Namespace) -> int:
    root = require_workspace(resolve_workspace(args.workspace))
    status = query_status(root)
    if status is None:
        starting = is_locked(root)
        if args.json:
            print(json.dumps({"running": False, "starting": starting, "workspace": str(root)}, indent=2))
        else:
            note = " (a daemon holds the lock but does not answer yet)" if starting else ""
            print(f"ctxos daemon: not running for {root}{note}")
        return EXIT_NOT_RUNNING
    status = {"running": True, **status}
    if args.json:
        print(json.dumps(status, indent=2, default=str))
        return 0
    print(format_status(status))
    return 0


def _http_off(status: dict[str, Any]) -> str:
    state = str((status.get("components") or {}).get("http", "off"))
    return f"NOT SERVING ({state[len('failed: ') :]})" if state.startswith("failed") else "off"


def _component(name: str, state: object, status: dict[str, Any]) -> str:
    """One component as the JSON has it: a running tray component with no icon says so, and why."""
    tray = status.get("tray") if name == "tray" else None
    if isinstance(tray, dict) and state == "running" and not tray.get("shown"):
        return f"tray running without an icon ({tray.get('reason') or 'not shown'})"
    return f"{name} {state}"


def format_status(status: dict[str, Any]) -> str:
    """The human-readable ``ctxos status``."""
    lines = [
        f"ctxos daemon: {status.get('state', '?')} (pid {status.get('pid')}, up {_duration(status.get('uptime_s', 0))})",
        f"  workspace       {status.get('workspace')}",
        f"  socket          {status.get('socket')}",
        f"  http            {status.get('http') or _http_off(status)}",
    ]
    if status.get("http"):
        server = status.get("http_server") or {}
        if server.get("auth") == "none":
            lines.append(f"  http auth       NONE - {NO_AUTH_WARNING}")
        elif server.get("auth"):
            lines.append(f"  http auth       bearer token ({server.get('token_source')}); web view: ctxos open")
    indexing = status.get("indexing")
    if indexing:
        partial = "; queries are answered from the memories indexed so far" if indexing.get("partial") else ""
        lines.append(
            f"  indexing        {indexing.get('text')} ({indexing.get('job')}, "
            f"{indexing.get('elapsed_s', 0):.0f} s{partial})"
        )
    if "memories" in status:
        lines.append(
            f"  memories        {status['memories']} indexed, {status.get('invalid_files', 0)} invalid file(s)"
            + ("  (see `ctxos doctor`)" if status.get("invalid_files") else "")
        )
    lines.append(f"  pending events  {status.get('pending_events', 0)}")
    lines.append(f"  index lag       {status.get('index_lag_ms', 0):.0f} ms")
    history = status.get("history") or {}
    if history.get("mode"):  # docs/history.md
        failed = (
            f", {history['failures']} failed (last: {history.get('last_error')})" if history.get("failures") else ""
        )
        lines.append(
            f"  history         {history['mode']}: {history.get('commits', 0)} commit(s), "
            f"{history.get('journal_entries', 0)} journal entries since start{failed}"
        )
    watcher = status.get("watcher") or {}
    last = watcher.get("last_batch")
    if last:
        lines.append(
            f"  last batch      {last.get('at')}: {last.get('paths')} path(s), {last.get('updated')} updated, "
            f"{last.get('removed')} removed in {last.get('apply_ms')} ms"
        )
    if status.get("config_error"):
        lines.append(f"  config          {status['config_error']}")
    workspaces = status.get("workspaces") or {}
    if workspaces.get("items"):
        lines.append(
            f"  workspaces      {workspaces.get('count')} served by this daemon, {workspaces.get('loaded')} loaded"
        )
        for item in workspaces["items"]:
            marks = " (default)" * bool(item.get("default"))
            detail = item.get("error") or item.get("state")
            lines.append(
                f"    {item.get('name')}{marks}: {detail}  {item.get('path')}"
                + (f"  {item['http']}" if item.get("http") else "")
            )
    components = status.get("components") or {}
    if components:
        lines.append(
            "  components      " + ", ".join(_component(name, state, status) for name, state in components.items())
        )
    jobs = status.get("jobs") or {}
    if jobs:
        lines.append("  last job runs")
        width = max(len(name) for name in jobs) + 2
        for name, info in sorted(jobs.items()):
            if isinstance(info, dict):
                when = info.get("last_run") or "never"
                runs, failures = info.get("runs"), info.get("failures")
                counts = f"{runs} run(s), {failures} failed" if runs is not None else ""
                error = f"  failed: {info['last_error']}" if info.get("last_ok") is False else ""
                lines.append(f"    {name:<{width}}{when}  {counts}{error}".rstrip())
            else:
                lines.append(f"    {name:<{width}}{info}")
    return "\n".join(lines)
