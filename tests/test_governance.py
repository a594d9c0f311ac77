"""Governance findings appear on purpose-built workspaces and clear when a person acts."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from ctxos.services import governance as gov
from ctxos.services.engine import Engine
from ctxos.services.similarity import claims, contradictions, similarity_join
from daemon_helpers import memory_text

REPO = Path(__file__).resolve().parents[1]


def days_ago(days: int) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%S")


def findings(engine: Engine, kind: str) -> list[gov.Finding]:
    return [f for f in gov.governance_report(engine).findings if f.kind == kind]


def rewrite(engine: Engine, rel: str, text: str) -> None:
    (engine.root / rel).write_text(text, encoding="utf-8")
    engine.apply_changes([rel])


# ---------------------------------------------------------------- each kind appears and clears


def test_decay_candidate_appears_and_clears_when_loaded_or_archived(open_engine):
    engine = open_engine(
        {
            "05-resources/old.md": memory_text(
                "old-notes", "Old notes about the legacy billing system.", type="resource", modified=days_ago(200)
            ),
            "05-resources/new.md": memory_text(
                "new-notes", "Fresh notes about the new billing service.", type="resource", modified=days_ago(3)
            ),
            "08-rules/old-rule.md": memory_text(
                "old-rule", "A rule that never changes.", type="rule", modified=days_ago(900)
            ),
        }
    )
    found = findings(engine, "decay")
    assert [f.ids for f in found] == [["old-notes"]]  # rules are exempt, fresh ones are fine
    assert found[0].evidence["age_days"] >= 199 and found[0].evidence["loads"] == 0
    assert found[0].action["action"] == "archive" and found[0].action["ids"] == ["old-notes"]
    assert found[0].command == "ctxos archive old-notes"
    # Loaded twice recently: no longer "rarely loaded".
    for _ in range(2):
        engine.access_log.record("billing", "default", 1000, 500, [("old-notes", "L1")])
    assert findings(engine, "decay") == []


def test_decay_clears_after_archive_and_comes_back_after_unarchive(open_engine):
    engine = open_engine(
        {
            "05-resources/old.md": memory_text(
                "old-notes", "Old notes about the legacy billing system.", type="resource", modified=days_ago(200)
            )
        }
    )
    assert findings(engine, "decay")
    result = gov.archive(engine, "old-notes")
    assert result.data["to"] == "_archive/05-resources/old.md"
    assert (engine.root / "_archive/05-resources/old.md").exists()
    assert engine.get_memory("old-notes") is None
    assert findings(engine, "decay") == []
    context = engine.execute_context_query("legacy billing", 2000, record_access=False)
    assert "old-notes" not in {s.id for s in context.selected}  # excluded from context
    back = gov.unarchive(engine, "old-notes")
    assert back.data["to"] == "05-resources/old.md" and engine.get_memory("old-notes") is not None
    assert findings(engine, "decay")


def test_conflicting_types_and_importance(open_engine):
    text = "Database migrations run with alembic upgrade head before every deploy of the api service."
    engine = open_engine(
        {
            "06-decisions/migrate.md": memory_text("migrate-decision", text, type="decision", tags=["db", "deploy"]),
            "04-skills/migrate.md": memory_text(
                "migrate-skill", text + " Check the logs.", type="skill", tags=["db", "deploy"]
            ),
        }
    )
    found = findings(engine, "conflict")
    assert len(found) == 1 and found[0].ids == ["migrate-decision", "migrate-skill"]
    assert any("types differ" in p for p in found[0].evidence["problems"])
    assert found[0].evidence["shared_tags"] == ["db", "deploy"]
    # Same type and importance: the disagreement is gone.
    rewrite(engine, "04-skills/migrate.md", memory_text("migrate-skill", text, type="decision", tags=["db", "deploy"]))
    assert findings(engine, "conflict") == []
    # Importance far apart brings it back as an importance conflict.
    rewrite(
        engine,
        "04-skills/migrate.md",
        memory_text("migrate-skill", text, type="decision", tags=["db", "deploy"], importance=0.95),
    )
    again = findings(engine, "conflict")
    assert len(again) == 1 and any("importance differs" in p for p in again[0].evidence["problems"])


def test_overlap_without_shared_tags_is_not_a_conflict(open_engine):
    text = "Database migrations run with alembic upgrade head before every deploy of the api service."
    engine = open_engine(
        {
            "06-decisions/a.md": memory_text("a", text, type="decision", tags=["db", "deploy"]),
            "04-skills/b.md": memory_text("b", text, type="skill", tags=["cooking", "travel"]),
        }
    )
    assert findings(engine, "conflict") == []


def test_contradiction_appears_and_clears_when_the_text_agrees(open_engine):
    engine = open_engine(
        {
            "08-rules/tabs.md": memory_text(
                "tabs", "Always use tabs for indentation in Python files.", type="rule", tags=["python", "style"]
            ),
            "04-skills/style.md": memory_text(
                "style",
                "Never use tabs for indentation in Python files. Format with black before committing.",
                type="rule",
                tags=["python", "style"],
            ),
        }
    )
    found = findings(engine, "conflict")
    assert len(found) == 1 and found[0].severity == "warning"
    statements = found[0].evidence["contradictions"][0]
    assert "Always use tabs" in statements["tabs"] and "Never use tabs" in statements["style"]
    rewrite(
        engine,
        "04-skills/style.md",
        memory_text(
            "style",
            "Always use tabs for indentation in Python files. Format with black before committing.",
            type="rule",
            tags=["python", "style"],
        ),
    )
    assert findings(engine, "conflict") == []


def test_contradiction_detection_reads_polarity():
    pairs = contradictions(
        claims("a", "Enable the strict mode flag in the compiler settings.")
        + claims("b", "Disable the strict mode flag in the compiler settings.")
    )
    assert len(pairs) == 1
    # A late qualifier is not a negation of the statement.
    assert (
        contradictions(
            claims("a", "Check the deploy script for syntax errors.")
            + claims("b", "Check the deploy script for syntax errors without running it.")
        )
        == []
    )
    # The same owner never contradicts itself here.
    assert contradictions(claims("a", "Use tabs in python files today. Don't use tabs in python files today.")) == []


def test_near_duplicates_cluster_and_clear_after_archiving(open_engine):
    base = (
        "To rotate the API signing key, generate a new key pair with the vault CLI, upload the public "
        "half to the gateway, wait one hour for caches to expire, then revoke the old key."
    )
    engine = open_engine(
        {
            "04-skills/rotate-1.md": memory_text("rotate-1", base, type="skill", importance=0.7),
            "04-skills/rotate-2.md": memory_text("rotate-2", base.replace("one hour", "an hour"), type="skill"),
            "04-skills/rotate-3.md": memory_text("rotate-3", base + " Tell the on-call channel.", type="skill"),
            "04-skills/other.md": memory_text(
                "other", "How to brew coffee with a french press and coarse beans.", type="skill"
            ),
        }
    )
    found = findings(engine, "consolidation")
    assert len(found) == 1
    assert found[0].ids == ["rotate-1", "rotate-2", "rotate-3"]
    assert found[0].action["action"] == "merge" and found[0].action["into"] == "rotate-1"
    assert found[0].command == "ctxos archive rotate-2 rotate-3"
    gov.archive(engine, "rotate-2")
    gov.archive(engine, "rotate-3")
    assert findings(engine, "consolidation") == []


def test_god_node_gets_a_suggested_importance_and_clears_once_set(open_engine):
    files = {
        "03-projects/hub.md": memory_text(
            "hub", "The platform overview everyone links to.", type="project", importance=0.2
        )
    }
    for i in range(10):
        files[f"04-skills/s{i}.md"] = memory_text(
            f"s{i}", f"Skill number {i} about topic {i * 17}.", type="skill", related=["hub"]
        )
    engine = open_engine(files)
    found = findings(engine, "god_node")
    assert [f.ids for f in found] == [["hub"]]
    suggested = found[0].action["value"]
    assert found[0].action["action"] == "set_importance" and 0.3 <= suggested <= 0.9
    assert found[0].command == f"ctxos importance hub {suggested:g}"
    gov.set_importance(engine, "hub", suggested)
    assert engine.get_memory("hub").importance == pytest.approx(suggested)
    assert "importance: " + str(suggested) in (engine.root / "03-projects/hub.md").read_text()
    assert findings(engine, "god_node") == []


def test_scratch_past_ttl_is_found_and_expired(open_engine):
    engine = open_engine(
        {
            "09-scratch/old.md": memory_text(
                "old-scratch", "Temporary thoughts.", type="scratch", modified=days_ago(30)
            ),
            "09-scratch/new.md": memory_text("new-scratch", "Today's thoughts.", type="scratch", modified=days_ago(1)),
        }
    )
    found = findings(engine, "scratch_expired")
    assert [f.ids for f in found] == [["old-scratch"]]
    assert found[0].evidence["ttl_days"] == 7
    done = gov.expire_scratch(engine)
    assert [d["archived"] for d in done] == ["old-scratch"]
    assert findings(engine, "scratch_expired") == []
    assert (engine.root / "_archive/09-scratch/old.md").exists()


def test_invalid_file_appears_and_clears_when_fixed(open_engine):
    engine = open_engine({"04-skills/bad.md": "---\nid: [broken\n---\nbody\n"})
    found = findings(engine, "invalid_file")
    assert len(found) == 1 and found[0].paths == ["04-skills/bad.md"] and found[0].severity == "error"
    assert "YAML" in found[0].reason or "yaml" in found[0].reason
    rewrite(engine, "04-skills/bad.md", memory_text("bad", "Now a fine memory.", type="skill"))
    assert findings(engine, "invalid_file") == []


# ---------------------------------------------------------------- dismissals and fingerprints


def test_dismissed_finding_stays_hidden_until_its_file_changes(open_engine):
    engine = open_engine(
        {
            "05-resources/old.md": memory_text(
                "old-notes", "Old notes about the legacy billing system.", type="resource", modified=days_ago(200)
            )
        }
    )
    fingerprint = findings(engine, "decay")[0].fingerprint
    assert gov.governance_report(engine).findings[0].fingerprint == fingerprint  # stable across runs
    result = gov.dismiss_finding(engine, fingerprint)
    assert result["dismissed"] == fingerprint
    report = gov.governance_report(engine)
    assert report.findings == [] and report.dismissed == 1
    stored = json.loads((engine.root / ".ctxos/dismissed.json").read_text())
    assert stored[fingerprint]["checksums"] == {"old-notes": engine.get_memory("old-notes").checksum}
    assert [f.fingerprint for f in gov.governance_report(engine, include_dismissed=True).findings] == [fingerprint]
    # The file changes (still old by its frontmatter date): the finding comes back.
    rewrite(
        engine,
        "05-resources/old.md",
        memory_text(
            "old-notes", "Old notes about the legacy billing system, v2.", type="resource", modified=days_ago(200)
        ),
    )
    assert [f.fingerprint for f in findings(engine, "decay")] == [fingerprint]


def test_dismissing_an_unknown_fingerprint_is_an_error(open_engine):
    engine = open_engine({})
    with pytest.raises(gov.GovernanceError):
        gov.dismiss_finding(engine, "000000000000")


def test_report_is_saved_for_the_health_view(open_engine):
    engine = open_engine({"04-skills/bad.md": "---\nid: [broken\n---\nbody\n"})
    gov.governance_report(engine)
    saved = gov.load_saved_report(engine.root)
    assert saved["counts"]["invalid_file"] == 1


# ---------------------------------------------------------------- RPC and CLI


def test_rpc_and_cli_round_trip(open_engine, capsys, monkeypatch):
    """The CLI (in-process backend) lists findings as JSON, archives, unarchives, sets importance, dismisses."""
    from ctxos.client import cli

    engine = open_engine(
        {
            "05-resources/old.md": memory_text(
                "old-notes", "Old notes about the legacy billing system.", type="resource", modified=days_ago(200)
            ),
        }
    )
    root = str(engine.root)
    engine.close()

    def run(*argv: str) -> tuple[int, str]:
        code = cli.main(["--workspace", root, *argv])
        return code, capsys.readouterr().out

    code, out = run("governance", "--json")
    report = json.loads(out)
    assert code == 0 and [f["kind"] for f in report["findings"]] == ["decay"]
    fingerprint = report["findings"][0]["fingerprint"]
    code, out = run("governance")
    assert "Decay candidates (1)" in out and fingerprint in out and "ctxos archive old-notes" in out
    code, out = run("dismiss", fingerprint)
    assert code == 0 and "dismissed" in out
    assert json.loads(run("governance", "--json")[1])["findings"] == []
    assert run("importance", "old-notes", "0.9")[0] == 0
    assert "importance: 0.9" in Path(root, "05-resources/old.md").read_text()
    code, out = run("archive", "old-notes")
    assert code == 0 and Path(root, "_archive/05-resources/old.md").exists()
    code, out = run("unarchive", "old-notes")
    assert code == 0 and Path(root, "05-resources/old.md").exists()
    assert run("archive", "no-such-id")[0] != 0
    assert run("importance", "old-notes", "1.5")[0] != 0


# ---------------------------------------------------------------- scale


def test_similarity_join_matches_brute_force():
    rng = random.Random(5)
    vocab = [f"w{i}" for i in range(60)]
    sets = [frozenset(rng.sample(vocab, rng.randint(1, 12))) for _ in range(150)]
    sets += [frozenset(list(s)[:-1] + ["extra"]) for s in sets[:30]]
    for threshold in (0.3, 0.5, 0.8):
        fast = {(i, j) for i, j, _ in similarity_join(sets, threshold)}
        slow = {
            (i, j)
            for i in range(len(sets))
            for j in range(i + 1, len(sets))
            if len(sets[i] & sets[j]) / len(sets[i] | sets[j]) >= threshold
        }
        assert fast == slow, threshold


def test_benchmark_small_mode(tmp_path: Path):
    from conftest import shared_data

    shared_data("tldr")
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_governance.py"), "--small", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["memories"] >= 250
    assert data["governance_s"] < 30 and data["communities_cold_s"] < 30
    assert data["communities_unchanged_recomputed"] is False
    assert data["router_rewrote_unchanged"] is False


def test_report_is_cached_until_files_loads_or_dismissals_change(open_engine):
    engine = open_engine(
        {"05-resources/old.md": memory_text("old", "An old note about zebras.", modified=days_ago(200))}
    )
    first = gov.governance_report(engine)
    assert gov.governance_report(engine) is first  # nothing changed: no rerun
    engine.execute_context_query("zebras", 2000)  # a load
    after_load = gov.governance_report(engine)
    assert after_load is not first
    rewrite(engine, "05-resources/old.md", memory_text("old", "Rewritten.", modified=days_ago(1)))
    after_edit = gov.governance_report(engine)
    assert after_edit is not after_load and not [f for f in after_edit.findings if f.kind == "decay"]


def test_each_engine_keeps_its_own_report_and_reuses_it_at_most_its_max_age(open_engine):
    files = {"05-resources/old.md": memory_text("old", "An old note about zebras.", modified=days_ago(200))}
    engine = open_engine(files)
    other = Engine(engine.root)  # a second engine on the same folder (another daemon, a CLI fallback)
    other.load()
    try:
        first = gov.governance_report(engine)
        assert gov.governance_report(engine) is first
        assert gov.governance_report(other) is not first  # the report is the engine's, not the process's
        assert other.governance_reports is not engine.governance_reports
        engine.governance_reports.max_age_s = 0.0  # the clock moved past the age bound: ages may have changed
        assert gov.governance_report(engine) is not first
    finally:
        other.close()


def test_memo_reuses_a_value_for_its_key_only() -> None:
    from ctxos.services.engine.memo import Memo

    memo: Memo[str] = Memo()
    assert memo.get(("a", 1)) is None
    memo.put(("a", 1), "report")
    assert memo.get(("a", 1)) == "report"
    assert memo.get(("a", 2)) is None  # another generation, load or config: recompute
    memo.clear()
    assert memo.get(("a", 1)) is None


def test_an_expired_memo_value_is_freed_at_the_next_ask_and_the_scheduled_run_keeps_none(make_workspace) -> None:
    """Issue 16: a governance report (~16 MiB live at 10,000) is not held past its use."""
    import gc
    import weakref

    from ctxos.daemon.scheduler import job_governance
    from ctxos.services.engine.memo import Memo

    class Value:
        pass

    memo: Memo[Value] = Memo(max_age_s=0.0)
    value = Value()
    ref = weakref.ref(value)
    memo.put("k", value)
    del value
    assert memo.get("k") is None
    gc.collect()
    assert ref() is None, "the expired value is released, not kept until the next put"

    root = make_workspace({"05-resources/a.md": "---\nid: a\nl0: Alpha\n---\nAlpha body.\n"})
    engine = Engine(root)
    engine.load()
    try:
        summary = job_governance(engine)
        assert "findings" in summary and engine.governance_reports._slot is None
        assert (root / ".ctxos" / "governance.json").exists()  # what the run found is saved, not held
    finally:
        engine.close()
