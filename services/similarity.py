"""Text overlap without comparing every pair: tokens, shingles, a prefix-filtered similarity join,
and sentence polarity for spotting contradictions.

Why a similarity join and not all pairs: governance runs over whole workspaces
(7,000 files in the tldr benchmark), where n^2/2 = 24 million comparisons is far
too slow for a scheduled job. The All-Pairs prefix filter (Bayardo et al., 2007)
is exact for Jaccard: order every set's tokens by global rarity; two sets with
Jaccard >= t must share a token among the first ``|x| - ceil(t*|x|) + 1`` of
each. So an inverted index over those prefixes (mostly rare tokens, short
posting lists) yields every qualifying pair and few others, and the result is
deterministic (no random hashing, unlike MinHash LSH), which keeps finding
fingerprints stable from run to run.
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

_WORD_RE = re.compile(r"[^\W_][\w'’-]*", re.UNICODE)
_SENTENCE_RE = re.compile(r"(?<=[.!?;:])\s+|\n+")

STOPWORDS: frozenset[str] = frozenset("""
a an the and or but if then else of to in on at by for with from into onto over under as is are was were
be been being it its this that these those there here i you he she we they me my our your their his her them
us do does did doing done have has had having can could should would may might will shall must so such than
too very just also only not no nor all any some each every both either neither more most other same own
what which who whom whose when where why how about above below up down out off again further once
""".split())

# Words that flip the polarity of a sentence.
NEGATIONS: frozenset[str] = frozenset("""
not no never nothing nobody none nowhere without cannot cant can't don't dont doesn't doesnt didn't didnt
isn't isnt aren't arent wasn't wasnt weren't werent won't wont shouldn't shouldnt mustn't mustnt
wouldn't wouldnt couldn't couldnt shan't haven't hasn't hadn't
""".split())

# Opposite words: the second of each pair is the first with the polarity flipped.
ANTONYMS: tuple[tuple[str, str], ...] = (
    ("always", "never"), ("enable", "disable"), ("enabled", "disabled"),
    ("use", "avoid"), ("prefer", "avoid"), ("allow", "forbid"), ("allow", "deny"), ("allow", "disallow"),
    ("allowed", "forbidden"), ("allowed", "disallowed"), ("true", "false"), ("required", "forbidden"),
    ("recommended", "discouraged"), ("safe", "unsafe"),
)
_FLIP: dict[str, tuple[str, int]] = {}
for _pos, _neg in ANTONYMS:
    _FLIP.setdefault(_pos, (_pos, 1))
    _FLIP.setdefault(_neg, (_pos, -1))
# Negation words that are also antonyms ("never") count once, as the antonym.
_PURE_NEGATIONS = NEGATIONS - set(_FLIP)


def words(text: str) -> list[str]:
    """Lower-cased word tokens (apostrophes kept so "don't" stays one word)."""
    return [w.replace("’", "'").strip("'-") for w in _WORD_RE.findall(text.casefold())]


def _stem(word: str) -> str:
    """A very light stem: plural -s, so "tabs" meets "tab". Enough for overlap, cheap."""
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def content_tokens(text: str) -> frozenset[str]:
    """Distinct content words (stop words dropped, lightly stemmed): the set for topic overlap."""
    return frozenset(_stem(w) for w in words(text) if len(w) > 1 and w not in STOPWORDS and w not in NEGATIONS)


def shingles(text: str, size: int = 2) -> frozenset[str]:
    """Word n-grams (stop words kept, order matters): the set for near-duplicate detection."""
    tokens = [w for w in words(text) if w]
    if len(tokens) < size:
        return frozenset([" ".join(tokens)]) if tokens else frozenset()
    return frozenset(" ".join(tokens[i:i + size]) for i in range(len(tokens) - size + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def similarity_join(sets: Sequence[frozenset[str]], threshold: float,
                    max_posting: int | None = None) -> list[tuple[int, int, float]]:
    """Every pair ``(i, j, jaccard)`` with ``i < j`` and Jaccard >= ``threshold``.

    ``max_posting`` optionally skips tokens whose prefix posting list grew past
    that length (boilerplate shared by thousands of files): it bounds the work
    at the price of possibly missing pairs that share only such boilerplate in
    their rarest tokens, which are not the pairs a person wants to hear about.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError("threshold must be in (0, 1]")
    freq: Counter[str] = Counter()
    for s in sets:
        freq.update(s)
    order = sorted((i for i in range(len(sets)) if sets[i]), key=lambda i: (len(sets[i]), i))
    index: dict[str, list[int]] = defaultdict(list)
    found: list[tuple[int, int, float]] = []
    for i in order:
        current = sets[i]
        size = len(current)
        prefix = sorted(current, key=lambda t: (freq[t], t))[: size - math.ceil(threshold * size) + 1]
        min_size = threshold * size
        candidates: set[int] = set()
        for token in prefix:
            posting = index[token]
            if max_posting is not None and len(posting) > max_posting:
                continue
            candidates.update(j for j in posting if len(sets[j]) >= min_size)
        for j in candidates:
            other = sets[j]
            inter = len(current & other)
            score = inter / (size + len(other) - inter)
            if score >= threshold:
                found.append((min(i, j), max(i, j), score))
        for token in prefix:
            index[token].append(i)
    found.sort()
    return found


