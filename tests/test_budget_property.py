"""Property: the rendered context never exceeds the budget, for any workspace, query and budget.

Hypothesis draws small random workspaces (rules, always_load memories, long
and short tiers, unicode, markdown symbols) and budgets from 0 up to more
than everything; the rendered text is counted again, as a whole, with the
engine's counter, and with the exact BPE counter when ``bpe-openai`` is
installed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from ctxos.services.engine import Engine
from ctxos.services.ontology import TYPE_FOLDERS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

WORDS = [
    "pool",
    "retry",
    "deploy",
    "bug",
    "error",
    "kafka",
    "login",
    "cache",
    "naïve",
    "数据",
    "`code`",
    "**bold**",
    "[[link]]",
    "```",
    "---",
    "#tag",
    "https://example.com/x?y=1",
    "3.14159",
    "a",
    "the",
    "emoji🙂",
    "x" * 40,
]

text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=120).map(" ".join)
memory = st.fixed_dictionaries(
    {
        "type": st.sampled_from(sorted(TYPE_FOLDERS)),
        "l0": text,
        "l1": text,
        "l2": st.one_of(st.just(""), text, st.lists(text, min_size=1, max_size=6).map("\n\n".join)),
        "always_load": st.booleans(),
        "importance": st.sampled_from([0.1, 0.5, 0.9]),
    }
)


def write_workspace(root: Path, memories: list[dict]) -> None:
    for i, m in enumerate(memories):
        folder = root / TYPE_FOLDERS[m["type"]]
        folder.mkdir(parents=True, exist_ok=True)
        body = m["l1"] + (f"\n<!-- L2 -->\n{m['l2']}" if m["l2"] else "")
        l0 = m["l0"].replace('"', "'").replace("\\", "/")
        (folder / f"m{i}.md").write_text(
            f'---\nid: m{i}\ntype: {m["type"]}\nl0: "{l0}"\nimportance: {m["importance"]}\n'
            f'always_load: {str(m["always_load"]).lower()}\n---\n{body}\n',
            encoding="utf-8",
        )


def check(engine: Engine, query: str, budget: int, counters) -> None:
    result = engine.execute_context_query(query, budget, record_access=False)
    assert result.tokens_used <= budget
    for counter in counters:
        assert counter.count(result.rendered) <= budget, counter.name
    assert engine.counter.count(result.rendered) == result.tokens_used
    listed = {s.id for s in result.selected}
    for s in result.selected:
        assert f"### {s.id} (" in result.rendered or f"- {s.id} (" in result.rendered
    assert len(listed) == len(result.selected)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    memories=st.lists(memory, min_size=0, max_size=10),
    queries=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join), min_size=1, max_size=3),
    budgets=st.lists(st.one_of(st.integers(0, 60), st.integers(0, 4000)), min_size=1, max_size=4),
)
def test_rendered_text_never_exceeds_budget(memories, queries, budgets):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_workspace(root, memories)
        engine = Engine(root)
        engine.load()
        try:
            for query in queries:
                for budget in budgets:
                    check(engine, query, budget, [engine.counter])
        finally:
            engine.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    memories=st.lists(memory, min_size=1, max_size=8), budgets=st.lists(st.integers(0, 2500), min_size=1, max_size=4)
)
def test_budget_holds_under_the_exact_bpe_counter_too(memories, budgets):
    pytest.importorskip("bpe_openai")
    from ctxos.services.tokens import BpeCounter

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_workspace(root, memories)
        (root / "_config.yaml").write_text("tokens:\n  counter: bpe:cl100k_base\n")
        engine = Engine(root)
        engine.load()
        try:
            assert engine.counter.name == "bpe:cl100k_base"
            for budget in budgets:
                check(engine, "pool retry deploy bug", budget, [BpeCounter("cl100k_base")])
        finally:
            engine.close()
