"""``ctxos daemon --all``: one daemon per user, serving every registered workspace.

Order of things (compare ``main.py``, the single-workspace daemon):

1. take the per-user lock (``<runtime dir>/user-daemon.lock``: one such daemon
   per user; the kernel drops it when the holder dies);
2. log to ``$XDG_STATE_HOME/ctxos/logs/daemon.log``;
3. open every workspace of the registry (``daemon/workspaces.py``): its
   workspace lock and its Unix socket, nothing else; the ones named with
   ``--load`` start loading at once, the others on first use;
4. start the daemon-wide components on the default workspace's context: HTTP
   (``/`` and ``/mcp`` for the default, ``/w/<name>/...`` for each) and the tray;
5. SIGHUP re-reads the registry (``ctxos start`` sends it after registering a
   workspace); SIGTERM/SIGINT stop everything in reverse order.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ctxos.services import runtime_paths
from ctxos.services.daemon_lock import UserLock, user_daemon_pid

from . import interpreter_tune, malloc_tune
from .components import COMPONENTS, stop_components
from .context import DaemonOptions
from .logging_setup import setup_logging
from .workspaces import WorkspaceSet

log = logging.getLogger("ctxos.daemon")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_ALREADY_RUNNING = 3
SHARED_COMPONENTS = ("http", "tray")  # run once per daemon, on the default workspace's context


def run_user_daemon(options: DaemonOptions | None = None, load: list[str] | None = None) -> int:
    """Run the per-user daemon in the foreground until a signal; return the exit code."""
    from ctxos.services.workspace_registry import RegistryError, load_registry

    options = options or DaemonOptions()
    # `ctxos start` may send SIGHUP as soon as our lock holds a pid, before the loop handles it:
    # ignore it until then (the registry is read after the handler is installed, so nothing is lost).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        registry = load_registry()
    except RegistryError as exc:
        print(f"ctxos: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not registry.workspaces:
        print(
            f"ctxos: error: no workspace is registered in {registry.path}; add one with "
            f"`ctxos workspace add PATH` (or `ctxos init PATH`)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    unknown = sorted(set(load or ()) - set(registry.workspaces))
    if unknown:
        print(f"ctxos: error: not registered: {', '.join(unknown)}", file=sys.stderr)
        return EXIT_USAGE
    lock = UserLock()
    if not lock.acquire():
        print(
            f"ctxos: error: the per-user ctxos daemon is already running (pid {user_daemon_pid()}); "
            f"`ctxos status` shows it, `ctxos stop` stops it",
            file=sys.stderr,
        )
        return EXIT_ALREADY_RUNNING
    try:
        log_file = setup_logging(
            Path.home(),
            log_file=runtime_paths.user_log_path(),
            level=logging.DEBUG if options.verbose else logging.INFO,
        )
        log.info(
            "ctxos per-user daemon starting: %d workspace(s), pid %d, log %s",
            len(registry.workspaces),
            os.getpid(),
            log_file,
        )
        malloc_tune.configure_heap()  # before any thread starts
        interpreter_tune.configure_switching()
        return asyncio.run(_serve(options, set(load or ())))
    except KeyboardInterrupt:
        return 130
    finally:
        _remove_info()
        lock.release()


async def _serve(options: DaemonOptions, eager: set[str]) -> int:
    from ctxos.services.workspace_registry import RegistryError, load_registry

    loop = asyncio.get_running_loop()
    workspaces = WorkspaceSet(options, loop)
    stop = asyncio.Event()
    reason: dict[str, Any] = {}

    async def reload_registry() -> None:
        if stop.is_set():  # stopping: opening workspaces now would leave them behind
            return
        try:
            registry = load_registry()
        except RegistryError as exc:
            log.error("SIGHUP: the registry could not be read, keeping the workspaces served: %s", exc)
            return
        await workspaces.sync(registry)
        http = next((c for c in shared_started if getattr(c, "name", "") == "http"), None)
        base = getattr(http, "url", None)
        for ctx in workspaces.contexts():  # joined now: its MCP is served at /w/<name>/mcp (http_server)
            if base and ctx is not getattr(http, "ctx", None) and not ctx.http_url:
                ctx.http_url = f"{base}/w/{ctx.name}"
        _mirror_shared(workspaces, getattr(http, "ctx", None) or workspaces.primary())
        _write_info(workspaces, shared_started)
        log.info("registry re-read: %d workspace(s) served", len(workspaces.contexts()))

    def on_signal(signum: int) -> None:
        if signum == signal.SIGHUP:
            loop.create_task(reload_registry())
            return
        if stop.is_set():
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(128 + signum)
        log.info("%s received: finishing the writes in flight, then stopping", signal.Signals(signum).name)
        reason["signal"] = signal.Signals(signum).name
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, on_signal, signum)

    shared_started: list[Any] = []
    try:
        await workspaces.sync(load_registry())
        primary = workspaces.primary()
        if primary is None:
            log.error(
                "no registered workspace could be served: %s",
                "; ".join(f"{w.name}: {w.error}" for w in workspaces.served.values()),
            )
            return EXIT_FAILED
        for spec in COMPONENTS:
            if spec.name not in SHARED_COMPONENTS:
                continue
            if not spec.enabled(options):
                primary.components[spec.name] = "disabled"
                continue
            try:
                component = spec.build()
                await component.start(primary)
            except Exception as exc:  # noqa: BLE001 - HTTP and the tray are never essential
                log.exception("component %s failed to start; continuing without it", spec.name)
                primary.components[spec.name] = f"failed: {type(exc).__name__}: {exc}"
                continue
            shared_started.append(component)
            primary.components[spec.name] = "running"
        _mirror_shared(workspaces, primary)
        _write_info(workspaces, shared_started)
        for name in eager:  # after daemon.json is written: the load cleans the state folder
            ctx = workspaces.get(name)
            if ctx is not None:
                ctx.activate()
        await stop.wait()
    finally:
        log.info("stopping")
        await stop_components(shared_started)
        await workspaces.close_all()
        log.info("stopped%s", f" ({reason['signal']})" if reason.get("signal") else "")
    return EXIT_OK


def _mirror_shared(workspaces: WorkspaceSet, primary: Any) -> None:
    """Every workspace's ``components`` shows the shared HTTP and tray state (so ``ctxos start`` and
    ``status`` for any workspace say when HTTP is not served, and why)."""
    if primary is None:
        return
    for ctx in workspaces.contexts():
        for name in SHARED_COMPONENTS:
            if ctx is not primary and name in primary.components:
                ctx.components[name] = primary.components[name]


def _write_info(workspaces: WorkspaceSet, shared: list[Any]) -> None:
    """``user-daemon.json`` in the runtime dir: pid, HTTP address and the workspaces served."""
    from ctxos.services.atomic import atomic_write_text

    primary = workspaces.primary()
    info = {
        "pid": os.getpid(),
        "http": primary.http_url if primary is not None else None,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "workspaces": {name: str(w.root) for name, w in workspaces.served.items() if w.ctx is not None},
    }
    for ctx in workspaces.contexts():
        _write_workspace_info(ctx)
    try:
        atomic_write_text(runtime_paths.user_info_path(), json.dumps(info, indent=2) + "\n", mode=0o600)
    except OSError:
        log.exception("could not write %s", runtime_paths.user_info_path())


def _write_workspace_info(ctx: Any) -> None:
    from .main import write_info

    write_info(ctx)


def _remove_info() -> None:
    try:
        data = json.loads(runtime_paths.user_info_path().read_text(encoding="utf-8"))
        if data.get("pid") == os.getpid():
            runtime_paths.user_info_path().unlink()
    except (OSError, ValueError, AttributeError):
        pass
