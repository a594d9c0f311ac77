"""The access log keeps a query's loads as one JSON list on its row (services/access_log.py).

Real SQLite files in a temporary folder: a log written the old way (a ``loads``
row per load) keeps counting after the change, new queries are read back in
selection order, and forgetting a memory removes it from both forms.
"""

from __future__ import annotations

import sqlite3
import time

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
