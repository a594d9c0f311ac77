"""The per-user daemon's workspaces: one :class:`DaemonContext` each, loaded on first use.

Why one context per workspace: each keeps its own engine, index, cache,
watcher, scheduler, write lock and RPC registry (so every RPC method, old or
new, works per workspace without knowing about the others), and a fault in
one never reaches another. What is shared is the process, its event loop,
the HTTP server (``/w/<name>/...``, ``/`` for the default) and the tray.

Why lazy: an idle workspace should cost little. Opening one takes its
workspace lock (no second daemon may serve it) and binds its Unix socket, at
the usual per-workspace path, so every client (``ctxos`` commands, ``ctxos
mcp``) reaches it unchanged; nothing is read from its folder. The first
request that needs the engine (any method but ``status``) starts the watcher,
loads and reconciles the index and starts the scheduler, exactly as a
single-workspace daemon does at start-up. ``status`` says which workspaces
are loaded. SIGHUP re-reads the registry: new entries are opened, removed
ones closed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxos.services.daemon_lock import DaemonAlreadyRunning, WorkspaceLock

from .components import register_rpc_methods, stop_components
from .context import DaemonContext, DaemonOptions

log = logging.getLogger("ctxos.daemon.workspaces")

# Started when a workspace is first used, in this order (the watcher before the load, as in main.py).
ACTIVE_COMPONENTS: tuple[tuple[str, str], ...] = (
    ("watcher", "ctxos.daemon.watcher:WatcherComponent"),
    ("scheduler", "ctxos.daemon.scheduler:SchedulerComponent"),
)
FEDERATE_WAIT_S = 60.0


def _build(target: str) -> Any:
    import importlib

    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)()


@dataclass
class ServedWorkspace:
    """One registered workspace as this daemon holds it."""

    name: str
    root: Path
    ctx: DaemonContext | None = None
    lock: WorkspaceLock | None = None
    error: str | None = None  # why it is not served (lock held elsewhere, missing folder)
    components: list[Any] = field(default_factory=list)
    load_task: asyncio.Task[None] | None = None
    activated_at: float | None = None

    def summary(self, default: str | None) -> dict[str, Any]:
        ctx = self.ctx
        state = "not served" if ctx is None else ctx.state
        data: dict[str, Any] = {
            "name": self.name,
            "path": str(self.root),
            "default": self.name == default,
            "state": state,
            "loaded": bool(ctx is not None and self.activated_at is not None),
        }
        if ctx is not None:
            data["socket"] = str(ctx.socket_path) if ctx.socket_path else None
            data["http"] = ctx.http_url
            if ctx.ready and not ctx.load_error:
                data["memories"] = len(ctx.engine.store)
        if self.error:
            data["error"] = self.error
        return data


def _load_workspace(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Load this workspace now, if it is idle, and answer once it is loaded (``ctxos start`` calls it)."""
    return {"name": ctx.name, "state": ctx.state}


