"""Rendered blocks kept between queries (services/render_cache.py) and the answer counted from them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ctxos.services.model import Memory
from ctxos.services.render import (
    SECTION_CATALOG,
    SECTION_MEMORIES,
    SECTION_RULES,
    Packer,
    assemble,
    catalog_line,
    finalize,
    memory_block,
)
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


def test_a_memory_moved_to_another_type_folder_gets_its_new_heading():
    """Moving a file keeps its checksum but changes its type, which the block's heading and catalog line show."""
    counter = HeuristicCounter()
    cache = BlockCache()
    memory = _memory("alpha", "First paragraph.")
    assert cache.block(memory, "L1", counter).text.startswith("### alpha (resource, L1)")
    assert cache.block(memory, CATALOG, counter).text == "- alpha (resource): alpha summary."
    moved = dataclasses.replace(memory, type="project", rel_path="03-projects/alpha.md")
    assert moved.checksum == memory.checksum
    assert (
        cache.block(moved, "L1", counter).text
        == memory_block(moved, "L1")
        == "### alpha (project, L1)\nFirst paragraph."
    )
    assert cache.block(moved, CATALOG, counter).text == "- alpha (project): alpha summary."


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


def test_l1_and_catalog_counts_are_kept_per_parse_and_need_no_file_read(tmp_path):
    """A builder counts the L1 block and catalog line while the text is in the object; a released memory
    is then costed without its file (here: deleted), and the pickled parse (the parse cache) keeps them."""
    import pickle

    from ctxos.services.config import load_config
    from ctxos.services.render import catalog_line_tokens, keep_counts, l1_block_tokens
    from ctxos.services.tier_source import clear_cache, read_cold
    from ctxos.services.workspace import load_memory

    counter = HeuristicCounter()
    note = tmp_path / "05-resources" / "retry.md"
    note.parent.mkdir(parents=True)
    note.write_text("# Retries\n\nRetry with backoff (jitter, 3 tries).\n\n<!-- L2 -->\nLong detail " * 3, "utf-8")
    memory = load_memory(tmp_path, "05-resources/retry.md", load_config(tmp_path))
    assert isinstance(memory, Memory) and memory.l1_tokens == -1 and memory.catalog_tokens == -1
    l1_count, catalog_count = counter.count(memory_block(memory, "L1")), counter.count(catalog_line(memory))
    keep_counts(memory)
    assert (memory.l1_tokens, memory.catalog_tokens) == (l1_count, catalog_count)
    assert memory.release_text(read_cold) and memory.released
    copy = pickle.loads(pickle.dumps(memory))
    note.unlink()
    clear_cache()
    assert l1_block_tokens(copy) == l1_count and catalog_line_tokens(copy) == catalog_count
    assert copy.l1 == ""  # the file is gone: a read-back would have counted an empty block


def test_engine_block_tokens_use_the_kept_counts_only_for_the_default_counter(tmp_path):
    """Same numbers as counting the rendered text, under the heuristic (kept on the memory) and a BPE counter."""
    from ctxos.services.engine import Engine
    from ctxos.services.tokens import BpeCounter

    for i in range(3):
        (tmp_path / f"n{i}.md").write_text(
            f"# Note {i}\n\nA paragraph about item {i}.\n\n<!-- L2 -->\nMore {i}.\n", "utf-8"
        )
    engine = Engine(tmp_path)
    engine.load()
    try:
        memories = engine.list_memories()
        heuristic = HeuristicCounter()
        for memory in memories:
            for tier in ("L1", "L2"):
                assert engine.block_tokens(memory, tier) == heuristic.count(memory_block(memory, tier))
            assert engine.catalog_tokens(memory) == heuristic.count(catalog_line(memory))
            assert memory.l1_tokens >= 0 and memory.catalog_tokens >= 0
        engine.counter = bpe = BpeCounter()
        engine._token_cache = {}
        for memory in memories:
            assert engine.block_tokens(memory, "L1") == bpe.count(memory_block(memory, "L1"))
            assert engine.catalog_tokens(memory) == bpe.count(catalog_line(memory))
    finally:
        engine.close()


