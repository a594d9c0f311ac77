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
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from .stop_flag import Check, never

_WORD_RE = re.compile(r"[^\W_](?:[\w'-]*[^\W_])?", re.UNICODE)  # starts and ends with a letter/digit
_SENTENCE_RE = re.compile(r"(?<=[.!?;:])\s+|\n+")

STOPWORDS: frozenset[str] = frozenset(
    """
a an the and or but if then else of to in on at by for with from into onto over under as is are was were
be been being it its this that these those there here i you he she we they me my our your their his her them
us do does did doing done have has had having can could should would may might will shall must so such than
too very just also only not no nor all any some each every both either neither more most other same own
what which who whom whose when where why how about above below up down out off again further once
""".split()
)

# Words that flip the polarity of a sentence.
NEGATIONS: frozenset[str] = frozenset(
    """
not no never nothing nobody none nowhere without cannot cant can't don't dont doesn't doesnt didn't didnt
isn't isnt aren't arent wasn't wasnt weren't werent won't wont shouldn't shouldnt mustn't mustnt
wouldn't wouldnt couldn't couldnt shan't haven't hasn't hadn't
""".split()
)

# Opposite words: the second of each pair is the first with the polarity flipped.
ANTONYMS: tuple[tuple[str, str], ...] = (
    ("enable", "disable"),
    ("enabled", "disabled"),
    ("use", "avoid"),
    ("prefer", "avoid"),
    ("allow", "forbid"),
    ("allow", "deny"),
    ("allow", "disallow"),
    ("allowed", "forbidden"),
    ("allowed", "disallowed"),
    ("true", "false"),
    ("required", "forbidden"),
    ("recommended", "discouraged"),
    ("safe", "unsafe"),
)
_FLIP: dict[str, tuple[str, int]] = {}
for _pos, _neg in ANTONYMS:
    _FLIP.setdefault(_pos, (_pos, 1))
    _FLIP.setdefault(_neg, (_pos, -1))
_EMPHASIS = frozenset({"always", "definitely", "really", "strictly"})
_NOT_CONTENT = STOPWORDS | NEGATIONS


def words(text: str) -> list[str]:
    """Lower-cased word tokens (apostrophes kept so "don't" stays one word)."""
    return _WORD_RE.findall(text.casefold().replace("’", "'"))


def _stem(word: str) -> str:
    """A very light stem: plural -s, so "tabs" meets "tab". Enough for overlap, cheap."""
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def content_tokens(text: str) -> frozenset[str]:
    """Distinct content words (stop words dropped, lightly stemmed): the set for topic overlap."""
    skip = _NOT_CONTENT
    return frozenset(
        w[:-1] if len(w) > 3 and w[-1] == "s" and w[-2] != "s" else w
        for w in words(text)
        if len(w) > 1 and w not in skip
    )


def shingles(text: str, size: int = 2) -> frozenset[str]:
    """Word n-grams (stop words kept, order matters): the set for near-duplicate detection."""
    tokens = [w for w in words(text) if w]
    if len(tokens) < size:
        return frozenset([" ".join(tokens)]) if tokens else frozenset()
    return frozenset(" ".join(tokens[i : i + size]) for i in range(len(tokens) - size + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def similarity_join(
    sets: Sequence[frozenset[str]],
    threshold: float,
    max_posting: int | None = None,
    accept: Callable[[int, int], bool] | None = None,
    check: Check = never,
) -> list[tuple[int, int, float]]:
    """Every pair ``(i, j, jaccard)`` with ``i < j`` and Jaccard >= ``threshold``.

    ``max_posting`` optionally skips tokens whose prefix posting list grew past
    that length (boilerplate shared by thousands of files): it bounds the work
    at the price of possibly missing pairs that share only such boilerplate in
    their rarest tokens, which are not the pairs a person wants to hear about.
    ``accept(i, j)``, when given, is checked before the (costlier) overlap, so a
    caller that only wants some pairs (e.g. memories whose types disagree)
    pays little for the rest. ``check`` is called every 1,024 sets (it raises
    ``stop_flag.Cancelled`` when the daemon is shutting down).
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError("threshold must be in (0, 1]")
    freq: Counter[str] = Counter()
    for s in sets:
        freq.update(s)
    order = sorted((i for i in range(len(sets)) if sets[i]), key=lambda i: (len(sets[i]), i))
    # Posting lists grow in size order (sets are visited smallest first), so the
    # size filter |y| >= t*|x| is a bisect on a parallel list of sizes.
    postings: dict[str, list[int]] = defaultdict(list)
    sizes: dict[str, list[int]] = defaultdict(list)
    found: list[tuple[int, int, float]] = []
    for n, i in enumerate(order):
        if not n & 1023:
            check()
        current = sets[i]
        size = len(current)
        prefix = sorted(current, key=lambda t: (freq[t], t))[: size - math.ceil(threshold * size) + 1]
        min_size = threshold * size
        candidates: set[int] = set()
        for token in prefix:
            posting = postings[token]
            if max_posting is not None and len(posting) > max_posting:
                continue
            start = bisect_left(sizes[token], min_size)
            candidates.update(posting[start:])
        for j in candidates:
            if accept is not None and not accept(i, j):
                continue
            other = sets[j]
            inter = len(current & other)
            score = inter / (size + len(other) - inter)
            if score >= threshold:
                found.append((min(i, j), max(i, j), score))
        for token in prefix:
            postings[token].append(i)
            sizes[token].append(size)
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

    Polarity is -1 when the sentence carries an odd number of flips: a negation
    ("not", "don't", "never") in the first half of the sentence, where it
    governs the main statement (a late "... without executing it" or "... and
    not the rest" only qualifies it), or the negative side of an antonym pair
    anywhere ("disable", "avoid", "forbidden"). Antonyms are folded to their
    positive side so "enable X" and "disable X" share their content words;
    "always" is treated as emphasis, not content. Sentences repeated in one
    text (an l0 that is also the first line) count once.
    """
    result: list[Claim] = []
    seen: set[tuple[frozenset[str], int]] = set()
    for sentence in _SENTENCE_RE.split(text):
        sentence = sentence.strip(" \t-*>#`")
        if not sentence:
            continue
        polarity = 1
        tokens: set[str] = set()
        sentence_words = words(sentence)
        scope = max(3, len(sentence_words) // 2)
        for position, word in enumerate(sentence_words):
            if word in NEGATIONS:
                if position < scope:
                    polarity = -polarity
                continue
            if word in _EMPHASIS:
                continue
            flip = _FLIP.get(word)
            if flip is not None:
                word, sign = flip
                polarity *= sign
            if len(word) > 1 and (word not in STOPWORDS or flip is not None):
                tokens.add(_stem(word))
        key = (frozenset(tokens), polarity)
        if len(tokens) >= min_tokens and key not in seen:
            seen.add(key)
            result.append(Claim(owner, sentence[:300], frozenset(tokens), polarity))
    return result


def contradictions(
    all_claims: Sequence[Claim], threshold: float = 0.75, max_posting: int | None = 200, check: Check = never
) -> list[tuple[Claim, Claim, float]]:
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
    for n, claim in enumerate(positives):
        if not n & 1023:
            check()
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
