"""The engine's query path: candidates, signals, intents, tiers, rendering, access log, file sync."""

from __future__ import annotations

import os
import shutil
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from conftest import write_files
from ctxos.services.access_log import AccessLog
from ctxos.services.engine import Engine
from ctxos.services.graph import build_graph
from ctxos.services.intent import detect_intent, expand_query
from ctxos.services.model import SIGNALS, ContextResult, Memory
from ctxos.services.query import QueryError, execute_context_query
from ctxos.services.render import SECTION_CATALOG, SECTION_MEMORIES, SECTION_RULES
from ctxos.services.signals import normalise_weights, recency_signal

LONG = " ".join(f"Detail sentence number {i} about connection pools and retries." for i in range(60))

FILES = {
    "08-rules/no-secrets.md": """\
        ---
        id: no-secrets
        type: rule
        l0: Never write secrets into memory files
        ---
        Never store passwords, API keys or tokens in memories.
        """,
    "01-context/who-we-are.md": """\
        ---
        id: who-we-are
        always_load: true
        l0: Team context
        ---
        We build a payments API in Python.
        """,
    "05-resources/postgres-pool.md": f"""\
        ---
        id: postgres-pool
        l0: Postgres connection pool sizing for the API
        importance: 0.9
        tags: [database, postgres, performance]
        related: [retry-policy]
        ---
        Size the pool to twice the CPU count; the database chokes beyond 50 connections.
        <!-- L2 -->
        {LONG}
        """,
    "05-resources/retry-policy.md": """\
        ---
        id: retry-policy
        l0: Retry policy for flaky network calls
        tags: [network, performance, database]
        ---
        Retry idempotent calls three times with jittered backoff. See [[postgres-pool]].
        """,
    "06-decisions/use-sqlite-tests.md": """\
        ---
        id: use-sqlite-tests
        type: decision
        l0: Tests run against SQLite, production against Postgres
        tags: [testing]
        ---
        We decided to run unit tests on SQLite for speed.
        """,
    "07-tasks/fix-login-bug.md": """\
        ---
        id: fix-login-bug
        type: task
        l0: Fix the login exception on expired sessions
        tags: [auth]
        ---
        The login handler raises an exception when the session expired. Fix it.
        """,
}


@pytest.fixture
def engine(make_workspace):
    root = make_workspace(FILES)
    eng = Engine(root)
    eng.load()
    yield eng
    eng.close()


def test_load_indexes_every_memory_and_reports_it(engine):
    status = engine.status()
    assert status["memories"] == 6 and status["invalid"] == 0
    assert status["index"]["documents"] == 6
    assert status["token_counter"] == "heuristic"


def test_top_memory_gets_l2_rules_and_always_load_come_first(engine):
    result = engine.execute_context_query("postgres connection pool size", 3000, record_access=False)
    tiers = {s.id: s.tier for s in result.selected}
    assert tiers["postgres-pool"] == "L2"
    reasons = {s.id: s.reason for s in result.selected}
    assert reasons["no-secrets"] == "rule" and reasons["who-we-are"] == "always_load"
    text = result.rendered
    assert text.index(SECTION_RULES) < text.index("### no-secrets") < text.index(SECTION_MEMORIES)
    assert text.index("### who-we-are") < text.index(SECTION_MEMORIES)
    assert text.index(SECTION_MEMORIES) < text.index("### postgres-pool")
    assert "Detail sentence number 59" in text  # the L2 part is there
    assert result.tokens_used <= 3000
    assert engine.counter.count(text) == result.tokens_used
    scored = [s for s in result.selected if s.reason == "scored"]
    assert scored[0].id == "postgres-pool"


def test_shares_sum_to_score_and_signals_are_bounded(engine):
    result = engine.execute_context_query("retry network calls", 3000, record_access=False)
    assert abs(sum(result.weights.values()) - 1.0) < 1e-9
    for item in result.selected:
        assert set(item.signals) == set(SIGNALS)
        assert all(0.0 <= v <= 1.0 for v in item.signals.values())
        assert abs(sum(item.shares.values()) - item.score) < 1e-9


def test_weights_are_reported_rounded():
    """A normalised row is 0.3 in JSON (REST, MCP, ``simulate --json``), not 0.29999999999999993."""
    row = normalise_weights(
        {"semantic": 0.1, "bm25": 0.2, "graph": 0.3, "recency": 0.1, "importance": 0.2, "frequency": 0.1}
    )
    assert row["graph"] != 0.3  # the float arithmetic the output must hide
    result = ContextResult("q", "default", [], 100, 0, [], [], 0, "", weights=row)
    assert result.to_dict()["weights"] == {
        "semantic": 0.1,
        "bm25": 0.2,
        "graph": 0.3,
        "recency": 0.1,
        "importance": 0.2,
        "frequency": 0.1,
    }


