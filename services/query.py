"""The one query path: ``execute_context_query`` (candidates → scores → tiers → render).

Every consumer (CLI ``simulate``, MCP ``get_context``, REST, the web view)
calls this, so what a person simulates is what an agent gets.

Candidates: the top ``query.candidate_k`` BM25 hits for the expanded query,
plus every rule and ``always_load`` memory, plus up to
``query.neighbour_limit`` link-graph neighbours of the best hits. Extra
candidates are scored by the index with the same query restricted to their
paths. Nothing else is scored, so a query costs the same at 500 or 50,000
memories apart from the BM25 search itself.

Tiers: rules and always_load memories go first at the largest tier that
fits. Then scored memories, best first: the best ``query.l2_top_n`` get L2
(everything) when it fits, else L1; the rest L1 when it fits; anything that
does not fit or scores under ``query.min_score`` becomes a catalog line. A
share of the budget (``query.catalog_budget_share``) is kept for the catalog so
the agent always learns what else exists.

The engine argument is anything with the attributes ``Engine`` has (config,
store, index, access_log, counter, semantic) and the methods
``graph(stale_ok=True)``, ``community_of(stale_ok=True)`` (the query path
accepts the last built graph when the engine allows it; see
``Engine.graph``), ``pinned_ids()``, ``heading_tokens(memory)``,
``block_tokens(memory, tier)`` and ``catalog_tokens(memory)``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

from .federation import join_federated
from .index import analyze
from .intent import ExpandedQuery, detect_intent, expand_query
from .model import ContextResult, Memory, SelectedMemory
from .ontology import TYPE_ORDER
from .render import (SECTION_CATALOG, SECTION_MEMORIES, SECTION_RULES, Packer, catalog_line, finalize,
                     memory_block, more_line)
from .signals import Candidate, build_query_terms, normalise_weights, score_candidates

NEIGHBOUR_SEEDS = 5            # best hits whose graph neighbours become candidates
PRIORITY_MORE = 0.0            # trimming order in the final check: lowest dropped first
PRIORITY_CATALOG = 1.0
PRIORITY_MEMORY = 10.0
PRIORITY_PINNED = 100.0


class QueryError(ValueError):
    """A bad query argument (unknown intent, bad budget); the message is for a person."""


@dataclass
class ScoredQuery:
    """Candidates with their signals, best first, and what the query was understood as."""

    query: str
    intent: str
    expanded: ExpandedQuery
    weights: dict[str, float]
    candidates: list[Candidate] = field(default_factory=list)

    def ranked_ids(self, include_pinned: bool = True) -> list[str]:
        return [c.memory.id for c in self.candidates
                if include_pinned or c.reason not in ("rule", "always_load")]


def known_intents(config: Any) -> list[str]:
    weights = config.get("weights", {}) or {}
    return sorted(k for k, v in weights.items() if isinstance(v, dict))


def resolve_intent(config: Any, query: str, intent: str | None) -> str:
    intents = known_intents(config)
    if intent:
        intent = intent.strip().lower()
        if intent not in intents:
            raise QueryError(f"unknown intent {intent!r}; expected one of: {', '.join(intents)}")
        return intent
    detected = detect_intent(query, config.get("intent_triggers", {}) or {})
    return detected if detected in intents else "default"


def _int_setting(config: Any, key: str, default: int) -> int:
    try:
        return int(config.get(key, default))
    except (TypeError, ValueError):
        return default


def _float_setting(config: Any, key: str, default: float) -> float:
    try:
        return float(config.get(key, default))
    except (TypeError, ValueError):
        return default


def gather_candidates(engine: Any, expanded: ExpandedQuery) -> dict[str, Candidate]:
    """BM25 top-K + rules/always_load + neighbours of the best hits (see module doc)."""
    config = engine.config
    store = engine.store
    k = max(1, _int_setting(config, "query.candidate_k", 60))
    neighbour_limit = max(0, _int_setting(config, "query.neighbour_limit", 40))
    candidates: dict[str, Candidate] = {}
    for hit in engine.index.search(expanded.terms, k):
        memory = store.get(hit.id)
        if memory is None or memory.rel_path != hit.path:
            continue            # index entry from a file the store no longer serves under that id
        candidates[hit.id] = Candidate(memory, hit.score, hit.matched)
    extras: dict[str, Candidate] = {}
    for mid in engine.pinned_ids():
        memory = store.get(mid)
        if memory is None:
            continue
        reason = "rule" if memory.type == "rule" else "always_load"
        if mid in candidates:
            candidates[mid].reason = reason
        else:
            extras[mid] = Candidate(memory, reason=reason)
    if neighbour_limit:
        graph = engine.graph(stale_ok=True)
        seeds = list(candidates)[:NEIGHBOUR_SEEDS]
        pool: set[str] = set()
        for seed in seeds:
            pool |= graph.neighbours(seed)
        pool -= set(candidates) | set(extras)
        ranked = sorted(pool, key=lambda i: (-graph.authority.get(i, 0.0), i))
        for mid in ranked[:neighbour_limit]:
            memory = store.get(mid)
            if memory is not None:
                extras[mid] = Candidate(memory, reason="neighbour")
    if extras:
        paths = {c.memory.rel_path: mid for mid, c in extras.items()}
        for hit in engine.index.search(expanded.terms, len(paths), restrict_paths=list(paths)):
            cand = extras.get(hit.id)
            if cand is not None and cand.memory.rel_path == hit.path:
                cand.bm25_raw, cand.matched = hit.score, hit.matched
        candidates.update(extras)
    for cand in candidates.values():
        if cand.matched:
            cand.heading = cand.matched & engine.heading_tokens(cand.memory)
    return candidates


def score_query(engine: Any, query: str, intent: str | None = None, *, now: datetime | None = None,
                weights: Mapping[str, float] | None = None) -> ScoredQuery:
    """Understand the query and score its candidates (no budget, no rendering, no logging).

    ``weights`` overrides the intent's weight row (benchmarks use it to rank by
    BM25 alone through the same path).
    """
    config = engine.config
    intent = resolve_intent(config, query, intent)
    row = weights if weights is not None else (config.get(f"weights.{intent}") or config.get("weights.default"))
    weight_row = normalise_weights(row)
    expanded = expand_query(query, config.get("synonyms", {}) or {})
    pool = gather_candidates(engine, expanded)
    join_federated(engine, pool, lambda other: gather_candidates(other, expanded))
    candidates = list(pool.values())
    if candidates:
        terms = build_query_terms(expanded, analyze, engine.index.idf)
        graph = engine.graph(stale_ok=True)
        frequency = engine.access_log.frequency_scores(c.memory.id for c in candidates)
        score_candidates(
            candidates, terms=terms, weights=weight_row, semantic=engine.semantic,
            authority=graph.authority, neighbours=graph.neighbours, frequency=frequency,
            half_lives=config.get("recency.half_life_days", {}) or {},
            now=now or datetime.now(timezone.utc).replace(tzinfo=None),
            community_of=engine.community_of(stale_ok=True),
            community_bonus=_float_setting(config, "graph.community_bonus", 0.08),
        )
    candidates.sort(key=lambda c: (-c.score, -c.bm25_raw, c.memory.id))
    return ScoredQuery(query, intent, expanded, weight_row, candidates)


def _tiers(memory: Memory, full: bool) -> list[str]:
    """Tiers to try, largest first; L2 only when it adds text beyond L1."""
    tiers = ["L2"] if full and memory.l2.strip() else []
    return tiers + ["L1"]


def _selected(cand: Candidate, tier: str, tokens: int) -> SelectedMemory:
    m = cand.memory
    return SelectedMemory(id=m.id, type=m.type, path=m.rel_path, tier=tier, tokens=tokens, score=cand.score,
                          signals=dict(cand.signals), shares=dict(cand.shares), reason=cand.reason,
                          workspace=cand.workspace)


def select_and_render(engine: Any, scored: ScoredQuery, budget: int) -> tuple[list[SelectedMemory], list[str], int, str, int]:
    """Choose tiers within ``budget`` and render; returns (selected, catalog_ids, omitted, text, tokens)."""
    config = engine.config
    counter = engine.counter
    packer = Packer(counter, budget)
    l2_top_n = max(0, _int_setting(config, "query.l2_top_n", 3))
    min_score = _float_setting(config, "query.min_score", 0.05)
    max_catalog = max(0, _int_setting(config, "query.catalog_max_entries", 40))
    share = min(0.9, max(0.0, _float_setting(config, "query.catalog_budget_share", 0.1)))
    reserve = int(budget * share) if max_catalog else 0
    chosen: dict[str, tuple[Candidate, str]] = {}      # part text id -> (candidate, tier)
    pool: list[Candidate] = []

    pinned = [c for c in scored.candidates if c.reason in ("rule", "always_load")]
    pinned.sort(key=lambda c: (TYPE_ORDER.get(c.memory.type, 99), -c.score, c.memory.id))
    for cand in pinned:
        for tier in _tiers(cand.memory, True) + ["L0"]:
            text = memory_block(cand.memory, tier)
            part = packer.add(SECTION_RULES, text, tokens=engine.block_tokens(cand.memory, tier),
                              memory_id=cand.memory.id, priority=PRIORITY_PINNED + cand.score)
            if part is not None:
                chosen[cand.memory.id] = (cand, tier)
                break

    rank = 0
    for cand in scored.candidates:
        if cand.reason in ("rule", "always_load"):
            continue
        if cand.score < min_score:
            pool.append(cand)
            continue
        placed = False
        for tier in _tiers(cand.memory, rank < l2_top_n):
            text = memory_block(cand.memory, tier)
            part = packer.add(SECTION_MEMORIES, text, tokens=engine.block_tokens(cand.memory, tier),
                              memory_id=cand.memory.id, priority=PRIORITY_MEMORY + cand.score, reserve=reserve)
            if part is not None:
                chosen[cand.memory.id] = (cand, tier)
                placed = True
                break
        rank += 1
        if not placed:
            pool.append(cand)

    listed: list[Candidate] = []
    total = len(engine.store)
    more_cost = counter.count(more_line(total)) + 1
    for cand in pool[:max_catalog]:
        part = packer.add(SECTION_CATALOG, catalog_line(cand.memory), tokens=engine.catalog_tokens(cand.memory),
                          memory_id=cand.memory.id,
                          priority=PRIORITY_CATALOG + cand.score, reserve=more_cost)
        if part is None:
            break
        listed.append(cand)
    more = total - len(chosen) - len(listed)
    if more > 0 and max_catalog:
        packer.add(SECTION_CATALOG, more_line(more), priority=PRIORITY_MORE)

    text, tokens, kept = finalize(packer.parts, counter, budget)
    kept_ids = {p.memory_id for p in kept if p.memory_id}
    selected: list[SelectedMemory] = []
    by_id = {p.memory_id: p for p in kept if p.memory_id}
    for mid, (cand, tier) in chosen.items():
        if mid in kept_ids:
            selected.append(_selected(cand, tier, by_id[mid].tokens))
    catalog_ids = []
    for cand in listed:
        if cand.memory.id in kept_ids:
            selected.append(_selected(cand, "L0", by_id[cand.memory.id].tokens))
            catalog_ids.append(cand.memory.id)
            selected[-1].reason = "catalog"
    omitted = max(0, total - len(selected))
    return selected, catalog_ids, omitted, text, tokens


def execute_context_query(engine: Any, query: str, budget_tokens: int | None = None, intent: str | None = None,
                          *, record_access: bool = True, now: datetime | None = None) -> ContextResult:
    """Choose and render context for ``query`` within ``budget_tokens`` (the one query path)."""
    started = time.perf_counter()
    config = engine.config
    if budget_tokens is None:
        budget_tokens = _int_setting(config, "query.default_budget", 4000)
    try:
        budget = int(budget_tokens)
    except (TypeError, ValueError) as exc:
        raise QueryError(f"budget must be a whole number of tokens, got {budget_tokens!r}") from exc
    if budget < 0:
        raise QueryError(f"budget must not be negative, got {budget}")
    scored = score_query(engine, query, intent, now=now)
    selected, catalog_ids, omitted, text, tokens = select_and_render(engine, scored, budget)
    result = ContextResult(
        query=query, intent=scored.intent, expanded_query=scored.expanded.expanded_words,
        budget_tokens=budget, tokens_used=tokens, selected=selected, catalog_ids=catalog_ids,
        catalog_omitted=omitted, rendered=text, weights=dict(scored.weights),
        elapsed_ms=(time.perf_counter() - started) * 1000.0,
    )
    if record_access:
        engine.access_log.record(query, scored.intent, budget, tokens, [(s.id, s.tier) for s in selected])
    return result
