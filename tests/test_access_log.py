"""The access log keeps a query's loads as one JSON list on its row (services/access_log.py).

Real SQLite files in a temporary folder: a log written the old way (a ``loads``
row per load) keeps counting after the change, new queries are read back in
selection order, and forgetting a memory removes it from both forms. The hourly
recount of the frequency window runs off the query path when the owner has a
background thread (the daemon), and loses nothing recorded or forgotten meanwhile.
The counts saved at close are brought up to date at the next open instead of
counted again, and anything odd about them means a count.
"""

from __future__ import annotations

import sqlite3
import time

from ctxos.services.access_counts import counts_path, discard_counts
from ctxos.services.access_log import DB_FILENAME, AccessLog

OLD_SCHEMA = """
CREATE TABLE queries (id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, query TEXT NOT NULL,
    intent TEXT NOT NULL, budget INTEGER NOT NULL, tokens_used INTEGER NOT NULL);
CREATE TABLE loads (query_id INTEGER NOT NULL REFERENCES queries(id) ON DELETE CASCADE,
    memory_id TEXT NOT NULL, tier TEXT NOT NULL, ts REAL NOT NULL);
"""


def _old_log(path, now):
    """A database as the log wrote it before loads moved onto the query's row."""
    conn = sqlite3.connect(str(path / DB_FILENAME))
    conn.executescript(OLD_SCHEMA)
    conn.execute(
        "INSERT INTO queries(ts, query, intent, budget, tokens_used) VALUES (?, 'old', 'default', 1000, 10)", (now,)
    )
    conn.executemany(
        "INSERT INTO loads(query_id, memory_id, tier, ts) VALUES (1, ?, ?, ?)",
        [("a", "L1", now), ("b", "L0", now), ("c", "L2", now)],
    )
    conn.commit()
    conn.close()


def test_old_rows_and_new_lists_are_read_together(tmp_path):
    now = time.time()
    _old_log(tmp_path, now)
    log = AccessLog(tmp_path)
    log.open()
    assert log.frequency_counts() == {"a": 1, "c": 1}  # old rows count; L0 is never a load
    log.record("new", "default", 1000, 20, [("c", "L2"), ("a", "L0"), ("d", "L1")], ts=now)
    assert log.counts_in_window(1) == {"a": 1, "c": 2, "d": 1}
    assert log.counts_in_window(1, ("L0",)) == {"a": 1, "b": 1}
    assert log.loaded_ids(1) == {"a", "c", "d"}
    newest = log.recent_queries(1)[0]
    assert log.loads_for_query(newest.id) == [("c", "L2"), ("a", "L0"), ("d", "L1")]
    assert log.loads_for_query(1) == [("a", "L1"), ("b", "L0"), ("c", "L2")]
    log.forget_memory("c")
    assert log.counts_in_window(1) == {"a": 1, "d": 1}
    assert log.loads_for_query(newest.id) == [("a", "L0"), ("d", "L1")]
    assert ("c", "L2") not in log.loads_for_query(1)
    log.close()
    again = AccessLog(tmp_path)  # the column was added once; reopening finds it
    again.open()
    assert again.query_count() == 2 and again.frequency_counts() == {"a": 1, "d": 1}
    again.close()


def test_one_row_per_query(tmp_path):
    """A batch writes a row per query, not per load: the write that was ~3 ms of CPU per query."""
    log = AccessLog(tmp_path)
    log.open()
    for i in range(5):
        log.record(f"q{i}", "default", 1000, 100, [(f"m{j}", "L1") for j in range(130)])
    log.flush()
    rows = log.conn.execute("SELECT COUNT(*) FROM loads").fetchone()[0]
    assert rows == 0 and log.query_count() == 5
    assert log.counts_in_window(1)["m7"] == 5
    log.close()


def test_without_json_functions_loads_are_rows(tmp_path):
    """An SQLite built without JSON functions cannot be had here: the flag the probe sets is forced off."""
    log = AccessLog(tmp_path)
    log.open()
    log._json_loads = False
    log.conn.execute("DROP VIEW all_loads")
    log.conn.execute("CREATE TEMP VIEW all_loads AS SELECT query_id, memory_id, tier, ts FROM loads")
    log.record("q", "default", 1000, 100, [("a", "L1"), ("b", "L0")])
    assert log.loads_for_query(log.recent_queries(1)[0].id) == [("a", "L1"), ("b", "L0")]
    assert log.counts_in_window(1) == {"a": 1}
    log.close()


