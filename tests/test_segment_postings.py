"""A builder's segment (``index.write_segment`` through ``services/segment_postings.py``) is Whoosh's, byte for byte.

Real files parsed by the real loader, real Whoosh writers on disk: the same
memories are written once by Whoosh's own ``SegmentWriter`` (its analysis of
the token list, its sorting pool, its codec's postings writer) and once by the
builders' path, and every file inside the two compound segments is compared.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ctxos.services import index as index_module
from ctxos.services.config import load_config
from ctxos.services.engine import Engine
from ctxos.services.model import Memory
from ctxos.services.segment_postings import SortedPostings, counted_text_field, whole_value_field, write_postings
from ctxos.services.workspace import iter_memory_paths, load_memories
from daemon_helpers import memory_text
from whoosh.codec.whoosh3 import W3Codec
from whoosh.query import Term
from whoosh.writing import SegmentWriter


def _corpus(n: int) -> dict[str, str]:
    """Words shared by every file (posting lists over several 128-posting blocks), by some, and by one."""
    files = {}
    for i in range(n):
        repeated = " ".join(["common"] * (1 + i % 4))
        body = f"{repeated} shared{i % 7} rare{i} café naïve w{i % 300}. Second line with {i % 11} things."
        tags = [f"tag{i % 5}", "all"] + (["solo"] if i == 3 else [])
        files[f"05-resources/n{i:04d}.md"] = memory_text(f"n{i:04d}", body, tags=tags, l0=f"Note {i} heading")
    return files


def _memories(root: Path) -> list[Memory]:
    paths = list(iter_memory_paths(root, []))
    return [m for m in load_memories(root, paths, config=load_config(root)) if isinstance(m, Memory)]


def _whoosh_segment(folder: Path, memories: list[Memory], codec: W3Codec) -> dict[str, bytes]:
    """What Whoosh's own writer makes of the same documents (the reference)."""
    return _segment(folder, memories, codec, fast=False)


def _segment(folder: Path, memories: list[Memory], codec: W3Codec, fast: bool) -> dict[str, bytes]:
    folder.mkdir(parents=True)
    storage = index_module._storage(folder)
    ix = storage.create_index(index_module.build_schema(), indexname=index_module.INDEX_NAME)
    codec.length_stats = False
    writer = SegmentWriter(ix, limitmb=128, codec=codec)
    if fast:
        pool = writer.pool = SortedPostings()
        counted_text_field(writer.schema["text"])
        for name in ("path", "id", "type"):
            whole_value_field(writer.schema[name])
    for memory in memories:
        fields = index_module._document(memory)
        writer.add_document(**{**fields, "text": index_module.index_tokens(fields["text"])})
    if fast:
        writer.perdocwriter.close()
        write_postings(writer.fieldwriter, writer.schema, pool, codec)
        writer._close_segment()
        writer._assemble_segment()
        segment = writer.get_segment()
    else:
        segment = writer._finalize_segment()
    writer._finish()
    ix.close()
    return _parts(folder, segment)


def _parts(folder: Path, segment: object) -> dict[str, bytes]:
    """The files inside a compound segment, by extension (their names carry the random segment id)."""
    compound = segment.open_compound_file(index_module._storage(folder))  # type: ignore[attr-defined]
    return {name.split(".", 1)[1]: compound.open_file(name).read() for name in compound.list()}


def test_builder_segment_is_whooshs_byte_for_byte(make_workspace, tmp_path) -> None:
    memories = _memories(make_workspace(_corpus(700)))
    assert len(memories) == 700
    staged = index_module.write_segment(tmp_path / "builder", memories)
    assert staged is not None
    ours = _parts(staged.folder, staged.segment)
    theirs = _whoosh_segment(tmp_path / "whoosh", memories, index_module.builder_codec())
    assert sorted(ours) == sorted(theirs) == ["_stored.col", "_tags_len.col", "_text_len.col", "pst", "trm"]
    for name in theirs:
        assert ours[name] == theirs[name], name


def test_builder_blocks_are_uncompressed_and_whoosh_reads_them(make_workspace, tmp_path) -> None:
    """A builder writes its posting blocks without zlib (index.BUILDER_POSTINGS_COMPRESSION); both readers take them."""
    root = make_workspace(_corpus(300))
    memories = _memories(root)
    staged = index_module.write_segment(tmp_path / "builder", memories)
    assert staged is not None
    compressed = _segment(tmp_path / "zlib", memories, W3Codec(), fast=True)["pst"]
    assert len(_parts(staged.folder, staged.segment)["pst"]) > len(compressed)  # the blocks are stored as pickled
    engine = Engine(root)
    engine.load()  # a cold build: the segments come from write_segment
    try:
        assert {h.id for h in engine.index.search([("common", 1.0)], 400)} == {m.id for m in memories}
        assert [h.id for h in engine.index.search([("rare17", 1.0)], 5)] == ["n0017"]
        with engine.index.ix.searcher() as whoosh:  # Whoosh's own matcher over the same segments
            assert len(whoosh.search(Term("text", "common"), limit=None)) == len(memories)
    finally:
        engine.close()


def test_multi_block_terms_match_whoosh(make_workspace, tmp_path) -> None:
    """Posting lists over many blocks (of 5 here): block sizes, last-block marks and deltas as Whoosh writes them."""
    memories = _memories(make_workspace(_corpus(60)))
    ours = _segment(tmp_path / "ours", memories, W3Codec(blocklimit=5), fast=True)
    theirs = _segment(tmp_path / "theirs", memories, W3Codec(blocklimit=5), fast=False)
    for name in theirs:
        assert ours[name] == theirs[name], name


def test_write_postings_refuses_what_it_does_not_write() -> None:
    codec = W3Codec()
    codec.length_stats = True
    with pytest.raises(ValueError, match="length_stats"):
        write_postings(None, None, SortedPostings(), codec)  # type: ignore[arg-type]
    inlining = W3Codec(inlinelimit=2)
    inlining.length_stats = False
    with pytest.raises(ValueError, match="inlinelimit"):
        write_postings(None, None, SortedPostings(), inlining)  # type: ignore[arg-type]


def test_cold_build_finds_what_it_indexed(make_workspace) -> None:
    """The staged segments committed by a cold build answer searches (whole engine, in process)."""
    root = make_workspace(_corpus(300))
    engine = Engine(root)
    try:
        engine.load()
        hits = {s.id for s in engine.execute_context_query("rare123 naïve", 8000).selected}
        assert "n0123" in hits
        assert engine.index.info()["documents"] == 300
    finally:
        engine.close()
