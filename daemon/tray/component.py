"""The daemon component: the tray in a thread (Linux, Windows) or in a child process (macOS)."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from typing import TYPE_CHECKING, Any

from .app import TrayApp
from .backends import LoopBackend
from .runner import TrayRunner
from .settings import READY_PREFIX, SHOW_TIMEOUT_S, STOP_TIMEOUT_S, TraySettings, display_problem

if TYPE_CHECKING:  # pragma: no cover
    from ..context import DaemonContext

log = logging.getLogger("ctxos.daemon.tray")  # one logger name for the whole tray (tests and log filters)


class TrayComponent:
    """Daemon component: the tray in a thread (Linux, Windows) or a child process (macOS)."""

    name = "tray"

    def __init__(self) -> None:
        self.ctx: DaemonContext | None = None
        self.runner: TrayRunner | None = None
        self.thread: threading.Thread | None = None
        self.child: asyncio.subprocess.Process | None = None
        self._child_watch: asyncio.Task[None] | None = None
        self._stopping = False
        self._info: dict[str, Any] = {"shown": False}

    async def start(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        ctx.add_status_provider("tray", self.status)
        wanted = getattr(ctx.options, "tray", None)
        if wanted is False:
            self._info = {"shown": False, "reason": "turned off (--no-tray)"}
            return
        problem = display_problem()
        if problem:
            # The one line for a headless start; nothing retries.
            (log.warning if wanted else log.info)("tray: %s; running without a tray icon", problem)
            self._info = {"shown": False, "reason": problem}
            return
        settings = TraySettings.from_config(ctx.config)
        mode = settings.resolved_mode()
        if mode == "process":
            await self._start_process(ctx)
        else:
            await self._start_thread(ctx, settings)

    async def _start_thread(self, ctx: DaemonContext, settings: TraySettings) -> None:
        loop = asyncio.get_running_loop()
        app = TrayApp(
            ctx.root, LoopBackend(ctx, loop), settings, settings_source=lambda: TraySettings.from_config(ctx.config)
        )
        self.runner = runner = TrayRunner(app)
        self.thread = threading.Thread(target=runner.run_icon, name="ctxos-tray", daemon=True)
        self.thread.start()
        outcome = await loop.run_in_executor(None, runner.wait_shown)
        if outcome != "shown":
            log.warning("tray: %s; running without a tray icon", outcome.removeprefix("failed: "))
            self._info = {"shown": False, "mode": "thread", "reason": outcome}
            await loop.run_in_executor(None, self._join_thread)
            self.runner = None
            return
        ctx.add_change_listener(self._on_change)
        log.info(
            "tray: icon shown (pystray backend %s, notifications via %s)",
            runner.backend_name,
            app.sink.channel if app.sink else "none",
        )

    async def _start_process(self, ctx: DaemonContext) -> None:
        argv = [sys.executable, "-m", "ctxos.daemon.tray", "--workspace", str(ctx.root)]
        self.child = child = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None
        )
        try:
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), SHOW_TIMEOUT_S + 5)
        except TimeoutError:
            line = b""
        outcome = line.decode("utf-8", "replace").strip().removeprefix(READY_PREFIX).strip() or "failed: no answer"
        if outcome != "shown":
            log.warning("tray: %s; running without a tray icon", outcome.removeprefix("failed: "))
            self._info = {"shown": False, "mode": "process", "reason": outcome}
            await self._end_child()
            return
        self._info = {"shown": True, "mode": "process", "pid": child.pid}
        self._child_watch = asyncio.create_task(self._watch_child())
        log.info("tray: icon shown by child process %d", child.pid)

    async def _watch_child(self) -> None:
        child = self.child
        if child is None:
            return
        code = await child.wait()
        if not self._stopping:
            log.warning("tray: the tray process exited (code %s); continuing without a tray icon", code)
            self._info = {"shown": False, "mode": "process", "reason": f"tray process exited with {code}"}

    async def _end_child(self) -> None:
        child = self.child
        if child is None or child.returncode is not None:
            return
        if child.stdin is not None:
            child.stdin.close()  # EOF on stdin tells the child to stop
        try:
            await asyncio.wait_for(child.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            child.terminate()
            try:
                await asyncio.wait_for(child.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                child.kill()
                await child.wait()

    def _on_change(self, _summary: Any) -> None:
        if self.runner is not None:
            self.runner.trigger_refresh()

    def _join_thread(self) -> None:
        if self.thread is not None:
            self.thread.join(STOP_TIMEOUT_S)

    async def stop(self) -> None:
        self._stopping = True
        loop = asyncio.get_running_loop()
        if self.runner is not None:
            runner = self.runner
            # Off the loop: stopping waits for the refresh thread, whose RPC calls need the loop running.
            await loop.run_in_executor(None, runner.stop)
            await loop.run_in_executor(None, self._join_thread)
            await loop.run_in_executor(None, runner.app.close)
        if self.child is not None:
            await self._end_child()
            if self._child_watch is not None:
                await self._child_watch

    def status(self) -> dict[str, Any]:
        if self.runner is not None:
            return {"mode": "thread", **self.runner.status()}
        return dict(self._info)
