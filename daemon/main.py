"""``ctxos daemon``: the long-running process for one workspace.

Order of things, and why:

1. take the workspace lock (one daemon per workspace; a dead holder's lock is
   released by the kernel, so there is nothing stale to clean up);
2. start logging (stderr + ``.ctxos/logs/daemon.log``);
3. start loading the engine on the write thread (scan, open/recover the
   index, reconcile with the files) *while* the components start, the watcher
   first so no edit made during the load is missed, then the socket, which
   answers ``status`` at once and every other method as soon as the load is done;
4. run until SIGTERM/SIGINT, then stop the components in reverse order, let the
   write in flight finish, close the engine and release the lock.

The asyncio loop only waits on sockets and inotify: no periodic wake-ups.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # pragma: no cover - the daemon's own process, before the imports below
    from ctxos.daemon.parse_pool import start_builders_early
    from ctxos.services.daemon_options import daemon_parser, workspace_path

    try:
        _early = daemon_parser().parse_known_args()[0]
        if not _early.all:  # a cold build is coming: its builders import on the other core meanwhile
            start_builders_early(workspace_path(_early).expanduser())
    except SystemExit:  # bad arguments: main() below reports them
        pass

import argparse
import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ctxos.services import runtime_paths
from ctxos.services.daemon_lock import DaemonAlreadyRunning, WorkspaceLock
from ctxos.services.daemon_options import daemon_parser, workspace_path
from ctxos.services.stop_flag import Cancelled

from . import interpreter_tune, malloc_tune
from .components import COMPONENTS, register_rpc_methods, stop_components
from .context import DaemonContext, DaemonOptions
from .logging_setup import setup_logging
from .parse_pool import building_map, stop_early_builders

log = logging.getLogger("ctxos.daemon")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_ALREADY_RUNNING = 3


def options_from_args(args: argparse.Namespace) -> DaemonOptions:
    return DaemonOptions(
        http=getattr(args, "http", True),
        http_port=getattr(args, "http_port", None),
        tray=getattr(args, "tray", None),
        verbose=getattr(args, "verbose", False),
        debounce_ms=getattr(args, "debounce_ms", None),
    )


def run_daemon(root: Path, options: DaemonOptions | None = None) -> int:
    """Run the daemon in the foreground until a signal; return the process exit code."""
    options = options or DaemonOptions()
    root = Path(root).expanduser().resolve()
    if not root.is_dir():
        print(f"ctxos: error: workspace {root} does not exist; create it with: ctxos init {root}", file=sys.stderr)
        return EXIT_USAGE
    lock = WorkspaceLock(root)
    try:
        lock.acquire()
    except DaemonAlreadyRunning as exc:
        print(f"ctxos: error: {exc}", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    try:
        from ctxos.services.config import load_config

        config = load_config(root)
        log_file = setup_logging(
            root,
            max_bytes=config.settings.daemon.log_max_bytes,
            backups=config.settings.daemon.log_backups,
            level=logging.DEBUG if options.verbose else logging.INFO,
        )
        log.info("ctxos daemon starting: workspace %s, pid %d, log %s", root, os.getpid(), log_file)
        malloc_tune.configure_heap()  # before any thread starts
        interpreter_tune.configure_switching()
        return asyncio.run(_serve(root, options))
    except KeyboardInterrupt:  # a signal before the loop installed its handlers
        return 130
    finally:
        remove_info(root)
        lock.release()


async def _serve(root: Path, options: DaemonOptions) -> int:
    from ctxos.services.engine import Engine

    loop = asyncio.get_running_loop()
    ctx = DaemonContext(root, Engine(root), options=options)
    ctx.bind_loop(loop)
    register_rpc_methods(ctx.rpc)

    stop = asyncio.Event()
    reason: dict[str, Any] = {}

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(128 + signum)
        log.info("%s received: finishing the write in flight, then stopping", signal.Signals(signum).name)
        reason["signal"] = signal.Signals(signum).name
        ctx.request_stop()  # the load, a change batch or a background job in flight stops at its next safe point
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)

    load_task = loop.create_task(load_workspace(ctx, stop))
    started: list[Any] = []
    exit_code = EXIT_OK
    try:
        for spec in COMPONENTS:
            if stop.is_set():
                break
            if not spec.enabled(options):
                ctx.components[spec.name] = "disabled"
                continue
            try:
                component = spec.build()
                await component.start(ctx)
            except Exception as exc:  # noqa: BLE001
                if spec.essential:
                    log.exception("component %s failed to start", spec.name)
                    ctx.components[spec.name] = f"failed: {exc}"
                    exit_code = EXIT_FAILED
                    break
                log.exception("component %s failed to start; continuing without it", spec.name)
                ctx.components[spec.name] = f"failed: {type(exc).__name__}: {exc}"
                continue
            started.append(component)
            ctx.components[spec.name] = "running"
        if exit_code == EXIT_OK:
            write_info(ctx)
            await stop.wait()
            if ctx.load_error and not reason.get("signal"):  # a load stopped by SIGTERM is no failure
                exit_code = EXIT_FAILED
    finally:
        log.info("stopping")
        await stop_components(started)
        # The write executor runs the write in flight (and the load, if still running) to completion.
        await loop.run_in_executor(None, ctx.shutdown_executors)
        if load_task.done() and not load_task.cancelled():
            load_task.result()
        else:
            load_task.cancel()
        try:
            ctx.write_sync(ctx.engine.close)
        except Exception:  # noqa: BLE001
            log.exception("closing the engine failed")
        log.info("stopped%s", f" ({reason['signal']})" if reason.get("signal") else "")
    return exit_code


async def load_workspace(
    ctx: DaemonContext, stop: asyncio.Event | None, before_ready: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Initial load + reconcile on the write thread.

    A failure stops a single-workspace daemon (``stop`` given: systemd restarts it);
    in the per-user daemon (``stop`` None) only that workspace reports the error.
    """
    started = time.monotonic()
    engine = ctx.engine
    engine.on_progress = ctx.on_engine_progress
    engine.build_map = building_map(engine.stop_flag.check)  # cold build and reindex: builder processes
    engine.defer_parse_cache = True  # written after ready, below: not part of the start's wait
    try:
        summary = await ctx.run_write(engine.load)
    except Cancelled:  # SIGTERM during the load: the next start goes on from what was indexed
        log.info("loading stopped: the daemon is shutting down")
        ctx.load_error = "stopped while loading"
        ctx.mark_ready()
        return
    except Exception as exc:  # noqa: BLE001
        log.exception("loading the workspace failed")
        ctx.load_error = f"{type(exc).__name__}: {exc}"
        ctx.mark_ready()  # wake waiters so they get the error instead of hanging
        if stop is not None:
            stop.set()
        return
    finally:
        stop_early_builders()  # on a thread of its own: the daemon does not wait for the builders to exit
        malloc_tune.trim()
    interpreter_tune.settle_loaded_heap()  # freeze the loaded heap, space out young collections
    ctx.add_status_provider("interpreter", interpreter_tune.status)
    ctx.load_summary = _summary_dict(summary)
    ctx.load_summary["load_ms"] = round((time.monotonic() - started) * 1000, 1)
    _note_unserved_federation(ctx)
    if before_ready is not None:  # the per-user daemon: federated workspaces join first
        try:
            await before_ready()
        except Exception:  # noqa: BLE001 - the workspace itself loaded: serve it regardless
            log.exception("preparing the loaded workspace failed")
    ctx.mark_ready()
    # Not announced to change listeners: components that care await ctx.wait_ready() instead
    # (the scheduler refreshes communities and router files then; announcing it too would do it twice).
    log.info("workspace loaded in %.0f ms: %s", ctx.load_summary["load_ms"], _summary_line(summary))
    save = getattr(engine, "save_parse_cache", None)
    if callable(save) and not ctx.stopping():
        try:
            if await ctx.run_background(save):
                log.info("parse cache written")
        except Exception:  # noqa: BLE001 - a cache: the next start parses more, nothing else
            log.exception("writing the parse cache failed")


