"""The one query path: ``execute_context_query`` (candidates → scores → tiers → render).

Every consumer (CLI ``simulate``, MCP ``get_context``, REST, the web view)
calls this, so what a person simulates is what an agent gets.

Candidates (each remembers its sources): the top-K BM25 hits (``bm25``) and
the K nearest embeddings (``vector``), K adapting to the budget and the query
(``candidate_depth``); every rule and ``always_load`` memory (``pinned``); the
most important memories (``importance``); then, after a first scoring pass,
link-graph neighbours of the best composite-scored memories (``graph``).
Nothing else is scored, so a query costs about the same at 500 or 50,000
memories apart from the BM25 search and one matrix-vector product.

Tiers (``plan_tiers``; the rule in docs/engine.md): rules and always_load
memories first at the largest tier that fits; then every relevant memory at
L1, the leftover upgrading the best ones to L2, then other matching memories
at L1; the L0 catalog last lists the best remaining memories of the
workspace (relevant, important, recent). A share of the budget
(``query.catalog_budget_share``) is kept for the catalog so the agent always
learns what else exists.

The engine argument is anything with the attributes ``Engine`` has (config,
store, index, access_log, counter, semantic) and the methods
``graph(stale_ok=True)``, ``community_of(stale_ok=True)`` (the query path
accepts the last built graph when the engine allows it; see
``Engine.graph``), ``pinned_ids()``, ``important_ids(n)``, ``recent_ids(n)``,
``block_tokens(memory, tier)`` and ``catalog_tokens(memory)``; optionally
``vectors`` (a ``VectorIndex``), ``intent_classifier()`` and
``block_tokens_at_least(memory, tier)`` (a cheap lower bound the tier planner
rules out L2 upgrades with).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar, cast, overload

from .analysis import analyze
from .answer_memo import AnswerMemo
from .federation import join_federated
from .index import heading_matches
from .intent import ExpandedQuery, IntentDetection, detect_intent_detail, expand_query
from .model import ContextResult, Memory, SelectedMemory
from .ontology import TYPE_ORDER
from .query_dates import QueryDates, date_weights, find_dates
from .query_facts import FactsMemo, QueryFacts, engine_state, gathered_of, values_of
from .render import (
    SECTION_CATALOG,
    SECTION_MEMORIES,
    SECTION_RULES,
    Packer,
    Part,
    finalize,
    more_line,
)
from .render_cache import CATALOG
from .semantic.scorer import query_text
from .signals import (
    Candidate,
    QueryTerms,
    build_query_terms,
    normalise_weights,
    rescore_graph,
    score_candidates,
)

T = TypeVar("T")

NEIGHBOUR_SEEDS = 5  # best first-pass candidates whose graph neighbours become candidates
GRAPH_SEEDS = 3  # best first-pass candidates the graph signal and community bonus refer to
DEPTH_TOKENS_PER_CANDIDATE = 40  # candidate depth grows by one per this many budget tokens ...
VECTOR_DEPTH_SHARE = 0.5  # nearest embeddings taken: this share of the BM25 depth
DEPTH_PER_EXTRA_WORD = 10  # ... and by this many per query word beyond three
IMPORTANT_LEVEL = 0.8  # importance at which a memory is loaded even when less directly relevant
NEAR_HALF = 0.5  # rescaled embedding similarity of the nearer half of the candidates
RELEVANT_SHARE = 0.5  # "relevant" for the tier plan: composite at least this share of the best one
PRIORITY_MORE = 0.0  # trimming order in the final check: lowest dropped first
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
    detection: IntentDetection | None = None
    semantic_name: str = ""

    def ranked_ids(self, include_pinned: bool = True) -> list[str]:
        return [c.memory.id for c in self.candidates if include_pinned or c.reason not in ("rule", "always_load")]


def known_intents(config: Any) -> list[str]:
    weights = config.get("weights", {}) or {}
    return sorted(k for k, v in weights.items() if isinstance(v, dict))


def resolve_intent_detail(engine: Any, query: str, intent: str | None) -> IntentDetection:
    """The caller's intent (validated) or the detected one, with the reason a person can read."""
    config = engine.config
    intents = known_intents(config)
    if intent:
        intent = intent.strip().lower()
        if intent not in intents:
            raise QueryError(f"unknown intent {intent!r}; expected one of: {', '.join(intents)}")
        return IntentDetection(intent, "given by the caller")
    classifier = getattr(engine, "intent_classifier", None)
    patterns = config.get("intent_patterns")
    detected = detect_intent_detail(
        query,
        config.get("intent_triggers", {}) or {},
        classifier() if callable(classifier) else None,
        patterns if isinstance(patterns, dict) else None,
    )
    if detected.intent not in intents:
        return IntentDetection("default", f"{detected.reason}; no weight row for {detected.intent!r}")
    return detected


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


