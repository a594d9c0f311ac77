"""A repeated query reuses what it found under the same engine state, and answers as computing it again would."""

from __future__ import annotations

from datetime import datetime

import pytest
from conftest import write_files
from ctxos.services import query as query_module
from ctxos.services.engine import Engine
from ctxos.services.query import execute_context_query
from ctxos.services.query_facts import CandidateValues, FactsMemo, QueryFacts, engine_state
from ctxos.services.signals import Candidate

NOW = datetime(2026, 12, 5, 12, 0)

FILES = {
    "05-resources/postgres-pool.md": """\
        ---
        id: postgres-pool
        l0: Postgres connection pool sizing
        tags: [database, postgres]
        related: [retry-policy]
        ---
        Size the connection pool to twice the CPU count.
        """,
    "05-resources/retry-policy.md": """\
        ---
        id: retry-policy
        l0: Retry policy for flaky network calls
        tags: [network, database]
        ---
        Retry idempotent calls three times with jittered backoff. See [[postgres-pool]].
        """,
    "06-decisions/queue.md": """\
        ---
        id: queue-choice
        l0: We chose a durable queue for payment events
        ---
        Payment events go through a durable queue; the connection pool is shared with the API.
        """,
    "08-rules/no-secrets.md": """\
        ---
        id: no-secrets
        type: rule
        l0: Never write secrets into memory files
        ---
        Never store passwords or tokens in memories.
        """,
}
QUERIES = ("postgres connection pool", "durable queue for payment events", "retry flaky calls", "what did we decide")


@pytest.fixture
def engine(open_engine):
    return open_engine(FILES)


def _answer(engine: Engine, query: str) -> dict:
    found = execute_context_query(engine, query, 800, record_access=False, now=NOW).to_dict()
    found.pop("elapsed_ms")
    return found


