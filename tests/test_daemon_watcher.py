"""The watcher in-process, on a real engine and real inotify: overflow handling and batching."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
from ctxos.daemon.context import DaemonContext, DaemonOptions
from ctxos.daemon.watcher import WatcherComponent
from ctxos.services.engine import Engine
from ctxos.services.index import MAX_SEGMENTS
from daemon_helpers import memory_text

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
            # The observer thread that dispatched the overflow event still delivers events.
            (root / "03-projects" / "after.md").write_text(memory_text("after", "Written after the overflow."))
            await _until(lambda: engine.get_memory("after") is not None)
            assert watcher._observer.is_alive()
            return watcher.status()
        finally:
            await watcher.stop()
            ctx.write_sync(engine.close)
            ctx.shutdown_executors()

    status = asyncio.run(scenario())
    assert status["overflows"] == 1 and status["reconciles"] == 1 and status["errors"] == 0


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
    assert status["batches"] <= 5, status["recent_batches"]  # coalesced, not one batch per file
    assert notified == status["batches"]  # one change notification per applied batch


def test_a_finished_save_skips_the_debounce_and_an_open_file_waits(make_workspace) -> None:
    """Adaptive debounce: a closed file is applied at once, a file still open for writing waits for its close."""
    root = make_workspace({"08-rules/seed.md": memory_text("seed", "Seed rule.")})

    async def scenario() -> tuple[float, bool, float]:
        engine = Engine(root)
        ctx = DaemonContext(root, engine, options=DaemonOptions(debounce_ms=3000))
        ctx.bind_loop(asyncio.get_running_loop())
        watcher = WatcherComponent()
        await watcher.start(ctx)
        try:
            await ctx.run_write(engine.load)
            ctx.mark_ready()
            started = time.monotonic()
            (root / "03-projects" / "quick.md").write_text(memory_text("quick", "Saved by an editor."))
            await _until(lambda: engine.get_memory("quick") is not None, 10)
            quick_s = time.monotonic() - started
            # A file still open for writing (no IN_CLOSE_WRITE yet) is not read half-written ...
            handle = open(root / "03-projects" / "slow.md", "w", encoding="utf-8")
            handle.write(memory_text("slow", "Written in two parts,"))
            handle.flush()
            await asyncio.sleep(0.5)
            early = engine.get_memory("slow") is not None
            # ... and its close ends the wait.
            handle.write(" the second one now.\n")
            started = time.monotonic()
            handle.close()
            await _until(lambda: (m := engine.get_memory("slow")) is not None and "second one" in m.l1 + m.l2, 10)
            return quick_s, early, time.monotonic() - started
        finally:
            await watcher.stop()
            ctx.write_sync(engine.close)
            ctx.shutdown_executors()

    quick_s, early, after_close_s = asyncio.run(scenario())
    assert quick_s < 1.5, quick_s  # far below the 3 s debounce
    assert not early
    assert after_close_s < 1.5, after_close_s


def test_single_saves_are_committed_unmerged_and_merged_after(make_workspace) -> None:
    """The daemon's commits leave the index's small segments unmerged (no save waits for a merge);
    the context merges them on the write thread once the saves pause (INDEX_MERGE_DELAY_S)."""
    SAVES = MAX_SEGMENTS + 2  # past the merge threshold, below index.HARD_MAX_SEGMENTS
    root = make_workspace({"08-rules/seed.md": memory_text("seed", "Seed rule.")})

    async def scenario() -> tuple[list[bool], int, list[str]]:
        engine = Engine(root)
        ctx = DaemonContext(root, engine, options=DaemonOptions(debounce_ms=20))
        ctx.bind_loop(asyncio.get_running_loop())
        watcher = WatcherComponent()
        await watcher.start(ctx)
        merged_in_commit: list[bool] = []
        try:
            await ctx.run_write(engine.load)
            assert engine.index is not None and engine.index.defer_merges  # the daemon's setting
            index = engine.index
            real_update = index.update

            def watched_update(*args, **kwargs):  # did this save's own commit shrink the segment count?
                before = len(index.ix._segments())
                result = real_update(*args, **kwargs)
                merged_in_commit.append(len(index.ix._segments()) < before)
                return result

            index.update = watched_update  # type: ignore[method-assign]
            ctx.mark_ready()
            for i in range(SAVES):
                (root / "03-projects" / f"s{i}.md").write_text(memory_text(f"s{i}", f"Single save {i}."))
                await _until(lambda i=i: engine.get_memory(f"s{i}") is not None)
            await _until(lambda: not index.merge_due() and (ctx._index_merge is None or ctx._index_merge.done()))
            found = [h.id for h in index.search([("single", 1.0)], 50)]
            return merged_in_commit, index.info()["segments"], found
        finally:
            await watcher.stop()
            ctx.write_sync(engine.close)
            ctx.shutdown_executors()

    merged_in_commit, segments, found = asyncio.run(scenario())
    assert len(merged_in_commit) >= SAVES and not any(merged_in_commit)
    assert segments <= MAX_SEGMENTS  # merged after the saves, by schedule_index_merge
    assert sorted(found) == sorted(f"s{i}" for i in range(SAVES))