def candidate_depth(config: Any, expanded: ExpandedQuery, budget: int | None) -> int:
    """How many BM25 and nearest-embedding hits become candidates (each list).

    At least ``query.candidate_k``; more for a larger budget (one candidate per
    ``DEPTH_TOKENS_PER_CANDIDATE`` tokens: a budget that can show more memories
    should be able to choose among more) and for longer queries (their hits
    spread over more memories); at most ``query.candidate_k_max``.
    """
    base = max(1, _int_setting(config, "query.candidate_k", 60))
    ceiling = max(base, _int_setting(config, "query.candidate_k_max", 150))
    by_budget = (budget or 0) // DEPTH_TOKENS_PER_CANDIDATE
    by_words = base + DEPTH_PER_EXTRA_WORD * max(0, len(expanded.words) - 3)
    return max(base, min(ceiling, max(by_budget, by_words)))


@overload
def _add(candidates: dict[str, Candidate], memory: Memory, source: str) -> Candidate: ...
@overload
def _add(candidates: dict[str, Candidate], memory: Memory | None, source: str) -> Candidate | None: ...
def _add(candidates: dict[str, Candidate], memory: Memory | None, source: str) -> Candidate | None:
    if memory is None:
        return None
    cand = candidates.get(memory.id)
    if cand is None:
        cand = candidates[memory.id] = Candidate(memory)
    cand.sources.add(source)
    return cand


def _score_bm25(engine: Any, expanded: ExpandedQuery, cands: list[Candidate]) -> None:
    """BM25 and matched terms for candidates that did not come from the BM25 search."""
    if not cands:
        return
    by_path = {c.memory.rel_path: c for c in cands}
    for hit in engine.index.search(expanded.terms, len(by_path), restrict_paths=list(by_path)):
        cand = by_path.get(hit.path)
        if cand is not None and cand.memory.id == hit.id:
            cand.bm25_raw, cand.matched = hit.score, hit.matched


def _beside(engine: Any, job: Callable[[], T]) -> Callable[[], T]:
    """``job`` started beside the caller by the engine's ``query_helper`` when its owner set one; what gives its result.

    Without a helper the job itself is returned: it runs, in the calling thread, when its
    result is asked for.
    """
    helper = getattr(engine, "query_helper", None)
    return job if helper is None else cast(Callable[[], T], helper(job))


