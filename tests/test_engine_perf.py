"""The engine's performance paths keep their behaviour.

Posting cache equals a plain Whoosh search and follows commits; stale-graph
serving and ``refresh_graph`` (and the daemon's coalesced refresh); batch
``apply_changes`` with folders gone; status never reading the index TOC;
an index path that is a file. Speed itself is measured by the benchmarks.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from pathlib import Path

import pytest
from ctxos.daemon.context import DaemonContext
from ctxos.services.engine import Engine
from ctxos.services.index import MemoryIndex
from ctxos.services.model import Memory
from whoosh.query import Or

WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
    "upsilon phi chi psi omega deploy retry cache socket index graph budget"
).split()


def mem(mid: str, body: str, tags=()) -> Memory:
    rel = f"05-resources/{mid}.md"
    return Memory(
        id=mid,
        type="resource",
        rel_path=rel,
        path=Path("/ws") / rel,
        l0=f"About {mid}",
        l1=body,
        l2="",
        tags=list(tags),
        checksum=hashlib.sha256(f"{mid}|{body}|{tags}".encode()).hexdigest(),
    )


def corpus(n: int) -> list[Memory]:
    out = []
    for i in range(n):
        words = [WORDS[(i * k + k * k) % len(WORDS)] for k in range(1, 12)]
        out.append(mem(f"m{i:03d}", " ".join(words), tags=[WORDS[i % 7], WORDS[i % 5]]))
    return out


def whoosh_reference(index: MemoryIndex, terms, limit: int) -> dict[str, float]:
    """Top ``limit`` by a plain Whoosh search (selective terms), then summed scores of all terms."""
    searcher = index.ix.searcher()
    try:
        queries = index._term_queries(terms)
        results = searcher.search(Or(index._selective(searcher, queries, index._generation_of(searcher))), limit=limit)
        docs = {hit.docnum: hit["id"] for hit in results}
        scores: dict[str, float] = {}
        for _, query in queries:
            matcher = query.matcher(searcher, searcher.context())
            while matcher.is_active():
                if matcher.id() in docs:
                    mid = docs[matcher.id()]
                    scores[mid] = scores.get(mid, 0.0) + matcher.score()
                matcher.next()
        return {mid: score for mid, score in scores.items() if score > 0}
    finally:
        searcher.close()


@pytest.fixture
def index(tmp_path):
    ix = MemoryIndex(tmp_path / "index")
    ix.open()
    ix.update(corpus(120))
    yield ix
    ix.close()


QUERIES = [
    [("alpha", 1.0), ("deploy", 1.0)],
    [("retry", 1.0), ("cache", 0.5)],
    [("omega", 1.0)],
    [("socket", 1.0), ("graph", 0.7), ("budget", 1.0)],
    [("beta", 1.0)],
]


def test_cached_postings_give_the_same_hits_and_scores_as_whoosh(index):
    for terms in QUERIES:
        for _ in range(2):  # cold, then from the cache
            hits = index.search(terms, 10)
            reference = whoosh_reference(index, terms, 10)
            assert {h.id for h in hits} == set(reference)
            for hit in hits:
                assert hit.score == pytest.approx(reference[hit.id], rel=1e-9)
    restricted = index.search([("alpha", 1.0)], 5, restrict_paths=["05-resources/m007.md", "05-resources/m001.md"])
    assert {h.path for h in restricted} <= {"05-resources/m007.md", "05-resources/m001.md"}


def test_cache_follows_commits(index):
    assert [h.id for h in index.search([("zebra", 1.0)], 5)] == []
    searcher = index.ix.searcher()
    try:  # Whoosh counts a deleted document until a merge; the cache says what Whoosh says
        assert index.document_frequency("zebra") == searcher.doc_frequency("text", "zebra")
    finally:
        searcher.close()
    idf_before = index.idf("alpha")
    index.update([mem("m005", "zebra zebra stripes")])
    assert [h.id for h in index.search([("zebra", 1.0)], 5)] == ["m005"]
    # document frequencies and IDFs are cached per generation: a commit gives fresh ones
    assert index.document_frequency("zebra") == 1
    searcher = index.ix.searcher()
    try:
        assert index.idf("alpha") == pytest.approx(searcher.idf("text", "alpha"), rel=1e-12)
    finally:
        searcher.close()
    assert index.idf("alpha") != idf_before  # m005's old text had "alpha"; its new one does not
    index.remove(["05-resources/m005.md"])
    assert [h.id for h in index.search([("zebra", 1.0)], 5)] == []
    searcher = index.ix.searcher()
    try:  # Whoosh counts a deleted document until a merge; the cache says what Whoosh says
        assert index.document_frequency("zebra") == searcher.doc_frequency("text", "zebra")
    finally:
        searcher.close()
    hits = index.search(QUERIES[0], 10)
    reference = whoosh_reference(index, QUERIES[0], 10)
    assert {h.id: pytest.approx(reference[h.id], rel=1e-9) for h in hits} == {h.id: h.score for h in hits}


def test_info_uses_counts_from_the_last_commit(index):
    for toc in index.dir.glob("*.toc"):
        toc.unlink()  # what a concurrent commit may do under a reader
    info = index.info()
    assert info["documents"] == 120 and info["segments"] >= 1


def test_index_path_that_is_a_file_is_moved_aside(tmp_path):
    (tmp_path / "index").write_text("not an index")
    ix = MemoryIndex(tmp_path / "index")
    assert ix.open() is True
    assert "not a folder" in (ix.recovered or "")
    ix.update([mem("a", "alpha text")])
    assert [h.id for h in ix.search([("alpha", 1.0)], 5)] == ["a"]
    assert [p.name for p in tmp_path.glob("index.not-a-folder-*")]
    ix.close()


def test_engine_recovers_from_index_file(make_workspace):
    root = make_workspace({"05-resources/a.md": "---\nid: a\ntype: resource\nl0: Alpha things\n---\nAlpha body.\n"})
    first = Engine(root)
    first.load()
    first.close()
    index_dir = root / ".ctxos" / "index"
    shutil.rmtree(index_dir)
    index_dir.write_text("oops")
    engine = Engine(root)
    summary = engine.load()
    assert summary.index_recovered and "a" in summary.updated
    assert [s.id for s in engine.execute_context_query("alpha", 1000, record_access=False).selected][:1] == ["a"]
    engine.close()


LINKED = {
    "05-resources/hub.md": "---\nid: hub\ntype: resource\nl0: The hub\n---\nHub body.\n",
    "05-resources/leaf.md": "---\nid: leaf\ntype: resource\nl0: A leaf\n---\nLeaf body.\n",
}


def test_stale_graph_is_served_until_refresh(make_workspace):
    root = make_workspace(LINKED)
    engine = Engine(root)
    engine.load()
    engine.allow_stale_graph = True
    before = engine.graph()
    assert "leaf" not in before.outgoing
    (root / "05-resources/leaf.md").write_text(
        "---\nid: leaf\ntype: resource\nl0: A leaf\nrelated: [hub]\n---\nLeaf body.\n"
    )
    engine.apply_changes(["05-resources/leaf.md"])
    assert engine.graph_is_stale() and engine.graph(stale_ok=True) is before  # no rebuild on the query path
    engine.execute_context_query("leaf", 1000, record_access=False)  # queries work on the old graph
    assert engine.graph_is_stale()
    after = engine.refresh_graph()
    assert not engine.graph_is_stale() and engine.graph(stale_ok=True) is after
    assert after.outgoing["leaf"] == ("hub",)
    (root / "05-resources/leaf.md").write_text(
        "---\nid: leaf\ntype: resource\nl0: A leaf, renamed\nrelated: [hub]\n---\nLeaf body.\n"
    )
    engine.apply_changes(["05-resources/leaf.md"])
    current = engine.graph()  # other callers: always current
    assert current is not after and not engine.graph_is_stale()
    engine.allow_stale_graph = False  # in-process default: exact
    (root / "05-resources/leaf.md").write_text("---\nid: leaf\ntype: resource\nl0: A leaf\n---\nLeaf body.\n")
    engine.apply_changes(["05-resources/leaf.md"])
    assert "leaf" not in engine.graph().outgoing
    engine.close()


def test_daemon_context_refreshes_the_graph_after_a_change(make_workspace):
    root = make_workspace(LINKED)
    engine = Engine(root)
    engine.load()

    async def scenario() -> None:
        ctx = DaemonContext(root, engine)  # mode="daemon": serves a stale graph
        ctx.bind_loop(asyncio.get_running_loop())
        assert engine.allow_stale_graph
        engine.graph()
        (root / "05-resources/leaf.md").write_text(
            "---\nid: leaf\ntype: resource\nl0: A leaf\nrelated: [hub]\n---\nLeaf body.\n"
        )
        summary = await ctx.run_write(engine.apply_changes, ["05-resources/leaf.md"])
        assert engine.graph_is_stale()
        await ctx.notify_change(summary)
        ctx.schedule_graph_refresh()  # coalesced with the one already running
        task = ctx._graph_refresh
        assert task is not None
        await task
        assert not engine.graph_is_stale() and engine.graph().outgoing["leaf"] == ("hub",)
        ctx.shutdown_executors()

    asyncio.run(scenario())
    engine.close()
    assert not DaemonContext(root, Engine(root), mode="in-process").engine.allow_stale_graph


def test_apply_changes_batch_with_a_deleted_folder(make_workspace):
    files = {
        f"03-projects/p/n{i}.md": f"---\nid: n{i}\ntype: project\nl0: Note {i}\n---\nBody {i}.\n" for i in range(5)
    }
    files["05-resources/keep.md"] = "---\nid: keep\ntype: resource\nl0: Keep\n---\nKeep body.\n"
    root = make_workspace(files)
    engine = Engine(root)
    engine.load()
    shutil.rmtree(root / "03-projects" / "p")
    (root / "05-resources/keep.md").write_text("---\nid: keep\ntype: resource\nl0: Keep\n---\nChanged.\n")
    summary = engine.apply_changes([root / "03-projects" / "p", "05-resources/keep.md", "05-resources/never.md"])
    assert sorted(summary.removed) == [f"n{i}" for i in range(5)]
    assert summary.updated == ["keep"]
    assert not any(p.startswith("03-projects/p/") for p in engine.store.known_paths())
    assert engine.index.search([("note", 1.0)], 10) == []
    engine.close()


def test_segment_reads_survive_an_edit_and_equal_whoosh_exactly(index):
    """An edit's commit adds one small segment: the old segments' postings are not read again."""
    terms = [("alpha", 1.0), ("deploy", 1.0), ("socket", 1.0)]
    index.search(terms, 10)
    cache = index._segment_cache
    before = {key: entry for key, entry in cache._terms.items()}
    assert before and len({key[0] for key in before}) == 1
    index.update([mem("m007", "alpha alpha deploy zebra")])  # a new segment, m007 deleted in the old one
    hits = index.search(terms, 10)
    for key, entry in before.items():
        assert cache._terms[key] is entry  # kept, not re-read
    assert len({key[0] for key in cache._terms}) == 2
    reference = whoosh_reference(index, terms, 10)
    assert {h.id: h.score for h in hits} == reference  # the same floats, not just close
    edited = index.search(terms, 5, restrict_paths=["05-resources/m007.md"])
    assert [h.id for h in edited] == ["m007"] and edited[0].matched == frozenset({"alpha", "deploi"})
    for i in range(12):  # more segments than MAX_SEGMENTS: Whoosh merges, dropped segments are forgotten
        index.update([mem(f"m{i:03d}", f"deploy socket round {i}")])
        index.search(terms, 10)
    live = {seg.segid for seg in index._generation_of(index._searcher()).segments}
    assert {key[0] for key in cache._terms} <= live
    hits = index.search(terms, 10)
    assert {h.id: h.score for h in hits} == whoosh_reference(index, terms, 10)


def test_committed_builder_segments_know_their_documents(tmp_path):
    """Segments written by builders (a cold build) carry their ids and paths into the search cache."""
    from ctxos.services.index import write_segment

    memories = corpus(60)
    ix = MemoryIndex(tmp_path / "index")
    ix.open()
    staged = [write_segment(tmp_path / f"stage-{i}", memories[i * 30 : (i + 1) * 30]) for i in range(2)]
    ix.add_segments([s for s in staged if s is not None])
    known = dict(ix._segment_cache.all_docs())
    assert len(known) == 2
    searcher = ix.ix.searcher()
    try:
        for reader, _ in searcher.reader().leaf_readers():
            stored = [reader.stored_fields(d) for d in range(reader.doc_count_all())]
            docs = known[reader.segment().segment_id()]
            assert docs.ids == [f["id"] for f in stored] and docs.paths == [f["path"] for f in stored]
    finally:
        searcher.close()
    hits = ix.search(QUERIES[0], 10)
    assert {h.id: h.score for h in hits} == whoosh_reference(ix, QUERIES[0], 10)
    ix.close()
