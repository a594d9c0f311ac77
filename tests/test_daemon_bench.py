"""The daemon benchmark's small mode runs end to end (the full run's numbers are in docs/daemon.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_daemon.py"


@pytest.mark.slow
def test_bench_daemon_small(tmp_path: Path) -> None:
    out = tmp_path / "bench_daemon.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--small", "--json", str(out)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "save-to-searchable" in run.stdout and "socket get_context" in run.stdout
    data = json.loads(out.read_text())
    settings = data["settings"]
    # (a few generated files may be skipped as invalid by the parser: count what was indexed)
    assert data["small"] is True and 0.8 * settings["memories"] <= data["memories"] <= settings["memories"]
    assert data["query"]["n"] == settings["clients"] * settings["queries_per_client"]
    assert data["save_single"]["n"] == settings["single_edits"]
    assert data["save_during_burst"]["n"] == settings["burst_probes"]
    assert 0 < data["save_single"]["p50"] <= data["save_single"]["p95"]
    assert 0 < data["query"]["p50"] <= data["query"]["p95"]
    assert data["burst"]["all_searchable_s"] >= data["burst"]["all_listed_s"] > 0
    assert data["idle"]["rss_mb"] > 0 and data["idle"]["cpu_s"] >= 0
    split = data["idle"]["rss_split_mb"]  # RssAnon + RssFile (+ RssShmem, ~0) make VmRSS, read a moment apart
    assert split["anon"] > 10 and split["file"] > 1 and abs(split["anon"] + split["file"] - data["idle"]["rss_mb"]) < 5
    assert "mapped files (shared libraries)" in run.stdout
    assert data["query"]["engine_ms"]["n"] == data["query"]["n"]
    stdio = data["mcp_stdio"]  # through ``ctxos mcp``: the stdio server an agent starts
    assert "MCP stdio get_context" in run.stdout and stdio["calls"] == 18 * settings["stdio_rounds"]
    assert 0 < stdio["engine_p50_ms"] < stdio["p50_ms"] <= stdio["p95_ms"] and not stdio["over_budget"]
    assert data["machine"]["cores"] >= 1
    assert data["first_query_after_cold_start_ms"] > 0 and data["first_query_after_warm_restart_ms"] > 0
    assert "first get_context right after ready" in run.stdout
    # Below 10,000 memories the table shows issue 16's latency targets only, each with its value.
    targets = data["targets"]
    assert set(targets) == {"save_p95_ms", "query_p95_ms", "stdio_p95_ms"}
    assert targets["save_p95_ms"] == {
        "target": 200.0,
        "value": data["save_single"]["p95"],
        "met": data["save_single"]["p95"] <= 200.0,
    }
    assert "<= 200 ms" in run.stdout


def test_bench_daemon_states_the_targets_issue_16_sets_for_the_size() -> None:
    sys.path.insert(0, str(BENCH.parent))
    try:
        from bench_daemon import issue_targets
    finally:
        sys.path.remove(str(BENCH.parent))
    at_10k = issue_targets(10_000)
    assert at_10k["cold_start_s"] == 6.0 and at_10k["warm_restart_s"] == 1.5 and at_10k["idle_rss_mb"] == 120.0
    assert at_10k["rss_after_queries_mb"] == 160.0 and at_10k["rss_after_burst_mb"] == 200.0
    assert at_10k["query_p95_ms"] == 40.0 and at_10k["stdio_p95_ms"] == 15.0 and at_10k["save_p95_ms"] == 200.0
    assert issue_targets(100_000) == {"warm_restart_s": 5.0, "idle_rss_mb": 400.0, "one_client_p95_ms": 60.0}
    assert set(issue_targets(200)) == {"save_p95_ms", "query_p95_ms", "stdio_p95_ms"}


@pytest.mark.slow
def test_bench_daemon_pair_small_runs_each_side_with_its_own_environment(tmp_path: Path) -> None:
    """Two real daemons, one with the interpreter settings off: each side's status shows what it ran with."""
    out = tmp_path / "pair.json"
    run = subprocess.run(
        [sys.executable, str(BENCH.with_name("bench_daemon_pair.py")), "--small", "--a", "CTXOS_INTERPRETER_TUNING=0"]
        + ["--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(out.read_text())
    settings = data["settings"]
    per_side = settings["bursts"] * settings["clients"] * settings["per_client"]
    for side in ("a", "b"):
        assert data[side]["queries"] == per_side and len(data[side]["burst_p95_ms"]) == settings["bursts"]
        assert 0 < data[side]["p50_ms"] <= data[side]["p95_ms"]
    assert data["env_a"] == {"CTXOS_INTERPRETER_TUNING": "0"} and data["env_b"] == {}
    assert data["interpreter_a"]["switch_interval_ms"] == 5.0 and data["interpreter_a"]["gc_thresholds"][0] == 700
    assert data["interpreter_b"]["switch_interval_ms"] == 10.0 and data["interpreter_b"]["gc_thresholds"][0] == 10_000
    assert 0 <= data["bursts_b_lower"] <= settings["bursts"]
    assert "bursts where B's p95 is lower" in run.stdout


def test_bench_daemon_pair_refuses_an_environment_that_is_not_name_value() -> None:
    run = subprocess.run(
        [sys.executable, str(BENCH.with_name("bench_daemon_pair.py")), "--small", "--a", "TUNING"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0 and "not NAME=VALUE: 'TUNING'" in run.stderr


@pytest.mark.slow
def test_bench_workspaces_small(tmp_path: Path) -> None:
    """The per-user daemon's cost per registered workspace (idle and loaded) is measured end to end."""
    out = tmp_path / "bench_workspaces.json"
    bench = BENCH.with_name("bench_workspaces.py")
    run = subprocess.run(
        [sys.executable, str(bench), "--small", "--json", str(out)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert [r["workspaces"] for r in rows] == data["settings"]["counts"]
    assert all(0 < r["idle_rss_mb"] <= r["loaded_rss_mb"] for r in rows)
    assert data["single_daemon_rss_mb"] > 0
    # Idle workspaces cost little: far less than a daemon of their own each.
    assert data["per_idle_workspace_mb"] < data["single_daemon_rss_mb"] / 4
