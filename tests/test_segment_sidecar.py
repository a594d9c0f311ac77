"""A segment's stored paths, ids and checksums in a sidecar file (services/segment_sidecar.py).

A warm open reads each segment's sidecar instead of one Whoosh stored-field
record per document (1.1 s of a warm restart at 100,000 memories), and
derives exactly what the stored fields give. Real Whoosh indexes on disk;
``read_stored_fields`` (the read through Whoosh) is wrapped to count its calls.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ctxos.services import index as index_module
from ctxos.services.engine import Engine
from ctxos.services.index import MAX_SEGMENTS, MemoryIndex
from ctxos.services.segment_sidecar import SIDECAR_SUFFIX, StoredDocs, read_sidecar, write_sidecar
from test_index import ids, mem


@pytest.fixture
def stored_reads(monkeypatch) -> list[int]:
    """Documents read through Whoosh's stored fields, one entry per segment read that way."""
    calls: list[int] = []
    real = index_module.read_stored_fields

    def counting(reader):
        calls.append(reader.doc_count_all())
        return real(reader)

    monkeypatch.setattr(index_module, "read_stored_fields", counting)
    return calls


def _derived(ix: MemoryIndex) -> tuple[dict[str, str], dict[str, str], dict[str, tuple[list[str], list[str]]]]:
    """What an open derives from the stored fields: the path maps and each segment's ids and paths."""
    segments = {segid: (docs.ids, docs.paths) for segid, docs in ix._segment_cache.all_docs()}
    return dict(ix._checksums), dict(ix._ids), segments


def _sidecars(folder: Path) -> set[str]:
    return {p.name[: -len(SIDECAR_SUFFIX)] for p in folder.glob(f"*{SIDECAR_SUFFIX}")}


def _three_segments(folder: Path) -> None:
    ix = MemoryIndex(folder)
    ix.open()
    ix.update([mem(f"a{i}", f"alpha words {i}") for i in range(10)])
    ix.update([mem(f"b{i}", f"beta words {i}") for i in range(10)])
    ix.update([mem("a3", "alpha rewritten"), mem("c0", "gamma words")], remove_paths=["05-resources/b5.md"])
    ix.close()


def test_a_warm_open_reads_the_sidecars_and_derives_the_same(tmp_path, stored_reads) -> None:
    folder = tmp_path / "index"
    _three_segments(folder)
    first = MemoryIndex(folder)
    assert first.open() is False
    segments = {segid for segid, _ in first._segment_cache.all_docs()}
    assert len(segments) == 3 and len(stored_reads) == 3  # no sidecars yet: Whoosh's stored fields
    assert _sidecars(folder) == segments  # ... written for the next open
    expected = _derived(first)
    hits = ids(first.search([("words", 1.0)], 50))
    first.close()

    stale = folder / f".{next(iter(segments))}{SIDECAR_SUFFIX}.x1y2"  # a write stopped before its rename
    stale.write_bytes(b'{"format": 1, "seg')
    stored_reads.clear()
    again = MemoryIndex(folder)
    assert again.open() is False
    try:
        assert not stale.exists()
        assert stored_reads == []
        assert _derived(again) == expected
        assert again.checksum_of("05-resources/b5.md") is None  # deleted in its segment: not served
        assert again.checksum_of("05-resources/a3.md") == mem("a3", "alpha rewritten").checksum
        assert ids(again.search([("words", 1.0)], 50)) == hits
        assert ids(again.search([("rewritten", 1.0)], 5)) == ["a3"]
    finally:
        again.close()


def test_a_damaged_or_foreign_sidecar_is_read_past_and_written_again(tmp_path, stored_reads) -> None:
    folder = tmp_path / "index"
    _three_segments(folder)
    first = MemoryIndex(folder)
    first.open()
    expected = _derived(first)
    first.close()
    torn, foreign, kept = sorted(_sidecars(folder))
    path_of = {segid: folder / f"{segid}{SIDECAR_SUFFIX}" for segid in (torn, foreign, kept)}
    path_of[torn].write_bytes(path_of[torn].read_bytes()[:40])  # a write cut short
    shutil.copyfile(path_of[kept], path_of[foreign])  # another segment's lists under this one's name

    stored_reads.clear()
    again = MemoryIndex(folder)
    again.open()
    try:
        assert len(stored_reads) == 2 and _derived(again) == expected
    finally:
        again.close()
    counts = {segid: len(paths) for segid, (_ids, paths) in expected[2].items()}
    for segid in (torn, foreign, kept):
        assert read_sidecar(folder, segid, counts[segid]) is not None  # usable again


def test_a_sidecar_must_name_its_segment_and_cover_every_document(tmp_path) -> None:
    docs = StoredDocs(["a", "b"], ["05-resources/a.md", "05-resources/b.md"], ["c1", "c2"])
    assert write_sidecar(tmp_path, "memories_abc", docs)
    assert read_sidecar(tmp_path, "memories_abc", 2) == docs
    assert read_sidecar(tmp_path, "memories_abc", 3) is None  # the segment holds another count
    assert read_sidecar(tmp_path, "memories_xyz", 2) is None  # none for that segment
    (tmp_path / f"memories_xyz{SIDECAR_SUFFIX}").write_bytes((tmp_path / f"memories_abc{SIDECAR_SUFFIX}").read_bytes())
    assert read_sidecar(tmp_path, "memories_xyz", 2) is None  # copied: names another segment
    # A path that is not valid UTF-8 (a file name kept as surrogates) has no JSON form: no sidecar.
    odd = StoredDocs(["a"], ["05-resources/caf\udce9.md"], ["c1"])
    assert write_sidecar(tmp_path, "memories_odd", odd) is False
    assert not list(tmp_path.glob(".memories_odd*")) and read_sidecar(tmp_path, "memories_odd", 1) is None


def test_whoosh_deletes_a_sidecar_with_its_segment(tmp_path) -> None:
    folder = tmp_path / "index"
    _three_segments(folder)
    ix = MemoryIndex(folder)
    ix.open()  # writes the three sidecars
    try:
        before = _sidecars(folder)
        for i in range(2 * MAX_SEGMENTS):  # small commits until Whoosh merges the small segments
            ix.update([mem(f"d{i}", f"delta words {i}")])
        live = {s.segment_id() for s in ix.ix._segments()}
        assert before - live, "no segment was merged away"
        assert _sidecars(folder) <= live  # the merged segments' sidecars went with them
    finally:
        ix.close()


def test_a_cold_builds_segments_have_sidecars_before_the_next_start(make_workspace, stored_reads) -> None:
    files = {f"05-resources/n{i:03d}.md": f"---\nid: n{i:03d}\n---\nNote {i} about topic{i % 5}.\n" for i in range(40)}
    root = make_workspace(files)
    engine = Engine(root)
    engine.load()  # a cold build: segments from write_segment, committed by add_segments
    folder = engine.index.dir
    segments = {s.segment_id() for s in engine.index.ix._segments()}
    engine.close()
    assert segments and _sidecars(folder) >= segments
    stored_reads.clear()
    warm = Engine(root)
    warm.load()
    try:
        assert stored_reads == []  # every segment's stored fields came from its sidecar
        assert [h.id for h in warm.index.search([("topic3", 1.0)], 20)] != []
        assert warm.index.checksum_of("05-resources/n007.md") == warm.store.get("n007").checksum
    finally:
        warm.close()
