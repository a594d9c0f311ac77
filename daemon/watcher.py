"""Live watching: watchdog events -> coalesced batches -> ``engine.apply_changes``.

Why it is shaped this way:

* watchdog's inotify observer blocks in ``poll()``; nothing here wakes up on a
  timer while the workspace is quiet (idle CPU ~0). A debounce timer exists
  only while events are pending.
* Events are reduced to *paths*. The debounce adapts (issue 16): a few paths
  whose last event says the file is complete (closed after writing, moved into
  place, deleted) are applied ``QUICK_DEBOUNCE_S`` after the last event, so an
  editor's save is searchable in tens of milliseconds; anything else (many
  paths: a ``git checkout``; a file still open for writing) is coalesced for
  ``daemon.debounce_ms`` after the last event (trailing debounce, capped so a
  never-ending stream still gets applied), then applied in batches. An editor's
  atomic save (write ``x.tmp``, rename over ``x.md``; vim's backup rename;
  JetBrains' ``___jb_tmp___``) therefore reaches the engine as one path, once:
  the temp names are filtered out and the rest coalesce.
* The engine re-reads a path if it exists and drops it if not, and an unchanged
  checksum costs nothing, so the daemon's own writes (``save_memory``, router
  files) come back as no-ops instead of loops.
* Events that arrive while a batch is being applied wait for the next batch,
  so a file half-written when it was read is read again after its last write.
* A kernel queue overflow (events lost) is answered with ``engine.reconcile()``.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import os
import re
import sys
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxos.services.config import CONFIG_FILENAME
from ctxos.services.workspace import is_ignored_dir, is_memory_path, relative_path
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    IgnorePolicy,
    RegexMatchingEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

if TYPE_CHECKING:  # pragma: no cover
    from .context import DaemonContext

log = logging.getLogger(__name__)

MAX_BATCH_PATHS = 1000  # paths per apply_changes call: queries interleave between batches
MAX_DELAY_FACTOR = 10  # a continuous stream is still applied every 10 x debounce
MIN_MAX_DELAY_S = 1.0
MAX_ATTEMPTS = 3  # failed batches are retried, then answered with a reconcile
RETRY_BACKOFF_S = (0.2, 1.0, 5.0, 30.0)
MAX_RECONCILE_FAILURES = 6  # then stop retrying until the next file event (no endless 30 s loop)
QUICK_DEBOUNCE_S = 0.02  # a single finished save: applied this long after its last event
QUICK_MAX_PATHS = 8  # more pending paths than this is a burst: full debounce, one batch


class QueueOverflowEvent(DirModifiedEvent):
    """Synthetic event: the kernel dropped events, so only a full reconcile can be trusted."""

    event_type = "overflow"


# Only the kinds of event that can change a memory (no open/read noise, so the
# engine reading files does not wake the watcher), plus our overflow marker
# (which adds nothing to the inotify mask: watchdog matches the classes by identity).
EVENT_FILTER = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    QueueOverflowEvent,
]

# Temp, swap and backup files editors write around a save (vim, emacs, VS Code, JetBrains...): one
# regex per kind of file name, matched against the last segment of a path.
_EDITOR_TEMP_NAMES = (
    r"4913",  # vim's "can I write here" probe
    r"\.[^/]*",  # hidden temp files (.x.md.swp, .x.md.123.tmp), emacs locks (.#x.md)
    r"~\$[^/]*",  # office owner files
    r"#[^/]*#",  # emacs autosave
    r"[^/]*(?:~|\.swp|\.swo|\.swx|\.swpx|\.tmp|\.temp|\.part|___jb_tmp___|___jb_old___|\.crswap|\.kate-swp)",
)
# The same as watchdog ignore regexes (matched from the start of the whole path, case-sensitive).
EDITOR_TEMP_REGEXES = [rf"(?:.*/)?{name}\Z" for name in _EDITOR_TEMP_NAMES]
_EDITOR_TEMP = [re.compile(regex) for regex in EDITOR_TEMP_REGEXES]


def is_editor_temp(name: str) -> bool:
    """True for a file name (or path) an editor writes around a save (see ``EDITOR_TEMP_REGEXES``)."""
    return any(regex.match(name) for regex in _EDITOR_TEMP)


class WatchFilter:
    """Decides which paths matter: memory files, folders that may hold them, and ``_config.yaml``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.config_rel = CONFIG_FILENAME

    def relevant(self, path: str, is_directory: bool) -> str | None:
        """The workspace-relative path to apply, or None to ignore the event."""
        if not path:
            return None
        rel = relative_path(self.root, path)
        if rel is None:
            return None
        if is_directory:
            return None if is_ignored_dir(rel) else rel
        if is_editor_temp(os.path.basename(rel)):
            return None
        if rel == self.config_rel or is_memory_path(rel):
            return rel
        return None


