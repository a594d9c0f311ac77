"""The six scoring signals, each in 0..1, and the weighted composite.

semantic    how much of the query's meaning a memory covers. Today: keyword
            coverage (IDF-weighted share of the query's concepts, a concept
            being a query word or any of its synonyms; full credit when found
            in the summary line, title, id or tags, 0.6 when only in the
            body) plus phrase overlap
            (adjacent query words found together, in a memory holding
            both words as index tokens). ``SemanticScorer`` is the
            seam where an embedding model can replace it.
bm25        Whoosh's BM25F score divided by the best score among the candidates.
graph       0.5 * authority (PageRank over explicit links, 0..1) + 0.5 if the
            memory is one hop from one of the best composite-scored memories
            of a first pass, + the community bonus (``graph.community_bonus``,
            0.08) when it shares a Leiden community with one of them; capped
            at 1 (two passes, seed §4.6; see query.score_query).
recency     0.5 ** (age_days / half_life[type]) from ``recency.half_life_days``;
            when the query names a date, closeness to it instead
            (``query_dates``: 0.5 ** (days apart / 3)).
importance  the memory's own ``importance`` field.
frequency   log-scaled L1/L2 loads in the access-log window, relative to the
            most-loaded memory.

The composite is the dot product with the intent's weight row, so each
signal's weighted share is reported and the shares sum to the score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol, SupportsFloat, SupportsIndex

from .intent import ExpandedQuery
from .model import SIGNALS, Memory
from .query_dates import QueryDates

GRAPH_AUTHORITY_SHARE = 0.5
GRAPH_PROXIMITY_SHARE = 0.5
COVERAGE_SHARE = 0.75  # semantic = 0.75 coverage + 0.25 phrase overlap (when phrases exist)
DEFAULT_HALF_LIFE_DAYS = 90.0
BODY_ONLY_CREDIT = 0.6  # a concept found only in the body counts 0.6, in the heading/tags 1.0


@dataclass(slots=True)
class Candidate:
    """A memory being scored, with what the index said about it (slots: ~150 are made per query)."""

    memory: Memory
    bm25_raw: float = 0.0
    matched: frozenset[str] = frozenset()  # analysed query tokens found in it
    heading: frozenset[str] = frozenset()  # ... found in its l0 / title / id / tags
    reason: str = "scored"  # scored | neighbour | rule | always_load
    sources: set[str] = field(default_factory=set)  # bm25 | vector | graph | importance | pinned
    cosine: float = 0.0  # embedding similarity (0..1) when a model is in use
    # per-query values that do not depend on the other candidates, kept for the second scoring pass
    keyword: float | None = None  # keyword overlap (KeywordOverlapScorer)
    raw_cosine: float | None = None  # centred cosine before rescaling over the candidates
    signals: dict[str, float] = field(default_factory=dict)
    score: float = 0.0
    workspace: str | None = None  # federated: the workspace it comes from (services/federation.py)
    weight_row: tuple[float, ...] = ()  # the weights ``score`` was composed with, in ``SIGNALS`` order

    @property
    def shares(self) -> dict[str, float]:
        """Weight × signal per signal, summing to ``score`` (empty before scoring).

        Built when asked rather than for every candidate of every pass: only
        the memories a result shows report them.
        """
        signals = self.signals
        return {name: weight * signals.get(name, 0.0) for name, weight in zip(SIGNALS, self.weight_row)}


@dataclass
class QueryTerms:
    """The query as the semantic scorer sees it."""

    expanded: ExpandedQuery
    group_tokens: list[frozenset[str]]  # analysed tokens per concept group
    group_weights: list[float]  # IDF weight per group (sums to 1)
    phrases: list[str]  # adjacent content-word pairs, lowercased
    # per phrase, the analysed tokens of its two words: a memory holds the phrase between word boundaries
    # only when its matched tokens include them all (``KeywordOverlapScorer`` reads the text only then)
    phrase_tokens: list[frozenset[str]] = field(default_factory=list)


class SemanticScorer(Protocol):
    """Scores how well each candidate matches the query's meaning, 0..1.

    An embedding-based scorer implements the same method (it may ignore
    ``terms`` and embed ``terms.expanded.words`` itself).
    """

    name: str

    def score(self, terms: QueryTerms, candidates: Sequence[Candidate]) -> dict[str, float]: ...


LOWER_CACHE_BYTES = 6 << 20  # lowercased memory text kept for phrase matching, per generation (two are kept)


def phrase_head(memory: Memory) -> str:
    """What the phrase text holds before the tiers: the summary line, title and tags (the memory's hot fields)."""
    return f"{memory.l0}\n{memory.title}\n{' '.join(memory.tags)}\n"


def phrase_text(memory: Memory, l1: str, l2: str) -> bytes:
    """The text phrases are looked for in: summary line, title, tags and both tiers, lowercased, as UTF-8.

    UTF-8 because a phrase occurs in a text exactly when its encoding occurs
    in the text's encoding (the code is self-synchronising), and searching
    bytes is faster than searching text with any non-ASCII character in it
    (stored at 2-4 bytes a character), and a cache of them is smaller.
    """
    return lower_utf8(f"{phrase_head(memory)}{l1}\n{l2}")


def lower_utf8(text: str) -> bytes:
    """``text.lower()`` as UTF-8 (lone surrogates kept, as a file decoded with them has them)."""
    # ASCII: bytes.lower() is str.lower() then encode, ~5x faster (only A-Z change either way)
    return text.encode("ascii").lower() if text.isascii() else text.lower().encode("utf-8", "surrogatepass")


class KeywordOverlapScorer:
    """Keyword coverage plus phrase overlap (no model; the default)."""

    name = "keyword-overlap"

    def __init__(self, stored: Callable[[Memory], bytes | None] | None = None) -> None:
        # Each memory's text, lowercased, per (id, checksum): candidates recur across queries,
        # and a memory's body is read from disk when it is not here. Two generations: when the
        # newer one holds ``LOWER_CACHE_BYTES`` it becomes the older one and the oldest is
        # dropped, so a hot memory survives a full cache (one dict replaced whole at 4,000
        # entries missed most of the time at 100,000 memories). Dicts are only ever replaced,
        # never cleared in place, so a query on another thread keeps the dicts it read.
        self._lower: dict[tuple[str, str], bytes] = {}
        self._older: dict[tuple[str, str], bytes] = {}
        self._lower_bytes = 0
        # a memory's phrase text as the last build stored it, None when it holds none (the engine's block store)
        self.stored = stored

    def _memory_text_lower(self, memory: Memory) -> bytes:
        """The memory's ``phrase_text``, cached per id and checksum.

        On a miss it comes from ``stored`` when that has it (the engine sets it to
        the block store the last build wrote: one ``pread`` instead of reading the
        file back, splitting its tiers and lowercasing them), else from the file.
        """
        key = (memory.id, memory.checksum)
        text = self._lower.get(key)
        if text is not None:
            return text
        text = self._older.get(key)
        if text is None and self.stored is not None:
            text = self.stored(memory)
        if text is None:
            l1, l2 = memory.tier_texts()  # a released memory's file read back once for both
            text = phrase_text(memory, l1, l2)
        if memory.checksum:
            if self._lower_bytes + len(text) > LOWER_CACHE_BYTES:
                self._older, self._lower, self._lower_bytes = self._lower, {}, 0
            self._lower[key] = text
            self._lower_bytes += len(text)
        return text

    def score(self, terms: QueryTerms, candidates: Sequence[Candidate]) -> dict[str, float]:
        out: dict[str, float] = {}
        groups = list(zip(terms.group_tokens, terms.group_weights))
        phrases = [p.encode("utf-8", "surrogatepass") for p in terms.phrases]
        needs = list(zip(phrases, terms.phrase_tokens))
        if len(needs) != len(phrases):  # a ``QueryTerms`` made without the phrases' tokens: read every text
            needs = [(p, frozenset[str]()) for p in phrases]
        # Many candidates hold the same query tokens (one or two words of the query): their coverage and
        # the phrases they may hold are worked out once per distinct (heading, matched) and matched.
        coverage_of: dict[tuple[frozenset[str], frozenset[str]], float] = {}
        possible_of: dict[frozenset[str], list[bytes]] = {}
        for cand in candidates:
            if cand.keyword is not None:  # scored in the first pass of this query
                out[cand.memory.id] = cand.keyword
                continue
            coverage = 0.0
            heading, matched = cand.heading, cand.matched
            if heading or matched:
                key = (heading, matched)
                known = coverage_of.get(key)
                if known is None:
                    for tokens, weight in groups:
                        if not tokens.isdisjoint(heading):
                            coverage += weight
                        elif not tokens.isdisjoint(matched):
                            coverage += BODY_ONLY_CREDIT * weight
                    coverage_of[key] = coverage
                else:
                    coverage = known
            if phrases:
                # Only phrases whose words' tokens the memory holds (``matched``) can occur in it between
                # word boundaries: its text is read (from the file, for a released memory) only for them.
                possible = possible_of.get(matched)
                if possible is None:
                    possible = possible_of[matched] = [p for p, need in needs if need <= matched]
                if possible:
                    text = self._memory_text_lower(cand.memory)
                    phrase = sum(1 for p in possible if p in text) / len(phrases)
                else:
                    phrase = 0.0
                value = COVERAGE_SHARE * coverage + (1 - COVERAGE_SHARE) * phrase
            else:
                value = coverage
            out[cand.memory.id] = cand.keyword = clamp01(value)
        return out


def build_query_terms(
    expanded: ExpandedQuery, analyze: Callable[[str], list[str]], idf: Callable[[str], float]
) -> QueryTerms:
    """Analyse each concept group and weight it by the IDF of its rarest token."""
    group_tokens: list[frozenset[str]] = []
    raw_weights: list[float] = []
    for group in expanded.groups:
        tokens = frozenset(t for word in group for t in analyze(word))
        if not tokens:
            continue
        group_tokens.append(tokens)
        primary = analyze(group[0]) or sorted(tokens)
        raw_weights.append(max(max(idf(t) for t in primary), 0.05))
    total = sum(raw_weights)
    weights = [w / total for w in raw_weights] if total > 0 else []
    content = [(w, frozenset(analyze(w))) for w in expanded.words]
    content = [(w, tokens) for w, tokens in content if tokens]
    pairs = list(zip(content, content[1:]))
    phrases = [f"{a} {b}" for (a, _), (b, _) in pairs]
    return QueryTerms(expanded, group_tokens, weights, phrases, [ta | tb for (_, ta), (_, tb) in pairs])


def recency_signal(memory: Memory, now: datetime, half_lives: Mapping[str, float]) -> float:
    """Exponential decay by age with the type's half-life (future dates count as new)."""
    return Recency(now, half_lives)(memory)


class Recency:
    """``recency_signal`` for many memories at one ``now``: each type's half-life is read once.

    Per candidate this was a function call, a ``float`` of the config value and a
    ``try`` (~150 candidates a query); the arithmetic is the same, so the value is
    the same float.
    """

    __slots__ = ("now", "half_lives", "_half_life")

    def __init__(self, now: datetime, half_lives: Mapping[str, float]) -> None:
        self.now = now
        self.half_lives = half_lives
        self._half_life: dict[str, float] = {}

    def half_life(self, kind: str) -> float:
        found = self._half_life.get(kind)
        if found is None:
            try:
                found = float(self.half_lives.get(kind, DEFAULT_HALF_LIFE_DAYS))
            except (TypeError, ValueError):
                found = DEFAULT_HALF_LIFE_DAYS
            self._half_life[kind] = found
        return found

    def __call__(self, memory: Memory) -> float:
        when = memory.modified
        if when is None:
            when = datetime.fromtimestamp(memory.mtime, tz=UTC).replace(tzinfo=None) if memory.mtime else None
            if when is None:
                return 0.0
        if when.tzinfo is not None:
            when = when.astimezone(UTC).replace(tzinfo=None)
        age_days = (self.now - when).total_seconds() / 86400.0
        if not age_days > 0.0:  # max(0.0, age): 0.0 unless strictly positive
            age_days = 0.0
        half_life = self.half_life(memory.type)
        if half_life <= 0:
            return 0.0
        return math.pow(0.5, age_days / half_life)


def clamp01(value: float) -> float:
    """``max(0.0, min(1.0, value))`` without two builtin calls: the same comparisons, so the same result
    (nan gives 1.0, -0.0 gives 0.0, as the builtins do); called per candidate per signal."""
    value = value if value < 1.0 else 1.0
    return value if value > 0.0 else 0.0


def _graph_context(
    neighbours: Callable[[str], set[str]], community_of: Mapping[str, int] | None, seeds: Sequence[str] | None
) -> tuple[set[str], set[int]]:
    """The memories one hop from ``seeds`` and the seeds' communities (both empty for the first pass)."""
    near: set[str] = set()
    seed_communities: set[int] = set()
    for seed in seeds or ():
        near |= neighbours(seed)
    if community_of and seeds:
        seed_communities = {community_of[s] for s in seeds if s in community_of}
    return near, seed_communities


def graph_signals(
    candidates: Sequence[Candidate],
    authority: Mapping[str, float],
    neighbours: Callable[[str], set[str]],
    community_of: Mapping[str, int] | None,
    community_bonus: float,
    seeds: Sequence[str] | None,
) -> dict[str, float]:
    """Authority, proximity to ``seeds``, and the community bonus (see module doc).

    ``seeds`` are the best composite-scored candidates of the first pass;
    ``None`` (the first pass itself) counts authority only. ``score_candidates``
    calls ``_graph_value`` inside its own loop instead.
    """
    near, seed_communities = _graph_context(neighbours, community_of, seeds)
    bonus_of = community_of.get if seed_communities and community_of is not None else None
    authority_of = authority.get
    return {
        cand.memory.id: _graph_value(cand.memory.id, authority_of, near, bonus_of, seed_communities, community_bonus)
        for cand in candidates
    }


def _graph_value(
    mid: str,
    authority_of: Callable[[str, float], float],
    near: set[str],
    bonus_of: Callable[[str], int | None] | None,
    seed_communities: set[int],
    community_bonus: float,
) -> float:
    """One memory's graph signal: min(1, 0.5 authority + 0.5 near a seed + the bonus in a seed's community)."""
    value = GRAPH_AUTHORITY_SHARE * float(authority_of(mid, 0.0))
    if mid in near:
        value += GRAPH_PROXIMITY_SHARE
    if bonus_of is not None and bonus_of(mid) in seed_communities:
        value += community_bonus
    return value if value < 1.0 else 1.0  # min(1.0, value): the builtin's own comparison


def weight_row(weights: Mapping[str, float]) -> tuple[float, ...]:
    """The weights in ``SIGNALS`` order (a missing signal weighs 0)."""
    return tuple(float(weights.get(name, 0.0)) for name in SIGNALS)


def _composite(row: tuple[float, ...], signals: Mapping[str, float]) -> float:
    """Σ weight × signal, added in ``SIGNALS`` order (the order ``shares`` lists them)."""
    get = signals.get
    w_sem, w_bm25, w_graph, w_recency, w_importance, w_frequency = row
    return (
        w_sem * get("semantic", 0.0)
        + w_bm25 * get("bm25", 0.0)
        + w_graph * get("graph", 0.0)
        + w_recency * get("recency", 0.0)
        + w_importance * get("importance", 0.0)
        + w_frequency * get("frequency", 0.0)
    )


def compose(candidates: Iterable[Candidate], weights: Mapping[str, float]) -> None:
    """Fill ``score`` (Σ weight × signal) and the weights its ``shares`` come from, for each candidate."""
    row = weight_row(weights)
    for cand in candidates:
        cand.weight_row = row
        cand.score = _composite(row, cand.signals)


def rescore_graph(
    candidates: Sequence[Candidate],
    *,
    weights: Mapping[str, float],
    authority: Mapping[str, float],
    neighbours: Callable[[str], set[str]],
    community_of: Mapping[str, int] | None,
    community_bonus: float,
    seeds: Sequence[str],
) -> None:
    """Second pass when no candidate was added: only the graph signal changes (see query.score_query)."""
    graph = graph_signals(candidates, authority, neighbours, community_of, community_bonus, seeds)
    for cand in candidates:
        cand.signals["graph"] = graph.get(cand.memory.id, 0.0)
    compose(candidates, weights)


def _as_float(value: object) -> float:
    """``float(value)`` for what ``float`` takes (numbers, numeric text); TypeError for anything else."""
    if type(value) is float or type(value) is int:  # the usual case, without a Protocol check
        return float(value)
    if isinstance(value, (str, bytes, bytearray, SupportsFloat, SupportsIndex)):
        return float(value)
    raise TypeError(f"not a number: {value!r}")


def normalise_weights(raw: Mapping[str, object] | None) -> dict[str, float]:
    """A weight row from config: missing signals get 0, negatives 0, rescaled to sum to 1."""
    row: dict[str, float] = {}
    for name in SIGNALS:
        try:
            row[name] = max(0.0, _as_float((raw or {}).get(name, 0.0)))
        except (TypeError, ValueError):
            row[name] = 0.0
    total = sum(row.values())
    if total <= 0:
        return {name: 1.0 / len(SIGNALS) for name in SIGNALS}
    return {name: value / total for name, value in row.items()}


def score_candidates(
    candidates: Sequence[Candidate],
    *,
    terms: QueryTerms,
    weights: Mapping[str, float],
    semantic: SemanticScorer,
    authority: Mapping[str, float],
    neighbours: Callable[[str], set[str]],
    frequency: Mapping[str, float],
    half_lives: Mapping[str, float],
    now: datetime,
    community_of: Mapping[str, int] | None = None,
    community_bonus: float = 0.08,
    graph_seeds: Sequence[str] | None = None,
    dates: QueryDates | None = None,
) -> None:
    """Compute all six signals and the composite for every candidate, in place.

    ``graph_seeds``: the memories graph proximity and the community bonus
    refer to (the best of a first pass); ``None`` scores authority only.
    ``dates``: the days the query names; when there are any, recency is the
    closeness to them instead of to ``now`` (``query_dates``).

    A candidate this query scored before (the second pass: its ``signals`` are
    set) keeps its recency, importance and frequency, which depend on neither
    the other candidates nor the seeds (the caller passes the same frequency
    values again); its semantic, BM25 and graph values are computed again (the
    rescaling over the candidates and the seeds change them), in place.
    """
    best_bm25 = max((c.bm25_raw for c in candidates), default=0.0)
    sem = semantic.score(terms, candidates).get
    near, seed_communities = _graph_context(neighbours, community_of, graph_seeds)
    bonus_of = community_of.get if seed_communities and community_of is not None else None
    authority_of = authority.get
    frequency_of = frequency.get
    recency_of = dates.closeness if dates else Recency(now, half_lives)
    row = weight_row(weights)
    w_sem, w_bm25, w_graph, w_recency, w_importance, w_frequency = row
    for cand in candidates:
        memory = cand.memory
        mid = memory.id
        semantic_value = sem(mid, 0.0)
        bm25 = cand.bm25_raw / best_bm25 if best_bm25 > 0 else 0.0
        # graph_signals' value, computed here: no dict per pass to build and read back by id
        graph_value = _graph_value(mid, authority_of, near, bonus_of, seed_communities, community_bonus)
        signals = cand.signals
        if signals:  # scored before in this query (see above): the same query, the same values
            recency, importance, used = signals["recency"], signals["importance"], signals["frequency"]
            signals["semantic"], signals["bm25"], signals["graph"] = semantic_value, bm25, graph_value
        else:
            recency = recency_of(memory)
            importance = clamp01(float(memory.importance))
            used = clamp01(float(frequency_of(mid, 0.0)))
            cand.signals = {
                "semantic": semantic_value,
                "bm25": bm25,
                "graph": graph_value,
                "recency": recency,
                "importance": importance,
                "frequency": used,
            }
        cand.weight_row = row
        # the same sum, in the same order, as ``_composite`` (inlined: this loop runs per candidate per pass)
        cand.score = (
            w_sem * semantic_value
            + w_bm25 * bm25
            + w_graph * graph_value
            + w_recency * recency
            + w_importance * importance
            + w_frequency * used
        )
