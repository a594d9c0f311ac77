"""The block store (services/block_store.py): builders' rendered blocks, served only when they are the memory's own."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import shared_texts
from ctxos.services import block_store
from ctxos.services.block_store import (
    CATALOG_CODE,
    FIRST_MAGIC,
    L1_CODE,
    L2_CODE,
    L2_STORED_MAX_CHARS,
    MAGIC,
    SECOND_MAGIC,
    BlockStore,
    encode_record,
    first_key_hash,
    key_hash,
    records_for,
    write_file,
)
from ctxos.services.engine import Engine
from ctxos.services.index import analyze
from ctxos.services.intent import expand_query
from ctxos.services.memory_file import split_tiers
from ctxos.services.model import Memory
from ctxos.services.query import execute_context_query
from ctxos.services.render import block_heading, catalog_line, memory_block
from ctxos.services.render_cache import CATALOG, BlockCache
from ctxos.services.signals import Candidate, KeywordOverlapScorer, build_query_terms, phrase_text
from ctxos.services.tokens import HeuristicCounter, PieceCosts, heuristic_floor
from daemon_helpers import memory_text

FP = "f" * 64


def _memory(mid: str, l1: str, checksum: str = "c1", rel_path: str | None = None) -> Memory:
    return Memory(
        id=mid,
        type="resource",
        rel_path=rel_path or f"{mid}.md",
        path=Path(mid),
        l0=f"{mid} summary (short).",
        l1=l1,
        l2="More.",
        checksum=checksum,
    )


def _store(folder: Path, memories: list[Memory]) -> tuple[BlockStore, Path]:
    records = [r for m in memories for r in records_for(m)]
    path = write_file(folder, FP, records)
    assert path is not None
    return BlockStore().with_files([path], FP), path


def test_stored_blocks_are_the_rendered_ones_with_their_costs(tmp_path):
    counter = HeuristicCounter()
    memories = [_memory(f"m{i}", f"Paragraph {i}: retry with backoff_{i} (see `x`).") for i in range(50)]
    store, _ = _store(tmp_path, memories)
    assert len(store) == 50  # one table entry per memory
    for memory in memories:
        assert memory.l1_tokens == counter.count(memory_block(memory, "L1"))  # counted as keep_counts does
        assert memory.catalog_tokens == counter.count(catalog_line(memory))
        l1, line = store.get(memory, L1_CODE), store.get(memory, CATALOG_CODE)
        assert l1 is not None and l1.text == memory_block(memory, "L1")
        assert l1.costs == counter.piece_costs(l1.text)
        assert line is not None and line.text == catalog_line(memory) and line.costs == counter.piece_costs(line.text)
    store.close()
    assert store.get(memories[0], L1_CODE) is None  # closed: a miss, never an error


def test_a_block_that_is_not_the_memorys_own_is_a_miss(tmp_path):
    memory = _memory("alpha", "First paragraph.")
    store, _ = _store(tmp_path, [memory])
    assert store.get(_memory("alpha", "Edited.", checksum="c2"), L1_CODE) is None  # the file changed
    assert store.get(_memory("beta", "First paragraph."), L1_CODE) is None  # never stored
    moved = _memory("alpha", "First paragraph.", rel_path="sources/alpha.md")  # same bytes, now a source
    assert moved.label != memory.label and store.get(moved, L1_CODE) is None
    assert store.get(moved, CATALOG_CODE) is None
    other_l0 = _memory("alpha", "First paragraph.")
    other_l0.l0 = "another summary"
    assert store.get(other_l0, CATALOG_CODE) is None and store.get(other_l0, L1_CODE) is not None
    bare = _memory("gamma", "")  # no L1 text: its block shows the summary line, checked whole
    store, _ = _store(tmp_path, [bare])
    assert (
        store.get(bare, L1_CODE).text == memory_block(bare, "L1") == "### gamma (resource, L1)\ngamma summary (short)."
    )
    bare.l0 = "summary parsed otherwise"
    assert store.get(bare, L1_CODE) is None


def test_damage_and_another_config_are_misses(tmp_path):
    memories = [_memory(f"m{i}", f"Paragraph number {i}.") for i in range(20)]
    store, path = _store(tmp_path, memories)
    raw = bytearray(path.read_bytes())
    text_at = raw.index(b"Paragraph number 3.")
    raw[text_at] ^= 0x20  # a flipped bit in one record: its CRC no longer matches
    path.write_bytes(bytes(raw))
    assert store.get(memories[3], L1_CODE) is None
    assert store.get(memories[4], L1_CODE) is not None
    assert len(BlockStore.open_folder(tmp_path, FP)) == 20  # the table is intact
    assert len(BlockStore.open_folder(tmp_path, "0" * 64)) == 0  # built under another config
    path.write_bytes(bytes(raw[:-10]))  # truncated: the trailer is gone
    assert len(BlockStore.open_folder(tmp_path, FP)) == 0
    block_store.clear_folder(tmp_path)
    assert not list(tmp_path.iterdir())


def test_the_block_cache_takes_missed_blocks_from_the_store(tmp_path):
    counter = HeuristicCounter()
    memory = _memory("alpha", "First paragraph (about alpha).")
    store, _ = _store(tmp_path, [memory])
    memory.release_text(lambda m, name: (_ for _ in ()).throw(AssertionError("file read back")))
    cache = BlockCache()
    assert cache.block(memory, "L1", counter, store).text == "### alpha (resource, L1)\nFirst paragraph (about alpha)."
    assert cache.block(memory, CATALOG, counter, store).text == "- alpha (resource): alpha summary (short)."


def _answers(engine: Engine) -> list[tuple]:
    out = []
    for query in ("topic3 note", "w17", "retry backoff", "topic11 w40"):
        for budget in (300, 2000):
            r = execute_context_query(engine, query, budget, record_access=False)
            out.append((r.rendered, r.tokens_used, [(s.id, s.tier, s.tokens) for s in r.selected]))
    return out


def test_engine_answers_are_the_same_with_the_store_damaged_or_gone(make_workspace):
    files = {
        f"05-resources/note-{i:03d}.md": memory_text(f"note-{i:03d}", f"Note {i} about topic{i % 13} and w{i}.")
        for i in range(120)
    }
    root = make_workspace(files)
    engine = Engine(root)
    engine.load()
    folder = engine.state_dir / block_store.FOLDER
    assert len(engine._block_store) == 120 and list(folder.glob("*.blk"))
    with_store = _answers(engine)
    engine.close()
    warm = Engine(root)
    warm.load()  # a warm start opens the last build's files
    assert len(warm._block_store) == 120 and _answers(warm) == with_store
    warm.close()
    for path in folder.glob("*.blk"):
        raw = bytearray(path.read_bytes())
        for at in range(200, len(raw) // 2, 97):  # records damaged here and there
            raw[at] ^= 0xFF
        path.write_bytes(bytes(raw))
    damaged = Engine(root)
    damaged.load()
    served = [damaged._block_store.get(m, L1_CODE) for m in damaged.store.memories.values()]
    assert len(damaged._block_store) == 120 and 0 < served.count(None) < len(served)
    assert _answers(damaged) == with_store
    damaged.close()
    block_store.clear_folder(folder)
    gone = Engine(root)
    gone.load()
    assert len(gone._block_store) == 0 and _answers(gone) == with_store
    gone.rebuild_index()  # a reindex writes the files again
    assert len(gone._block_store) == 120 and _answers(gone) == with_store
    gone.close()
    assert all(os.path.getsize(p) > 0 for p in folder.glob("*.blk"))


def test_phrase_texts_are_stored_and_served_only_as_the_memorys_own(tmp_path):
    memories = [_memory(f"m{i}", f"Paragraph {i}: Retry With Backoff.") for i in range(10)]
    memories[3].tags = ["Ops", "Net"]
    memories[4].l2 = "Ünïcode Straße " * 400  # records longer than one read: the rest is read after
    memories[5].l2 = "a __ b_c ___\n\n_ d"  # runs of underscores alone are not counted
    memories[6].l1, memories[6].l2 = "", ""  # no tiers: the L2 text is the summary line
    store, _ = _store(tmp_path, memories)
    for memory in memories:
        assert store.phrase_text(memory) == phrase_text(memory, memory.l1, memory.l2)
        floor = heuristic_floor(block_heading(memory, "L2")) + store.l2_text_floor(memory)
        assert floor == heuristic_floor(memory_block(memory, "L2"))
        assert store.get(memory, L1_CODE).text == memory_block(memory, "L1")  # beside it, still found
        assert store.get(memory, CATALOG_CODE).text == catalog_line(memory)
    edited = _memory("m1", "Paragraph 1: Retry With Backoff.", checksum="c2")
    assert store.phrase_text(edited) is None and store.l2_text_floor(edited) is None  # the file changed since
    retagged = _memory("m3", "Paragraph 3: Retry With Backoff.")
    retagged.tags = ["ops"]
    assert store.phrase_text(retagged) is None  # its hot fields differ from what was stored
    assert store.phrase_text(_memory("zeta", "x")) is None  # never stored


def test_a_long_memory_id_across_the_first_read_is_found(tmp_path):
    long_id = "n" * 5000  # the id of the catalog record lies past the first read
    memory = _memory(long_id, "Short paragraph.")
    store, _ = _store(tmp_path, [memory])
    assert store.get(memory, CATALOG_CODE).text == catalog_line(memory)
    assert store.phrase_text(memory) == phrase_text(memory, memory.l1, memory.l2)


def test_keyword_overlap_reads_stored_phrase_texts_instead_of_the_files(tmp_path):
    memory = _memory("alpha", "Retry backoff when the server is busy.")
    fresh = _memory("alpha", "Retry backoff when the server is busy.")
    store, _ = _store(tmp_path, [memory])
    memory.release_text(lambda m, name: (_ for _ in ()).throw(AssertionError("file read back")))
    terms = build_query_terms(expand_query("retry backoff", {}), analyze, lambda t: 1.0)
    assert terms.phrases == ["retry backoff"]
    stored, read = Candidate(memory), Candidate(fresh)
    for cand in (stored, read):
        cand.matched = frozenset(t for tokens in terms.group_tokens for t in tokens)
    with_store = KeywordOverlapScorer(store.phrase_text).score(terms, [stored])
    from_file = KeywordOverlapScorer().score(terms, [read])
    missing = KeywordOverlapScorer(store.phrase_text).score(
        build_query_terms(expand_query("backoff retry", {}), analyze, lambda t: 1.0),
        [Candidate(memory, matched=stored.matched)],
    )
    assert with_store == from_file and with_store["alpha"] > missing["alpha"]  # the phrase found, as in the file


def test_a_file_of_the_first_format_still_serves_its_blocks(tmp_path):
    """An earlier release's build (one table entry per record, no phrase texts) keeps serving until a rebuild."""
    memories = [_memory(f"m{i}", f"Paragraph {i}.") for i in range(5)]
    records = []
    for memory in memories:  # the first format's records: the L1 block and catalog line, each its own entry
        counter = HeuristicCounter()
        for code, text in ((L1_CODE, memory_block(memory, "L1")), (CATALOG_CODE, catalog_line(memory))):
            record = encode_record(memory.id, memory.checksum, code, text, counter.piece_costs(text))
            records.append((first_key_hash(memory.id, code), record))
    path = write_file(tmp_path, FP, records)
    path.write_bytes(path.read_bytes().replace(MAGIC, FIRST_MAGIC))  # header and trailer
    old = BlockStore.open_folder(tmp_path, FP)
    assert len(old) == 10
    for memory in memories:
        assert old.get(memory, L1_CODE).text == memory_block(memory, "L1")
        assert old.get(memory, CATALOG_CODE).text == catalog_line(memory)
        assert old.phrase_text(memory) is None and old.l2_text_floor(memory) is None  # read from the file
    new, _ = _store(tmp_path / "new", [_memory("n1", "New paragraph.")])
    both = old.with_files(list((tmp_path / "new").glob("*.blk")), FP)  # both formats in one store
    assert both.get(memories[2], L1_CODE) is not None and both.phrase_text(_memory("n1", "New paragraph.")) is not None
    path.write_bytes(path.read_bytes().replace(FIRST_MAGIC, b"CTXBLK9\n"))
    assert len(BlockStore.open_folder(tmp_path, FP)) == 0  # a format this release does not know