def test_tight_budget_falls_back_to_l1_then_catalog(engine):
    big = engine.execute_context_query("postgres connection pool size", 3000, record_access=False)
    pool_l2 = next(s for s in big.selected if s.id == "postgres-pool")
    budget = pool_l2.tokens + 40  # not enough for the rules plus the L2 block
    small = engine.execute_context_query("postgres connection pool size", budget, record_access=False)
    tiers = {s.id: s.tier for s in small.selected}
    assert tiers.get("postgres-pool") in ("L1", "L0")
    assert small.tokens_used <= budget
    tiny = engine.execute_context_query("postgres connection pool size", 25, record_access=False)
    assert tiny.tokens_used <= 25
    zero = engine.execute_context_query("postgres connection pool size", 0, record_access=False)
    assert zero.rendered == "" and zero.tokens_used == 0 and zero.selected == []


def test_catalog_is_bounded_with_a_count_of_the_rest(make_workspace):
    files = {
        f"05-resources/note-{i}.md": f"---\nl0: Kafka consumer note {i}\n---\nKafka consumer lag detail {i}.\n"
        for i in range(30)
    }
    root = make_workspace(files)
    (root / "_config.yaml").write_text("query:\n  catalog_max_entries: 5\n  l2_top_n: 0\n")
    eng = Engine(root)
    eng.load()
    result = eng.execute_context_query("kafka consumer lag", 200, record_access=False)
    assert len(result.catalog_ids) <= 5
    assert result.catalog_omitted > 0
    assert f"and {result.catalog_omitted:,} more memories not listed" in result.rendered
    assert result.rendered.index(SECTION_CATALOG) > result.rendered.index(SECTION_MEMORIES)
    assert result.tokens_used <= 200
    eng.close()


def test_intent_detection_expansion_and_forced_intent(engine):
    result = engine.execute_context_query("login bug on expired sessions", 2000, record_access=False)
    assert result.intent == "debug"
    assert {"error", "exception"} <= set(result.expanded_query)
    top = [s.id for s in result.selected if s.reason == "scored"][0]
    assert top == "fix-login-bug"
    forced = engine.execute_context_query("login bug", 2000, intent="brainstorm", record_access=False)
    assert forced.intent == "brainstorm" and forced.weights["importance"] == pytest.approx(0.30)
    with pytest.raises(QueryError):
        engine.execute_context_query("x", 100, intent="nonsense")
    with pytest.raises(QueryError):
        engine.execute_context_query("x", -1)


def test_detect_intent_and_expand_from_config_tables():
    triggers = {"debug": ["bug", "crash"], "brainstorm": ["ideas", "what if"], "recall": ["when", "last time"]}
    assert detect_intent("why does it crash", triggers) == "debug"
    assert detect_intent("what if we used kafka", triggers) == "brainstorm"
    assert detect_intent("when did we ship", triggers) == "recall"
    assert detect_intent("postgres pool", triggers) == "default"
    expanded = expand_query("Deploys failing", {"deploy": ["release", "ci"]})
    assert expanded.words == ["deploys", "failing"]
    assert expanded.groups[0] == ["deploys", "release", "ci"]
    assert dict(expanded.terms)["release"] < dict(expanded.terms)["deploys"]
    assert expand_query("what did she say about the deploy", {}).words == ["say", "deploy"]


def test_access_is_recorded_and_feeds_frequency(engine):
    for _ in range(3):
        engine.execute_context_query("retry policy backoff", 2000)
    assert engine.access_log.query_count() == 3
    result = engine.execute_context_query("retry policy backoff", 2000, record_access=False)
    retry = next(s for s in result.selected if s.id == "retry-policy")
    assert retry.signals["frequency"] == pytest.approx(1.0)
    record = engine.access_log.recent_queries(1)[0]
    assert record.query == "retry policy backoff" and record.budget == 2000
    assert ("retry-policy", retry.tier) in engine.access_log.loads_for_query(record.id)