class _Handler(RegexMatchingEventHandler):
    """Runs on watchdog's thread: reduce events to paths and hand them to the loop.

    watchdog drops events whose paths are all editor temp files (``ignore_regexes``);
    ``IgnorePolicy.ALL`` keeps a move with one such side (an atomic save renames
    ``x.md.tmp`` over ``x.md``), and ``WatchFilter`` then keeps the paths that matter.
    """

    def __init__(self, watcher: WatcherComponent) -> None:
        super().__init__(ignore_regexes=EDITOR_TEMP_REGEXES, case_sensitive=True, ignore_policy=IgnorePolicy.ALL)
        self._watcher = watcher

    def on_overflow(self, event: FileSystemEvent) -> None:
        """A :class:`QueueOverflowEvent` (watchdog then calls ``on_<event_type>``): reconcile."""
        self._watcher.threadsafe_overflow()

    def on_any_event(self, event: FileSystemEvent) -> None:
        if isinstance(event, QueueOverflowEvent):
            return  # on_overflow
        watcher = self._watcher
        watch_filter = watcher.filter
        if watch_filter is None:  # set by start(), before the observer that calls this exists
            return
        paths = []
        for raw in (event.src_path, event.dest_path):
            if raw:
                rel = watch_filter.relevant(os.fsdecode(raw), event.is_directory)
                if rel is not None:
                    paths.append(rel)
        if paths:
            # Created/modified: the writer may not be done (inotify sends IN_CLOSE_WRITE when it is);
            # closed, moved into place, deleted, folders: nothing more is coming for this path.
            watcher.threadsafe_add(paths, complete=not isinstance(event, (FileCreatedEvent, FileModifiedEvent)))


def _make_observer(on_overflow_queue: bool = True) -> BaseObserver:
    """watchdog's native observer; on Linux, one that also reports inotify queue overflows.

    watchdog (7.x) repairs its own watches after ``IN_Q_OVERFLOW`` but tells the
    handler nothing, while we must reconcile, and it has no public hook for it.
    The observer is built with watchdog's public ``emitter_class`` argument; the
    emitter wraps its watch group's ``on_queue_overflow`` (the one private
    attribute used here, ``_inotify``) and queues a :class:`QueueOverflowEvent`.
    If a future watchdog changes that, the hook is skipped (with a log line) and
    watching still works.
    """
    if not (sys.platform.startswith("linux") and on_overflow_queue):
        return Observer()
    try:
        from watchdog.observers.inotify import InotifyEmitter
    except ImportError:  # pragma: no cover
        return Observer()

    class OverflowReportingEmitter(InotifyEmitter):
        def on_thread_start(self) -> None:
            super().on_thread_start()
            group = getattr(self, "_inotify", None)
            original = getattr(group, "on_queue_overflow", None)
            if group is None or original is None:  # pragma: no cover - watchdog internals changed
                log.info("inotify overflow hook unavailable in this watchdog version")
                return

            def on_queue_overflow() -> None:
                original()
                self.queue_event(QueueOverflowEvent(self.watch.path))

            group.on_queue_overflow = on_queue_overflow

    return BaseObserver(emitter_class=OverflowReportingEmitter)