# L2 sections the joined costs must hold for besides real files: a symbol run ending L1 (it takes the
# blank line), lists, code, non-ASCII, underscores, digits glued to words, an L1 of one symbol.
ODD_TIERS = [
    ("See `x`:", "- one\n- two"),
    ("Ends with a URL https://example.org/a_b?c=1", "```py\nx = 1\n```"),
    ("Ünïcode Straße — naïve café.", "日本語のテキスト and English."),
    ("___", "_ a __ b_c"),
    ("v2.0.1 released", "2024-01-05: 3x faster (p95 12ms)."),
    ("#", "#"),
]


def test_l2_blocks_are_stored_with_the_whole_blocks_costs_on_real_files(tmp_path):
    """The builder tokenizes only the L2 section and joins it to the L1 block's costs: on the shared corpora's
    files and odd texts, the stored costs equal the whole L2 block's, and the block is served as the memory's own."""
    counter = HeuristicCounter()
    tiers = [split_tiers(text) for text in shared_texts(per_corpus=150)] + ODD_TIERS
    memories = []
    for i, (l1, l2) in enumerate(tiers):
        memory = _memory(f"r{i}", l1)
        memory.l2 = l2
        memories.append(memory)
    too_long = _memory("long", "Short paragraph.")
    too_long.l2 = "word " * (L2_STORED_MAX_CHARS // 5 + 1)
    no_l1 = _memory("bare", "")  # the L2 block shows the L2 section alone: tokenized whole
    no_l1.l2 = "Only the details: see `x`."
    memories += [too_long, no_l1]
    store, _ = _store(tmp_path, memories)
    stored = 0
    for memory in memories:
        found = store.get(memory, L2_CODE)
        if not memory.has_l2 or len(memory.l2.strip()) > L2_STORED_MAX_CHARS:
            assert found is None  # rendered from the file when asked (too_long, and the corpora's long files)
            continue
        stored += 1
        assert found is not None and found.text == memory_block(memory, "L2")
        assert found.costs == counter.piece_costs(found.text), memory.id
        assert store.get(memory, L1_CODE).text == memory_block(memory, "L1")  # the records before it, still found
    assert stored >= len(ODD_TIERS) + 1 and store.get(too_long, L2_CODE) is None
    moved = _memory("r0", memories[0].l1, rel_path="sources/r0.md")
    moved.l2 = memories[0].l2
    edited = _memory("r0", memories[0].l1, checksum="c2")
    edited.l2 = memories[0].l2
    assert store.get(moved, L2_CODE) is None and store.get(edited, L2_CODE) is None  # not its own any more


def test_the_block_cache_counts_an_l2_block_from_the_store_without_reading_the_file(tmp_path):
    memory = _memory("alpha", "First paragraph (about alpha).")
    memory.l2 = "The details, at length: retry with backoff."
    store, _ = _store(tmp_path, [memory])
    memory.release_text(lambda m, name: (_ for _ in ()).throw(AssertionError("file read back")))
    block = BlockCache().block(memory, "L2", HeuristicCounter(), store)
    assert (
        block.text
        == "### alpha (resource, L2)\nFirst paragraph (about alpha).\n\nThe details, at length: retry with backoff."
    )
    assert block.costs == HeuristicCounter().piece_costs(block.text)


def test_coded_costs_round_trip_and_many_distinct_costs_stay_float64(tmp_path):
    few = PieceCosts((1.0, 1.17, 1.0, 0.1 + 0.2, 1.17, 2.5), True)  # 0.1 + 0.2: an inexact float kept exactly
    many = PieceCosts(tuple(1.0 + i / 7 for i in range(300)), False)  # more than a byte can index
    memories = [_memory("few", "a"), _memory("many", "b")]
    records = [
        (key_hash(m.id), encode_record(m.id, m.checksum, L2_CODE, memory_block(m, "L2"), costs, coded=True))
        for m, costs in zip(memories, (few, many))
    ]
    coded, plain = records[0][1], records[1][1]
    assert len(coded) < len(encode_record("few", "c1", L2_CODE, memory_block(memories[0], "L2"), few))
    assert len(plain) > 8 * 300  # float64 each
    path = write_file(tmp_path, FP, records)
    store = BlockStore().with_files([path], FP)
    assert store.get(memories[0], L2_CODE).costs == few
    assert store.get(memories[1], L2_CODE).costs == many


def test_a_file_of_the_second_format_still_serves_its_blocks(tmp_path):
    """An earlier release's build (float64 costs, no L2 blocks) keeps serving until a rebuild; that release does
    not open this release's files (their magic differs), so it never reads one-byte costs as float64."""
    memories = [_memory(f"m{i}", f"Paragraph {i}.") for i in range(5)]
    counter = HeuristicCounter()
    records = []
    for memory in memories:
        parts = [
            encode_record(memory.id, memory.checksum, code, text, counter.piece_costs(text))
            for code, text in ((L1_CODE, memory_block(memory, "L1")), (CATALOG_CODE, catalog_line(memory)))
        ]
        records.append((key_hash(memory.id), b"".join(parts)))
    path = write_file(tmp_path, FP, records)
    path.write_bytes(path.read_bytes().replace(MAGIC, SECOND_MAGIC))
    old = BlockStore.open_folder(tmp_path, FP)
    assert len(old) == 5
    for memory in memories:
        assert old.get(memory, L1_CODE).text == memory_block(memory, "L1")
        assert old.get(memory, CATALOG_CODE).costs == counter.piece_costs(catalog_line(memory))
        assert old.get(memory, L2_CODE) is None  # rendered from the file, as before
    new, new_path = _store(tmp_path / "new", [_memory("n1", "New paragraph.")])
    assert new_path.read_bytes().startswith(MAGIC) and MAGIC != SECOND_MAGIC