def test_access_log_health_numbers_and_corruption(tmp_path):
    log = AccessLog(tmp_path)
    log.open()
    now = time.time()
    log.record("q1", "default", 1000, 500, [("a", "L2"), ("b", "L0")], ts=now)
    log.record("q2", "debug", 1000, 1000, [("a", "L1")], ts=now - 20 * 86400)
    assert log.loaded_ids(14) == {"a"}  # L0 catalog lines are not loads
    assert log.coverage(["a", "b", "c", "d"], 14) == 0.25
    assert log.efficiency(14) == pytest.approx(0.5)
    assert log.efficiency(None) == pytest.approx(0.75)
    assert log.counts_in_window(30)["a"] == 2
    scores = log.frequency_scores(["a", "b"])
    assert scores["a"] == pytest.approx(1.0) and scores["b"] == 0.0
    log.close()
    (tmp_path / "access.db").write_bytes(b"this is not a database" * 100)
    for extra in ("access.db-wal", "access.db-shm"):
        (tmp_path / extra).unlink(missing_ok=True)
    fresh = AccessLog(tmp_path)
    fresh.open()
    assert fresh.recovered and fresh.query_count() == 0
    fresh.close()


def test_graph_edges_authority_dangling_and_neighbour_candidates(engine):
    graph = engine.graph()
    assert ("postgres-pool", "retry-policy") in graph.explicit_edges()
    assert ("retry-policy", "postgres-pool") in graph.explicit_edges()  # the wikilink
    assert ("postgres-pool", "retry-policy") in graph.implicit_edges()  # database + performance
    assert max(graph.authority.values()) == pytest.approx(1.0)
    result = engine.execute_context_query("jittered backoff", 2000, record_access=False)
    by_id = {s.id: s for s in result.selected}
    assert "postgres-pool" in by_id  # only reachable as a graph neighbour
    assert by_id["postgres-pool"].signals["graph"] >= 0.5


def test_build_graph_dangling_and_tag_cap():
    def m(mid, tags=(), related=()):
        return Memory(
            id=mid,
            type="resource",
            rel_path=f"{mid}.md",
            path=Path(mid),
            l0=mid,
            l1="",
            l2="",
            tags=list(tags),
            related=list(related),
        )

    mems = [m("a", ["x", "y"], ["b", "ghost"]), m("b", ["x", "y"]), m("c", ["x"])]
    graph = build_graph(mems, lambda t, s=None: None)
    assert graph.dangling == [("a", "ghost")]
    assert graph.implicit_edges() == [("a", "b")]
    assert graph.authority["b"] == 1.0 and graph.authority["a"] == 0.0
    assert ("a", "b", 1.0) in graph.edges()
    capped = build_graph(mems, lambda t, s=None: None, max_tag_members=1)
    assert capped.implicit_edges() == [] and capped.skipped_tags == ["x", "y"]


def test_community_bonus_goes_to_members_of_the_top_results_community(engine):
    def graph_signal(query):
        return {c.memory.id: c.signals["graph"] for c in engine.score_query(query).candidates}

    before = graph_signal("login exception tests")
    engine.set_community_of({"fix-login-bug": 1, "use-sqlite-tests": 1, "no-secrets": 2})
    after = graph_signal("login exception tests")
    bonus = engine.config.get("graph.community_bonus")
    assert bonus == 0.08
    assert after["use-sqlite-tests"] == pytest.approx(before["use-sqlite-tests"] + bonus)
    assert after["fix-login-bug"] == pytest.approx(before["fix-login-bug"] + bonus)
    assert after["no-secrets"] == pytest.approx(before["no-secrets"])  # other community


def test_recency_and_weights_helpers():
    mem = Memory(
        id="d", type="daily", rel_path="d.md", path=Path("d"), l0="", l1="", l2="", modified=datetime(2026, 1, 1)
    )
    now = datetime(2026, 1, 15)
    assert recency_signal(mem, now, {"daily": 14}) == pytest.approx(0.5)
    assert recency_signal(mem, now - timedelta(days=30), {"daily": 14}) == 1.0  # future counts as new
    row = normalise_weights({"semantic": 2, "bm25": 2, "bogus": 5})
    assert row["semantic"] == 0.5 and row["graph"] == 0.0