def test_lazy_counts_are_counted_at_first_use_with_the_same_result(tmp_path):
    """The engine opens the log with ``lazy_counts`` (the count is not part of a restart's wait)."""
    now = time.time()
    log = AccessLog(tmp_path)
    log.open()
    log.record("q", "default", 1000, 20, [("a", "L1"), ("b", "L2"), ("a", "L0")], ts=now)
    log.close()
    discard_counts(counts_path(tmp_path))  # no saved counts: the window is counted
    lazy = AccessLog(tmp_path)
    lazy.lazy_counts = True
    lazy.open()
    assert lazy._counts_at == 0.0  # opened without counting the window
    assert lazy.query_count() == 1
    lazy.record("q2", "default", 1000, 20, [("b", "L1")], ts=now)  # before the first count
    assert lazy.frequency_counts() == {"a": 1, "b": 2}
    lazy.close()


def test_frequency_scores_keep_the_maximum_as_loads_are_recorded_and_forgotten(tmp_path):
    """The most-loaded memory's count is kept between calls (a query asks twice), and is the true maximum
    after every record, a forgotten memory and a reload of the window."""
    import math

    log = AccessLog(tmp_path)
    log.open()

    def expected(ids: list[str]) -> dict[str, float]:
        counts = log.frequency_counts()
        top = max(counts.values(), default=0)
        return {m: (math.log1p(counts.get(m, 0)) / math.log1p(top) if top else 0.0) for m in ids}

    ids = ["a", "b", "c"]
    assert log.frequency_scores(ids) == {"a": 0.0, "b": 0.0, "c": 0.0}
    log.record("q1", "default", 1000, 10, [("a", "L1"), ("b", "L2"), ("c", "L0")])
    assert log.frequency_scores(ids) == expected(ids) and log.frequency_scores(ids)["a"] == 1.0
    for _ in range(3):
        log.record("q2", "default", 1000, 10, [("b", "L1")])
    assert log.frequency_scores(ids) == expected(ids) and log.frequency_scores(ids)["b"] == 1.0
    log.forget_memory("b")  # the most-loaded one goes: "a" is the top again
    assert log.frequency_scores(ids) == expected(ids) and log.frequency_scores(ids)["a"] == 1.0
    log.flush()
    with log._lock:
        log._reload_counts_locked()
    assert log.frequency_scores(ids) == expected(ids)
    log.close()


def _exact_counts(log: AccessLog) -> dict[str, int]:
    """The window counted straight from the database, plus what is still pending (what a recount must equal)."""
    with log._lock:
        log._flush_locked()
    return dict(log.counts_in_window(log.window_days))


def test_a_due_recount_runs_in_the_background_and_the_query_keeps_its_counts(tmp_path):
    """The hourly recount (a GROUP BY over every logged query: ~1.5 s at 10,000) never runs in a query
    when the owner gave a background thread: the due query answers with the counts it has, one job is
    handed over, and the counts it swaps in are exact, loads past the window gone."""
    from ctxos.services.access_log import DAY_S, REFRESH_S

    now = time.time()
    log = AccessLog(tmp_path, window_days=30)
    jobs: list = []
    log.refresh_in_background = jobs.append
    log.open()
    log.record("old", "default", 1000, 10, [("gone", "L1"), ("a", "L1")], ts=now - 29.99 * DAY_S)
    log.record("new", "default", 1000, 10, [("a", "L2"), ("b", "L1")], ts=now)
    assert log.frequency_counts() == {"gone": 1, "a": 2, "b": 1}
    log.window_days = 29.9  # the window moves past the old query (as an hour or a day does)
    log._counts_at -= REFRESH_S + 1
    before = log.frequency_counts()
    assert before == {"gone": 1, "a": 2, "b": 1} and len(jobs) == 1  # answered at once, the recount handed over
    assert log.frequency_counts() is before and len(jobs) == 1  # a second due query hands nothing more
    jobs.pop()()
    assert log.frequency_counts() == {"a": 1, "b": 1} == _exact_counts(log)
    assert time.time() - log._counts_at < 5 and not log._refresh_handed
    log.close()


