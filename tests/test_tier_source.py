"""Issue 16: once indexed, a memory's tiers and frontmatter dict leave the store and are read back from its file."""

from __future__ import annotations

import pickle

from ctxos.services import tier_source
from ctxos.services.analysis import index_tokens
from ctxos.services.engine import Engine
from ctxos.services.index import heading_text
from ctxos.services.model import COLD_FIELDS
from ctxos.services.workspace import load_memory
from daemon_helpers import memory_text

LONG_BODY = (
    "# Deploy checklist\n\nRun the release script from a clean tree.\n\n<!-- L2 -->\n"
    "Then tag the commit, push the tag and watch the pipeline until the canary is green."
)


def _engine(root) -> Engine:
    engine = Engine(root)
    engine.load()
    return engine


def test_loaded_memories_hold_no_text_and_read_it_back_as_parsed(make_workspace) -> None:
    root = make_workspace(
        {
            "05-resources/deploy.md": memory_text("deploy", LONG_BODY, title="Release steps", owner="Dana"),
            "05-resources/plain.md": memory_text("plain", "One short paragraph."),
        }
    )
    engine = _engine(root)
    try:
        for memory_id in ("deploy", "plain"):
            served = engine.get_memory(memory_id)
            assert served is not None and served.released
            assert not set(COLD_FIELDS) & set(served.__getstate__()), "the cold fields left the object (unset slots)"
            parsed = load_memory(root, served.rel_path, engine.config)
            assert (served.l1, served.l2, served.metadata) == (parsed.l1, parsed.l2, parsed.metadata)
            assert served.has_l2 == bool(parsed.l2.strip())
            assert served.display_title == parsed.display_title
            assert served.explicit_id and served.frontmatter_title == parsed.frontmatter_title
        deploy = engine.get_memory("deploy")
        assert deploy.metadata["owner"] == "Dana" and deploy.display_title == "Release steps"
        assert "watch the pipeline" in deploy.tier_text("L2") and "watch the pipeline" not in deploy.tier_text("L1")
        # A query renders the text read back from the file.
        result = engine.execute_context_query("release script canary pipeline", budget_tokens=2000)
        assert "deploy" in [s.id for s in result.selected] and "clean tree" in result.rendered
    finally:
        engine.close()


def test_a_released_memory_pickles_and_reads_its_file_after_unpickling(make_workspace) -> None:
    root = make_workspace({"05-resources/deploy.md": memory_text("deploy", LONG_BODY)})
    engine = _engine(root)
    try:
        memory = engine.get_memory("deploy")
        copy = pickle.loads(pickle.dumps(memory))
        assert copy.released and copy.l2 == memory.l2 and "canary" in copy.l2
    finally:
        engine.close()


def test_a_changed_or_vanished_file_serves_what_is_on_disk(make_workspace) -> None:
    root = make_workspace({"05-resources/deploy.md": memory_text("deploy", LONG_BODY)})
    engine = _engine(root)
    try:
        memory = engine.get_memory("deploy")
        tier_source.clear_cache()
        path = root / "05-resources/deploy.md"
        path.write_text(memory_text("deploy", "# Deploy checklist\n\nRewritten by hand before the watcher saw it."))
        assert "Rewritten by hand" in memory.l1  # what the person wrote, not a stale copy
        tier_source.clear_cache()
        path.unlink()
        assert (memory.l1, memory.l2, memory.metadata) == ("", "", {})
    finally:
        engine.close()


def test_the_read_back_cache_is_bounded(make_workspace, monkeypatch) -> None:
    root = make_workspace({f"05-resources/n{i}.md": memory_text(f"n{i}", f"Note {i}. " * 50) for i in range(40)})
    engine = _engine(root)
    monkeypatch.setattr(tier_source, "CACHE_BYTES", 5_000)
    tier_source.clear_cache()
    try:
        for memory in engine.list_memories():
            assert memory.l1.startswith(f"Note {memory.id[1:]}.")
        assert 1 <= len(tier_source._cache) < 40 and tier_source._cache_size <= 5_000 + 1_000
    finally:
        engine.close()


