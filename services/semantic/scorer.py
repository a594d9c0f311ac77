"""``EmbeddingScorer``: the semantic signal from embeddings, fused with keyword overlap.

semantic = EMBED_SHARE x similarity + (1 - EMBED_SHARE) x keyword overlap

``similarity`` is the cosine of the query's and the memory's embeddings,
min-max rescaled over the candidates (the best candidate 1, the lowest 0;
the low end is at most ``COSINE_FLOOR``, so a handful of similar candidates
is not spread over the whole range), because static embeddings put
unrelated texts at cosines of 0.2-0.4 and only the spread among candidates
separates them.
Keyword overlap (``KeywordOverlapScorer``) stays in: exact names and
numbers are what static embeddings blur. The shares were chosen on LoCoMo
dev (docs/engine.md#tuning).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ..intent import ExpandedQuery
from ..signals import Candidate, KeywordOverlapScorer, QueryTerms
from .vectors import VectorIndex

EMBED_SHARE = 0.6
COSINE_FLOOR = 0.2
NAN = float("nan")
QUERY_MEMO = 64  # query embeddings remembered (``EmbeddingScorer.query_vector``)


def query_text(expanded: ExpandedQuery) -> str:
    """What is embedded for a query: the person's content words (question words carry no topic)."""
    return " ".join(expanded.words)


class EmbeddingScorer:
    """Semantic signal from a ``VectorIndex`` (see module doc)."""

    def __init__(
        self, vectors: VectorIndex, embed_share: float = EMBED_SHARE, keywords: KeywordOverlapScorer | None = None
    ) -> None:
        self.vectors = vectors
        self.embed_share = embed_share
        self.keywords = keywords if keywords is not None else KeywordOverlapScorer()
        self.name = vectors.name
        self._embedded = lru_cache(maxsize=QUERY_MEMO)(vectors.embed_query)

    def query_vector(self, text: str) -> np.ndarray:
        """The query's embedding, remembered for the last ``QUERY_MEMO`` texts (1 KB each at 256 dimensions).

        Candidates and scoring share it within a query, and an agent asking the same
        thing again (several clients interleave) skips the embedding. Read-only:
        callers never change the array.
        """
        return self._embedded(text)

    def similarities(self, terms: QueryTerms, candidates: Sequence[Candidate]) -> dict[str, float]:
        """Rescaled cosine per candidate (0..1); candidates without a row are left out."""
        rescaled = self._rescaled(terms, candidates)
        return {c.memory.id: v for c, v in zip(candidates, rescaled) if c.raw_cosine == c.raw_cosine}

    def _rescaled(self, terms: QueryTerms, candidates: Sequence[Candidate]) -> list[float]:
        """Rescaled cosine per candidate, in their order, 0.0 for one without a row (see module doc).

        A list rather than dicts by id (candidates' ids are distinct: they come from one
        dict): ``score`` runs twice a query over ~150 candidates.
        """
        todo = [c for c in candidates if c.raw_cosine is None]  # the rest were computed in the first pass
        if todo:
            vector = self.query_vector(query_text(terms.expanded))
            found = self.vectors.similarities(vector, (c.memory.id for c in todo))
            for cand in todo:
                cand.raw_cosine = found.get(cand.memory.id, float("nan"))  # nan: no row for it
        raw = [NAN if (v := c.raw_cosine) is None else v for c in candidates]  # never None here
        known = [v for v in raw if v == v]
        if not known:
            return [0.0] * len(raw)
        top = max(known)
        low = min(min(known), COSINE_FLOOR)
        span = top - low
        if top <= 0 or span <= 1e-9:
            same = 1.0 if top > 0 else 0.0
            return [same if v == v else 0.0 for v in raw]
        # value >= low, so never below 0: the conditional is ``max(0.0, x)``'s own comparison, and it
        # also turns a missing row's nan into 0.0
        return [x if (x := (v - low) / span) > 0.0 else 0.0 for v in raw]

    def score(self, terms: QueryTerms, candidates: Sequence[Candidate]) -> dict[str, float]:
        overlap = self.keywords.score(terms, candidates).get
        share = self.embed_share
        rest = 1.0 - share
        out: dict[str, float] = {}
        for cand, cosine in zip(candidates, self._rescaled(terms, candidates)):
            mid = cand.memory.id
            cand.cosine = cosine
            out[mid] = share * cosine + rest * overlap(mid, 0.0)
        return out