def test_a_background_recount_keeps_what_was_recorded_and_forgotten_while_it_counted(tmp_path):
    """Between the recount's snapshot and its swap, queries are written, others still pending, and a memory
    is forgotten: the swapped counts equal the database's own count with nothing lost or brought back."""
    log = AccessLog(tmp_path)
    log.open()
    log.record("q1", "default", 1000, 10, [("a", "L1"), ("b", "L1"), ("x", "L2")])
    log.flush()
    log._refresh_handed = True  # as _hand_refresh sets it
    started = time.time()
    snapshot = log._count_snapshot(started - log.window_days * 86400.0)
    assert snapshot is not None and snapshot[2] == {"a": 1, "b": 1, "x": 1}
    log.record("q2", "default", 1000, 10, [("a", "L1"), ("c", "L2")])
    log.flush()  # written after the snapshot: an id past it
    log.record("q3", "default", 1000, 10, [("b", "L1"), ("c", "L0"), ("x", "L1")])  # still pending
    log.forget_memory("x")  # forgotten while the recount ran
    log.record("q4", "default", 1000, 10, [("d", "L1")])  # pending at the swap
    log._swap_counts(*snapshot, started)
    assert log.frequency_counts() == {"a": 2, "b": 2, "c": 1, "d": 1}
    assert log.frequency_counts() == _exact_counts(log)
    log.close()


def test_without_a_background_thread_the_due_query_counts_inline(tmp_path):
    """A one-shot engine (the CLI) recounts in the query that finds the counts due, as before."""
    from ctxos.services.access_log import REFRESH_S

    log = AccessLog(tmp_path)
    log.open()
    log.record("q", "default", 1000, 10, [("a", "L1")])
    log.flush()
    log.conn.execute("UPDATE queries SET ts = ts - 40 * 86400")  # the only query leaves the window
    log._counts_at -= REFRESH_S + 1
    assert log.frequency_counts() == {} == _exact_counts(log)
    log.close()


def test_in_the_daemon_a_due_recount_never_holds_up_a_query(make_workspace):
    """A real ``DaemonContext`` (its thread pools) and engine on a real workspace: with the recount made
    slow, a query that finds the counts due answers while the recount still runs on the background
    thread, and the counts the recount swaps in afterwards are exact."""
    import asyncio
    import threading

    from ctxos.daemon.context import DaemonContext
    from ctxos.services.access_log import REFRESH_S
    from ctxos.services.engine import Engine

    root = make_workspace(
        {
            "04-skills/deploy.md": "---\nid: deploy\ntype: skill\nl0: Deploy with the release checklist\n---\nDeploy.\n",
            "04-skills/rollback.md": "---\nid: rollback\ntype: skill\nl0: Roll back a failed deploy\n---\nRoll back.\n",
        }
    )
    engine = Engine(root)
    release, counting = threading.Event(), threading.Event()

    async def scenario() -> None:
        ctx = DaemonContext(root, engine)  # before the load, as the daemon does: the load wires the log
        ctx.bind_loop(asyncio.get_running_loop())
        engine.load()
        log = engine.access_log
        assert log.refresh_in_background is not None
        await ctx.run_read(engine.execute_context_query, "deploy checklist", 1000)
        assert log.frequency_counts()["deploy"] >= 1
        snapshot = log._count_snapshot

        def slow_snapshot(since: float):
            counting.set()
            assert release.wait(30)
            return snapshot(since)

        log._count_snapshot = slow_snapshot
        log._counts_at -= REFRESH_S + 1
        await asyncio.wait_for(ctx.run_read(engine.execute_context_query, "roll back a deploy", 1000), 10)
        assert counting.wait(10) and log._refresh_handed  # the recount is running, the query has answered
        await ctx.run_read(engine.execute_context_query, "deploy checklist", 1000)  # recorded meanwhile
        release.set()
        for _ in range(200):
            if not log._refresh_handed:
                break
            await asyncio.sleep(0.05)
        assert not log._refresh_handed and time.time() - log._counts_at < 30
        assert dict(log.frequency_counts()) == _exact_counts(log)
        ctx.shutdown_executors()

    try:
        asyncio.run(scenario())
    finally:
        release.set()
        engine.close()


def _no_full_count(log: AccessLog) -> list[int]:
    """Record every full count of the window this log makes (the spy the saved-counts tests read)."""
    calls: list[int] = []
    full = log._reload_counts_locked

    def spy() -> None:
        calls.append(1)
        full()

    log._reload_counts_locked = spy  # type: ignore[method-assign]
    return calls


