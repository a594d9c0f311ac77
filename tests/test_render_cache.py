"""Rendered blocks kept between queries (services/render_cache.py) and the answer counted from them."""

from __future__ import annotations

from pathlib import Path

from ctxos.services.model import Memory
from ctxos.services.render import SECTION_CATALOG, SECTION_MEMORIES, SECTION_RULES, Packer, assemble, finalize
from ctxos.services.render_cache import CATALOG, BlockCache
from ctxos.services.tokens import HeuristicCounter, join_count


def _memory(mid: str, l1: str, l2: str = "", checksum: str = "c1") -> Memory:
    return Memory(
        id=mid,
        type="resource",
        rel_path=f"{mid}.md",
        path=Path(mid),
        l0=f"{mid} summary.",
        l1=l1,
        l2=l2,
        checksum=checksum,
    )


def test_blocks_are_cached_per_checksum_and_tier_and_bounded():
    counter = HeuristicCounter()
    cache = BlockCache(max_bytes=6_000)
    memory = _memory("alpha", "First paragraph (about alpha).", "More text.")
    first = cache.block(memory, "L1", counter)
    assert first.text == "### alpha (resource, L1)\nFirst paragraph (about alpha)."
    assert first.costs is not None and join_count([(first.costs, 0)]) == counter.count(first.text)
    assert cache.block(memory, "L1", counter) is first and cache.hits == 1
    assert cache.block(memory, "L2", counter).text.endswith("More text.")
    assert cache.block(memory, CATALOG, counter).text == "- alpha (resource): alpha summary."
    edited = _memory("alpha", "Edited paragraph.", checksum="c2")  # a new version: a new key, never the old text
    assert cache.block(edited, "L1", counter).text.endswith("Edited paragraph.")
    for i in range(200):
        cache.block(_memory(f"m{i}", "word " * 40), "L1", counter)
    assert cache.size_bytes <= 6_000 and 1 <= len(cache) < 200


def test_finalize_counts_the_answer_from_piece_costs_exactly():
    """With cached piece costs the whole answer is not re-tokenized, and its count is what count() says."""
    counter = HeuristicCounter()
    cache = BlockCache()
    memories = [
        _memory(f"m{i}", f"Paragraph {i}: retry with backoff_{i}", "Details `x`." if i % 2 else "") for i in range(30)
    ]
    for budget in (40, 120, 400, 4000):
        packer = Packer(counter, budget)
        for memory in memories[:3]:
            block = cache.block(memory, "L1", counter)
            packer.add(SECTION_RULES, block.text, costs=block.costs, priority=2.0)
        for memory in memories[3:20]:
            block = cache.block(memory, "L2", counter)
            packer.add(SECTION_MEMORIES, block.text, costs=block.costs, priority=1.0)
        for memory in memories[20:]:
            block = cache.block(memory, CATALOG, counter)
            packer.add(SECTION_CATALOG, block.text, costs=block.costs)
        packer.add(SECTION_CATALOG, "- ... and 12 more memories not listed")  # no costs: computed in finalize
        text, tokens, kept = finalize(packer.parts, counter, budget)
        assert text == assemble(kept)
        assert tokens == counter.count(text) <= budget
