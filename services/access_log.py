"""The access log: which memories each context query loaded (SQLite, ``<state>/access.db``).

It feeds the access-frequency signal (how often a memory was loaded lately)
and the health view (coverage: share of memories loaded in the last 14 days;
efficiency: tokens used per budget). Like the rest of ``.ctxos/`` it is a
cache of behaviour, not of content: a damaged file is moved aside and a new
one started, and the files are never at risk.

Frequency counts are kept in memory (loaded at open, bumped on each record)
so the query path never runs a GROUP BY; they are re-read from disk when the
window has moved by more than ``REFRESH_S``.

Records are written in batches (issue 16): ``record`` keeps the query in
memory and one transaction writes what is pending once ``FLUSH_EVERY``
queries or ``FLUSH_AFTER_S`` seconds have gathered, before any read of the
database, and at ``close``. A transaction per query was ~3-5 ms of every
``get_context`` on a busy machine. What a crash (not a normal stop) can lose
is at most the queries of the last pending batch: behaviour, never content.

A batch of 16 queries is ~1,600 rows, 20-90 ms of writing: paid by the query
that made it due, that was one query in 16, i.e. the p95 itself. So an owner
with threads (the daemon) sets ``defer``: a due batch is then handed to it and
written on one of its threads, off the query; the query path only appends to a
list. Should that thread fall behind, a query writes once ``MAX_PENDING`` queries
are waiting, so memory stays bounded.

Counting the window again (hourly, so loads older than the window drop out) is a
GROUP BY over every query's loads: ~1.5 s once the log holds ~10,000 queries
(measured, 2026-12-07). An owner with a background thread sets
``refresh_in_background``: the query that finds the counts due then answers with
the counts it has (at most an hour and a recount stale) and the recount runs on
that thread, on a connection of its own, off every query and every batch write
(``_refresh_counts``). Without it (a one-shot CLI engine) the query counts inline,
as the first count after a load does when there are no saved counts.

The counts are saved at a clean close (``services/access_counts.py``), with the
last query id and the window start they are exact for; an open brings them up to
date with two small queries, so a restart neither counts the window nor makes its
first query wait for a count.

A query's loads are one JSON list on its ``queries`` row (``loads``:
``[[memory_id, tier], ...]`` in selection order), not a ``loads`` row each: a
query loads ~130 memories, and writing a row per load into a table with two
indexes was ~3 ms of CPU per query (46 ms per batch of 16, measured at 10,000
memories) against ~0.2 ms for 16 rows. Readers see both through the
``all_loads`` view (rows written before this change stay in ``loads``); the
counts run in SQLite over ``json_each``. An SQLite without JSON functions
(older than 3.38 and built without them) keeps writing a row per load.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .access_counts import SavedCounts, counts_path, discard_counts, load_counts, save_counts

log = logging.getLogger(__name__)

DB_FILENAME = "access.db"
REFRESH_S = 3600.0
DAY_S = 86400.0
# Catalog-only (L0) lines do not count as a load for the frequency signal: the
# memory was listed, not read.
COUNTED_TIERS = ("L1", "L2")
FLUSH_EVERY = 16  # pending queries that trigger a write
FLUSH_AFTER_S = 1.0  # a pending query older than this is written at the next record
MAX_PENDING = 256  # with ``defer``: a query writes the batch itself when this many wait

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    query TEXT NOT NULL,
    intent TEXT NOT NULL,
    budget INTEGER NOT NULL,
    tokens_used INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS loads (
    query_id INTEGER NOT NULL REFERENCES queries(id) ON DELETE CASCADE,
    memory_id TEXT NOT NULL,
    tier TEXT NOT NULL,
    ts REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS loads_ts ON loads(ts);
CREATE INDEX IF NOT EXISTS loads_memory ON loads(memory_id, ts);
CREATE INDEX IF NOT EXISTS queries_ts ON queries(ts);
"""