def test_apply_changes_edit_delete_rename_folder_and_duplicates(engine):
    root = engine.root
    path = root / "05-resources/retry-policy.md"
    path.write_text(path.read_text().replace("three times", "five times with zebra backoff"))
    summary = engine.apply_changes([path])
    assert summary.updated == ["retry-policy"]
    assert engine.score_query("zebra").ranked_ids(False)[:1] == ["retry-policy"]
    assert not engine.apply_changes([path]).changed  # unchanged: nothing to do

    new_path = root / "03-projects/retry-policy.md"
    path.rename(new_path)
    summary = engine.apply_changes([path, new_path])
    assert (
        summary.updated == ["retry-policy"]
        and engine.get_memory("retry-policy").rel_path == "03-projects/retry-policy.md"
    )
    assert set(engine.index.checksums()) >= {"03-projects/retry-policy.md"}
    assert "05-resources/retry-policy.md" not in engine.index.checksums()

    dup = root / "05-resources/copy.md"
    dup.write_text("---\nid: postgres-pool\n---\nA copy with the word walrus.\n")
    summary = engine.apply_changes([dup])
    assert [f.rel_path for f in summary.invalid] == ["05-resources/copy.md"]
    os.unlink(root / "05-resources/postgres-pool.md")
    summary = engine.apply_changes([root / "05-resources/postgres-pool.md"])
    assert engine.get_memory("postgres-pool").rel_path == "05-resources/copy.md"  # promoted
    assert engine.score_query("walrus").ranked_ids(False)[:1] == ["postgres-pool"]

    shutil.rmtree(root / "07-tasks")
    summary = engine.apply_changes([root / "07-tasks"])
    assert summary.removed == ["fix-login-bug"] and engine.get_memory("fix-login-bug") is None
    assert "fix-login-bug" not in engine.score_query("login exception").ranked_ids(False)


def test_a_repeated_query_answers_as_a_fresh_engine_after_each_change(make_workspace):
    """Search results and nearest rows are kept between queries (per index generation and embedding
    state): after an edit, a new file, a removal and a move, the same query answers exactly as an
    engine loaded afresh on the same files."""
    root = make_workspace(FILES)
    eng = Engine(root)
    eng.load()
    query, now = "postgres connection pool retries", datetime(2026, 12, 5, 12, 0)

    def answer(engine: Engine) -> dict:
        """What the agent gets; scores to 1e-5 (a fresh engine sums its embedding rows in another order)."""
        found = execute_context_query(engine, query, 600, record_access=False, now=now)
        return {
            "rendered": found.rendered,
            "selected": [(s.id, s.path, s.tier, s.tokens, s.reason, sorted(s.sources)) for s in found.selected],
            "scores": [s.score for s in found.selected],
            "catalog": found.catalog_ids,
        }

    first = answer(eng)
    assert answer(eng) == first  # exactly, scores too
    del first["scores"]
    pool = root / "05-resources/postgres-pool.md"
    retry = root / "05-resources/retry-policy.md"

    def edit() -> list[Path]:
        pool.write_text(pool.read_text().replace("twice the CPU count", "four times the cores"))
        return [pool]

    def add() -> list[Path]:
        write_files(root, {"05-resources/pool-retries.md": "---\nl0: Pool retries\n---\nPostgres pool retries.\n"})
        return [root / "05-resources/pool-retries.md"]

    def remove() -> list[Path]:
        retry.unlink()
        return [retry]

    def move() -> list[Path]:
        moved = root / "03-projects/postgres-pool.md"
        pool.rename(moved)
        return [pool, moved]

    seen = [first]
    for step in (edit, add, remove, move):
        eng.apply_changes(step())
        fresh = Engine(root)
        fresh.load()
        try:
            got, want = answer(eng), answer(fresh)
            assert got["scores"] == pytest.approx(want.pop("scores"), abs=1e-5)
            del got["scores"]
            assert got == want and got not in seen
            seen.append(got)
        finally:
            fresh.close()
    assert "pool-retries" in [selected[0] for selected in seen[-1]["selected"]]
    eng.close()


def test_reconcile_and_index_recovery(make_workspace):
    root = make_workspace(FILES)
    eng = Engine(root)
    eng.load()
    eng.close()
    (root / "05-resources/retry-policy.md").unlink()
    (root / "05-resources/new-note.md").write_text("---\nl0: Quokka habitat notes\n---\nQuokkas live on Rottnest.\n")
    again = Engine(root)
    summary = again.load()  # files changed while no engine ran
    assert "new-note" in summary.updated and summary.index_recovered is None
    assert set(again.index.checksums()) == {m.rel_path for m in again.list_memories()}
    (root / "05-resources/another.md").write_text("---\nl0: Wombat notes\n---\nWombats dig.\n")
    assert again.reconcile().updated == ["another"]
    again.close()

    shutil.rmtree(again.state_dir / "index")
    third = Engine(root)
    summary = third.load()
    assert summary.index_recovered == "index missing"
    assert third.score_query("wombats").ranked_ids(False)[:1] == ["another"]
    assert third.rebuild_index().updated == sorted(m.id for m in third.list_memories())
    third.close()