class WorkspaceSet:
    """Every workspace the per-user daemon serves, by registry name."""

    def __init__(self, options: DaemonOptions, loop: asyncio.AbstractEventLoop) -> None:
        self.options = options
        self.loop = loop
        self.served: dict[str, ServedWorkspace] = {}
        self.default: str | None = None
        self._stopping = False

    # ------------------------------------------------------------ lookups

    def contexts(self) -> list[DaemonContext]:
        return [w.ctx for w in self.served.values() if w.ctx is not None]

    def get(self, name: str) -> DaemonContext | None:
        served = self.served.get(name)
        return served.ctx if served is not None else None

    def primary(self) -> DaemonContext | None:
        """The default workspace's context (served at ``/``), else the first one served."""
        ctx = self.get(self.default) if self.default else None
        return ctx or next(iter(self.contexts()), None)

    def status(self) -> dict[str, Any]:
        """The ``workspaces`` section of every workspace's ``status``."""
        items = [w.summary(self.default) for w in self.served.values()]
        return {"count": len(items), "loaded": sum(1 for item in items if item["loaded"]), "items": items}

    # ------------------------------------------------------------ opening and closing

    async def sync(self, registry: Any, eager: set[str] | frozenset[str] = frozenset()) -> None:
        """Open every registered workspace not served yet, close those no longer registered.

        ``eager`` ones start loading at once (``ctxos start`` for that workspace).
        """
        self.default = registry.default_name()
        for name in [
            n for n in self.served if n not in registry.workspaces or registry.workspaces[n] != self.served[n].root
        ]:
            await self.close(name)
        for name, root in registry.workspaces.items():
            if name not in self.served:
                await self.open(name, root, eager=name in eager)
            elif name in eager and (served_ctx := self.served[name].ctx) is not None:
                served_ctx.activate()

    async def open(self, name: str, root: Path, *, eager: bool = False) -> ServedWorkspace:
        from ctxos.services.engine import Engine

        from .ipc_server import IpcServerComponent

        served = ServedWorkspace(name, Path(root))
        self.served[name] = served
        if not served.root.is_dir():
            served.error = f"{served.root} does not exist (ctxos workspace remove {name}, or create it)"
            log.warning("workspace %s: %s", name, served.error)
            return served
        lock = WorkspaceLock(served.root)
        try:
            lock.acquire()
        except DaemonAlreadyRunning as exc:
            served.error = f"served by another daemon (pid {exc.pid})" if exc.pid else str(exc)
            log.warning("workspace %s: %s", name, served.error)
            return served
        ctx = DaemonContext(served.root, Engine(served.root), options=self.options)
        ctx.name = name
        ctx.workspaces = self
        ctx.bind_loop(self.loop)
        register_rpc_methods(ctx.rpc)
        ctx.rpc.register("load_workspace", _load_workspace)
        ctx.add_status_provider("workspaces", self.status)
        ipc = IpcServerComponent()
        try:
            await ipc.start(ctx)
        except Exception as exc:  # noqa: BLE001 - one workspace's socket must not stop the others
            log.exception("workspace %s: its socket could not be opened", name)
            lock.release()
            served.error = f"socket: {type(exc).__name__}: {exc}"
            return served
        ctx.components["ipc"] = "running"
        served.ctx, served.lock = ctx, lock
        served.components.append(ipc)
        ctx.set_activator(lambda: self._activate(served))
        log.info(
            "workspace %s (%s) served on %s%s",
            name,
            served.root,
            ctx.socket_path,
            "" if eager else "; loads on first use",
        )
        if eager:
            ctx.activate()
        return served

    def _activate(self, served: ServedWorkspace) -> None:
        if self._stopping or served.ctx is None:
            return
        served.activated_at = time.time()
        served.load_task = self.loop.create_task(self._run_activation(served), name=f"ctxos-load-{served.name}")

    async def _run_activation(self, served: ServedWorkspace) -> None:
        """Start the watcher, load and reconcile, start the scheduler: a single daemon's start-up."""
        from .main import load_workspace

        ctx = served.ctx
        assert ctx is not None
        log.info("workspace %s: loading on first use", served.name)
        watcher = await self._start_component(served, *ACTIVE_COMPONENTS[0])
        if watcher is None:  # without a watcher the index would go stale: refuse to serve it
            ctx.load_error = f"the file watcher could not start: {ctx.components.get('watcher')}"
            ctx.mark_ready()
            return
        await load_workspace(ctx, None, before_ready=lambda: self.federate(served))
        ctx.add_change_listener(lambda _summary: self.federate(served, wait=False))
        for name, target in ACTIVE_COMPONENTS[1:]:
            await self._start_component(served, name, target)

    async def federate(self, served: ServedWorkspace, *, wait: bool = True) -> None:
        """Give the workspace's engine the engines of the workspaces its config federates.

        Each is loaded if idle. With ``wait`` (the first load), answering waits for
        them (up to FEDERATE_WAIT_S), except for one that federates this workspace
        back, which is loading at the same moment and would wait for us in turn.
        A name that is not served is a problem in ``status``/``doctor``.
        """
        from ctxos.services.federation import federate_names

        ctx = served.ctx
        if ctx is None:
            return
        engines: list[tuple[str, Any]] = []
        problems: list[str] = []
        waits: list[DaemonContext] = []
        for name in federate_names(ctx.config):
            other = self.get(name)
            if name == served.name:
                continue
            if other is None:
                problem = self.served[name].error if name in self.served else "it is not registered"
                problems.append(f"federate: workspace {name!r} is not served ({problem})")
                continue
            engines.append((name, other.engine))
            if not other.ready:
                other.activate()
                if served.name not in federate_names(other.config):
                    waits.append(other)
        ctx.engine.federated = engines
        ctx.status_extra["federated"] = [name for name, _ in engines]
        ctx.status_extra["federate_problems"] = problems
        for problem in problems:
            log.warning("workspace %s: %s", served.name, problem)
        if wait and waits:
            try:
                await asyncio.wait_for(asyncio.gather(*(other.wait_ready() for other in waits)), FEDERATE_WAIT_S)
            except Exception as exc:  # noqa: BLE001 - answer without them; they join once loaded
                log.warning("workspace %s: federated workspaces not ready yet (%s)", served.name, type(exc).__name__)

    async def _start_component(self, served: ServedWorkspace, name: str, target: str) -> Any:
        ctx = served.ctx
        assert ctx is not None
        try:
            component = _build(target)
            await component.start(ctx)
        except Exception as exc:  # noqa: BLE001
            log.exception("workspace %s: component %s failed to start", served.name, name)
            ctx.components[name] = f"failed: {type(exc).__name__}: {exc}"
            return None
        served.components.append(component)
        ctx.components[name] = "running"
        return component

    async def close(self, name: str) -> None:
        """Stop a workspace's components, let its write in flight finish, close its engine, free its lock."""
        served = self.served.pop(name, None)
        if served is None:
            return
        ctx = served.ctx
        if ctx is not None:
            ctx.request_stop()  # its load or background job in flight stops at the next safe point
        await stop_components(served.components, f"workspace {name}: ")
        served.components.clear()
        if ctx is not None:
            await self.loop.run_in_executor(None, ctx.shutdown_executors)
            task = served.load_task
            if task is not None and not task.done():
                task.cancel()
            try:
                ctx.write_sync(ctx.engine.close)
            except Exception:  # noqa: BLE001
                log.exception("workspace %s: closing the engine failed", name)
        if served.lock is not None:
            from .main import remove_info

            remove_info(served.root)
            served.lock.release()
        log.info("workspace %s closed", name)

    async def close_all(self) -> None:
        self._stopping = True
        for name in list(self.served):
            await self.close(name)
