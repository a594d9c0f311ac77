"""The watcher in-process, on a real engine and real inotify: overflow handling and batching."""
from __future__ import annotations

import asyncio
import sys
import time

import pytest

from daemon_helpers import memory_text

from ctxos.daemon.context import DaemonContext, DaemonOptions
from ctxos.daemon.watcher import WatcherComponent
from ctxos.services.engine import Engine

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify overflow hook is Linux-only")


async def _until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


def test_queue_overflow_triggers_a_reconcile(make_workspace) -> None:
    root = make_workspace({"08-rules/seed.md": memory_text("seed", "Seed rule.")})

    async def scenario() -> dict:
        engine = Engine(root)
        ctx = DaemonContext(root, engine, options=DaemonOptions(debounce_ms=20))
        ctx.bind_loop(asyncio.get_running_loop())
        await ctx.run_write(engine.load)
        # A change the watcher never hears about, as if its event had been dropped by the kernel:
        (root / "03-projects" / "lost.md").write_text(memory_text("lost", "An edit whose event was lost."))
        watcher = WatcherComponent()
        await watcher.start(ctx)
        try:
            ctx.mark_ready()
            assert engine.get_memory("lost") is None
            # The kernel's IN_Q_OVERFLOW cannot be provoked here without lowering a system-wide
            # sysctl, so call watchdog's own overflow callback on the live watch group, which is
            # exactly what watchdog does when the kernel reports the overflow.
            emitters = list(watcher._observer.emitters)
            assert emitters, "no inotify emitter"
            emitters[0]._inotify.on_queue_overflow()
            await _until(lambda: watcher.status()["reconciles"] >= 1 and not watcher.status()["pending_events"])
            assert engine.get_memory("lost") is not None
            return watcher.status()
        finally:
            await watcher.stop()
            ctx.write_sync(engine.close)
            ctx.shutdown_executors()

    status = asyncio.run(scenario())
    assert status["overflows"] == 1 and status["reconciles"] == 1 and status["errors"] == 0
    assert status["last_batch"]["kind"] == "reconcile"


def test_a_burst_is_applied_in_few_batches(make_workspace) -> None:
    root = make_workspace({"08-rules/seed.md": memory_text("seed", "Seed rule.")})

    async def scenario() -> tuple[dict, int]:
        engine = Engine(root)
        ctx = DaemonContext(root, engine, options=DaemonOptions(debounce_ms=100))
        ctx.bind_loop(asyncio.get_running_loop())
        changes: list = []
        ctx.add_change_listener(changes.append)
        watcher = WatcherComponent()
        await watcher.start(ctx)
        try:
            await ctx.run_write(engine.load)
            ctx.mark_ready()
            for i in range(300):
                (root / "05-resources" / f"b{i}.md").write_text(memory_text(f"b{i}", f"Burst {i}"))
            await _until(lambda: len(engine.store) == 301 and not watcher.status()["pending_events"], 30)
            return watcher.status(), len(changes)
        finally:
            await watcher.stop()
            ctx.write_sync(engine.close)
            ctx.shutdown_executors()

    status, notified = asyncio.run(scenario())
    assert status["updated"] == 300 and status["errors"] == 0
    assert status["batches"] <= 5, status["recent_batches"]     # coalesced, not one batch per file
    assert notified == status["batches"]                         # one change notification per applied batch
