"""Seed-faithful selection (issue 13): no text repeated between L1 and L2, tiers that do not let one
long memory push relevant ones to L0, the catalog of the workspace's best remaining memories, and
graph proximity measured from the best composite-scored memories."""

from __future__ import annotations

from ctxos.services.engine import Engine
from ctxos.services.memory_file import split_tiers

LONG_PARAGRAPH = " ".join(f"Billing detail {i} says the invoices table is partitioned by month." for i in range(40))


def test_long_opening_paragraph_is_not_repeated_in_l2():
    body = LONG_PARAGRAPH + "\n"  # no blank line: the old split repeated the cut inside L2
    l1, l2 = split_tiers(body)
    assert l1.endswith(" …") and l2
    assert l2 not in l1 and not l2.startswith(l1[:50])
    assert (l1[:-2] + " " + l2).split() == body.split()  # every word exactly once, in order


def _memory(mid: str, l0: str, body: str, importance: float = 0.5, tags: str = "[]") -> str:
    return f"---\nid: {mid}\nl0: {l0}\nimportance: {importance}\ntags: {tags}\n---\n{body}\n"


def test_a_long_l2_does_not_push_relevant_memories_to_l0(make_workspace):
    files = {
        "05-resources/billing-handbook.md": _memory(
            "billing-handbook",
            "Billing handbook for invoices",
            "Invoices and billing overview.\n\n" + LONG_PARAGRAPH * 2,
        )
    }
    for i in range(5):
        files[f"06-decisions/billing-{i}.md"] = _memory(
            f"billing-{i}", f"Billing decision {i} about invoices", f"We decided billing rule {i} for invoices."
        )
    root = make_workspace(files)
    engine = Engine(root)
    engine.load()
    budget = 700
    result = engine.execute_context_query("billing invoices decision", budget, record_access=False)
    tiers = {s.id: s.tier for s in result.selected}
    assert all(tiers.get(f"billing-{i}") in ("L1", "L2") for i in range(5)), tiers
    assert tiers.get("billing-handbook") in ("L1", "L0")  # its long L2 did not fit beside them
    assert result.tokens_used <= budget
    big = engine.execute_context_query("billing invoices decision", 6000, record_access=False)
    assert {s.id: s.tier for s in big.selected}["billing-handbook"] == "L2"  # room left: full text
    engine.close()


def test_catalog_lists_important_memories_beyond_the_candidates(make_workspace):
    files = {"05-resources/topic.md": _memory("topic", "Kafka consumer lag", "Consumer lag on the orders topic.")}
    for i in range(6):
        files[f"01-context/vital-{i}.md"] = _memory(
            f"vital-{i}", f"Vital fact {i}", f"Unrelated vital fact {i}.", importance=0.95
        )
    root = make_workspace(files)
    # neither importance nor embedding candidates: only the catalog can list them
    (root / "_config.yaml").write_text("query:\n  importance_k: 0\nsemantic:\n  model: lexical\n")
    engine = Engine(root)
    engine.load()
    result = engine.execute_context_query("kafka consumer lag", 1000, record_access=False)
    assert result.selected[0].id == "topic"
    listed = set(result.catalog_ids)
    assert {f"vital-{i}" for i in range(6)} <= listed
    assert result.rendered.index("## Catalog") > result.rendered.index("## Memories")
    engine.close()


def test_graph_signal_refers_to_the_best_composite_scored_memories(make_workspace):
    # "hub" matches the query words best by BM25 but has a very low importance and age, so under the
    # brainstorm row it is not among the best composite-scored memories; its neighbour must not get the
    # proximity bonus from it, while the neighbour of the composite winner does.
    files = {
        "05-resources/winner.md": _memory("winner", "Roadmap ideas for search", "Ideas for search.", importance=1.0),
        "05-resources/winner-friend.md": _memory("winner-friend", "Friend of the winner", "See [[winner]]."),
    }
    root = make_workspace(files)
    engine = Engine(root)
    engine.load()
    scored = engine.score_query("ideas for search roadmap", intent="brainstorm")
    by_id = {c.memory.id: c for c in scored.candidates}
    assert scored.candidates[0].memory.id == "winner"
    assert by_id["winner-friend"].signals["graph"] >= 0.5  # one hop from the composite winner
    assert "graph" in by_id["winner-friend"].sources
    engine.close()


def test_candidate_depth_grows_with_budget_and_query_within_bounds():
    from ctxos.services.config import Config, default_config
    from ctxos.services.intent import expand_query
    from ctxos.services.query import candidate_depth

    config = Config(default_config())
    short = expand_query("postgres pool", {})
    long = expand_query("postgres pool sizing retries timeouts billing invoices worker", {})
    assert candidate_depth(config, short, 500) == 60  # the floor
    assert candidate_depth(config, short, 4000) == 100  # one per 40 budget tokens
    assert candidate_depth(config, long, 500) > 60  # more words, more depth
    assert candidate_depth(config, short, 100_000) == 150  # the ceiling


def test_pruned_common_words_do_not_cut_recall_at_depth(make_workspace):
    # "common" is in every memory (skipped by the top-K walk as near-zero IDF); "rare" in three.
    # Asked for 20, the search must still return memories that only contain the common word.
    files = {
        f"05-resources/m{i:02d}.md": _memory(f"m{i:02d}", f"Memory {i}", f"The common word here, item {i}.")
        for i in range(60)
    }
    for i in range(3):
        files[f"05-resources/r{i}.md"] = _memory(f"r{i}", f"Rare {i}", "A rare word and the common word.")
    root = make_workspace(files)
    engine = Engine(root)
    engine.load()
    hits = engine.index.search([("rare", 1.0), ("common", 1.0)], 20)
    ids = [h.id for h in hits]
    assert len(ids) == 20 and set(ids[:3]) == {"r0", "r1", "r2"}  # rare ones first, then the rest
    engine.close()