def test_counts_saved_at_close_are_brought_up_to_date_at_the_next_open(tmp_path, monkeypatch):
    """A clean close saves the counts; the next open reads them and adds what a process that stopped
    without closing wrote, takes away what left the window, and counts nothing in full."""
    import ctxos.services.access_log as access_log_module

    now = time.time()
    first = AccessLog(tmp_path, window_days=30)
    first.open()
    first.record("old", "default", 1000, 10, [("old", "L1"), ("a", "L1")], ts=now - 30 * 86400 + 600)
    first.record("q1", "default", 1000, 10, [("a", "L2"), ("b", "L1"), ("c", "L0")], ts=now)
    first.close()
    assert counts_path(tmp_path).exists()

    crashed = AccessLog(tmp_path, window_days=30)
    crashed.open()
    crashed.record("q2", "default", 1000, 10, [("b", "L1"), ("d", "L1")])
    crashed.flush()
    crashed._conn.close()  # stopped without closing: the saved counts lack q2
    crashed._conn = None

    later = now + 3600  # an hour on: the "old" query has left the 30-day window
    monkeypatch.setattr(access_log_module.time, "time", lambda: later)
    again = AccessLog(tmp_path, window_days=30)
    again.lazy_counts = True
    calls = _no_full_count(again)
    again.open()
    assert again._counts_at == later and not calls  # counted at open, from the saved counts
    assert again.frequency_counts() == {"a": 1, "b": 2, "d": 1} == _exact_counts(again)
    assert not calls
    again.close()


def test_odd_or_stale_saved_counts_mean_a_count(tmp_path):
    """A torn file, another window, a file ahead of the log, or a forgotten memory: the window is counted,
    with the database's own result."""
    log = AccessLog(tmp_path, window_days=30)
    log.open()
    log.record("q", "default", 1000, 10, [("a", "L1"), ("b", "L1")])
    log.close()
    saved = counts_path(tmp_path)
    good = saved.read_bytes()

    def reopened(window_days: float = 30) -> tuple[AccessLog, list[int]]:
        fresh = AccessLog(tmp_path, window_days=window_days)
        fresh.lazy_counts = True
        calls = _no_full_count(fresh)
        fresh.open()
        return fresh, calls

    for damage in (good[: len(good) // 2], b"[]", good.replace(b'"newest":1', b'"newest":9')):
        saved.write_bytes(damage)
        fresh, calls = reopened()
        assert fresh._counts_at == 0.0  # nothing usable: counted at first use
        assert fresh.frequency_counts() == {"a": 1, "b": 1} and calls == [1]
        fresh.close()
    fresh, calls = reopened(window_days=7)  # saved for a 30-day window
    assert fresh._counts_at == 0.0 and fresh.frequency_counts() == {"a": 1, "b": 1} and calls == [1]
    fresh.forget_memory("a")
    assert not saved.exists()  # they counted the forgotten memory's loads
    fresh.close()
    fresh, calls = reopened(window_days=7)  # saved again at the clean close, for this window
    assert fresh._counts_at > 0 and fresh.frequency_counts() == {"b": 1} and not calls
    fresh.close()


def test_loads_with_non_ascii_ids_are_read_and_forgotten_in_both_spellings(tmp_path):
    """Lists are written as UTF-8 JSON text (orjson) now, \\u-escaped (the standard library) before: counts,
    read-back and forgetting find a non-ASCII id in both."""
    import json

    log = AccessLog(tmp_path)
    log.open()
    log.record("new", "default", 1000, 10, [("café", "L1"), ("naïve", "L2")])
    log.flush()
    stored = log.conn.execute("SELECT loads, typeof(loads) FROM queries").fetchone()
    assert stored == ('[["café","L1"],["naïve","L2"]]', "text")
    old = json.dumps([["café", "L2"], ["b", "L1"]])
    assert "\\u00e9" in old
    log.conn.execute(
        "INSERT INTO queries(ts, query, intent, budget, tokens_used, loads) VALUES (?, 'old', 'default', 1000, 10, ?)",
        (time.time(), old),
    )
    assert log.counts_in_window(1) == {"café": 2, "naïve": 1, "b": 1}
    oldest, newest = sorted(q.id for q in log.recent_queries(2))
    assert log.loads_for_query(oldest) == [("café", "L1"), ("naïve", "L2")]
    log.forget_memory("café")
    assert log.counts_in_window(1) == {"naïve": 1, "b": 1}
    assert log.loads_for_query(newest) == [("b", "L1")]
    log.close()


def test_an_error_bringing_saved_counts_up_to_date_means_a_count(tmp_path, monkeypatch):
    """The open never fails over the saved counts: an SQLite error there falls back to counting the window."""
    import sqlite3

    log = AccessLog(tmp_path)
    log.open()
    log.record("q", "default", 1000, 10, [("a", "L1")])
    log.close()

    def fail(self: AccessLog) -> bool:
        raise sqlite3.OperationalError("database disk image is malformed")

    monkeypatch.setattr(AccessLog, "_load_saved_counts_locked", fail)
    again = AccessLog(tmp_path)
    again.open()
    assert again.frequency_counts() == {"a": 1}
    again.close()