def gather_candidates(
    engine: Any, expanded: ExpandedQuery, depth: int, query_vector: Any = None, *, own_cosines: bool = True
) -> dict[str, Candidate]:
    """BM25 top-K ∪ nearest-embedding top-K ∪ pinned ∪ most important (see module doc).

    Graph neighbours are added later, from the best composite-scored
    candidates (``add_neighbours``). With ``own_cosines`` the candidates' embedding
    cosines (``Candidate.raw_cosine``) come from the product the nearest-embedding
    search computed over every row, when it computed one, instead of being computed
    again at scoring (``VectorIndex.nearest_and_cosines``); a federated workspace's
    candidates leave them to the scorer, as before.
    """
    config = engine.config
    store = engine.store
    candidates: dict[str, Candidate] = {}
    vectors = getattr(engine, "vectors", None)
    nearest = product = None
    if vectors is not None and query_vector is not None:
        # its product started first: with a helper it runs while the index is searched (numpy lets go of the lock)
        nearest = vectors.nearest_search(query_vector, max(1, int(depth * VECTOR_DEPTH_SHARE)))
        product = _beside(engine, nearest.product)
    for hit in engine.index.search(expanded.terms, depth):
        memory = store.get(hit.id)
        if memory is None or memory.rel_path != hit.path:
            continue  # index entry from a file the store no longer serves under that id
        cand = _add(candidates, memory, "bm25")
        cand.bm25_raw, cand.matched = hit.score, hit.matched
    cosine_of = None
    if nearest is not None and product is not None:
        product()  # the helper's product done (or computed here), then the rest in this thread
        found, cosine_of = nearest.result()
        for mid, _ in found:
            _add(candidates, store.get(mid), "vector")
    for mid in engine.pinned_ids():
        memory = store.get(mid)
        cand = _add(candidates, memory, "pinned")
        if cand is not None:
            cand.reason = "rule" if memory.type == "rule" else "always_load"
    for mid in engine.important_ids(max(0, _int_setting(config, "query.importance_k", 10))):
        _add(candidates, store.get(mid), "importance")
    _score_bm25(engine, expanded, [c for c in candidates.values() if "bm25" not in c.sources])
    if cosine_of is not None and own_cosines:
        for cand in candidates.values():
            cand.raw_cosine = cosine_of(cand.memory.id)
    return candidates


def add_neighbours(
    engine: Any,
    expanded: ExpandedQuery,
    candidates: dict[str, Candidate],
    seeds: list[str],
    facts: QueryFacts | None = None,
) -> list[Candidate]:
    """Up to ``query.neighbour_limit`` link-graph neighbours of ``seeds``, highest authority first; returns the new ones.

    The new ones ``facts`` knows (this query scored them before) get their values
    from it; the rest are scored against the index and have ``heading`` still empty.
    """
    limit = max(0, _int_setting(engine.config, "query.neighbour_limit", 40))
    if not limit:
        return []
    graph = engine.graph(stale_ok=True)
    pool: set[str] = set()
    for seed in seeds:
        pool |= graph.neighbours(seed)
    for mid in seeds:
        for other in graph.neighbours(mid):
            if other in candidates:
                candidates[other].sources.add("graph")
    pool -= set(candidates)
    ranked = sorted(pool, key=lambda i: (-graph.authority.get(i, 0.0), i))
    added = []
    for mid in ranked[:limit]:
        cand = _add(candidates, engine.store.get(mid), "graph")
        if cand is not None:
            cand.reason = "neighbour"
            added.append(cand)
    _score_bm25(engine, expanded, [c for c in added if facts is None or not facts.fill(c)])
    return added


