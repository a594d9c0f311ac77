"""Scheduled jobs inside a REAL daemon process, on a fast test schedule."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from ctxos.services.engine import Engine
from daemon_helpers import daemon_factory, memory_text  # noqa: F401  (daemon_factory is a fixture)

pytestmark = pytest.mark.slow

JOBS = ("governance", "communities", "scratch_expiry", "router")


def fast_config(interval: float, after_change: float = 0.3, wake: float = 0.5) -> str:
    return (
        "schedule:\n"
        f"  governance_interval: {interval}\n  communities_interval: {interval}\n"
        f"  scratch_expiry_interval: {interval}\n  router_interval: {interval}\n"
        f"  after_change_delay: {after_change}\n  wake_check_interval: {wake}\n"
    )


def cluster_files() -> dict[str, str]:
    files = {"08-rules/style.md": memory_text("style", "Write small functions with clear names.", type="rule")}
    for i in range(4):
        files[f"04-skills/deploy-{i}.md"] = memory_text(
            f"deploy-{i}",
            f"Deployment step {i}: kubernetes rollout notes number {i}.",
            type="skill",
            tags=["deploy", "kubernetes", "ops"],
        )
        files[f"05-resources/cook-{i}.md"] = memory_text(
            f"cook-{i}",
            f"Recipe {i}: pasta sauce with basil, variant {i}.",
            type="resource",
            tags=["cooking", "pasta", "recipes"],
        )
    files["04-skills/deploy-extra.md"] = memory_text(
        "deploy-extra",
        "Rollback checklist for kubernetes rollout failures.",
        type="skill",
        tags=["deploy", "kubernetes"],
    )
    return files


def jobs(daemon) -> dict:
    return daemon.status()["jobs"]


def test_jobs_fire_on_a_fast_schedule(make_workspace, daemon_factory):
    root = make_workspace(
        {
            **cluster_files(),
            "_config.yaml": fast_config(1),
            "09-scratch/old.md": memory_text(
                "old-scratch", "Temporary.", type="scratch", modified="2020-01-01T00:00:00"
            ),
        }
    )
    daemon = daemon_factory(root)
    daemon.wait_for(
        lambda: all(jobs(daemon)[name]["runs"] >= 2 for name in JOBS), timeout=60, message="every job to run twice"
    )
    status = jobs(daemon)
    for name in JOBS:
        assert status[name]["last_ok"] is True, status[name]
        assert status[name]["interval_s"] == 1
        assert status[name]["next_run"]
    assert (root / ".ctxos/governance.json").exists()
    assert (root / ".ctxos/communities.json").exists()
    assert (root / "claude.md").exists() and (root / "_index.yaml").exists()
    # scratch expiry archived the expired scratch file, and the daemon saw it go
    assert (root / "_archive/09-scratch/old.md").exists()
    daemon.wait_for(lambda: not daemon.has_memory("old-scratch"), message="archived scratch to leave the index")


def test_intervals_follow_a_config_edit(make_workspace, daemon_factory):
    root = make_workspace({**cluster_files(), "_config.yaml": fast_config(3600)})
    daemon = daemon_factory(root)
    assert jobs(daemon)["governance"]["interval_s"] == 3600
    (root / "_config.yaml").write_text(
        fast_config(3600).replace("governance_interval: 3600", "governance_interval: 0.5")
    )
    daemon.wait_for(
        lambda: jobs(daemon)["governance"]["last_trigger"] == "schedule",
        timeout=15,
        message="governance on its new interval",
    )
    assert jobs(daemon)["governance"]["interval_s"] == 0.5
    assert jobs(daemon)["router"]["interval_s"] == 3600


def test_missed_runs_run_once_on_wake(make_workspace, daemon_factory):
    """SIGSTOP the daemon for ~5 intervals: on SIGCONT each job catches up with one run, not one per missed interval.

    (A stopped process is the closest a test gets to a laptop asleep: the
    timers are overdue when it wakes.) Within one interval after waking a job
    may run twice at most: the catch-up run and, at most, its next regular run
    on APScheduler's interval grid.
    """
    interval = 1.5
    root = make_workspace({**cluster_files(), "_config.yaml": fast_config(interval)})
    daemon = daemon_factory(root)
    daemon.wait_for(
        lambda: all(jobs(daemon)[name]["last_trigger"] == "schedule" for name in JOBS),
        timeout=60,
        message="a scheduled run of every job",
    )
    daemon.close_client()
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        time.sleep(5 * interval)
    finally:
        woke = time.time()
        os.kill(daemon.pid, signal.SIGCONT)
    daemon.wait_for(
        lambda: all(any(t >= woke for t in jobs(daemon)[name]["recent_starts"]) for name in JOBS),
        timeout=5,
        message="the catch-up runs",
    )
    time.sleep(max(0.0, woke + interval - time.time()))
    starts = {name: [t for t in jobs(daemon)[name]["recent_starts"] if woke <= t < woke + interval] for name in JOBS}
    assert all(1 <= len(found) <= 2 for found in starts.values()), starts


def test_a_failing_job_is_recorded_and_the_daemon_goes_on(make_workspace, daemon_factory):
    root = make_workspace({**cluster_files(), "_config.yaml": fast_config(1)})
    (root / ".ctxos").mkdir(exist_ok=True)
    (root / ".ctxos/governance.json").mkdir()  # the report cannot be written: a real failure
    daemon = daemon_factory(root)
    daemon.wait_for(lambda: jobs(daemon)["governance"]["failures"] >= 2, timeout=60, message="governance failures")
    status = jobs(daemon)
    assert status["governance"]["last_ok"] is False
    assert "IsADirectoryError" in status["governance"]["last_error"]
    assert status["router"]["last_ok"] is True and status["communities"]["last_ok"] is True
    assert daemon.context_ids("kubernetes rollout")  # still serving
    assert "scheduled job governance failed" in daemon.log_file.read_text()


def test_router_regenerated_after_an_edit_and_untouched_otherwise(make_workspace, daemon_factory):
    root = make_workspace({**cluster_files(), "_config.yaml": fast_config(3600, after_change=0.3)})
    daemon = daemon_factory(root)
    claude = root / "claude.md"
    daemon.wait_for(lambda: claude.exists() and jobs(daemon)["router"]["runs"] >= 1, message="claude.md")
    first = claude.stat().st_mtime_ns
    # Nothing changed: an explicit regeneration leaves every file alone.
    result = daemon.call("regenerate_router")
    assert {f["status"] for f in result["files"]} == {"unchanged"}
    assert claude.stat().st_mtime_ns == first
    # An edit: regenerated after the debounce, without being asked.
    (root / "08-rules/style.md").write_text(
        memory_text("style", "Write small functions; name them by intent.", type="rule")
    )
    daemon.wait_for(
        lambda: "name them by intent" in claude.read_text(), timeout=15, message="claude.md to follow the edit"
    )
    assert claude.stat().st_mtime_ns != first
    # No write -> event -> write loop: once settled, neither the file nor the job moves.
    time.sleep(1.0)
    daemon.wait_settled()
    second, runs = claude.stat().st_mtime_ns, jobs(daemon)["router"]["runs"]
    time.sleep(1.5)
    assert claude.stat().st_mtime_ns == second
    assert jobs(daemon)["router"]["runs"] == runs


def test_communities_follow_changes_and_the_bonus_shows_in_simulate(make_workspace, daemon_factory):
    root = make_workspace({**cluster_files(), "_config.yaml": fast_config(3600, after_change=0.3)})
    daemon = daemon_factory(root)
    path = root / ".ctxos/communities.json"
    daemon.wait_for(path.exists, message="communities.json")
    mapping = json.loads(path.read_text())["communities"]
    assert mapping["deploy-0"] == mapping["deploy-extra"] != mapping["cook-0"]

    simulated = daemon.call("simulate", query="rollback checklist kubernetes", budget_tokens=4000)
    graph = {s["id"]: s["signals"]["graph"] for s in simulated["selected"]}
    # The same query without communities (an in-process engine given an empty map).
    engine = Engine(root)
    engine.load()
    try:
        engine.set_community_of({})
        plain = engine.execute_context_query("rollback checklist kubernetes", 4000, record_access=False)
    finally:
        engine.close()
    plain_graph = {s.id: s.signals["graph"] for s in plain.selected}
    bonus = 0.08
    boosted = [
        i
        for i in graph
        if i.startswith("deploy")
        and i in plain_graph
        and plain_graph[i] + bonus <= 1
        and graph[i] == pytest.approx(plain_graph[i] + bonus, abs=1e-6)
    ]
    assert boosted, (graph, plain_graph)

    # A new memory joins the deploy cluster: communities are recomputed after the change.
    (root / "04-skills/deploy-new.md").write_text(
        memory_text("deploy-new", "Blue-green kubernetes deploys.", type="skill", tags=["deploy", "kubernetes", "ops"])
    )
    daemon.wait_for(
        lambda: "deploy-new" in json.loads(path.read_text())["communities"],
        timeout=15,
        message="communities to include the new memory",
    )
    mapping = json.loads(path.read_text())["communities"]
    assert mapping["deploy-new"] == mapping["deploy-0"]


def test_an_after_change_run_waits_ten_times_its_last_duration_and_is_deferred_not_dropped():
    """At 100,000 memories Leiden took minutes and every new file asked for it again (issue 16)."""
    import asyncio

    from ctxos.daemon.scheduler import AFTER_CHANGE_DUTY, SchedulerComponent

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        scheduler = SchedulerComponent()
        now = time.monotonic()
        scheduler._ended["communities"] = (now, 2.0)  # its last run took 2 s and just ended
        assert scheduler.cooldown_left("communities", now) == pytest.approx(AFTER_CHANGE_DUTY * 2.0)
        assert scheduler.cooldown_left("communities", now + AFTER_CHANGE_DUTY * 2.0 + 1) == 0
        assert scheduler.cooldown_left("router", now) == 0  # never ran: runs at once
        await scheduler._change_run("communities")
        pending = scheduler._deferred["communities"]
        assert pending.when() - loop.time() == pytest.approx(AFTER_CHANGE_DUTY * 2.0, abs=0.5)
        await scheduler._change_run("communities")  # a later change joins the pending run
        assert scheduler._deferred == {"communities": pending}
        await scheduler.stop()
        assert not scheduler._deferred and pending.cancelled()

    asyncio.run(scenario())
