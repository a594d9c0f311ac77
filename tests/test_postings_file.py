"""A builder segment's postings file (services/postings_file.py): the arrays Whoosh's blocks decode to, and a cache only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import shared_texts
from ctxos.services import postings as postings_module
from ctxos.services.engine import Engine
from ctxos.services.index import MemoryIndex, write_segment
from ctxos.services.model import Memory
from ctxos.services.postings_file import (
    _HEADER,
    ABSENT,
    SEARCHED_FIELDS,
    SUFFIX,
    PostingsFile,
    PostingsWriter,
    path_for,
)
from daemon_helpers import memory_text
from test_segment_postings import _corpus, _memories


def _staged_files(tmp_path: Path, memories: list[Memory]) -> tuple[MemoryIndex, list[Path]]:
    """An index holding one builder segment of ``memories`` (as a cold build commits it), and its postings files."""
    index = MemoryIndex(tmp_path / "index")
    index.open()
    index.add_segments([write_segment(tmp_path / "staging", memories)])
    return index, sorted(index.dir.glob(f"*{SUFFIX}"))


def _every_term(index: MemoryIndex) -> list[tuple[object, str, bytes]]:
    searcher = index._searcher()
    return [
        (reader, field, tbytes)
        for reader, _ in searcher.reader().leaf_readers()
        for field in SEARCHED_FIELDS
        for tbytes in reader.lexicon(field)
    ]


def _real_memories(tmp_path: Path) -> list[Memory]:
    """Memories of the shared corpora's texts (tldr, Obsidian, Foam, Dendron, LoCoMo turns), as a workspace loads them."""
    texts = shared_texts(40)
    if not texts:
        pytest.skip("the shared corpora are not here")
    root = tmp_path / "ws"
    for i, text in enumerate(texts):
        folder = root / "05-resources"
        folder.mkdir(parents=True, exist_ok=True)
        tags = [w for w in text.split()[:3] if w.isalnum()]
        (folder / f"m{i:04d}.md").write_text(memory_text(f"m{i:04d}", text, tags=tags), encoding="utf-8")
    return _memories(root)


@pytest.mark.parametrize("source", ["made", "shared"])
def test_every_term_reads_as_whooshs_blocks_decode(tmp_path, source):
    """For every term of the searched fields, the file gives the document numbers, weights (dtypes too) and
    document frequency ``read_term`` decodes from Whoosh's blocks (multi-block lists, repeated words, accents,
    real text); a word the segment lacks is ``ABSENT``; a field the file does not hold is left to Whoosh."""
    if source == "made":
        root = tmp_path / "ws"
        for rel, text in _corpus(400).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        memories = _memories(root)
    else:
        memories = _real_memories(tmp_path)
    index, files = _staged_files(tmp_path, memories)
    try:
        assert len(files) == 1  # moved into the index with its segment
        postings = PostingsFile.open(files[0])
        assert postings is not None and postings.fields == frozenset(SEARCHED_FIELDS)
        terms = _every_term(index)
        assert len(terms) > 300
        for reader, field, tbytes in terms:
            text = reader.schema[field].from_bytes(tbytes)  # type: ignore[attr-defined]
            whoosh = postings_module.read_term(reader, field, text)
            found = postings.get(field, tbytes)
            assert found, (field, tbytes)
            ids, weights = found
            assert ids.dtype == whoosh.ids.dtype and weights.dtype == whoosh.weights.dtype
            assert np.array_equal(ids, whoosh.ids) and np.array_equal(weights, whoosh.weights), (field, tbytes)
            assert whoosh.df == len(ids)
        assert postings.get("text", b"zzqqxxnotaword") == ABSENT
        assert postings.get("path", b"05-resources/m0001.md") is None  # not held: read from Whoosh
        postings.close()
    finally:
        index.close()


def test_a_damaged_or_missing_file_leaves_the_search_to_whooshs_postings(tmp_path):
    """Damaged items or slots, a truncated or foreign file, or none at all: the same hits, from Whoosh's blocks."""
    root = tmp_path / "ws"
    for rel, text in _corpus(300).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    memories = _memories(root)
    queries = [[("common", 1.0), ("rare17", 1.0)], [("shared3", 1.0), ("tag2", 0.5)], [("naïve", 1.0), ("w42", 1.0)]]
    index, files = _staged_files(tmp_path, memories)
    try:
        expected = [index.search(q, 50) for q in queries]
        assert all(expected)
    finally:
        index.close()
    (path,) = files
    good = path.read_bytes()
    damaged = bytearray(good)
    for at in range(200, len(good) // 2, 97):  # bytes across the items (document numbers, weights, keys)
        damaged[at] ^= 0x55
    table = _HEADER.unpack_from(good)[3]  # where the slot table starts
    zeroed = good[:table] + bytes(len(good) - table)  # zeroed slots must not read as empty ones
    flipped = bytearray(good)
    for at in range(table, len(good), 13):  # bytes across the slots' hashes, checks and offsets
        flipped[at] ^= 0x21
    for body in (bytes(damaged), zeroed, bytes(flipped), good[: len(good) // 2], b"not a postings file", None):
        if body is None:
            path.unlink()
        else:
            path.write_bytes(body)
        again = MemoryIndex(tmp_path / "index")
        again.open()
        try:
            assert [again.search(q, 50) for q in queries] == expected
        finally:
            again.close()


def test_a_cold_build_writes_one_per_segment_and_a_merge_leaves_none_behind(make_workspace):
    """Each builder segment comes with its file; the daemon's own commit of a saved file has none (its postings are
    read from Whoosh's blocks) and is found; a merge removes the merged segments' files with them."""
    root = make_workspace(_corpus(600))
    engine = Engine(root)
    try:
        engine.load()
        folder = engine.index.dir
        segments = {p.stem for p in folder.glob("*.seg")}
        assert {p.stem for p in folder.glob(f"*{SUFFIX}")} == segments
        (root / "05-resources" / "n0005.md").write_text(
            memory_text("n0005", "an edited body with quixotic words", tags=["tag0"]), encoding="utf-8"
        )
        engine.apply_changes(["05-resources/n0005.md"])
        assert len(list(folder.glob("*.seg"))) == len(segments) + 1
        assert "n0005" in {s.id for s in engine.execute_context_query("quixotic", 2000).selected}
        engine.index.rebuild(engine.list_memories())  # Whoosh's own writer: one new segment, the old ones gone
        assert not list(folder.glob(f"*{SUFFIX}"))  # Whoosh's clean-up removed them with their segments
        assert "n0005" in {s.id for s in engine.execute_context_query("quixotic", 2000).selected}
    finally:
        engine.close()


def test_a_writer_that_cannot_write_leaves_no_file(tmp_path):
    """A folder that cannot be made: ``write`` says False and leaves nothing (the segment's postings stay Whoosh's)."""
    writer = PostingsWriter()
    writer.add("text", b"word", (0, 3), (1.0, 2.0))
    (tmp_path / "a-file").write_text("not a folder", encoding="utf-8")
    assert writer.write(tmp_path / "a-file" / f"seg{SUFFIX}") is False
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]
    assert writer.write(path_for(tmp_path, "seg")) is True
    postings = PostingsFile.open(path_for(tmp_path, "seg"))
    assert postings is not None
    ids, weights = postings.get("text", b"word")  # type: ignore[misc]
    assert ids.tolist() == [0, 3] and weights.tolist() == [1.0, 2.0]
    assert postings.get("tags", b"word") == ABSENT
    postings.close()
    assert postings.get("text", b"word") is None  # closed (the index closed meanwhile): Whoosh's blocks then