def test_save_memory_and_log_session_are_indexed_at_once(engine):
    memory = engine.save_memory(type="skill", l0="Capybara grooming checklist", content="Brush the capybara weekly.")
    assert memory.type == "skill"
    assert engine.score_query("capybara grooming").ranked_ids(False)[:1] == [memory.id]
    assert engine.get_skill(memory.id) is memory or engine.get_skill(memory.id).id == memory.id
    rel = engine.log_session("deployed v2", "all green")
    assert rel.startswith("02-daily/") and engine.store.get_by_path(rel) is not None


def test_queries_during_a_rebuild_see_the_whole_store(make_workspace):
    """Readers on other threads while ``rebuild_index`` runs see the old store or the new one, never a half-filled one.

    Real engine, real Whoosh index, real threads: the rebuild builds a new store and swaps the reference
    (filling the store in place fails this test: the sampler sees it part-filled).
    """
    import sys
    import threading

    n = 1000
    files = {
        f"05-resources/note-{i:04d}.md": f"---\nid: note-{i:04d}\nl0: Note {i} about otters\n---\nOtters {i}.\n"
        for i in range(n)
    }
    engine = Engine(make_workspace(files))
    engine.load()
    expected = len(engine.store)
    assert expected >= n
    sizes: set[int] = set()
    errors: list[BaseException] = []
    stop = threading.Event()

    def sampler() -> None:  # what any reader would see of the store, as often as the GIL allows
        while not stop.is_set():
            sizes.add(len(engine.store.memories))

    def querier() -> None:
        while not stop.is_set():
            try:
                engine.execute_context_query("otters", 500, record_access=False)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so the readers run in the middle of a rebuild
    threads = [threading.Thread(target=sampler), threading.Thread(target=querier)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(3):
            engine.rebuild_index()
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        sys.setswitchinterval(interval)
        engine.close()
    assert not errors, errors
    assert sizes == {expected}


def test_access_log_hands_a_due_batch_to_defer_and_stays_bounded(tmp_path):
    """With ``defer`` (the daemon's worker) no query writes: the due batch is handed over once."""
    from ctxos.services import access_log as access_log_module

    log = AccessLog(tmp_path)
    handed: list = []
    log.defer = handed.append
    log.open()
    for i in range(access_log_module.FLUSH_EVERY + 3):
        log.record(f"q{i}", "default", 1000, 100, [("a", "L1")])
    assert len(handed) == 1  # handed once while it waits, not once per query
    assert log.query_count(None) == access_log_module.FLUSH_EVERY + 3  # a reader writes what is pending first
    handed[0]()  # the worker runs late: nothing left to write, and it may be handed again
    for i in range(access_log_module.FLUSH_EVERY):
        log.record(f"r{i}", "default", 1000, 100, [("a", "L1")])
    assert len(handed) == 2
    log.defer = lambda job: None  # a worker that never runs: the queries write once MAX_PENDING wait
    for i in range(access_log_module.MAX_PENDING + 1):
        log.record(f"s{i}", "default", 1000, 100, [("b", "L1")])
    assert len(log._pending) < access_log_module.MAX_PENDING
    assert log.frequency_counts()["b"] == access_log_module.MAX_PENDING + 1
    log.close()


def test_a_query_helper_runs_the_nearest_rows_beside_the_search_with_the_same_answer(engine):
    """``Engine.query_helper`` (the daemon's helper thread, daemon/query_helper.py) changes when, not what."""
    from ctxos.daemon.query_helper import QueryHelper

    now = datetime(2026, 12, 7, 12, 0)
    queries = ("postgres connection pool sizing", "how do we retry flaky calls", "team context")
    plain = [execute_context_query(engine, q, 1500, record_access=False, now=now).rendered for q in queries]
    assert engine.vectors is not None  # the default model: the product the helper is for runs
    helper = QueryHelper()
    engine.query_facts.clear()  # gather again, through the helper
    engine.query_helper = helper
    try:
        helped = [execute_context_query(engine, q, 1500, record_access=False, now=now).rendered for q in queries]
    finally:
        engine.query_helper = None
        helper.close()
    assert helped == plain
    assert helper.started == len(queries)
