"""The write-time budget guard: will a memory, as written, load the way its author means?

``save_memory`` succeeds or is refused by the safety rules (writes.py); this module
only *advises*, after the save, when the memory will not load as intended:

- ``l1_never_fits``: its L1 block is larger than what the default budget can ever give
  one memory (the budget, minus the catalog share, minus what rules and always-load
  memories take first). At the default budget it can only ever appear as a catalog line.
- ``l1_over_share``: its L1 block takes more than ``save_guard.l1_share`` (25%) of the
  default budget. It loads at L1 only when few other memories compete; usually it is
  cut to its one-line summary.
- ``no_usable_l0``: the one-line summary is missing, too short to tell what the memory
  is about, only repeats the title, or is cut in the catalog (over 200 characters).
- ``near_duplicate``: its text nearly duplicates another memory's (word-shingle Jaccard
  at or above ``governance.consolidation.min_overlap``): update that one instead.

``l1_budget(engine)`` is the arithmetic the first two use, and ``never_at_l1(engine)`` is
what ``ctxos doctor`` lists. docs/engine.md ("The write-time budget guard") explains
the share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .analysis import analyze
from .memory_file import L0_MAX_CHARS
from .model import Memory
from .ontology import TYPE_ORDER
from .similarity import STOPWORDS, jaccard, shingles, words

DEFAULT_L1_SHARE = 0.25
MIN_L0_WORDS = 3
DUPLICATE_QUERY_WORDS = 16
DUPLICATE_CANDIDATES = 8


@dataclass
class SaveWarning:
    kind: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, **({"details": self.details} if self.details else {})}


@dataclass
class L1Budget:
    budget: int  # query.default_budget
    catalog_reserve: int  # kept for the catalog (query.catalog_budget_share)
    pinned_tokens: int  # what rules and always_load memories take first
    share: float  # save_guard.l1_share
    share_tokens: int  # share * budget

    @property
    def available(self) -> int:
        """The most one (not pinned) memory can ever get at this budget."""
        return max(0, self.budget - self.catalog_reserve - self.pinned_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "default_budget": self.budget,
            "catalog_reserve": self.catalog_reserve,
            "pinned_tokens": self.pinned_tokens,
            "available": self.available,
            "l1_share": self.share,
            "l1_share_tokens": self.share_tokens,
        }


def _pinned(engine: Any) -> list[Memory]:
    memories = [m for m in list(engine.store.memories.values()) if m.type == "rule" or m.always_load]
    return sorted(memories, key=lambda m: (TYPE_ORDER.get(m.type, 99), -m.importance, m.id))


def pinned_cost(engine: Any, budget: int, skip: str | None = None) -> int:
    """Tokens the pinned memories take, each at the largest tier that still fits (as the query places them)."""
    used = 0
    for memory in _pinned(engine):
        if memory.id == skip:
            continue
        tiers = (["L2"] if memory.l2.strip() else []) + ["L1", "L0"]
        for tier in tiers:
            cost = engine.block_tokens(memory, tier)
            if used + cost <= budget:
                used += cost
                break
    return used


def l1_budget(engine: Any, skip: str | None = None) -> L1Budget:
    settings = engine.config.settings  # checked when loaded: budget > 0, shares within 0..1
    budget = settings.query.default_budget
    catalog_share = settings.query.catalog_budget_share
    share = max(0.01, settings.save_guard.l1_share)
    return L1Budget(budget, int(budget * catalog_share), pinned_cost(engine, budget, skip), share, int(budget * share))


def _l1_warnings(engine: Any, memory: Memory) -> list[SaveWarning]:
    pinned = memory.type == "rule" or memory.always_load
    plan = l1_budget(engine, skip=memory.id)
    tokens = engine.block_tokens(memory, "L1")
    available = plan.budget - plan.pinned_tokens if pinned else plan.available
    details = {"l1_tokens": tokens, **plan.to_dict(), "available": available}
    if tokens > available:
        return [
            SaveWarning(
                "l1_never_fits",
                (
                    f"{memory.id}'s L1 summary is {tokens:,} tokens, more than the {available:,} tokens the default "
                    f"{plan.budget:,}-token budget can ever give one memory: it will never load at L1 by default, only "
                    "as its one-line catalog entry. Pass a shorter l1 (one paragraph) and keep the detail in content."
                ),
                details,
            )
        ]
    if tokens > plan.share_tokens and not pinned:
        return [
            SaveWarning(
                "l1_over_share",
                (
                    f"{memory.id}'s L1 summary is {tokens:,} tokens, over {plan.share:.0%} of the default "
                    f"{plan.budget:,}-token budget ({plan.share_tokens:,} tokens): it loads at L1 only when few other "
                    "memories compete and is usually cut to its one-line summary. Pass a shorter l1 (one paragraph)."
                ),
                details,
            )
        ]
    return []


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[\W_]+", " ", text.casefold()).split())


def _l0_warning(memory: Memory, raw_l0: str | None) -> list[SaveWarning]:
    l0 = " ".join((raw_l0 if raw_l0 is not None else memory.l0).split())
    if not l0:
        reason = "there is no one-line summary (l0)"
    elif len(l0) > L0_MAX_CHARS:
        reason = (
            f"the one-line summary is {len(l0)} characters; the catalog shows only the first "
            f"{L0_MAX_CHARS}, so the end is cut"
        )
    elif len([w for w in words(l0) if w not in STOPWORDS]) < MIN_L0_WORDS - 1 or len(words(l0)) < MIN_L0_WORDS:
        reason = f"the one-line summary {l0!r} is too short to tell an agent what the memory holds"
    elif memory.title and _norm(l0) == _norm(memory.title):
        reason = "the one-line summary only repeats the memory's title"
    else:
        return []
    return [
        SaveWarning(
            "no_usable_l0",
            (
                f"{memory.id}: {reason}. Agents choose what to read from that line in the catalog; write one "
                "sentence that says what the memory is about."
            ),
            {"l0": l0},
        )
    ]


def _text(memory: Memory) -> str:
    return "\n".join(p for p in (memory.l0, memory.l1, memory.l2) if p)


def near_duplicates(engine: Any, memory: Memory) -> list[tuple[Memory, float]]:
    """Other memories whose text nearly duplicates ``memory``'s: BM25 on its rarest words, then shingle Jaccard."""
    consolidation = engine.config.settings.governance.consolidation
    threshold, size = consolidation.min_overlap, consolidation.shingle_words
    text = _text(memory)
    candidates: dict[str, float] = {}
    for word in dict.fromkeys(w for w in words(text) if w not in STOPWORDS and len(w) > 2):
        tokens = analyze(word)
        if tokens:
            candidates[word] = max(engine.index.idf(t) for t in tokens)
    if not candidates:
        return []
    terms = [(w, 1.0) for w in sorted(candidates, key=lambda w: -candidates[w])[:DUPLICATE_QUERY_WORDS]]
    mine = shingles(text, size)
    found: list[tuple[Memory, float]] = []
    for hit in engine.index.search(terms, DUPLICATE_CANDIDATES + 1):
        other = engine.store.get(hit.id)
        if other is None or other.id == memory.id:
            continue
        overlap = jaccard(mine, shingles(_text(other), size))
        if overlap >= threshold:
            found.append((other, round(overlap, 3)))
    return sorted(found, key=lambda item: -item[1])


