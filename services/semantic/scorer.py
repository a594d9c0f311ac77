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
QUERY_MEMO = 64  # query embeddings remembered (``EmbeddingScorer.query_vector``)


def query_text(expanded: ExpandedQuery) -> str:
    """What is embedded for a query: the person's content words (question words carry no topic)."""
    return " ".join(expanded.words)


class EmbeddingScorer:
    """Semantic signal from a ``VectorIndex`` (see module doc)."""

    def __init__(self, vectors: VectorIndex, embed_share: float = EMBED_SHARE) -> None:
        self.vectors = vectors
        self.embed_share = embed_share
        self.keywords = KeywordOverlapScorer()
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
        """Rescaled cosine per candidate (0..1)."""
        todo = [c for c in candidates if c.raw_cosine is None]  # the rest were computed in the first pass
        if todo:
            vector = self.query_vector(query_text(terms.expanded))
            found = self.vectors.similarities(vector, (c.memory.id for c in todo))
            for cand in todo:
                cand.raw_cosine = found.get(cand.memory.id, float("nan"))  # nan: no row for it
        raw = {
            c.memory.id: c.raw_cosine for c in candidates if c.raw_cosine is not None and c.raw_cosine == c.raw_cosine
        }
        if not raw:
            return {}
        top = max(raw.values())
        low = min(min(raw.values()), COSINE_FLOOR)
        span = top - low
        if top <= 0 or span <= 1e-9:
            return {mid: (1.0 if top > 0 else 0.0) for mid in raw}
        return {mid: max(0.0, (value - low) / span) for mid, value in raw.items()}

    def score(self, terms: QueryTerms, candidates: Sequence[Candidate]) -> dict[str, float]:
        words = self.keywords.score(terms, candidates)
        sims = self.similarities(terms, candidates)
        share = self.embed_share
        rest = 1.0 - share
        similarity, overlap = sims.get, words.get
        out: dict[str, float] = {}
        for cand in candidates:
            mid = cand.memory.id
            cosine = cand.cosine = similarity(mid, 0.0)
            out[mid] = share * cosine + rest * overlap(mid, 0.0)
        return out