def score_query(
    engine: Any,
    query: str,
    intent: str | None = None,
    *,
    now: datetime | None = None,
    weights: Mapping[str, float] | None = None,
    budget: int | None = None,
) -> ScoredQuery:
    """Understand the query and score its candidates (no budget, no rendering, no logging).

    Two passes (seed §4.6): the first scores every candidate without graph
    proximity; the best composite-scored ones then seed the graph neighbours
    (new candidates) and the graph signal (one hop from a seed, + the
    community bonus for sharing a seed's community), and the second pass
    scores everything with them. ``weights`` overrides the intent's weight
    row (benchmarks rank by BM25 alone through the same path); ``budget``
    sets the candidate depth (``candidate_depth``).
    """
    config = engine.config
    if budget is None:
        budget = _int_setting(config, "query.default_budget", 4000)
    memo: FactsMemo | None = getattr(engine, "query_facts", None)
    state = engine_state(engine) if memo is not None else None
    facts_key = (query, intent, budget)
    facts = memo.get(state, facts_key) if memo is not None and state is not None else None
    detection = facts.detection if facts is not None else resolve_intent_detail(engine, query, intent)
    understood = detection  # before the dates' note: what the facts keep
    intent = detection.intent
    row = weights if weights is not None else (config.get(f"weights.{intent}") or config.get("weights.default"))
    weight_row = normalise_weights(row)
    dates = find_dates(query)
    if dates and weights is None:  # a caller's own row (benchmarks' BM25-only) is left as given
        weight_row = date_weights(weight_row, dates)
        detection = IntentDetection(detection.intent, f"{detection.reason}; {_named(dates)}", detection.scores)
    expanded = facts.expanded if facts is not None else expand_query(query, config.get("synonyms", {}) or {})
    semantic = engine.semantic
    pool = facts.candidates(engine.store.get) if facts is not None else None
    if pool is None:  # not kept, or the store no longer holds one of them: gather again
        facts = None
        depth = candidate_depth(config, expanded, budget)
        pool = gather_candidates(engine, expanded, depth, _query_vector(engine, expanded))
        join_federated(
            engine,
            pool,
            lambda other: gather_candidates(other, expanded, depth, _query_vector(other, expanded), own_cosines=False),
        )
    gathered = gathered_of(pool) if facts is None and state is not None else ()
    terms: QueryTerms | None = None
    if pool:
        terms = facts.terms if facts is not None else None
        if terms is None:
            terms = build_query_terms(expanded, analyze, engine.index.idf)
        graph = engine.graph(stale_ok=True)
        options = dict(
            terms=terms,
            weights=weight_row,
            semantic=semantic,
            authority=graph.authority,
            neighbours=graph.neighbours,
            half_lives=config.get("recency.half_life_days", {}) or {},
            now=now or datetime.now(UTC).replace(tzinfo=None),
            community_of=engine.community_of(stale_ok=True),
            community_bonus=_float_setting(config, "graph.community_bonus", 0.08),
            dates=dates,
        )
        if facts is None:  # kept facts hold every gathered candidate's headings
            _headings(pool.values())
        first = list(pool.values())
        frequency = engine.access_log.frequency_scores(c.memory.id for c in first)
        score_candidates(first, frequency=frequency, graph_seeds=None, **options)
        ranked = [c.memory.id for c in sorted(first, key=_rank_key) if "pinned" not in c.sources]
        added = add_neighbours(engine, expanded, pool, ranked[:NEIGHBOUR_SEEDS], facts)
        if added:
            _headings([c for c in added if facts is None or c.memory.id not in facts.values])
            everything = list(pool.values())
            # the first pass's values and the new candidates' (one query reads the counts as one snapshot)
            frequency = {**frequency, **engine.access_log.frequency_scores(c.memory.id for c in added)}
            score_candidates(everything, frequency=frequency, graph_seeds=ranked[:GRAPH_SEEDS], **options)
        else:  # only the graph signal changes: no need to score again
            rescore_graph(
                first,
                weights=weight_row,
                authority=graph.authority,
                neighbours=graph.neighbours,
                community_of=options["community_of"],
                community_bonus=options["community_bonus"],
                seeds=ranked[:GRAPH_SEEDS],
            )
    if memo is not None and state is not None:
        if facts is None:
            values = {mid: values_of(cand) for mid, cand in pool.items()}
            memo.put(state, facts_key, QueryFacts(understood, expanded, terms, gathered, values))
        else:  # neighbours this query had not scored before
            memo.grew(state, facts.learn(pool))
    candidates = sorted(pool.values(), key=_rank_key)
    return ScoredQuery(
        query,
        intent,
        expanded,
        weight_row,
        candidates,
        detection=detection,
        semantic_name=getattr(semantic, "name", type(semantic).__name__),
    )


def _named(dates: QueryDates) -> str:
    """What simulate says about a named date (the reason line)."""
    named = [d.isoformat() for d in dates.days] or [f"{y}-{m:02d}" for y, m in dates.months]
    return f"names {', '.join(named)}: recency = closeness to it"


def _query_vector(engine: Any, expanded: ExpandedQuery) -> Any:
    """The query's embedding for ``engine``'s model (None without one; federated engines may differ)."""
    semantic = getattr(engine, "semantic", None)
    if semantic is not None and hasattr(semantic, "query_vector"):
        return semantic.query_vector(query_text(expanded))
    return None