def test_a_bulk_read_gives_the_whole_text_and_leaves_the_render_cache_alone(make_workspace) -> None:
    root = make_workspace({"05-resources/deploy.md": memory_text("deploy", LONG_BODY, l0="Deploy checklist")})
    engine = _engine(root)
    try:
        memory = engine.get_memory("deploy")
        tier_source.clear_cache()
        text = tier_source.full_text(memory)
        assert text.startswith("Deploy checklist\n") and "clean tree" in text and "canary is green" in text
        assert len(tier_source._cache) == 0  # a governance pass over every file does not evict rendered blocks
    finally:
        engine.close()


def test_released_memories_share_their_root_and_empty_lists(make_workspace) -> None:
    """At 100,000 memories an absolute Path per memory (~35 MiB) and ~360,000 empty link lists
    (~19 MiB) were the largest per-memory objects: a released memory joins its path on demand
    and shares one empty list, which refuses changes (every memory holds the same one)."""
    root = make_workspace(
        {
            "05-resources/deploy.md": memory_text("deploy", LONG_BODY),
            "05-resources/plain.md": memory_text("plain", "One short paragraph, no tags, no links."),
        }
    )
    for attempt in ("cold", "warm"):  # a full parse, then the parse cache's read-back
        engine = _engine(root)
        try:
            deploy, plain = engine.get_memory("deploy"), engine.get_memory("plain")
            state = plain.__getstate__()
            assert "path" not in state and state["_root"] is deploy.__getstate__()["_root"], attempt
            assert plain.path == root / "05-resources" / "plain.md" and plain.path.is_file()
            assert plain.requires == [] and plain.requires is deploy.optional, attempt
            try:
                plain.requires.append("x")
            except TypeError:
                pass
            else:
                raise AssertionError("the shared empty list took an item")
            assert deploy.requires == [] and pickle.loads(pickle.dumps(plain)).requires is plain.requires
        finally:
            engine.close()


def test_a_memory_being_released_reads_its_text_at_every_step(make_workspace, monkeypatch) -> None:
    """The store serves a memory while the writer releases it: a query thread reading ``l1`` or
    ``path`` at any point of ``release_text`` must get the text (the source is set before the
    fields go). Before, a read between the deletion and the source's assignment raised
    AttributeError ('no attribute l1'): seen at 100,000 memories under load."""
    from ctxos.services.model import Memory

    root = make_workspace({"05-resources/deploy.md": memory_text("deploy", LONG_BODY)})
    memory = load_memory(root, "05-resources/deploy.md", Engine(root).config)
    seen: list[tuple[str, str]] = []
    share = Memory._share_small_values

    def reading_meanwhile(self: Memory) -> None:
        seen.append((self.l1, str(self.path)))  # what a concurrent query would read at this point
        share(self)
        seen.append((self.l1, str(self.path)))

    monkeypatch.setattr(Memory, "_share_small_values", reading_meanwhile)
    assert memory.release_text(tier_source.read_cold)
    assert [l1 for l1, _ in seen] == [memory.l1, memory.l1] and "clean tree" in memory.l1
    assert {p for _, p in seen} == {str(root / "05-resources" / "deploy.md")}


