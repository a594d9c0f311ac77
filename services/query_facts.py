"""What a query found that neither the clock, the access log nor the link graph changes, kept per engine state.

Agents ask the same questions again and again: every session of a project
starts with its context, and several tools ask beside each other. Of a
repeated query's CPU at 10,000 memories, about a third went to work whose
result depends only on the query and the engine's state (issue 16; docs/engine.md,
"Repeated queries: the facts a query keeps"):

- the intent and the expanded query and its analysed terms;
- the candidates gathered (BM25 top-K, nearest embeddings, pinned, important),
  each with its sources and reason;
- per candidate: its BM25 score and matched tokens, the matched tokens in its
  heading, its keyword overlap (phrases are found by reading the file back)
  and its raw centred cosine.

``QueryFacts`` holds those for one query; ``FactsMemo`` holds the facts of
recent queries for one engine state and forgets them all when any part of that
state moves on: a store generation, an index commit, a new set of embedding
rows, another config, semantic scorer or embedding model (``engine_state``).
What may differ between two asks of one query is computed every time: recency
(the clock), frequency (the access log), the graph signal and the neighbours
(a background refresh replaces the graph), the composite scores, the tiers and
the rendering. So a kept fact never changes an answer: a repeated query gives
what computing it again would (tests/test_query_facts.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from .federation import federated_engines
from .intent import ExpandedQuery, IntentDetection
from .model import Memory
from .signals import Candidate, QueryTerms

MAX_VALUES = 12_000  # candidate values kept over all queries (~150 bytes each: ~1.8 MiB at most)


class CandidateValues(NamedTuple):
    """One candidate's values that depend only on the query and the engine state."""

    bm25_raw: float
    matched: frozenset[str]
    heading: frozenset[str]
    keyword: float | None  # None: the semantic scorer did not compute one (never scored)
    raw_cosine: float | None  # None: no embedding scorer (or not computed)


def values_of(cand: Candidate) -> CandidateValues:
    return CandidateValues(cand.bm25_raw, cand.matched, cand.heading, cand.keyword, cand.raw_cosine)


@dataclass
class QueryFacts:
    """One query's facts: how it was understood, what it gathered, and each scored candidate's values.

    ``values`` grows as later asks of the query meet graph neighbours it had not
    scored (the graph, and so the neighbours, may change while the facts hold).
    """

    detection: IntentDetection
    expanded: ExpandedQuery
    terms: QueryTerms | None  # None: the query gathered no candidate
    gathered: tuple[tuple[str, frozenset[str], str], ...]  # (id, sources, reason), in gathering order
    values: dict[str, CandidateValues]

    def candidates(self, get: Callable[[str], Memory | None]) -> dict[str, Candidate] | None:
        """The gathered candidates again, each with its values; None when the store no longer holds one."""
        out: dict[str, Candidate] = {}
        values = self.values
        for mid, sources, reason in self.gathered:
            memory = get(mid)
            known = values.get(mid)
            if memory is None or known is None:
                return None
            # positional: ~200 a query, and keywords cost twice the call (fields in ``Candidate``'s order)
            out[mid] = Candidate(memory, known[0], known[1], known[2], reason, set(sources), 0.0, known[3], known[4])
        return out

    def fill(self, cand: Candidate) -> bool:
        """Give ``cand`` (a neighbour just added) its known values; False when this query never scored it."""
        known = self.values.get(cand.memory.id)
        if known is None:
            return False
        cand.bm25_raw, cand.matched, cand.heading = known.bm25_raw, known.matched, known.heading
        cand.keyword, cand.raw_cosine = known.keyword, known.raw_cosine
        return True

    def learn(self, candidates: Mapping[str, Candidate]) -> int:
        """Keep the values of scored candidates not yet known; how many were new."""
        values = self.values
        new = 0
        for mid, cand in candidates.items():
            if mid not in values:
                values[mid] = values_of(cand)
                new += 1
        return new


def gathered_of(candidates: Mapping[str, Candidate]) -> tuple[tuple[str, frozenset[str], str], ...]:
    """The gathered candidates as ``QueryFacts.gathered`` keeps them (before neighbours mark any)."""
    return tuple((mid, frozenset(c.sources), c.reason) for mid, c in candidates.items())


def engine_state(engine: Any) -> tuple[object, ...] | None:
    """What the kept facts depend on, compared item by item with ``is`` (None: keep nothing for this engine).

    The store generation, the index's committed generation and the embedding
    rows' version are numbers; the config, the semantic scorer and the embedding
    model are the objects themselves (a reload replaces them; the intent
    classifier is built from the model and the fixed prototypes, so the model
    stands for it without building one). A federated query is not kept: other
    workspaces' states would join the key.
    """
    index = getattr(engine, "index", None)
    key_of = getattr(index, "generation_key", None)
    if key_of is None or any(True for _ in federated_engines(engine)):
        return None
    vectors = getattr(engine, "vectors", None)
    return (
        engine.generation,
        key_of(),
        None if vectors is None else vectors.version,
        engine.config,
        engine.semantic,
        None if vectors is None else vectors.model,
    )


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(
        x is y or (type(x) is type(y) and type(x) in (int, tuple) and x == y) for x, y in zip(a, b)
    )


class FactsMemo:
    """The facts of recent queries under one engine state (module doc), by query key.

    One slot, (state, facts by key), replaced whole: a reader on another thread
    sees the facts of the state it compares, never another state's. A full slot
    starts again empty (``MAX_VALUES`` candidate values over all its queries).
    """

    def __init__(self, max_values: int = MAX_VALUES) -> None:
        self.max_values = max_values
        self._slot: tuple[tuple[object, ...], dict[Any, QueryFacts], list[int]] = ((), {}, [0])

    def get(self, state: tuple[object, ...], key: Any) -> QueryFacts | None:
        slot = self._slot
        return slot[1].get(key) if _same(state, slot[0]) else None

    def put(self, state: tuple[object, ...], key: Any, facts: QueryFacts) -> None:
        slot = self._slot
        size = len(facts.values)
        if not _same(state, slot[0]) or slot[2][0] + size > self.max_values:
            slot = self._slot = (state, {}, [0])
        slot[1][key] = facts
        slot[2][0] += size

    def grew(self, state: tuple[object, ...], count: int) -> None:
        """``count`` values were added to facts kept under ``state`` (``QueryFacts.learn``)."""
        slot = self._slot
        if count and _same(state, slot[0]):
            slot[2][0] += count
            if slot[2][0] > self.max_values:
                self._slot = (state, {}, [0])

    def clear(self) -> None:
        self._slot = ((), {}, [0])

    def __len__(self) -> int:
        return len(self._slot[1])