@dataclass(frozen=True)
class Claim:
    """One sentence reduced to its content words and its polarity (+1 or -1)."""

    owner: Hashable
    text: str
    tokens: frozenset[str]
    polarity: int


def claims(owner: Hashable, text: str, min_tokens: int = 4) -> list[Claim]:
    """Sentences of ``text`` with at least ``min_tokens`` content words, each with its polarity.

    Polarity is -1 when the sentence carries an odd number of flips (a negation
    such as "not"/"don't", or the negative side of an antonym pair such as
    "never", "disable", "avoid"); antonyms are folded to their positive side so
    "always use tabs" and "never use tabs" have the same content words.
    """
    result: list[Claim] = []
    for sentence in _SENTENCE_RE.split(text):
        sentence = sentence.strip(" \t-*>#`")
        if not sentence:
            continue
        polarity = 1
        tokens: set[str] = set()
        for word in words(sentence):
            if word in _PURE_NEGATIONS:
                polarity = -polarity
                continue
            flip = _FLIP.get(word)
            if flip is not None:
                word, sign = flip
                polarity *= sign
            if len(word) > 1 and (word not in STOPWORDS or flip is not None):
                tokens.add(_stem(word))
        if len(tokens) >= min_tokens:
            result.append(Claim(owner, sentence[:300], frozenset(tokens), polarity))
    return result


def contradictions(all_claims: Sequence[Claim], threshold: float = 0.75,
                   max_posting: int | None = 200) -> list[tuple[Claim, Claim, float]]:
    """Pairs of claims from different owners that say nearly the same words with opposite polarity.

    Only negative claims are indexed and only positive ones probe the index,
    so the join never even looks at the (many) same-polarity pairs.
    """
    negatives = [c for c in all_claims if c.polarity < 0]
    positives = [c for c in all_claims if c.polarity > 0]
    if not negatives or not positives:
        return []
    freq: Counter[str] = Counter()
    for claim in all_claims:
        freq.update(claim.tokens)

    def prefix(tokens: frozenset[str]) -> list[str]:
        size = len(tokens)
        return sorted(tokens, key=lambda t: (freq[t], t))[: size - math.ceil(threshold * size) + 1]

    index: dict[str, list[int]] = defaultdict(list)
    for n, claim in enumerate(negatives):
        for token in prefix(claim.tokens):
            index[token].append(n)
    found: list[tuple[Claim, Claim, float]] = []
    for claim in positives:
        seen: set[int] = set()
        for token in prefix(claim.tokens):
            posting = index.get(token, ())
            if max_posting is not None and len(posting) > max_posting:
                continue
            seen.update(posting)
        for n in sorted(seen):
            other = negatives[n]
            if other.owner == claim.owner:
                continue
            score = jaccard(claim.tokens, other.tokens)
            if score >= threshold:
                found.append((claim, other, score))
    return found