# Every load, old (a ``loads`` row each) and new (the JSON list on the query's row); per connection.
_ALL_LOADS_JSON = """
CREATE TEMP VIEW IF NOT EXISTS all_loads AS
    SELECT query_id, memory_id, tier, ts FROM loads
    UNION ALL
    SELECT q.id, json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]'), q.ts
    FROM queries AS q, json_each(q.loads) AS j
    WHERE q.loads IS NOT NULL
"""
_ALL_LOADS_ROWS = "CREATE TEMP VIEW IF NOT EXISTS all_loads AS SELECT query_id, memory_id, tier, ts FROM loads"


def _loads_json(loads: list[Any]) -> str:
    """A query's loads as the JSON text of its row (orjson: ~5x the standard library's speed on ~130 pairs).

    Text, not bytes: SQLite reads a BLOB argument of its JSON functions as its binary JSONB.
    """
    return orjson.dumps(loads).decode("utf-8")


def _loads_per_memory(
    conn: sqlite3.Connection, condition: str, params: tuple[float, ...], tiers: tuple[str, ...] = COUNTED_TIERS
) -> Counter[str]:
    """Loads per memory among ``all_loads`` rows meeting ``condition`` (SQL over ts and query_id) at ``tiers``."""
    marks = ",".join("?" * len(tiers))
    rows = conn.execute(
        f"SELECT memory_id, COUNT(*) FROM all_loads WHERE {condition} AND tier IN ({marks}) GROUP BY memory_id",
        (*params, *tiers),
    ).fetchall()
    return Counter({mid: int(n) for mid, n in rows})


def _newest_query_id(conn: sqlite3.Connection) -> int:
    """The id of the newest written query (0 when none)."""
    return int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM queries").fetchone()[0])


@dataclass
class _Pending:
    """A recorded query not yet written."""

    ts: float
    query: str
    intent: str
    budget: int
    tokens_used: int
    loads: list[tuple[str, str]]
    queued: float = field(default_factory=time.monotonic)


@dataclass
class QueryRecord:
    id: int
    ts: float
    query: str
    intent: str
    budget: int
    tokens_used: int


