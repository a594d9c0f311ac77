"""Agent and person writes: safety rules, version checks, atomic appends under concurrency."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from ctxos.services import writes
from ctxos.services.config import load_config
from ctxos.services.store import MemoryStore
from ctxos.services.workspace import load_memory, scan_workspace
from ctxos.services.writes import WriteRefused


def setup(root: Path):
    config = load_config(root)
    store = MemoryStore.from_items(scan_workspace(root, config))
    return store, config


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".ctxos" not in p.parts
    }


def test_create_then_update_with_version(make_workspace):
    root = make_workspace()
    store, config = setup(root)
    created = writes.save_memory(
        root,
        store,
        config,
        type="skill",
        content="Use `cargo clippy`.",
        l0="Rust lint checklist",
        tags=["rust"],
        l1="Lint before commit.",
    )
    assert created.created and created.id == "rust-lint-checklist" and created.version == 1
    memory = load_memory(root, created.rel_path, config)
    assert memory.type == "skill" and memory.tags == ["rust"] and memory.l1 == "Lint before commit."
    assert memory.l2 == "Use `cargo clippy`." and memory.created is not None and memory.modified is not None
    store.put(memory)
    with pytest.raises(WriteRefused, match="pass expected_version=1"):
        writes.save_memory(root, store, config, type="skill", id=created.id, content="new", l0="x")
    updated = writes.save_memory(
        root,
        store,
        config,
        type="skill",
        id=created.id,
        content="new text",
        l0="Rust lint checklist v2",
        expected_version=1,
    )
    again = load_memory(root, created.rel_path, config)
    assert updated.version == 2 and again.version == 2 and again.l1 == "new text" and again.tags == ["rust"]


def test_stale_version_and_edited_on_disk_are_refused(make_workspace):
    root = make_workspace({"04-skills/s.md": "---\nid: s\nversion: 3\n---\nbody\n"})
    store, config = setup(root)
    with pytest.raises(WriteRefused, match="you read version 2, the file is at version 3"):
        writes.save_memory(root, store, config, type="skill", id="s", content="x", l0="x", expected_version=2)
    (root / "04-skills/s.md").write_text("---\nid: s\nversion: 3\n---\nedited by a person\n")
    before = snapshot(root)
    with pytest.raises(WriteRefused, match="edited on disk since it was last read"):
        writes.save_memory(root, store, config, type="skill", id="s", content="x", l0="x", expected_version=3)
    assert snapshot(root) == before


@pytest.mark.parametrize("bad_id", ["../escape", "/abs/path", "a/b", ".hidden", "x" * 200, "a..b"])
def test_bad_ids_refused(make_workspace, bad_id):
    root = make_workspace()
    store, config = setup(root)
    before = snapshot(root)
    with pytest.raises(WriteRefused, match="is not allowed"):
        writes.save_memory(root, store, config, type="skill", id=bad_id, content="x", l0="x")
    assert snapshot(root) == before


def test_protected_sources_symlink_and_type_refusals(make_workspace, tmp_path):
    root = make_workspace(
        {"08-rules/p.md": "---\nid: p\nprotected: true\n---\nrule\n", "08-rules/q.md": "---\nid: q\n---\nrule\n"}
    )
    store, config = setup(root)
    before = snapshot(root)
    with pytest.raises(WriteRefused, match="is protected"):
        writes.save_memory(root, store, config, type="rule", id="p", content="x", l0="x", expected_version=1)
    with pytest.raises(WriteRefused, match="is a rule"):
        writes.save_memory(root, store, config, type="skill", id="q", content="x", l0="x", expected_version=1)
    with pytest.raises(WriteRefused, match="sources/ is read-only"):
        writes.safe_target(root, "sources/x.md")
    with pytest.raises(WriteRefused, match="leaves the workspace"):
        writes.safe_target(root, "../x.md")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.rmdir(root / "05-resources")
    os.symlink(outside, root / "05-resources")
    with pytest.raises(WriteRefused, match="symlink that leaves the workspace"):
        writes.save_memory(root, store, config, type="resource", content="x", l0="escape")
    assert snapshot(root) == before and list(outside.iterdir()) == []
    with pytest.raises(WriteRefused, match="unknown type"):
        writes.save_memory(root, store, config, type="widget", content="x", l0="x")


def test_invalid_existing_file_is_not_overwritten(make_workspace):
    root = make_workspace({"04-skills/broken.md": "---\ntags: [\n---\nx"})
    store, config = setup(root)
    with pytest.raises(WriteRefused, match="not a valid memory"):
        writes.save_memory(root, store, config, type="skill", id="broken", content="x", l0="x")
    assert (root / "04-skills/broken.md").read_text() == "---\ntags: [\n---\nx"


def test_concurrent_log_session_never_loses_lines(make_workspace):
    root = make_workspace()
    config = load_config(root)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(15):
                writes.log_session(root, config, f"event-{n}-{i}", details=f"detail {n} {i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    [daily] = list((root / "02-daily").glob("*.md"))
    text = daily.read_text()
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(lines) == 90
    assert {f"event-{n}-{i}" for n in range(6) for i in range(15)} == {line.split("**")[1] for line in lines}
    memory = load_memory(root, daily.relative_to(root).as_posix(), config)
    assert memory.type == "daily" and memory.id.startswith("daily-")


def test_archive_unarchive_and_set_importance(make_workspace):
    root = make_workspace({"04-skills/a.md": "---\nid: a\nimportance: 0.2\nextra: keep\n---\nbody\n"})
    store, config = setup(root)
    writes.set_importance(root, store, config, "a", 0.75)
    text = (root / "04-skills/a.md").read_text()
    assert "importance: 0.75" in text and "extra: keep" in text and "version: 2" in text
    src, dst = writes.archive_memory(root, store, "a")
    assert dst == "_archive/04-skills/a.md" and (root / dst).exists() and not (root / src).exists()
    assert writes.list_archived(root) == [dst]
    assert writes.unarchive_memory(root, dst) == (dst, src) and (root / src).exists()
    with pytest.raises(WriteRefused, match="outside 0.0-1.0"):
        writes.set_importance(root, store, config, "a", 2)


def test_expected_checksum_catches_edit_without_version_bump(make_workspace):
    root = make_workspace({"04-skills/s.md": "---\nid: s\nversion: 2\n---\nbody\n"})
    store, config = setup(root)
    read_checksum = store.get("s").checksum
    (root / "04-skills/s.md").write_text("---\nid: s\nversion: 2\n---\nperson's edit\n")
    store, config = setup(root)  # the engine re-indexed the person's edit
    with pytest.raises(writes.WriteConflict, match="checksum differs"):
        writes.save_memory(
            root,
            store,
            config,
            type="skill",
            id="s",
            content="agent",
            l0="x",
            expected_version=2,
            expected_checksum=read_checksum,
        )
    assert "person's edit" in (root / "04-skills/s.md").read_text()


def test_a_version_served_in_a_context_answer_catches_an_unversioned_edit(make_workspace):
    """``get_context`` notes the version of every memory it serves (``note_served_all``, one lock for all):
    an agent saving with that version after a person's edit that kept it is refused, and the edit stays."""
    from ctxos.services.engine import Engine
    from ctxos.services.engine.facade import AMBIGUOUS_VERSION

    root = make_workspace(
        {
            "04-skills/s.md": "---\nid: s\nversion: 2\nl0: Deploy skill\n---\nHow we deploy.\n",
            "04-skills/t.md": "---\nid: t\nl0: Rollback skill\n---\nHow we deploy a rollback.\n",
        }
    )
    engine = Engine(root)
    engine.load()
    try:
        served = engine.execute_context_query("how we deploy", 800, record_access=False).selected
        assert {"s", "t"} <= {chosen.id for chosen in served}
        engine.note_served_all(engine.store.get(chosen.id) for chosen in served)
        assert engine.served_checksum("s", 2) == engine.store.get("s").checksum
        (root / "04-skills/s.md").write_text("---\nid: s\nversion: 2\nl0: Deploy skill\n---\nperson's edit\n")
        engine.apply_changes([root / "04-skills/s.md"])
        with pytest.raises(writes.WriteConflict, match="checksum differs"):
            engine.save_memory(type="skill", id="s", content="agent", l0="x", expected_version=2)
        assert "person's edit" in (root / "04-skills/s.md").read_text()
        engine.note_served_all([engine.store.get("s")])  # the same version served with two contents
        assert engine.served_checksum("s", 2) == AMBIGUOUS_VERSION
    finally:
        engine.close()
