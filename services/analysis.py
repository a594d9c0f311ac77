"""The index's words: one analyzer for the index, its builder processes and scoring.

Whoosh's ``StemmingAnalyzer`` (lowercase, stop words, Porter stems) defines
what a word is. ``index_tokens`` gives exactly its tokens in one loop (cold
builds hand Whoosh pre-analysed text); ``analyze`` is the same with a cache
for the short texts a query analyses several times. Scoring compares query
and memory text through ``analyze`` so both sides use the index's stemmer.
"""

from __future__ import annotations

import re
from functools import lru_cache

from whoosh.analysis import STOP_WORDS, StemmingAnalyzer
from whoosh.lang.porter import stem

ANALYZE_CACHE_CHARS = 64  # texts up to this long (words, not documents) have their tokens cached
ANALYZER = StemmingAnalyzer()


def analyze(text: str) -> list[str]:
    """The index's own tokens for ``text`` (lowercased, stop words dropped, stemmed).

    Exposed so scoring compares query and memory text with the same stemmer
    the index uses. Short texts (query words) are cached: a query analyses
    its words several times. Through ``index_tokens`` rather than Whoosh's
    generator chain: the same tokens at a third of the CPU (headings of
    every candidate are analysed per query).
    """
    if len(text) <= ANALYZE_CACHE_CHARS:
        return list(_analyze_short(text))
    return index_tokens(text)


@lru_cache(maxsize=8192)
def _analyze_short(text: str) -> tuple[str, ...]:
    return tuple(index_tokens(text))


_TOKEN_RE = re.compile(r"[\w\*]+(?:\.?[\w\*]+)*")  # Whoosh's default_pattern, without its capturing group
_STOP_WORDS = frozenset(STOP_WORDS)
_STEMS: dict[str, str] = {}
_STEMS_MAX = 100_000  # distinct words memoised per process (~10 MB at most; then started afresh)


def index_tokens(text: str) -> list[str]:
    """``analyze(text)`` in one loop: the tokens a builder hands Whoosh pre-analysed.

    The same tokens as ``ANALYZER`` (RegexTokenizer, LowercaseFilter,
    StopFilter with minsize 2, StemFilter: checked equal on the 10,000-memory
    corpus and edge cases in tests/test_cold_build.py) at a third of the CPU:
    Whoosh's chain runs five generators per token and a pure-Python LFU cache
    around the stemmer. Whoosh indexes a list of strings as given.
    """
    out: list[str] = []
    stems = _STEMS
    if len(stems) > _STEMS_MAX:
        stems.clear()
    for word in _TOKEN_RE.findall(text):
        word = word.lower()
        if len(word) < 2 or word in _STOP_WORDS:
            continue
        stemmed = stems.get(word)
        if stemmed is None:
            stemmed = stems[word] = stem(word)
        out.append(stemmed)
    return out