def _note_unserved_federation(ctx: DaemonContext) -> None:
    """A single-workspace daemon cannot federate: say so in status instead of answering without it."""
    from ctxos.services.federation import federate_names

    names = federate_names(ctx.config)
    if names and getattr(ctx, "workspaces", None) is None:
        problem = (
            f"federate: {', '.join(names)} not joined: only the per-user daemon (`ctxos start`) "
            f"serves federated workspaces"
        )
        ctx.status_extra["federate_problems"] = [problem]
        log.warning("%s", problem)


def _summary_dict(summary: Any) -> dict[str, Any]:
    to_dict = getattr(summary, "to_dict", None)
    return dict(to_dict()) if callable(to_dict) else {}


def _summary_line(summary: Any) -> str:
    return (
        f"{len(getattr(summary, 'updated', []) or [])} updated, "
        f"{len(getattr(summary, 'removed', []) or [])} removed, "
        f"{len(getattr(summary, 'invalid', []) or [])} invalid, "
        f"{getattr(summary, 'unchanged', 0)} unchanged"
    )


def write_info(ctx: DaemonContext) -> None:
    """``.ctxos/daemon.json``: how to reach this daemon (informational; the lock decides liveness)."""
    from ctxos.services.atomic import atomic_write_text

    info = {
        "pid": ctx.pid,
        "workspace": str(ctx.root),
        "socket": str(ctx.socket_path) if ctx.socket_path else None,
        "http": ctx.http_url,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ctx.started_at)),
        "components": dict(ctx.components),
    }
    error: OSError | None = None
    for _ in range(3):
        try:
            atomic_write_text(runtime_paths.info_path(ctx.root), json.dumps(info, indent=2) + "\n", mode=0o600)
            return
        except FileNotFoundError as exc:
            # The load, running meanwhile, clears orphaned temp files at start and may take ours
            # between its write and its rename: write it again.
            error = exc
        except OSError as exc:
            error = exc
            break
    log.error("could not write %s: %s", runtime_paths.info_path(ctx.root), error)


def read_info(root: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(runtime_paths.info_path(root).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def remove_info(root: Path) -> None:
    info = read_info(root)
    if info and info.get("pid") == os.getpid():
        try:
            runtime_paths.info_path(root).unlink()
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    """``python -m ctxos.daemon.main --workspace PATH | --all [options]``: what ``ctxos start`` spawns."""
    args = daemon_parser().parse_args(argv)
    if args.all:
        from .user_daemon import run_user_daemon

        return run_user_daemon(options_from_args(args), load=args.load)
    return run_daemon(workspace_path(args), options_from_args(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
