"""The daemon's scheduled jobs: governance, community recompute, scratch expiry, router regeneration,
and the optional team git sync (``history.git_sync``).

APScheduler's ``AsyncIOScheduler`` runs inside the daemon's own event loop; each
job hands its engine work to the daemon's worker threads (``ctx.run_background``
for reads, off the query pool, / ``ctx.run_write``), so the loop never blocks on the disk.

Rules the issue asks for, and how they hold:

- intervals come from ``schedule.*_interval`` in ``_config.yaml`` (0 = off);
- a job never overlaps itself: ``max_instances=1`` for scheduled runs, plus a
  per-job lock shared with the change-triggered runs;
- a run missed while the machine slept runs once on wake: ``coalesce=True``
  with ``misfire_grace_time=None``. asyncio timers use the monotonic clock,
  which stops during suspend on Linux, so a light wake check (one timer every
  ``schedule.wake_check_interval`` seconds) notices a wall-clock jump and
  wakes the scheduler at once instead of after the suspended time;
- failures are logged with their traceback and recorded in
  ``ctx.status_extra["jobs"]`` (shown by ``ctxos status``); the daemon goes on.

After each batch of file changes (``ctx.add_change_listener``), community
recompute and router regeneration run once, ``schedule.after_change_delay``
seconds after the last change of a burst (debounced), and no sooner than
``AFTER_CHANGE_DUTY`` times their last duration after their last run ended:
at 100,000 memories Leiden ran for minutes in its child process (one of two
cores) and every new file asked for it again; a run that must wait is
deferred, not dropped, and then sees every change made meanwhile. At 10,000
memories (runs of a second or two) the wait is seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ctxos.services.stop_flag import Cancelled

from .context import DaemonContext

log = logging.getLogger("ctxos.daemon.scheduler")

DEFAULT_INTERVAL_S = 3600.0
RECENT_RUNS = 10  # start times (epoch s) kept per job in status
WAKE_JUMP_S = 5.0  # wall clock ahead of the monotonic clock by more than this: we slept
AFTER_CHANGE_DUTY = 10.0  # an after-change run waits until this x its last duration has passed since it ended


# --- the jobs: plain functions of the engine, run on worker threads ---------------------


def job_governance(engine: Any) -> dict[str, Any]:
    from ctxos.services.governance import governance_report

    report = governance_report(engine)
    # The scheduled run keeps nothing: its report is saved (.ctxos/governance.json) and the
    # engine's memo would hold it (~16 MiB live at 10,000) until the next ask, maybe an hour.
    engine.governance_reports.clear()
    return {"findings": len(report.findings), "counts": report.counts(), "elapsed_ms": round(report.elapsed_ms, 1)}


def job_communities(engine: Any) -> dict[str, Any]:
    from ctxos.services.communities import refresh_communities

    cmap, recomputed = refresh_communities(engine)
    return {
        "recomputed": recomputed,
        "communities": len(cmap.sizes),
        "nodes": cmap.node_count,
        "edges": cmap.edge_count,
    }


def job_scratch_expiry(engine: Any) -> dict[str, Any]:
    if not engine.config.settings.governance.scratch_auto_archive:
        return {"archived": [], "disabled": True}
    from ctxos.services.governance import expire_scratch

    return {"archived": [item["archived"] for item in expire_scratch(engine)]}


def job_router(engine: Any) -> dict[str, Any]:
    from ctxos.services.router import regenerate_router

    report = regenerate_router(engine)
    return {"written": report.written, "counts": report.to_dict()["counts"]}


def job_git_sync(engine: Any) -> dict[str, Any]:
    """``git pull --rebase`` + ``push`` for a team workspace (services/history/sync.py); the watcher
    indexes what the pull brought. Runs behind the write lock (and the cross-process one)."""
    from ctxos.services.history.sync import sync
    from ctxos.services.writes import write_lock

    with write_lock(engine.root):
        return sync(engine.root, engine.config.settings.history.git_remote or None).to_dict()


def git_sync_interval(config: Any) -> float:
    """``history.git_sync_interval`` when ``history.git_sync`` is on, else 0 (off)."""
    if config.settings.history.git_sync is not True:
        return 0.0
    return config.settings.history.git_sync_interval


def _attributed(spec: JobSpec) -> Callable[[Any], dict[str, Any]]:
    """The job, with its writes (archived scratch, router files) committed as one history entry."""

    def run(engine: Any) -> dict[str, Any]:
        from ctxos.services.history import Actor, scope

        with scope(Actor(client="scheduler", tool=f"{spec.name} job")):
            return spec.run(engine)

    return run


@dataclass(frozen=True)
class JobSpec:
    name: str
    config_key: str  # schedule.<key> interval in seconds
    run: Callable[[Any], dict[str, Any]]
    writes: bool  # True: behind the daemon's write lock
    interval_of: Callable[[Any], float] | None = None  # the interval from the config, when not schedule.<key>


JOBS: tuple[JobSpec, ...] = (
    JobSpec("governance", "governance_interval", job_governance, writes=False),
    # Reads the graph and swaps in a new community map (one reference assignment) plus a
    # cache file under .ctxos: no memory file changes, so it must not hold the write lock
    # that file-change batches wait on.
    JobSpec("communities", "communities_interval", job_communities, writes=False),
    JobSpec("scratch_expiry", "scratch_expiry_interval", job_scratch_expiry, writes=True),
    JobSpec("router", "router_interval", job_router, writes=False),
    JobSpec("git_sync", "history.git_sync_interval", job_git_sync, writes=True, interval_of=git_sync_interval),
)
AFTER_CHANGE_JOBS: tuple[str, ...] = ("communities", "router")
START_JOBS: tuple[str, ...] = ("scratch_expiry", "communities", "router")


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


class SchedulerComponent:
    """Daemon component (``async start(ctx)`` / ``async stop()``) running the jobs above."""

    name = "scheduler"

    def __init__(self) -> None:
        self.ctx: DaemonContext | None = None
        self.scheduler: Any = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._debounce: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._wake_handle: asyncio.TimerHandle | None = None
        self._wall_mark = 0.0
        self._mono_mark = 0.0
        self._stopping = False
        self._ended: dict[str, tuple[float, float]] = {}  # job -> (monotonic end, seconds it took)
        self._deferred: dict[str, asyncio.TimerHandle] = {}  # after-change runs waiting for their turn

    # --- lifecycle ---------------------------------------------------------------------
    async def start(self, ctx: DaemonContext) -> None:
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        self.ctx = ctx
        loop = asyncio.get_running_loop()
        jobs_status: dict[str, Any] = ctx.status_extra.setdefault("jobs", {})
        self.scheduler = AsyncIOScheduler(
            event_loop=loop,
            timezone=UTC,
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        for spec in JOBS:
            self._locks[spec.name] = asyncio.Lock()
            interval = self._interval(spec)
            jobs_status[spec.name] = {
                "interval_s": interval,
                "runs": 0,
                "failures": 0,
                "last_run": None,
                "last_ok": None,
                "last_error": None,
                "last_result": None,
                "last_duration_ms": None,
                "last_trigger": None,
                "next_run": None,
                "running": False,
                "recent_starts": [],
            }
            if interval > 0:
                self._add(spec.name, interval)
        self.scheduler.start()
        self._refresh_next_runs()
        ctx.add_change_listener(self._on_change)
        ctx.add_status_provider("history", self._history_status)
        self._arm_wake_check()
        # Once loaded: expire scratch, bring communities and router files up to date (cheap when unchanged).
        self._spawn(self._after_ready())
        log.info(
            "scheduler started: %s",
            ", ".join(
                f"{s.name} every {self._interval(s):g}s" if self._interval(s) > 0 else f"{s.name} off" for s in JOBS
            ),
        )

    def _history_status(self) -> dict[str, Any]:
        """History mode and counters (commits, journal entries, failures), for ``ctxos status``."""
        recorder = getattr(self.ctx.engine, "history", None) if self.ctx is not None else None
        return recorder.status() if recorder is not None else {"mode": "not loaded"}

    async def stop(self) -> None:
        self._stopping = True
        if self.ctx is not None:
            self.ctx.remove_change_listener(self._on_change)
        for handle in (self._debounce, self._wake_handle, *self._deferred.values()):
            if handle is not None:
                handle.cancel()
        self._deferred.clear()
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # --- running jobs --------------------------------------------------------------------
    def _interval(self, spec: JobSpec) -> float:
        assert self.ctx is not None
        try:
            if spec.interval_of is not None:
                return max(0.0, float(spec.interval_of(self.ctx.config)))
            return max(0.0, float(getattr(self.ctx.config.settings.schedule, spec.config_key, DEFAULT_INTERVAL_S)))
        except (TypeError, ValueError):
            return DEFAULT_INTERVAL_S

    def _add(self, name: str, interval: float) -> None:
        self.scheduler.add_job(self._scheduled, "interval", seconds=interval, args=[name], id=name, name=name)

    def _sync_intervals(self) -> None:
        """Follow ``schedule.*_interval`` after ``_config.yaml`` changed (the watcher reloads it)."""
        assert self.ctx is not None
        jobs_status = self.ctx.status_extra.setdefault("jobs", {})
        for spec in JOBS:
            record = jobs_status.setdefault(spec.name, {})
            new = self._interval(spec)
            if record.get("interval_s") == new:
                continue
            existing = self.scheduler.get_job(spec.name)
            if existing is not None and new > 0:
                self.scheduler.reschedule_job(spec.name, trigger="interval", seconds=new)
            elif existing is not None:
                self.scheduler.remove_job(spec.name)
                record["next_run"] = None
            elif new > 0:
                self._add(spec.name, new)
            log.info("job %s: interval %s -> %s s", spec.name, record.get("interval_s"), new)
            record["interval_s"] = new
        self._refresh_next_runs()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _scheduled(self, name: str) -> None:
        await self.run_job(name, trigger="schedule")

    async def run_job(self, name: str, trigger: str = "manual") -> dict[str, Any] | None:
        """Run one job now (waiting for the same job if it is running); record the outcome."""
        assert self.ctx is not None
        ctx = self.ctx
        spec = next(s for s in JOBS if s.name == name)
        await ctx.wait_ready()
        async with self._locks[name]:
            if self._stopping:
                return None
            record = ctx.status_extra.setdefault("jobs", {}).setdefault(name, {"runs": 0, "failures": 0})
            started, mono = time.time(), time.monotonic()
            record["last_run"] = _iso(started)
            record["last_trigger"] = trigger
            record["running"] = True
            record["recent_starts"] = [*record.get("recent_starts", [])[-(RECENT_RUNS - 1) :], round(started, 3)]
            try:
                runner = ctx.run_write if spec.writes else ctx.run_background
                result = await runner(_attributed(spec), ctx.engine)
            except asyncio.CancelledError:
                raise
            except Cancelled:  # the daemon is shutting down (services/stop_flag.py): not a failure
                log.info("job %s stopped: the daemon is shutting down", name)
                result = None
            except Exception as exc:  # noqa: BLE001 - a failed job is reported, the daemon goes on
                log.exception("scheduled job %s failed", name)
                record["failures"] = record.get("failures", 0) + 1
                record["last_ok"] = False
                record["last_error"] = f"{type(exc).__name__}: {exc}"
                record["last_error_at"] = _iso(started)
                result = None
            else:
                record["last_ok"] = True
                record["last_result"] = result
                if name == "scratch_expiry" and result and result.get("archived"):
                    self._schedule_after_change()
            finally:
                ended = time.monotonic()
                self._ended[name] = (ended, ended - mono)
                record["running"] = False
                record["runs"] = record.get("runs", 0) + 1
                record["last_duration_ms"] = round((ended - mono) * 1000.0, 1)
                self._refresh_next_runs()
            return result

    def _refresh_next_runs(self) -> None:
        if self.scheduler is None or self.ctx is None:
            return
        jobs_status = self.ctx.status_extra.setdefault("jobs", {})
        for job in self.scheduler.get_jobs():
            next_time = getattr(job, "next_run_time", None)
            jobs_status.setdefault(job.id, {})["next_run"] = next_time.isoformat() if next_time else None

    # --- after changes (debounced) ---------------------------------------------------------
    def _on_change(self, summary: Any) -> None:
        """After a batch of changes (or a config reload): follow new intervals, refresh derived files."""
        if self._stopping or self.scheduler is None:
            return
        self._sync_intervals()
        self._schedule_after_change()

    def _schedule_after_change(self) -> None:
        """Run communities + router once, ``schedule.after_change_delay`` s after the last change."""
        if self._stopping or self.ctx is None:
            return
        loop = asyncio.get_running_loop()
        if self._debounce is not None:
            self._debounce.cancel()
        try:
            delay = self.ctx.config.settings.schedule.after_change_delay
        except (TypeError, ValueError):
            delay = 5.0
        self._debounce = loop.call_later(delay, lambda: self._spawn(self._after_change()))

    async def _after_change(self) -> None:
        self._debounce = None
        for name in AFTER_CHANGE_JOBS:
            await self._change_run(name)

    async def _change_run(self, name: str) -> None:
        """An after-change run of ``name``: now, or deferred while it runs or cools down."""
        wait = self.cooldown_left(name)
        lock = self._locks.get(name)
        if lock is not None and lock.locked():
            wait = max(wait, 1.0)  # running now (a start or scheduled run): look again when it is done
        if wait > 0:
            self._defer(name, wait)
            return
        await self.run_job(name, trigger="change")

    def cooldown_left(self, name: str, now: float | None = None) -> float:
        """Seconds before an after-change run of ``name`` may start (0: now); see the module doc."""
        last = self._ended.get(name)
        if last is None:
            return 0.0
        ended, took = last
        return max(0.0, ended + AFTER_CHANGE_DUTY * took - (time.monotonic() if now is None else now))

    def _defer(self, name: str, wait: float) -> None:
        """Run ``name`` once ``wait`` seconds from now (one pending run per job; later changes join it)."""
        if self._stopping or name in self._deferred:
            return
        record = self.ctx.status_extra.setdefault("jobs", {}).setdefault(name, {}) if self.ctx is not None else {}
        record["deferred_s"] = round(wait, 1)

        def fire() -> None:
            self._deferred.pop(name, None)
            record.pop("deferred_s", None)
            self._spawn(self._change_run(name))

        self._deferred[name] = asyncio.get_running_loop().call_later(wait, fire)

    async def _after_ready(self) -> None:
        assert self.ctx is not None
        try:
            await self.ctx.wait_ready()
        except Exception:  # noqa: BLE001 - a failed load is reported by main.py
            return
        for name in START_JOBS:
            await self.run_job(name, trigger="start")

    # --- sleep / resume ----------------------------------------------------------------------
    def _arm_wake_check(self) -> None:
        assert self.ctx is not None
        try:
            every = self.ctx.config.settings.schedule.wake_check_interval
        except (TypeError, ValueError):
            every = 60.0
        if every <= 0 or self._stopping:
            return
        self._wall_mark, self._mono_mark = time.time(), time.monotonic()
        self._wake_handle = asyncio.get_running_loop().call_later(every, self._wake_check)

    def _wake_check(self) -> None:
        """If the wall clock moved further than the monotonic one, we slept: process due jobs now."""
        jump = (time.time() - self._wall_mark) - (time.monotonic() - self._mono_mark)
        if jump > WAKE_JUMP_S and self.scheduler is not None and self.scheduler.running:
            log.info("clock jumped %.0f s (sleep/resume?): running due jobs once", jump)
            self.scheduler.wakeup()
        self._arm_wake_check()
