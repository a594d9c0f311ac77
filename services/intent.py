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
from dataclasses import dataclass, field
from typing import Any, Mapping

INTENTS: tuple[str, ...] = ("default", "debug", "brainstorm", "recall")
SYNONYM_WEIGHT = 0.6          # weight of an expansion word relative to the person's words
# Tie-break when two intents have the same number of trigger hits: the more specific first.
_TIE_ORDER = ("debug", "recall", "brainstorm")
# Words that carry no topic in a request ("what did she say about ..."): dropped from
# the searched words (not from intent detection, which needs "when" and "who").
QUERY_STOP_WORDS = frozenset("""
a an the and or but if then of in on at to for from by with about into over after before
is are was were be been being am do does did done doing have has had having will would
shall should can could may might must i me my mine we us our you your he him his she her
it its they them their this that these those there here what which who whom whose when
where why how any some all also just so than too very not no yes ever
""".split())
_WORD_RE = re.compile(r"[\w][\w'+#.-]*[\w+#]|[\w]", re.UNICODE)


def query_words(text: str) -> list[str]:
    """Lowercased words of a query, in order (hyphenated and dotted words kept whole)."""
    return [w.lower() for w in _WORD_RE.findall(text)]


def _trigger_hits(query_lower: str, words: set[str], triggers: list[str]) -> int:
    hits = 0
    for trigger in triggers:
        trigger = str(trigger).lower().strip()
        if not trigger:
            continue
        if " " in trigger:
            if re.search(r"\b" + re.escape(trigger) + r"\b", query_lower):
                hits += 1
        elif trigger in words:
            hits += 1
    return hits


def detect_intent(query: str, triggers: Mapping[str, Any]) -> str:
    """The intent whose triggers occur most often in ``query``; ``default`` when none do."""
    query_lower = " ".join(query_words(query))
    words = set(query_lower.split())
    best, best_hits = "default", 0
    for intent in _TIE_ORDER + tuple(k for k in triggers if k not in _TIE_ORDER):
        values = triggers.get(intent)
        if not isinstance(values, list):
            continue
        hits = _trigger_hits(query_lower, words, values)
        if hits > best_hits:
            best, best_hits = intent, hits
    return best


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