class AccessLog:
    """Append-only log of context queries and the memories they loaded."""

    def __init__(self, state_dir: Path, window_days: float = 30.0) -> None:
        self.path = Path(state_dir) / DB_FILENAME
        self.window_days = float(window_days)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._counts: Counter[str] = Counter()
        # The largest of those counts, with the Counter it is for (frequency_scores): kept under
        # ``_pending_lock`` as loads are recorded, found again after a reload or a forgotten memory.
        self._top: tuple[Counter[str], int] | None = None
        self._counts_at = 0.0
        self._counts_since = 0.0  # the window start the counts are exact from (saved with them at close)
        self._counts_path = counts_path(self.path.parent)
        # True: ``open`` leaves the frequency counts to the first ``frequency_counts`` call. The
        # engine sets it and warms them after its load: counting the window (a GROUP BY over every
        # query's loads) took ~0.2 s of a daemon's warm restart after ~1,400 queries, and grows with use.
        self.lazy_counts = False
        self._pending: list[_Pending] = []
        self._pending_lock = threading.Lock()  # the pending list and counts; never held while writing
        self._flush_handed = False  # a due batch was handed to ``defer`` and is not written yet
        self.recovered: str | None = None
        self._json_loads = False  # set at connect: loads go on the query's row as JSON (module doc)
        # How a due batch is written: None = by the query that made it due; else a function that
        # runs its argument on another thread (the daemon's), so no query waits for the write.
        self.defer: Callable[[Callable[[], None]], None] | None = None
        # How a due recount of the window runs: None = inline; else a function that runs its
        # argument on a background thread (module doc).
        self.refresh_in_background: Callable[[Callable[[], None]], None] | None = None
        self._refresh_handed = False  # a recount was handed over and has not swapped its counts in yet
        self._forgotten: set[str] = set()  # memories forgotten while a recount runs (it must not bring them back)

    # --- connection -----------------------------------------------------------------
    def open(self) -> None:
        with self._lock:
            if self._conn is not None:
                return
            try:
                self._conn = self._connect()
            except sqlite3.DatabaseError as exc:
                # A damaged cache: keep it for inspection, start a fresh one.
                aside = self.path.with_name(f"{DB_FILENAME}.corrupt-{int(time.time())}")
                log.warning("access log %s unreadable (%s); moved to %s", self.path, exc, aside.name)
                try:
                    self.path.rename(aside)
                except OSError:
                    self.path.unlink(missing_ok=True)
                self.recovered = f"access log unreadable ({exc}); started a new one"
                discard_counts(self._counts_path)  # they counted the queries of the log moved aside
                self._conn = self._connect()
            if not self._load_saved_counts_guarded() and not self.lazy_counts:
                self._reload_counts_locked()

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=5.0, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(_SCHEMA)
        conn.execute("SELECT COUNT(*) FROM queries").fetchone()
        columns = {row[1] for row in conn.execute("PRAGMA table_info(queries)")}
        if "loads" not in columns:  # a log made before loads moved onto the query's row
            conn.execute("ALTER TABLE queries ADD COLUMN loads TEXT")
        try:
            conn.execute("SELECT COUNT(*) FROM json_each('[]')").fetchone()
            self._json_loads = True
        except sqlite3.OperationalError:  # an SQLite without its JSON functions
            self._json_loads = False
        conn.execute(_ALL_LOADS_JSON if self._json_loads else _ALL_LOADS_ROWS)
        return conn

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            self.open()
        assert self._conn is not None
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._flush_locked()
                try:
                    self._save_counts_locked()
                except sqlite3.Error as exc:  # a cache: the next open counts the window
                    log.warning("access log %s: frequency counts not saved (%s)", self.path, exc)
                self._conn.close()
                self._conn = None

    def flush(self) -> None:
        """Write the pending queries now (readers of the database call this first)."""
        with self._lock:
            self._flush_locked()

    # --- writing --------------------------------------------------------------------
    def record(
        self,
        query: str,
        intent: str,
        budget: int,
        tokens_used: int,
        loads: Iterable[tuple[str, str]],
        ts: float | None = None,
    ) -> None:
        """Log one query and the (memory_id, tier) pairs it loaded (written with the next batch)."""
        ts = time.time() if ts is None else float(ts)
        loads = list(loads)
        _ = self.conn  # opens the database (and loads the counts) on first use
        with self._pending_lock:
            self._pending.append(_Pending(ts, query, intent, int(budget), int(tokens_used), loads))
            counts = self._counts
            kept = self._top
            top = kept[1] if kept is not None and kept[0] is counts else None
            for mid, tier in loads if ts >= self._counts_since else ():  # older: outside the counted window
                if tier in COUNTED_TIERS:
                    counts[mid] += 1
                    if top is not None and counts[mid] > top:
                        top = counts[mid]
            self._top = (counts, top) if top is not None else None
            waiting = len(self._pending)
            due = waiting >= FLUSH_EVERY or time.monotonic() - self._pending[0].queued >= FLUSH_AFTER_S
            defer = self.defer if waiting < MAX_PENDING else None
            hand = due and defer is not None and not self._flush_handed
            if hand:
                self._flush_handed = True
        if not due or (defer is not None and not hand):
            return
        if defer is None:
            self.flush()
            return
        try:
            defer(self.flush)
        except Exception as exc:  # noqa: BLE001 - e.g. the daemon's pool is shutting down: write here
            log.debug("access log: deferred write refused (%s); writing now", exc)
            self.flush()

    def _flush_locked(self) -> None:
        """One transaction for every pending query; a failed write is logged and dropped (a cache)."""
        with self._pending_lock:
            pending, self._pending = self._pending, []
            self._flush_handed = False  # what a handed job would write is being written now
        if not pending or self._conn is None:
            return
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if self._json_loads:
                    conn.executemany(
                        "INSERT INTO queries(ts, query, intent, budget, tokens_used, loads) VALUES (?, ?, ?, ?, ?, ?)",
                        [
                            (item.ts, item.query, item.intent, item.budget, item.tokens_used, _loads_json(item.loads))
                            for item in pending
                        ],
                    )
                else:
                    for item in pending:
                        self._insert_rows(conn, item)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            log.warning("access log %s: %d queries not written (%s)", self.path, len(pending), exc)

    @staticmethod
    def _insert_rows(conn: sqlite3.Connection, item: _Pending) -> None:
        """A query and a ``loads`` row per load (an SQLite without JSON functions)."""
        cursor = conn.execute(
            "INSERT INTO queries(ts, query, intent, budget, tokens_used) VALUES (?, ?, ?, ?, ?)",
            (item.ts, item.query, item.intent, item.budget, item.tokens_used),
        )
        query_id = cursor.lastrowid
        if query_id is None:  # sqlite3 sets it after every INSERT of one row
            raise sqlite3.OperationalError("the query row got no id")
        conn.executemany(
            "INSERT INTO loads(query_id, memory_id, tier, ts) VALUES (?, ?, ?, ?)",
            [(query_id, mid, tier, item.ts) for mid, tier in item.loads],
        )

    def forget_memory(self, memory_id: str) -> None:
        """Drop a memory's loads (e.g. after it is deleted for good)."""
        with self._lock:
            self._flush_locked()
            discard_counts(self._counts_path)  # they count its loads; a clean close saves them again
            conn = self.conn
            conn.execute("DELETE FROM loads WHERE memory_id = ?", (memory_id,))
            if self._json_loads:
                # As the lists hold it: UTF-8 as written now, \u-escaped as the standard library wrote it before.
                needles = (_loads_json([memory_id])[1:-1], json.dumps(memory_id))
                rows = conn.execute(
                    "SELECT id, loads FROM queries WHERE loads IS NOT NULL AND (instr(loads, ?) > 0 OR instr(loads, ?) > 0)",
                    needles,
                ).fetchall()
                updates = [
                    (_loads_json([pair for pair in json.loads(text) if pair[0] != memory_id]), query_id)
                    for query_id, text in rows
                ]
                if updates:
                    conn.executemany("UPDATE queries SET loads = ? WHERE id = ?", updates)
            with self._pending_lock:
                self._counts.pop(memory_id, None)
                self._top = None
                if self._refresh_handed:
                    self._forgotten.add(memory_id)

    # --- frequency signal ---------------------------------------------------------------
    def _reload_counts_locked(self) -> None:
        self._flush_locked()
        since = time.time() - self.window_days * DAY_S
        self._counts = _loads_per_memory(self._conn, "ts >= ?", (since,)) if self._conn else Counter()
        self._counts_since = since
        self._counts_at = time.time()

    def _load_saved_counts_guarded(self) -> bool:
        """``_load_saved_counts_locked``; a database that cannot answer means counting the window instead."""
        try:
            return self._load_saved_counts_locked()
        except sqlite3.Error as exc:
            log.warning("access log %s: saved frequency counts not brought up to date (%s)", self.path, exc)
            return False

    def _load_saved_counts_locked(self) -> bool:
        """Counts saved at the last close, brought up to date; False when there are none usable.

        What the saved counts lack: loads of queries written after ``newest`` (a
        process that stopped without closing) and, taken away, loads the window has
        left behind since. Both are found through the queries' ids and times
        (indexed), not a count of the whole window.
        """
        saved = load_counts(self._counts_path, self.window_days)
        conn = self._conn
        if saved is None or conn is None:
            return False
        now = time.time()
        since = now - self.window_days * DAY_S
        if saved.newest > _newest_query_id(conn) or since < saved.since:  # another log, or the clock went back
            return False
        counts = saved.counts
        counts.update(_loads_per_memory(conn, "query_id > ? AND ts >= ?", (saved.newest, since)))
        counts.subtract(
            _loads_per_memory(conn, "query_id <= ? AND ts >= ? AND ts < ?", (saved.newest, saved.since, since))
        )
        if any(n < 0 for n in counts.values()):  # the file counted loads the log no longer has
            return False
        with self._pending_lock:
            self._counts = +counts  # without the memories whose loads all left the window
            self._counts_since = since
            self._counts_at = now
            self._top = None
        return True

    def _save_counts_locked(self) -> None:
        """Save the counts for the next open (at close: every recorded query is written by now)."""
        if not self._counts_at or self._conn is None:
            return  # never counted: nothing exact to save
        newest = _newest_query_id(self._conn)
        with self._pending_lock:
            saved = SavedCounts(newest, self._counts_since, self.window_days, Counter(self._counts))
        save_counts(self._counts_path, saved)

    def frequency_counts(self) -> Counter[str]:
        """Loads (L1/L2) per memory in the frequency window (cached, refreshed hourly).

        The first count after a load is made here (or by the engine's warm-up) and
        waited for; a later, hourly recount runs on ``refresh_in_background`` when the
        owner gave one, while this call returns the counts it has (module doc).
        """
        _ = self.conn  # opens the database (and loads the counts) on first use
        if time.time() - self._counts_at <= REFRESH_S:
            return self._counts
        background = self.refresh_in_background
        if self._counts_at and background is not None:
            self._hand_refresh(background)
            return self._counts
        with self._lock:
            if time.time() - self._counts_at > REFRESH_S:  # not counted meanwhile by a caller it waited for
                self._reload_counts_locked()
        return self._counts

    def _hand_refresh(self, background: Callable[[Callable[[], None]], None]) -> None:
        """Hand one recount of the window to ``background`` (a second due caller hands nothing)."""
        with self._pending_lock:
            if self._refresh_handed:
                return
            self._refresh_handed = True
            self._forgotten = set()
        try:
            background(self._refresh_counts)
        except Exception as exc:  # noqa: BLE001 - e.g. the pools are shutting down: keep the counts
            log.debug("access log: background recount refused (%s)", exc)
            with self._pending_lock:
                self._refresh_handed = False

    def _refresh_counts(self) -> None:
        """Count the window on a connection of its own, then swap the counts in (a background job)."""
        try:
            started = time.time()
            snapshot = self._count_snapshot(started - self.window_days * DAY_S)
            if snapshot is not None:
                self._swap_counts(*snapshot, started)
        except Exception:  # noqa: BLE001 - a cache: the old counts stay, the next due query asks again
            log.exception("access log %s: counting the frequency window failed", self.path)
        finally:
            with self._pending_lock:
                self._refresh_handed = False
                self._forgotten = set()

    def _count_snapshot(self, since: float) -> tuple[int, float, Counter[str]] | None:
        """The newest written query's id and the counts of every load up to it, in one read transaction.

        A reader connection in WAL mode sees one snapshot and blocks no writer, so
        batches keep being written while it counts.
        """
        if not self.path.exists():
            return None
        conn = sqlite3.connect(str(self.path), timeout=5.0, isolation_level=None)
        try:
            conn.execute(_ALL_LOADS_JSON if self._json_loads else _ALL_LOADS_ROWS)  # a temporary view
            conn.execute("PRAGMA query_only=ON")  # from here on, this connection only reads
            conn.execute("BEGIN")
            newest = _newest_query_id(conn)
            counts = _loads_per_memory(conn, "ts >= ? AND query_id <= ?", (since, newest))
            conn.execute("COMMIT")
        finally:
            conn.close()
        return newest, since, counts

    def _swap_counts(self, newest: int, since: float, counts: Counter[str], started: float) -> None:
        """Make ``counts`` (every load up to query ``newest``) current: add what was recorded after it.

        Under ``_lock`` no batch is being written, so each query recorded since is
        either written (an id past ``newest``) or still pending, never both or neither.
        """
        with self._lock:
            later = (
                _loads_per_memory(self._conn, "query_id > ? AND ts >= ?", (newest, since))
                if self._conn is not None
                else Counter()
            )
            with self._pending_lock:
                counts.update(later)
                for item in self._pending:
                    if item.ts < since:
                        continue
                    for mid, tier in item.loads:
                        if tier in COUNTED_TIERS:
                            counts[mid] += 1
                for mid in self._forgotten:
                    counts.pop(mid, None)
                self._counts = counts
                self._top = None
                self._counts_since = since
                self._counts_at = started

    def frequency_scores(self, memory_ids: Iterable[str]) -> dict[str, float]:
        """The access-frequency signal, 0..1: log-scaled loads relative to the most-loaded memory."""
        counts = self.frequency_counts()
        kept = self._top
        if kept is not None and kept[0] is counts:  # a query asks twice: the maximum is kept, not found each time
            top = kept[1]
        else:
            with self._pending_lock:  # counted loads change under this lock
                top = max(counts.values(), default=0)
                if counts is self._counts:
                    self._top = (counts, top)
        if top <= 0:
            return {mid: 0.0 for mid in memory_ids}
        scale = math.log1p(top)
        return {mid: math.log1p(counts.get(mid, 0)) / scale for mid in memory_ids}

    def counts_in_window(self, days: float, tiers: Iterable[str] = COUNTED_TIERS) -> Counter[str]:
        """Loads per memory in the last ``days`` days (straight from the database)."""
        since = time.time() - days * DAY_S
        with self._lock:
            self._flush_locked()
            return _loads_per_memory(self.conn, "ts >= ?", (since,), tuple(tiers))

    # --- health ---------------------------------------------------------------------
    def loaded_ids(self, days: float = 14.0) -> set[str]:
        """Ids loaded (L1 or L2) in the last ``days`` days."""
        return set(self.counts_in_window(days))

    def coverage(self, memory_ids: Iterable[str], days: float = 14.0) -> float:
        """Share of ``memory_ids`` loaded at least once in the last ``days`` days (0..1; 0 for none)."""
        ids = set(memory_ids)
        if not ids:
            return 0.0
        return len(ids & self.loaded_ids(days)) / len(ids)

    def efficiency(self, days: float | None = 14.0) -> float | None:
        """Mean tokens_used / budget over queries in the window; None when there were none."""
        where = "WHERE budget > 0"
        params: tuple[float, ...] = ()
        if days is not None:
            where, params = ("WHERE budget > 0 AND ts >= ?", (time.time() - days * DAY_S,))
        with self._lock:
            self._flush_locked()
            row = self.conn.execute(
                f"SELECT AVG(MIN(1.0, CAST(tokens_used AS REAL) / budget)), COUNT(*) FROM queries {where}", params
            ).fetchone()
        return None if not row or not row[1] else float(row[0])

    def last_query_id(self) -> int:
        """Id of the newest recorded query (0 when none): a cheap "has anything been loaded since" stamp."""
        with self._lock:
            self._flush_locked()
            return _newest_query_id(self.conn)

    def query_count(self, days: float | None = None) -> int:
        with self._lock:
            self._flush_locked()
            if days is None:
                return int(self.conn.execute("SELECT COUNT(*) FROM queries").fetchone()[0])
            since = time.time() - days * DAY_S
            return int(self.conn.execute("SELECT COUNT(*) FROM queries WHERE ts >= ?", (since,)).fetchone()[0])

    def recent_queries(self, limit: int = 20) -> list[QueryRecord]:
        with self._lock:
            self._flush_locked()
            rows = self.conn.execute(
                "SELECT id, ts, query, intent, budget, tokens_used FROM queries ORDER BY id DESC LIMIT ?", (int(limit),)
            ).fetchall()
        return [QueryRecord(*row) for row in rows]

    def loads_for_query(self, query_id: int) -> list[tuple[str, str]]:
        """The (memory_id, tier) pairs one query loaded, in the order it selected them."""
        with self._lock:
            self._flush_locked()
            conn = self.conn
            found = conn.execute("SELECT loads FROM queries WHERE id = ?", (int(query_id),)).fetchone()
            if found is not None and found[0] is not None:
                return [(mid, tier) for mid, tier in json.loads(found[0])]
            rows = conn.execute(
                "SELECT memory_id, tier FROM loads WHERE query_id = ? ORDER BY rowid", (int(query_id),)
            ).fetchall()
        return [(mid, tier) for mid, tier in rows]