def _headings(cands: Any) -> None:
    """The matched query tokens found in each candidate's heading (summary line, title, id, tags)."""
    for cand in cands:
        matched = cand.matched
        if matched and not cand.heading:
            cand.heading = heading_matches(cand.memory, matched)


def _rank_key(cand: Candidate) -> tuple[float, float, str]:
    return (-cand.score, -cand.bm25_raw, cand.memory.id)


def _tiers(memory: Memory, full: bool) -> list[str]:
    """Tiers to try, largest first; L2 only when it adds text beyond L1."""
    tiers = ["L2"] if full and memory.has_l2 else []
    return tiers + ["L1"]


def _selected(cand: Candidate, tier: str, tokens: int, reason: str | None = None) -> SelectedMemory:
    """The selected entry of ``cand``; its signals, shares and sources are made only when read (most answers never do)."""
    m = cand.memory
    return SelectedMemory.deferred(
        lambda: (dict(cand.signals), cand.shares, sorted(cand.sources)),  # shares: a new dict per call
        {
            "id": m.id,
            "type": m.type,
            "path": m.rel_path,
            "tier": tier,
            "tokens": tokens,
            "score": cand.score,
            "reason": cand.reason if reason is None else reason,
            "workspace": cand.workspace,
        },
    )


def plan_tiers(engine: Any, ranked: list[Candidate], room: int, l2_top_n: int, relevant_floor: float) -> dict[str, str]:
    """Tier per memory id for the scored memories (the rule in docs/engine.md#tiers-and-the-budget).

    1. every *relevant* memory (score at least ``relevant_floor``), best first,
       gets L1 while it fits ``room``;
    2. what is left upgrades the best ``l2_top_n`` of them to L2, best first,
       when the extra text fits;
    3. the other scored memories get L1 while it fits, when they match the
       query at all (a BM25 hit or an embedding among the nearer half of the
       candidates) or are important (``IMPORTANT_LEVEL``; seed §4.2); the rest
       are left to the catalog.
    So a long L2 never pushes a relevant memory down to L0: full text is paid
    for only with tokens no relevant memory needs.
    """
    sep = 1  # the newline joining blocks
    plan: dict[str, str] = {}
    used = 0
    relevant = [c for c in ranked if c.score >= relevant_floor]
    for cand in relevant:
        cost = engine.block_tokens(cand.memory, "L1") + sep
        if used + cost <= room:
            plan[cand.memory.id] = "L1"
            used += cost
    upgraded = 0
    at_least = getattr(engine, "block_tokens_at_least", None)
    for cand in relevant:
        if upgraded >= l2_top_n:
            break
        if plan.get(cand.memory.id) != "L1" or not cand.memory.has_l2:
            continue
        l1 = engine.block_tokens(cand.memory, "L1")
        if at_least is not None and used + at_least(cand.memory, "L2") - l1 > room:
            continue  # cannot fit: its exact count (a tokenization) is not needed
        extra = engine.block_tokens(cand.memory, "L2") - l1
        if used + extra <= room:
            plan[cand.memory.id] = "L2"
            used += extra
            upgraded += 1
    for cand in ranked:
        if cand.memory.id in plan or not _matches(cand):
            continue
        cost = engine.block_tokens(cand.memory, "L1") + sep
        if used + cost <= room:
            plan[cand.memory.id] = "L1"
            used += cost
    return plan


def _matches(cand: Candidate) -> bool:
    return cand.bm25_raw > 0 or cand.cosine >= NEAR_HALF or cand.memory.importance >= IMPORTANT_LEVEL


def catalog_pool(engine: Any, leftover: list[Candidate], shown: set[str], limit: int) -> list[Memory]:
    """The L0 catalog: the best memories not otherwise shown, relevant first.

    Order: unplaced candidates by score (relevant to this query), then the
    workspace's most important memories, then its most recently changed
    ones (seed: the catalog of what exists, last), each at most once.
    """
    out: list[Memory] = []
    seen = set(shown)
    store = engine.store

    def push(memory: Memory | None) -> None:
        if memory is not None and memory.id not in seen and len(out) < limit:
            seen.add(memory.id)
            out.append(memory)

    for cand in leftover:
        push(cand.memory)
    for mid in engine.important_ids(limit):
        push(store.get(mid))
    for mid in engine.recent_ids(limit):
        push(store.get(mid))
    return out


