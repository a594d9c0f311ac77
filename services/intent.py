"""Intent detection and query expansion, both driven by ``_config.yaml``.

Intent picks the weight row (debug favours BM25 and the link graph, brainstorm
favours importance and recency, recall favours exact words). It is detected by
trigger words so a person can see and change why a query got its intent;
a caller can always name the intent instead.

Expansion adds the synonyms of each query word (``bug`` also searches
``error fix exception failure``) with a lower weight than the person's own
words, and keeps the groups so the semantic signal can count a concept as
covered when any of its words is present.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

from whoosh.lang.porter import stem

INTENTS: tuple[str, ...] = ("default", "debug", "brainstorm", "recall")
SYNONYM_WEIGHT = 0.6  # weight of an expansion word relative to the person's words
# Tie-break when two intents have the same number of trigger hits: the more specific first.
_TIE_ORDER = ("debug", "recall", "brainstorm")
# Words that carry no topic in a request ("what did she say about ..."): dropped from
# the searched words (not from intent detection, which needs "when" and "who").
QUERY_STOP_WORDS = frozenset(
    """
a an the and or but if then of in on at to for from by with about into over after before
is are was were be been being am do does did done doing have has had having will would
shall should can could may might must i me my mine we us our you your he him his she her
it its they them their this that these those there here what which who whom whose when
where why how any some all also just so than too very not no yes ever
""".split()
)
# Question shapes that say what a person wants even without a trigger word (searched in the
# lowercased words of the query joined by single spaces; ``intent_patterns:`` in the config overrides).
DEFAULT_PATTERNS: dict[str, list[str]] = {
    "debug": [
        r"\bwhy (is|does|do|did|are|was|won't|can't|doesn't|isn't)\b.*\b(not|fail\w*|crash\w*|break\w*|broke|"
        r"slow|hang\w*|stuck|wrong|empty|missing|error\w*|timeout|time out|refus\w*|reject\w*|leak\w*)\b",
        r"\b(doesn't|does not|won't|will not|can't|cannot|isn't|is not|stopped|stops) (work|working|start|load|"
        r"connect|compile|run|build|sync)\w*\b",
        r"\bhow (do|can|should) (i|we) (fix|debug|resolve|solve|repair)\b",
        r"\bwhat('s| is) wrong\b",
        r"\b(goes|went|is|are) wrong\b",
        r"\b(keeps|kept) (failing|crashing|breaking)\b",
        r"\b\w+(error|exception)\b",
        r"\b[45]\d\d\b",
        r"\b(stopped|stops) \w+ing\b",
    ],
    "brainstorm": [
        r"\bwhat (should|could|might) (we|i) (build|do|try|make|add|work on|focus on|explore)\b",
        r"\bhow (could|might|can) (we|i) (improve|make|grow|reduce|increase|better|rethink|redesign)\b",
        r"\bwhat are (some|other|the) (ways|options|ideas|alternatives|approaches)\b",
        r"\b(any|some|more|new|fresh) (ideas|suggestions|directions|angles|options)\b",
        r"\bwhat if\b",
        r"\bnext (step|steps|feature|features|project|quarter|milestone)\b",
        r"\b(pros and cons|trade-?offs?)\b",
    ],
    "recall": [
        r"^(when|where|who) (did|was|were|is|has|had|do|does)\b",
        r"\bwhat (was|were|did) (the|we|i|he|she|they|you|our|\w+) ?.*\b(decid\w*|decision|agree\w*|chose|choose|"
        r"say|said|pick\w*|conclu\w*|settle\w*|plan\w*)\b",
        r"\bwhat was the (decision|outcome|result|conclusion|reason|plan)\b",
        r"\b(last time|remind me|do you remember|did we (ever|already)|have we (ever|already))\b",
        r"\bhow (long ago|many times)\b",
        r"\bwhat (did|has|had) \w+ (do|make|buy|paint|read|say|write|go)\b",
    ],
}
_WORD_RE = re.compile(r"[\w][\w'+#.-]*[\w+#]|[\w]", re.UNICODE)


def query_words(text: str) -> list[str]:
    """Lowercased words of a query, in order (hyphenated and dotted words kept whole)."""
    return [w.lower() for w in _WORD_RE.findall(text)]


@dataclass
class IntentDetection:
    """The intent chosen for a query and why, in words a person can check ("matched 'crash' → debug")."""

    intent: str
    reason: str
    scores: dict[str, float] = field(default_factory=dict)


class IntentClassifier(Protocol):
    """Nearest-prototype classifier on embeddings (``semantic.intent_prototypes``)."""

    def classify(self, query: str) -> tuple[str, float, str] | None:
        """(intent, similarity, nearest prototype) or None when no prototype is close enough."""
        ...


PATTERN_WEIGHT = 2.0  # a question pattern counts as two trigger words
_PATTERN_CACHE: dict[str, re.Pattern[str] | None] = {}


def _stems(words: list[str]) -> list[str]:
    return [stem(w) for w in words]


def _pattern(text: str) -> re.Pattern[str] | None:
    try:
        return _PATTERN_CACHE[text]
    except KeyError:
        pass
    compiled: re.Pattern[str] | None
    try:
        compiled = re.compile(text, re.IGNORECASE)
    except re.error:
        compiled = None  # a broken pattern in the config is skipped, never fatal
    if len(_PATTERN_CACHE) > 1000:
        _PATTERN_CACHE.clear()
    _PATTERN_CACHE[text] = compiled
    return compiled


@lru_cache(maxsize=4096)
def _trigger_key(trigger: str) -> tuple[str, str] | None:
    """(stemmed words, words as written) of one trigger; the same triggers come with every query."""
    words = query_words(trigger)
    if not words:
        return None
    return " ".join(_stems(words)), " ".join(words)


def _trigger_hits(stemmed: list[str], triggers: list[Any]) -> list[str]:
    """Triggers found in the query, compared stem to stem ("crashing" matches "crash")."""
    found: dict[str, str] = {}  # stemmed trigger -> as written (a stem counts once)
    joined = " " + " ".join(stemmed) + " "
    for trigger in triggers:
        keyed = _trigger_key(str(trigger))
        if keyed is None:
            continue
        key, written = keyed
        if key not in found and " " + key + " " in joined:
            found[key] = written
    return list(found.values())


def detect_intent_detail(
    query: str,
    triggers: Mapping[str, Any],
    classifier: IntentClassifier | None = None,
    patterns: Mapping[str, Any] | None = None,
) -> IntentDetection:
    """Question patterns, then stemmed trigger words, then the nearest prototype; else ``default``.

    Each intent scores ``PATTERN_WEIGHT`` per matching question pattern plus
    one per trigger found; the highest wins (ties: debug, recall, brainstorm).
    With nothing matched, the classifier (when embeddings are available) may
    name an intent whose prototypes are close enough to the query.
    """
    words = query_words(query)
    stemmed = _stems(words)
    lowered = " ".join(words)
    patterns = DEFAULT_PATTERNS if patterns is None else patterns
    scores: dict[str, float] = {}
    evidence: dict[str, list[str]] = {}
    names = list(_TIE_ORDER) + [k for k in list(triggers) + list(patterns) if k not in _TIE_ORDER]
    for intent in dict.fromkeys(names):
        hits: list[str] = []
        value = 0.0
        values = triggers.get(intent)
        if isinstance(values, list):
            found = _trigger_hits(stemmed, values)
            value += len(found)
            hits.extend(found)
        for text in patterns.get(intent) or []:
            compiled = _pattern(str(text))
            match = compiled.search(lowered) if compiled is not None else None
            if match:
                value += PATTERN_WEIGHT
                hits.append(match.group(0).strip())
        hits = list(dict.fromkeys(hits))
        if value > 0:
            scores[intent] = value
            evidence[intent] = hits
    if scores:
        best = max(scores, key=lambda k: (scores[k], -names.index(k)))
        shown = ", ".join(f"'{h}'" for h in evidence[best][:3])
        return IntentDetection(best, f"matched {shown} → {best}", scores)
    if classifier is not None:
        guess = classifier.classify(query)
        if guess is not None:
            intent, similarity, prototype = guess
            return IntentDetection(
                intent, f"nearest example '{prototype}' ({similarity:.2f}) → {intent}", {intent: similarity}
            )
    return IntentDetection("default", "no trigger, pattern or close example → default", {})


def detect_intent(query: str, triggers: Mapping[str, Any]) -> str:
    """The intent of ``query`` from patterns and triggers alone (see ``detect_intent_detail``)."""
    return detect_intent_detail(query, triggers).intent


@dataclass
class ExpandedQuery:
    """The person's words plus synonyms.

    ``groups`` has one entry per distinct query word: that word followed by its
    synonyms. ``terms`` is the flat list of (word, weight) sent to the index.
    """

    words: list[str]
    groups: list[list[str]] = field(default_factory=list)
    terms: list[tuple[str, float]] = field(default_factory=list)

    @property
    def expanded_words(self) -> list[str]:
        """Every word searched, the person's first (what ``simulate`` shows)."""
        return [word for word, _ in self.terms]


def _synonym_key(word: str, synonyms: Mapping[str, Any]) -> str | None:
    if word in synonyms:
        return word
    for suffix in ("s", "es", "ing", "ed"):
        if word.endswith(suffix) and word[: -len(suffix)] in synonyms:
            return word[: -len(suffix)]
    return None


def expand_query(query: str, synonyms: Mapping[str, Any]) -> ExpandedQuery:
    """Words of ``query`` plus synonyms from the config table (plural/-ing forms match too)."""
    all_words = list(dict.fromkeys(query_words(query)))
    words = [w for w in all_words if w not in QUERY_STOP_WORDS] or all_words
    groups: list[list[str]] = []
    weights: dict[str, float] = {word: 1.0 for word in words}
    for word in words:
        group = [word]
        key = _synonym_key(word, synonyms)
        extra = synonyms.get(key) if key else None
        if isinstance(extra, list):
            for synonym in extra:
                synonym = str(synonym).lower().strip()
                if synonym and synonym not in group:
                    group.append(synonym)
                    weights.setdefault(synonym, SYNONYM_WEIGHT)
        groups.append(group)
    return ExpandedQuery(words=words, groups=groups, terms=list(weights.items()))