def _duplicate_warnings(engine: Any, memory: Memory) -> list[SaveWarning]:
    found = near_duplicates(engine, memory)
    if not found:
        return []
    other, overlap = found[0]
    return [
        SaveWarning(
            "near_duplicate",
            (
                f"{memory.id} nearly duplicates {other.id} ({overlap:.0%} of their word pairs overlap): two copies "
                f"split the loads and can drift apart. Update {other.id} instead (save_memory with id={other.id!r} and "
                f"expected_version={other.version}), then archive {memory.id}."
            ),
            {
                "duplicates": [
                    {"id": m.id, "overlap": o, "version": m.version, "path": m.rel_path} for m, o in found[:5]
                ]
            },
        )
    ]


def save_warnings(engine: Any, memory: Memory, *, raw_l0: str | None = None) -> list[SaveWarning]:
    """Everything that will keep ``memory`` (just saved) from loading as intended; empty when all is well."""
    return [*_l1_warnings(engine, memory), *_l0_warning(memory, raw_l0), *_duplicate_warnings(engine, memory)]


def never_at_l1(engine: Any) -> tuple[L1Budget, list[dict[str, Any]]]:
    """Memories whose L1 block can never fit the workspace's default budget (for ``ctxos doctor``)."""
    plan = l1_budget(engine)
    pinned_ids = {m.id for m in _pinned(engine)}
    found = []
    for memory in sorted(list(engine.store.memories.values()), key=lambda m: m.id):
        tokens = engine.block_tokens(memory, "L1")
        if memory.id in pinned_ids:
            available = (
                plan.budget - pinned_cost(engine, plan.budget, skip=memory.id)
                if tokens > plan.available
                else plan.available
            )
        else:
            available = plan.available
        if tokens > available:
            found.append({"id": memory.id, "path": memory.rel_path, "l1_tokens": tokens, "available": available})
    return plan, found