class _Answer:
    """The parts an answer places, by token count; their texts are fetched (or the whole answer recalled) at the end.

    Each placed memory block is added to the packer with its count only and noted
    with what its text depends on (``render.block_key``'s fields); ``finish`` then
    takes the rendered answer from the engine's ``AnswerMemo`` when the same shape
    was rendered before, and otherwise fetches each block's text and piece costs
    and runs ``finalize`` (services/answer_memo.py).
    """

    def __init__(self, engine: Any, budget: int) -> None:
        self.engine = engine
        self.packer = Packer(engine.counter, budget)
        self.blocks: list[tuple[Part, Memory, str]] = []
        self.shape: list[tuple[str, ...]] = []

    def place(self, section: str, memory: Memory, tier: str, tokens: int, priority: float, reserve: int) -> bool:
        """Add ``memory``'s block at ``tier`` (``tokens`` long) when it fits; its text is fetched in ``finish``."""
        part = self.packer.add(section, "", tokens=tokens, memory_id=memory.id, priority=priority, reserve=reserve)
        if part is None:
            return False
        self.blocks.append((part, memory, tier))
        # what the block's text depends on (``render.block_key``: the label is made of the type and path)
        self.shape.append((section, memory.id, memory.checksum, memory.type, memory.rel_path, tier))
        return True

    def add_text(self, section: str, text: str, priority: float) -> None:
        if self.packer.add(section, text, priority=priority) is not None:
            self.shape.append((section, text))

    def finish(self) -> tuple[str, int, list[Part]]:
        """The rendered text, its tokens and the parts kept (``render.finalize``), recalled when known."""
        engine, packer = self.engine, self.packer
        counter, budget = packer.counter, packer.budget
        memo: AnswerMemo | None = getattr(engine, "answer_memo", None)
        shape = tuple(self.shape)
        if memo is not None:
            known = memo.get(counter, budget, shape)
            if known is not None:
                return known.text, known.tokens, list(packer.parts)
        for part, memory, tier in self.blocks:
            block = engine.rendered_block(memory, tier)
            part.text, part.costs = block.text, block.costs
        text, tokens, kept = finalize(packer.parts, counter, budget)
        if memo is not None and len(kept) == len(packer.parts):
            memo.put(counter, budget, shape, text, tokens)
        return text, tokens, kept


def _place(answer: _Answer, section: str, cand: Candidate, tier: str, priority: float, reserve: int) -> bool:
    """Add ``cand``'s block at ``tier`` when it fits (its text is fetched only for an answer not seen before)."""
    memory = cand.memory
    return answer.place(section, memory, tier, answer.engine.block_tokens(memory, tier), priority, reserve)