def test_released_memories_share_the_values_they_repeat(make_workspace) -> None:
    """Issue 16, at 100,000 memories: tag and link texts (218,000 tags, 4,800 distinct), file sizes,
    the hot values of a memory titled by its heading, the heading's tokens as one text, and store keys
    equal to an id were each a separate object per memory. Cold (a full parse) and warm (the parse
    cache read back) alike, the repeats are one object, and every value reads as before."""
    body = "# {title}\n\nSee [[plain]] and [[deploy]] before the release; the steps are the same each time.\n" + (
        "Keep the notes of each run beside the checklist, so the next person finds them.\n" * 3
    )
    root = make_workspace(
        {
            "05-resources/alpha.md": memory_text("alpha", body.format(title="Alpha steps"), tags=["ops", "release"]),
            "05-resources/bravo.md": memory_text("bravo", body.format(title="Bravo steps"), tags=["ops", "release"]),
            "05-resources/deploy.md": memory_text("deploy", LONG_BODY, title="Release steps"),
            "05-resources/plain.md": memory_text("plain", "One short paragraph."),
        }
    )
    for attempt in ("cold", "warm"):
        engine = _engine(root)
        try:
            alpha, bravo, deploy = (engine.get_memory(i) for i in ("alpha", "bravo", "deploy"))
            assert alpha.tags == ["ops", "release"] and alpha.tags[1] is bravo.tags[1], attempt
            assert alpha.wikilinks == ["plain", "deploy"] and alpha.wikilinks[0] is bravo.wikilinks[0], attempt
            assert alpha.size == bravo.size > 256 and alpha.size is bravo.size, attempt
            assert alpha.display_title == "Alpha steps" and bravo.display_title == "Bravo steps", attempt
            assert alpha.__getstate__()["_hot"] is bravo.__getstate__()["_hot"], attempt  # (flags, None, ...)
            assert deploy.display_title == "Release steps" and deploy.frontmatter_title == "Release steps", attempt
            assert deploy.has_l2 and deploy.explicit_id and alpha.explicit_id and not alpha.has_l2, attempt
            tokens = engine.heading_tokens(alpha)
            analysed = index_tokens(heading_text(alpha) + "\n" + " ".join(alpha.tags))
            assert tokens == tuple(sorted(set(analysed))) and "alpha" in tokens, attempt
            assert alpha.__getstate__()["heading_tokens"] == " ".join(tokens), attempt
            stem_key = next(key for key in engine.store._by_stem if key == "alpha")
            loose_key = next(key for key in engine.store._loose if key == "alpha")
            assert stem_key is alpha.id and loose_key is alpha.id, attempt
        finally:
            engine.close()


def test_a_memory_the_engine_parses_keeps_what_queries_read_before_its_text_goes(make_workspace, monkeypatch) -> None:
    """An edit (and a warm start's changed file) is parsed by the engine, not a builder: its heading tokens and
    the token counts of its L1 block and catalog line are kept before its text is released, so no query reads
    its file back to count it."""
    from ctxos.services.render import catalog_line, memory_block
    from ctxos.services.tokens import default_counter

    root = make_workspace({f"05-resources/n{i}.md": memory_text(f"n{i}", f"Note {i} about deploys.") for i in range(6)})
    engine = _engine(root)
    edited = root / "05-resources/n2.md"
    try:
        edited.write_text(memory_text("n2", LONG_BODY, title="Release steps"))
        engine.apply_changes([edited])
        memory = engine.get_memory("n2")
        assert memory.released and memory.heading_tokens is not None
        reads: list[str] = []
        real = tier_source._read
        monkeypatch.setattr(tier_source, "_read", lambda m: reads.append(m.rel_path) or real(m))
        tier_source.clear_cache()
        assert engine.block_tokens(memory, "L1") == memory.l1_tokens >= 0  # kept: no read to count it
        assert engine.catalog_tokens(memory) == memory.catalog_tokens >= 0
        assert reads == []
        counter = default_counter()
        assert memory.l1_tokens == counter.count(memory_block(memory, "L1"))  # reads the file: the same count
        assert memory.catalog_tokens == counter.count(catalog_line(memory))
        monkeypatch.undo()
    finally:
        engine.close()
    other = root / "05-resources/n4.md"
    other.write_text(memory_text("n4", "Changed while the daemon was down."))
    warm = _engine(root)  # a warm start: n4 parsed here, the rest from the parse cache
    try:
        assert warm.parse_cache_hits == 5
        memory = warm.get_memory("n4")
        assert memory.released and memory.heading_tokens is not None and memory.l1_tokens >= 0
    finally:
        warm.close()