def test_engine_counts_follow_a_memory_moved_into_sources(tmp_path):
    """Counts are kept per ``render.block_key``: a moved file keeps its checksum but its heading's label changes."""
    from ctxos.services.engine import Engine
    from ctxos.services.engine.derived import FLOOR_L2
    from ctxos.services.render import block_key
    from ctxos.services.tokens import BpeCounter, heuristic_floor

    (tmp_path / "note.md").write_text("# Note\n\nA paragraph.\n\n<!-- L2 -->\nMore words here.\n", "utf-8")
    engine = Engine(tmp_path)
    engine.load()
    try:
        (memory,) = engine.list_memories()
        moved = dataclasses.replace(memory, rel_path="sources/note.md")
        assert moved.checksum == memory.checksum and moved.label != memory.label
        heuristic = HeuristicCounter()
        for tier in ("L1", "L2"):
            assert engine.block_tokens(memory, tier) == heuristic.count(memory_block(memory, tier))
        assert engine.block_tokens_at_least(moved, "L2") == heuristic_floor(memory_block(moved, "L2"))
        assert engine.block_tokens_at_least(memory, "L2") == engine.block_tokens(memory, "L2")
        assert engine.block_tokens(moved, "L2") == heuristic.count(memory_block(moved, "L2"))
        assert engine.block_tokens(moved, "L2") > engine.block_tokens(memory, "L2")
        assert block_key(moved, FLOOR_L2) in engine._token_cache
        engine.counter = bpe = BpeCounter()
        engine._token_cache = {}
        assert engine.block_tokens(memory, "L1") == bpe.count(memory_block(memory, "L1"))
        assert engine.block_tokens(moved, "L1") == bpe.count(memory_block(moved, "L1"))
    finally:
        engine.close()


def test_l2_lower_bound_rules_out_upgrades_without_changing_the_plan(tmp_path):
    """``Engine.block_tokens_at_least`` is at most the count (kept per checksum), and ``plan_tiers`` with it
    plans the same tiers as without it at every room size, counting fewer L2 blocks when they cannot fit."""
    from ctxos.services.engine import Engine
    from ctxos.services.query import plan_tiers
    from ctxos.services.signals import Candidate

    for i in range(6):
        detail = " ".join(f"detail{i}_{j} word" for j in range(15 * (i + 1)))
        (tmp_path / f"n{i}.md").write_text(f"# Note {i}\n\nShort item {i}.\n\n<!-- L2 -->\n{detail}\n", "utf-8")
    engine = Engine(tmp_path)
    engine.load()
    try:
        memories = sorted(engine.list_memories(), key=lambda m: m.id)
        ranked = [Candidate(m, score=1.0 - 0.1 * k) for k, m in enumerate(memories)]
        for memory in memories:
            floor = engine.block_tokens_at_least(memory, "L2")
            assert 0 < floor <= engine.block_tokens(memory, "L2")
            assert engine.block_tokens_at_least(memory, "L1") == engine.block_tokens(memory, "L1")

        class NoBound:  # the same engine without the bound (what a duck-typed engine gives)
            def block_tokens(self, memory, tier):
                return engine.block_tokens(memory, tier)

        counted = []
        exact = engine.block_tokens

        def counting(memory, tier):
            counted.append(tier)
            return exact(memory, tier)

        for room in range(0, 1200, 7):
            engine._token_cache = {}
            engine.block_tokens = counting
            counted.clear()
            with_bound = plan_tiers(engine, ranked, room, 3, 0.0)
            del engine.block_tokens
            assert with_bound == plan_tiers(NoBound(), ranked, room, 3, 0.0)
            if room == 70:  # every L1 fits, no L2 does: none is counted
                assert "L2" not in with_bound.values() and counted.count("L2") == 0
    finally:
        engine.close()