def _counting_gather(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = query_module.gather_candidates

    def counted(engine, expanded, depth, query_vector=None):
        calls.append(depth)
        return real(engine, expanded, depth, query_vector)

    monkeypatch.setattr(query_module, "gather_candidates", counted)
    return calls


def test_a_repeated_query_gathers_once_and_answers_as_computing_it_again(engine, monkeypatch):
    calls = _counting_gather(monkeypatch)
    for query in QUERIES:
        first = _answer(engine, query)
        kept = _answer(engine, query)  # from the kept facts
        engine.query_facts.clear()
        again = _answer(engine, query)  # computed again from nothing
        assert kept == first == again
    assert len(calls) == 2 * len(QUERIES)  # the first ask and the one after clear(): never the kept one
    engine.query_facts.clear()
    for query in QUERIES:
        _answer(engine, query)
    assert len(engine.query_facts) == len(QUERIES)  # one state: every query's facts side by side


def test_frequency_and_the_clock_still_move_a_kept_query(engine):
    """The access log and ``now`` are read at every ask: only what they cannot change is kept."""
    query = "postgres connection pool"
    before = _answer(engine, query)
    for _ in range(30):  # the retry policy is used a lot from now on
        engine.access_log.record("retry", "default", 800, 100, [("retry-policy", "L1")])
    engine.access_log.flush()
    kept = _answer(engine, query)
    engine.query_facts.clear()
    again = _answer(engine, query)
    assert kept == again
    freq = {s["id"]: s["signals"]["frequency"] for s in kept["selected"]}
    assert freq["retry-policy"] > {s["id"]: s["signals"]["frequency"] for s in before["selected"]}["retry-policy"]
    later = execute_context_query(engine, query, 800, record_access=False, now=datetime(2027, 6, 1)).to_dict()
    recency = {s["id"]: s["signals"]["recency"] for s in later["selected"]}
    assert recency["postgres-pool"] < {s["id"]: s["signals"]["recency"] for s in kept["selected"]}["postgres-pool"]


def test_an_edit_moves_the_state_on_and_the_query_sees_the_new_text(engine):
    """A phrase written into a file counts at the next ask: the facts of the old state are not served."""
    root = engine.root
    query = "jittered backoff"
    state = engine_state(engine)
    before = _answer(engine, query)
    queue = root / "06-decisions/queue.md"
    queue.write_text(queue.read_text().replace("shared with the API.", "shared with the API; jittered backoff too."))
    engine.apply_changes([queue])
    assert engine_state(engine) != state
    after = _answer(engine, query)
    engine.query_facts.clear()
    assert after == _answer(engine, query)
    signals = {s["id"]: s["signals"] for s in after["selected"]}
    old = {s["id"]: s["signals"] for s in before["selected"]}
    assert signals["queue-choice"]["bm25"] > old.get("queue-choice", {}).get("bm25", 0.0)


def test_a_new_file_is_found_by_a_query_asked_before(engine):
    root = engine.root
    query = "postgres connection pool"
    assert "pool-notes" not in {s["id"] for s in _answer(engine, query)["selected"]}
    write_files(
        root,
        {
            "05-resources/pool-notes.md": "---\nid: pool-notes\nl0: Postgres pool notes\n---\nPostgres connection pool notes.\n"
        },
    )
    engine.apply_changes([root / "05-resources/pool-notes.md"])
    assert "pool-notes" in {s["id"] for s in _answer(engine, query)["selected"]}


def _facts(values: dict[str, CandidateValues]) -> QueryFacts:
    return QueryFacts(detection=None, expanded=None, terms=None, gathered=(), values=values)  # type: ignore[arg-type]


def test_facts_fill_the_neighbours_they_know_and_learn_the_others(engine):
    memory = engine.store.get("retry-policy")
    other = engine.store.get("queue-choice")
    known = CandidateValues(1.5, frozenset({"retri"}), frozenset({"retri"}), 0.25, 0.1)
    facts = _facts({"retry-policy": known})
    cand = Candidate(memory)
    assert facts.fill(cand) and (cand.bm25_raw, cand.matched, cand.keyword, cand.raw_cosine) == (
        1.5,
        frozenset({"retri"}),
        0.25,
        0.1,
    )
    stranger = Candidate(other)
    assert not facts.fill(stranger) and stranger.keyword is None
    stranger.bm25_raw, stranger.keyword = 0.5, 0.0
    assert facts.learn({"retry-policy": cand, "queue-choice": stranger}) == 1
    assert facts.values["queue-choice"] == CandidateValues(0.5, frozenset(), frozenset(), 0.0, None)


def test_the_memo_keeps_one_state_and_a_bounded_number_of_values():
    memo = FactsMemo(max_values=5)
    config = object()
    state = (1, (7, 3), None, config)
    one = _facts({f"m{i}": CandidateValues(0.0, frozenset(), frozenset(), None, None) for i in range(3)})
    memo.put(state, "q1", one)
    assert memo.get((1, (7, 3), None, config), "q1") is one  # numbers compare by value
    assert memo.get((1, (7, 3), None, object()), "q1") is None  # another config object: another state
    assert memo.get((2, (7, 3), None, config), "q1") is None  # the store moved on
    assert memo.get((1, (7, 4), None, config), "q1") is None  # the index committed
    memo.put(state, "q2", _facts({"a": one.values["m0"]}))
    assert len(memo) == 2
    memo.put(state, "q3", _facts({"b": one.values["m0"], "c": one.values["m0"]}))  # 3 + 1 + 2 > 5: start again
    assert len(memo) == 1 and memo.get(state, "q1") is None and memo.get(state, "q3") is not None
    memo.grew(state, 10)  # a kept query learned many neighbours: over the bound, start again
    assert len(memo) == 0
    memo.put((2,), "q1", one)
    assert memo.get(state, "q3") is None and memo.get((2,), "q1") is one


def test_a_federated_engine_keeps_nothing(engine, open_engine):
    other = open_engine(FILES)
    assert engine_state(engine) is not None
    engine.federated = [("other", other)]
    try:
        assert engine_state(engine) is None
        _answer(engine, "postgres connection pool")
        assert len(engine.query_facts) == 0
    finally:
        engine.federated = []
