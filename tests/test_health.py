"""The health score moves with coverage, efficiency, freshness, balance and cleanliness."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from ctxos.services.engine import Engine
from ctxos.services.governance import governance_report
from ctxos.services.health import HealthSettings, compute_health, efficiency_part, health_inputs
from daemon_helpers import memory_text


def days_ago(days: int) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%S")


def health_of(engine: Engine):
    settings = HealthSettings.from_config(engine.config)
    report = governance_report(engine)
    return compute_health(
        engine.list_memories(),
        flagged_ids=report.flagged_ids(),
        invalid_count=len(engine.invalid_files()),
        settings=settings,
        **health_inputs(engine.access_log, settings),
    )


TOPICS = {
    "billing": ("05-resources", "resource", "Invoices are generated nightly by the billing worker from usage records."),
    "deploy": ("04-skills", "skill", "Deploy with the release pipeline; canary first, then the full fleet."),
    "postgres": ("06-decisions", "decision", "We chose postgres over mysql for transactional consistency."),
    "oncall": ("03-projects", "project", "The oncall rotation changes every monday at noon."),
}


@pytest.fixture
def engine(make_workspace):
    files = {
        f"{folder}/{name}.md": memory_text(name, text, type=kind, modified=days_ago(200))
        for name, (folder, kind, text) in TOPICS.items()
    }
    eng = Engine(make_workspace(files))
    eng.load()
    yield eng
    eng.close()


def test_score_moves_with_coverage_and_freshness(engine):
    first = health_of(engine)
    assert first.part("coverage").score == 0.0
    assert "not loaded by any query" in first.part("coverage").advice
    assert first.part("freshness").score < 0.5 and "not updated in 90 days" in first.part("freshness").advice
    assert first.part("efficiency").score == 0.0 and first.part("efficiency").advice

    # Coverage: two real context queries load two of the four memories.
    for query in ("billing worker invoices", "deploy release pipeline canary"):
        result = engine.execute_context_query(query, 300)
        assert result.selected
    second = health_of(engine)
    loaded = second.part("coverage").data["loaded"]
    assert 0 < loaded < 4
    assert second.part("coverage").score == pytest.approx(loaded / 4)
    assert second.score > first.score

    # Freshness: the files are updated.
    for name, (folder, kind, text) in TOPICS.items():
        (engine.root / folder / f"{name}.md").write_text(memory_text(name, text, type=kind, modified=days_ago(1)))
    engine.reconcile()
    third = health_of(engine)
    assert third.part("freshness").score == 1.0 and third.part("freshness").advice == ""
    assert third.score > second.score
    assert 0 <= third.score <= 100
    assert third.score == round(sum(p.points for p in third.parts))


def test_efficiency_ideal_band():
    settings = HealthSettings()
    assert efficiency_part(None, 0, settings).score == 0.0
    assert efficiency_part(0.65, 10, settings).score == 1.0
    assert efficiency_part(0.65, 10, settings).advice == ""
    low = efficiency_part(0.25, 10, settings)
    assert low.score == pytest.approx(0.5) and "lower" in low.advice
    high = efficiency_part(1.0, 10, settings)
    assert high.score == pytest.approx(0.5) and "raise query.default_budget" in high.advice


def test_efficiency_from_the_access_log(engine):
    engine.access_log.record("q", "default", 1000, 650, [])
    engine.access_log.record("q", "default", 1000, 700, [])
    part = health_of(engine).part("efficiency")
    assert part.score == 1.0 and part.data["queries"] == 2


def test_balance_and_cleanliness(make_workspace):
    files = {
        f"04-skills/s{i}.md": memory_text(f"s{i}", f"Skill {i} about topic {i * 13}.", type="skill") for i in range(4)
    }
    files["04-skills/broken.md"] = "---\nid: [broken\n---\n"
    eng = Engine(make_workspace(files))
    eng.load()
    try:
        report = health_of(eng)
        balance = report.part("balance")
        assert balance.score == 0.0 and "skill makes up 100%" in balance.advice and "decision" in balance.advice
        clean = report.part("cleanliness")
        assert clean.score == pytest.approx(1 - 1 / 5) and "cannot be parsed" in clean.advice
        (eng.root / "04-skills/broken.md").unlink()
        (eng.root / "06-decisions/d.md").write_text(
            memory_text("d", "We picked sqlite for the cache.", type="decision")
        )
        (eng.root / "08-rules/r.md").write_text(
            memory_text("r", "Never commit secrets to the repository.", type="rule")
        )
        eng.reconcile()
        better = health_of(eng)
        assert better.part("balance").score > 0.4
        assert better.part("cleanliness").score == 1.0
        assert better.score > report.score
    finally:
        eng.close()


def test_health_rpc(engine):
    from ctxos.daemon.components import register_rpc_methods
    from ctxos.daemon.context import DaemonContext

    ctx = DaemonContext(engine.root, engine, mode="in-process")
    register_rpc_methods(ctx.rpc)
    ctx.mark_ready()
    try:
        data = ctx.rpc.call_sync(ctx, "health", {})
        assert [p["name"] for p in data["parts"]] == ["coverage", "efficiency", "freshness", "balance", "cleanliness"]
        assert sum(p["max_points"] for p in data["parts"]) == pytest.approx(100)
        assert all(p["advice"] for p in data["parts"] if p["score"] < 1)
        json.dumps(data)
    finally:
        ctx.shutdown_executors()