def select_and_render(
    engine: Any, scored: ScoredQuery, budget: int
) -> tuple[list[SelectedMemory], list[str], int, str, int]:
    """Choose tiers within ``budget`` and render; returns (selected, catalog_ids, omitted, text, tokens)."""
    config = engine.config
    counter = engine.counter
    answer = _Answer(engine, budget)
    packer = answer.packer
    l2_top_n = max(0, _int_setting(config, "query.l2_top_n", 3))
    min_score = _float_setting(config, "query.min_score", 0.05)
    max_catalog = max(0, _int_setting(config, "query.catalog_max_entries", 40))
    share = min(0.9, max(0.0, _float_setting(config, "query.catalog_budget_share", 0.1)))
    reserve = int(budget * share) if max_catalog else 0
    chosen: dict[str, tuple[Candidate, str]] = {}  # part text id -> (candidate, tier)

    pinned = [c for c in scored.candidates if c.reason in ("rule", "always_load")]
    pinned.sort(key=lambda c: (TYPE_ORDER.get(c.memory.type, 99), -c.score, c.memory.id))
    for cand in pinned:
        for tier in _tiers(cand.memory, True) + ["L0"]:
            if _place(answer, SECTION_RULES, cand, tier, PRIORITY_PINNED + cand.score, 0):
                chosen[cand.memory.id] = (cand, tier)
                break

    ranked = [c for c in scored.candidates if c.reason not in ("rule", "always_load") and c.score >= min_score]
    heading = counter.count(SECTION_MEMORIES) + 1 + (1 if packer.parts else 0)
    room = packer.remaining - reserve - heading
    best = ranked[0].score if ranked else 0.0
    floor = max(min_score, RELEVANT_SHARE * best)
    plan = plan_tiers(engine, ranked, room, l2_top_n, floor) if room > 0 else {}
    leftover: list[Candidate] = []
    for cand in ranked:
        planned = plan.get(cand.memory.id)
        placed = False
        for option in ([planned, "L1"] if planned == "L2" else [planned]) if planned else []:
            if _place(answer, SECTION_MEMORIES, cand, option, PRIORITY_MEMORY + cand.score, reserve):
                chosen[cand.memory.id] = (cand, option)
                placed = True
                break
        if not placed:
            leftover.append(cand)
    leftover += [c for c in scored.candidates if c.reason not in ("rule", "always_load") and c.score < min_score]

    listed: list[Memory] = []
    total = len(engine.store)
    more_cost = counter.count(more_line(total)) + 1
    for rank, memory in enumerate(catalog_pool(engine, leftover, set(chosen), max_catalog)):
        tokens = engine.catalog_tokens(memory)
        if not answer.place(SECTION_CATALOG, memory, CATALOG, tokens, PRIORITY_CATALOG - rank * 1e-6, more_cost):
            break
        listed.append(memory)
    more = total - len(chosen) - len(listed)
    if more > 0 and max_catalog:
        answer.add_text(SECTION_CATALOG, more_line(more), PRIORITY_MORE)

    text, tokens, kept = answer.finish()
    kept_ids = {p.memory_id for p in kept if p.memory_id}
    selected: list[SelectedMemory] = []
    by_id = {p.memory_id: p for p in kept if p.memory_id}
    for mid, (cand, tier) in chosen.items():
        if mid in kept_ids:
            selected.append(_selected(cand, tier, by_id[mid].tokens))
    by_cand = {c.memory.id: c for c in scored.candidates}
    catalog_ids = []
    for memory in listed:
        if memory.id not in kept_ids:
            continue
        found = by_cand.get(memory.id)
        if found is None:  # from the workspace's important / recent memories
            found = Candidate(
                memory, sources={"importance" if memory.id in engine.important_ids(max_catalog) else "recent"}
            )
        selected.append(_selected(found, "L0", by_id[memory.id].tokens, "catalog"))
        catalog_ids.append(memory.id)
    omitted = max(0, total - len(selected))
    return selected, catalog_ids, omitted, text, tokens


def execute_context_query(
    engine: Any,
    query: str,
    budget_tokens: int | None = None,
    intent: str | None = None,
    *,
    record_access: bool = True,
    now: datetime | None = None,
) -> ContextResult:
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
    scored = score_query(engine, query, intent, now=now, budget=budget)
    selected, catalog_ids, omitted, text, tokens = select_and_render(engine, scored, budget)
    result = ContextResult(
        query=query,
        intent=scored.intent,
        expanded_query=scored.expanded.expanded_words,
        budget_tokens=budget,
        tokens_used=tokens,
        selected=selected,
        catalog_ids=catalog_ids,
        catalog_omitted=omitted,
        rendered=text,
        weights=dict(scored.weights),
        elapsed_ms=(time.perf_counter() - started) * 1000.0,
        intent_reason=scored.detection.reason if scored.detection else "",
        semantic_model=scored.semantic_name,
    )
    if record_access:
        engine.access_log.record(query, scored.intent, budget, tokens, [(s.id, s.tier) for s in selected])
    return result