class WatcherComponent:
    """Daemon component: watch the workspace and keep the engine current."""

    name = "watcher"

    def __init__(self) -> None:
        self.ctx: DaemonContext | None = None
        self.filter: WatchFilter | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._observer: BaseObserver | None = None
        self._pending: dict[str, float] = {}  # rel path -> monotonic time first seen (insertion = age order)
        self._writing: set[str] = set()  # pending paths whose last event was created/modified (not closed)
        self._last_event = 0.0  # monotonic time of the latest relevant event
        self._attempts: dict[str, int] = {}  # rel path -> failed attempts so far
        self._overflow = False
        self._reconcile_failures = 0
        self._timer: asyncio.TimerHandle | None = None
        self._flush_task: asyncio.Task[None] | None = None
        self._ready_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._paused = False  # events are collected but not applied while paused
        self._in_flight = 0
        self._in_flight_since: float | None = None
        self._stats: dict[str, Any] = {
            "events": 0,
            "batches": 0,
            "paths_applied": 0,
            "updated": 0,
            "removed": 0,
            "invalid": 0,
            "overflows": 0,
            "reconciles": 0,
            "retries": 0,
            "errors": 0,
            "config_reloads": 0,
        }
        self._last_batch: dict[str, Any] | None = None
        self._recent: deque[dict[str, Any]] = deque(maxlen=20)

    # ------------------------------------------------------------ lifecycle

    async def start(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        self._loop = asyncio.get_running_loop()
        self.filter = WatchFilter(ctx.root)
        observer = _make_observer()
        observer.schedule(_Handler(self), str(ctx.root), recursive=True, event_filter=EVENT_FILTER)
        # start() adds the inotify watches synchronously (one per folder): off the loop.
        try:
            await self._loop.run_in_executor(None, observer.start)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EMFILE):
                raise RuntimeError(
                    f"cannot watch {ctx.root}: the inotify limit is reached ({exc.strerror}); raise it with "
                    "`sudo sysctl fs.inotify.max_user_watches=524288` (and max_user_instances)"
                ) from exc
            raise
        self._observer = observer
        ctx.add_status_provider("watcher", self.status)
        ctx.rpc.register("pause_watching", self._rpc_pause)
        ctx.rpc.register("resume_watching", self._rpc_resume)
        self._ready_task = asyncio.create_task(self._after_ready())  # keep a reference: tasks are weakly held
        log.info("watching %s (debounce %d ms)", ctx.root, round(ctx.debounce_seconds() * 1000))

    async def _after_ready(self) -> None:
        """Events seen during the initial load are applied once it is done (the load may already cover them)."""
        assert self.ctx is not None
        try:
            await self.ctx.wait_ready()
        except Exception:  # noqa: BLE001 - load failed; main.py reports it
            return
        self._schedule()

    async def stop(self) -> None:
        """Stop watching; a batch being applied is finished, pending events are left to the next start's reconcile."""
        self._stopping = True
        if self._ready_task is not None and not self._ready_task.done():
            self._ready_task.cancel()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        observer, self._observer = self._observer, None
        if observer is not None:
            loop = asyncio.get_running_loop()

            def _stop() -> None:
                observer.stop()
                observer.join(timeout=5)

            await loop.run_in_executor(None, _stop)
        if self._flush_task is not None and not self._flush_task.done():
            try:
                await self._flush_task
            except Exception:  # noqa: BLE001
                pass

    # ------------------------------------------------------------ from the watchdog thread

    def threadsafe_add(self, paths: list[str], complete: bool = False) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._add, paths, complete)
        except RuntimeError:  # loop closed while shutting down
            pass

    def threadsafe_overflow(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._on_overflow)
        except RuntimeError:
            pass

    # ------------------------------------------------------------ pause / resume (tray, RPC)

    def _rpc_pause(self, ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
        return self._set_paused_from_thread(True)

    def _rpc_resume(self, ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
        return self._set_paused_from_thread(False)

    def _set_paused_from_thread(self, paused: bool) -> dict[str, Any]:
        """RPC handlers run on worker threads; the flag and the timer belong to the loop."""
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._set_paused(paused), self._loop).result(timeout=10)
        return {"paused": self._paused, "pending_events": self.pending_count()}

    async def _set_paused(self, paused: bool) -> None:
        """Pausing keeps collecting events (cheap) but applies none; resuming applies them as one batch."""
        if paused == self._paused:
            return
        self._paused = paused
        log.info("watching %s", "paused: changes are collected, not indexed" if paused else "resumed")
        if paused and self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not paused:
            self._schedule()

    # ------------------------------------------------------------ on the loop

    def _add(self, paths: Iterable[str], complete: bool = False) -> None:
        self._stats["events"] += 1
        now = time.monotonic()
        self._last_event = now
        for rel in paths:
            self._pending.setdefault(rel, now)
            if complete:
                self._writing.discard(rel)
            else:
                self._writing.add(rel)
        self._schedule()

    def _debounce(self) -> float:
        """How long to wait after the last event: short for a few finished files, the full debounce otherwise.

        A single save (or an atomic rename, or a delete) needs no batching, and
        waiting only delays it; a burst (more than ``QUICK_MAX_PATHS`` paths) or
        a file still being written (created/modified without a close yet) gets
        the configured debounce so it is read once, after its last write.
        """
        assert self.ctx is not None
        debounce = self.ctx.debounce_seconds()
        if self._overflow or len(self._pending) > QUICK_MAX_PATHS:
            return debounce
        if any(rel in self._writing for rel in self._pending):
            return debounce
        return min(debounce, QUICK_DEBOUNCE_S)

    def _on_overflow(self) -> None:
        log.warning("file-event queue overflowed; events were lost: reconciling the workspace")
        self._stats["overflows"] += 1
        self._overflow = True
        self._schedule()

    def _oldest_pending(self) -> float | None:
        """First-seen time of the oldest pending path (dicts keep insertion order, and times only grow)."""
        return next(iter(self._pending.values()), None)

    def _schedule(self, delay: float | None = None) -> None:
        """(Re)arm the debounce timer; nothing is armed while nothing is pending.

        Fires ``debounce`` after the *latest* event (a burst is one batch),
        but no later than ``max_delay`` after the oldest pending one.
        """
        if self._stopping or self._paused or self.ctx is None or self._loop is None or not self.ctx.ready:
            return
        if self._flush_task is not None and not self._flush_task.done():
            return  # the running flush reschedules when it finishes
        if not self._pending and not self._overflow:
            return
        if self._timer is not None:
            self._timer.cancel()
        if delay is None:
            now = time.monotonic()
            debounce = self.ctx.debounce_seconds()
            max_delay = max(MIN_MAX_DELAY_S, debounce * MAX_DELAY_FACTOR)
            oldest = self._oldest_pending()
            deadline = now if oldest is None else oldest + max_delay  # overflow only: at once
            delay = max(0.0, min(self._last_event + self._debounce(), deadline) - now)
        self._timer = self._loop.call_later(delay, self._start_flush)

    def _start_flush(self) -> None:
        self._timer = None
        if self._stopping:
            return
        self._flush_task = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        retry_delay: float | None = None
        try:
            if self._overflow:
                self._overflow = False
                self._pending.clear()  # the reconcile covers them
                self._writing.clear()
                retry_delay = await self._reconcile()
                return
            if self._pending and not self._stopping:
                # One batch per flush; the rest (and events that arrive meanwhile) go through
                # _schedule again, so a save in progress is still debounced.
                batch = list(itertools.islice(self._pending, MAX_BATCH_PATHS))
                firsts = [self._pending.pop(rel) for rel in batch]
                self._writing.difference_update(batch)
                retry_delay = await self._apply(batch, firsts[0])
        except Exception:  # noqa: BLE001 - the watcher must outlive any batch
            log.exception("applying file changes failed")
            self._stats["errors"] += 1
        finally:
            self._flush_task = None
            if not self._stopping:
                self._schedule(retry_delay)

    async def _apply(self, batch: list[str], first_seen: float) -> float | None:
        """Apply one batch; on failure re-queue it (or reconcile after MAX_ATTEMPTS) and return a backoff."""
        assert self.ctx is not None
        ctx = self.ctx
        config_changed = CONFIG_FILENAME in batch
        paths = [rel for rel in batch if rel != CONFIG_FILENAME]
        started = time.monotonic()
        self._in_flight, self._in_flight_since = len(batch), first_seen
        try:
            summary = await ctx.run_write(self._apply_sync, paths, config_changed)
        except Exception as exc:  # noqa: BLE001
            worst = 0
            for rel in batch:
                self._attempts[rel] = self._attempts.get(rel, 0) + 1
                worst = max(worst, self._attempts[rel])
            self._stats["errors"] += 1
            if worst >= MAX_ATTEMPTS:
                log.warning("applying %d path(s) failed %d times (%s); reconciling instead", len(batch), worst, exc)
                for rel in batch:
                    self._attempts.pop(rel, None)
                self._overflow = True
                return RETRY_BACKOFF_S[0]
            self._stats["retries"] += 1
            log.warning("applying %d path(s) failed (%s: %s); retrying", len(batch), type(exc).__name__, exc)
            now = time.monotonic()
            for rel in batch:
                self._pending.setdefault(rel, now)
            return RETRY_BACKOFF_S[min(worst - 1, len(RETRY_BACKOFF_S) - 1)]
        finally:
            self._in_flight, self._in_flight_since = 0, None
        for rel in batch:
            self._attempts.pop(rel, None)
        self._record(summary, len(batch), started, first_seen, config_changed)
        if _changed(summary) or config_changed:
            await ctx.notify_change(summary)
        return None

    def _apply_sync(self, paths: list[str], config_changed: bool) -> Any:
        """On the write thread: reload the config if it changed, then apply the paths."""
        assert self.ctx is not None
        engine = self.ctx.engine
        if config_changed:
            engine.reload_config()
            self._stats["config_reloads"] += 1
            log.info("reloaded %s", CONFIG_FILENAME)
        return engine.apply_changes(paths)

    async def _reconcile(self) -> float | None:
        """Full files-vs-index comparison; on failure keep it due and return a growing backoff."""
        assert self.ctx is not None
        started = time.monotonic()
        self._stats["reconciles"] += 1
        self._in_flight, self._in_flight_since = -1, started
        try:
            summary = await self.ctx.run_write(self.ctx.engine.reconcile)
        except Exception:  # noqa: BLE001
            self._reconcile_failures += 1
            backoff = RETRY_BACKOFF_S[min(self._reconcile_failures - 1, len(RETRY_BACKOFF_S) - 1)]
            self._stats["errors"] += 1
            if self._reconcile_failures >= MAX_RECONCILE_FAILURES:
                log.exception(
                    "reconcile failed %d times; giving up until the next file change (see `ctxos doctor` and this log)",
                    self._reconcile_failures,
                )
                self._reconcile_failures = 0
                self._overflow = False
                return None
            log.exception("reconcile failed; retrying in %.1f s", backoff)
            self._overflow = True
            return backoff
        finally:
            self._in_flight, self._in_flight_since = 0, None
        self._reconcile_failures = 0
        self._record(summary, 0, started, started, False, kind="reconcile")
        if _changed(summary):
            await self.ctx.notify_change(summary)
        return None

    def _record(
        self, summary: Any, n_paths: int, started: float, first_seen: float, config_changed: bool, kind: str = "batch"
    ) -> None:
        now = time.monotonic()
        updated = list(getattr(summary, "updated", []) or [])
        removed = list(getattr(summary, "removed", []) or [])
        invalid = list(getattr(summary, "invalid", []) or [])
        self._stats["batches"] += 1
        self._stats["paths_applied"] += n_paths
        self._stats["updated"] += len(updated)
        self._stats["removed"] += len(removed)
        self._stats["invalid"] += len(invalid)
        entry = {
            "kind": kind,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "paths": n_paths,
            "updated": len(updated),
            "removed": len(removed),
            "invalid": len(invalid),
            "apply_ms": round((now - started) * 1000, 1),
            "lag_ms": round((now - first_seen) * 1000, 1),  # first event -> applied
            "config_reloaded": config_changed,
            "sample": [str(x) for x in (updated + removed)[:5]],
        }
        self._last_batch = entry
        self._recent.append(entry)
        if updated or removed or invalid:
            log.info(
                "%s: %d path(s), %d updated, %d removed, %d invalid in %.0f ms",
                kind,
                n_paths,
                len(updated),
                len(removed),
                len(invalid),
                entry["apply_ms"],
            )

    # ------------------------------------------------------------ status

    def pending_count(self) -> int:
        """Paths waiting or being applied (+1 while a reconcile is due or running)."""
        count = len(self._pending) + max(self._in_flight, 0)
        if self._overflow or self._in_flight < 0:
            count += 1
        return count

    def index_lag_ms(self) -> float:
        """Age of the oldest change not yet applied (0 when the index is current)."""
        now = time.monotonic()
        candidates = [t for t in (self._oldest_pending(), self._in_flight_since) if t is not None]
        return round((now - min(candidates)) * 1000, 1) if candidates else 0.0

    def status(self) -> dict[str, Any]:
        """Called from a worker thread by ``status``: counters plus a snapshot of pending work."""
        return {
            "pending_events": self.pending_count(),
            "index_lag_ms": self.index_lag_ms(),
            "applying": self._in_flight != 0,
            "paused": self._paused,
            **dict(self._stats),
            "last_batch": self._last_batch,
            "recent_batches": list(self._recent),
        }


def _changed(summary: Any) -> bool:
    changed = getattr(summary, "changed", None)
    if changed is not None:
        return bool(changed)
    return bool(getattr(summary, "updated", None) or getattr(summary, "removed", None))
