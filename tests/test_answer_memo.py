"""A repeated answer is recalled by the blocks it joins (services/answer_memo.py), and equals rendering it again."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from ctxos.services.answer_memo import AnswerMemo
from ctxos.services.engine import Engine
from ctxos.services.model import Memory
from ctxos.services.query import _Answer, execute_context_query
from ctxos.services.render import SECTION_MEMORIES, memory_block
from ctxos.services.render_cache import RenderedBlock

NOW = datetime(2026, 12, 7, 12, 0)


def _files(count: int) -> dict[str, str]:
    files = {
        f"05-resources/note-{i:02d}.md": (
            f"---\nid: note-{i:02d}\nl0: Connection pool note {i} about postgres and retries\n"
            f"tags: [database]\n---\nThe pool for service {i} holds {i + 2} connections; retry {i} times.\n"
            f"<!-- L2 -->\nLonger notes for service {i}: " + "details " * 30 + "\n"
        )
        for i in range(count)
    }
    files["08-rules/no-secrets.md"] = "---\nid: no-secrets\ntype: rule\nl0: Never write secrets\n---\nNever.\n"
    return files


def _answer(engine: Engine, query: str, budget: int) -> tuple[str, int, list[tuple[str, str, int]]]:
    result = execute_context_query(engine, query, budget, record_access=False, now=NOW)
    return result.rendered, result.tokens_used, [(s.id, s.tier, s.tokens) for s in result.selected]


def test_a_repeated_answer_is_recalled_and_equals_rendering_it_again(open_engine):
    engine = open_engine(_files(40))
    memo = engine.answer_memo
    queries = ("postgres connection pool", "retry service 7", "what holds connections")
    for budget in (60, 300, 1200, 4000):
        for query in queries:
            first = _answer(engine, query, budget)
            hits = memo.hits
            again = _answer(engine, query, budget)
            assert memo.hits == hits + 1, "the second ask of the same answer is recalled"
            engine.answer_memo = None  # the same query rendered from its blocks
            try:
                assert _answer(engine, query, budget) == again == first
            finally:
                engine.answer_memo = memo


def test_an_edited_memory_is_rendered_anew(open_engine):
    engine = open_engine(_files(12))
    before = _answer(engine, "connection pool service 3", 2000)
    assert "holds 5 connections" in before[0]
    path = engine.root / "05-resources/note-03.md"
    path.write_text(path.read_text().replace("holds 5 connections", "holds 50 connections"))
    engine.apply_changes([path])
    after = _answer(engine, "connection pool service 3", 2000)
    assert "holds 50 connections" in after[0] and "holds 5 connections" not in after[0]


class _CountingJoins:
    """A counter that charges 25 tokens for each blank line: joined blocks cost more than their parts."""

    name = "joins"

    def count(self, text: str) -> int:
        return len(text.split()) + 25 * text.count("\n\n")


class _Blocks:
    """What ``_Answer`` needs of an engine: a counter, rendered blocks and a memo."""

    def __init__(self, memo: AnswerMemo | None) -> None:
        self.counter = _CountingJoins()
        self.answer_memo = memo
        self.fetched = 0

    def rendered_block(self, memory: Memory, tier: str) -> RenderedBlock:
        self.fetched += 1
        return RenderedBlock(memory_block(memory, tier), None)


def _memory(i: int) -> Memory:
    return Memory(
        id=f"m{i}", type="resource", rel_path=f"m{i}.md", path=Path(f"m{i}.md"), l0="x", l1=f"text {i}", l2=""
    )


def _render(engine: _Blocks, budget: int) -> tuple[str, int, list[str | None]]:
    answer = _Answer(engine, budget)
    for i in range(4):
        memory = _memory(i)
        answer.place(SECTION_MEMORIES, memory, "L1", engine.counter.count(memory_block(memory, "L1")), 10.0 - i, 0)
    text, tokens, kept = answer.finish()
    return text, tokens, [p.memory_id for p in kept]


def test_an_answer_the_final_check_trimmed_is_not_kept():
    """Which part the final check drops depends on the scores, which the shape leaves out: such answers are rendered."""
    memo = AnswerMemo()
    engine = _Blocks(memo)
    trimmed = _render(engine, 40)
    assert len(trimmed[2]) < 4 and trimmed[1] <= 40
    assert _render(engine, 40) == trimmed and memo.hits == 0 and engine.fetched == 8
    whole = _render(engine, 400)  # fits as placed: kept, then recalled without fetching a block
    assert whole[2] == ["m0", "m1", "m2", "m3"]
    assert _render(engine, 400) == whole and memo.hits == 1 and engine.fetched == 12
    assert _render(_Blocks(None), 400) == whole


def test_the_memo_is_bounded_by_its_bytes():
    memo = AnswerMemo(max_bytes=20_000)
    for i in range(100):
        memo.put("counter", 4000, (("## Memories", "id", str(i), "resource", "a.md", "L1"),), "x" * 1000, 10)
    kept = [
        i for i in range(100) if memo.get("counter", 4000, (("## Memories", "id", str(i), "resource", "a.md", "L1"),))
    ]
    assert 1 <= len(kept) <= 20 and kept[-1] == 99
