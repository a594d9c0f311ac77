"""The write gate in process (services/write_gate.py): the engine's own seams, real files in tmp dirs.

The daemon-level guarantees are in test_data_safety.py / test_chaos.py; these pin the gate's
contract for the modules that call it (the after_write hook, generated files, rollover, encoders).
"""

from __future__ import annotations

import json

import pytest
from ctxos.daemon.rpc import encode_message
from ctxos.services import write_gate
from ctxos.services.engine import Engine
from ctxos.services.writes import WriteConflict, WriteRefused, write_lock


@pytest.fixture
def engine(make_workspace):
    root = make_workspace()
    (root / "_config.yaml").write_text("limits:\n  max_file_bytes: 4096\n", encoding="utf-8")
    eng = Engine(root)
    eng.load()
    yield eng
    eng.close()


def test_after_write_runs_once_per_final_write_and_never_for_a_refusal(engine):
    seen: list[str] = []
    hook = lambda root, rel: seen.append(rel)  # noqa: E731
    write_gate.after_write.append(hook)
    try:
        engine.save_memory(type="project", id="a", l0="A", content="First.")
        with pytest.raises(WriteRefused):
            engine.save_memory(type="project", id="a", l0="A", content="é" * 3000, expected_version=1)
        engine.save_memory(type="project", id="a", l0="A", content="Second.", expected_version=1)
    finally:
        write_gate.after_write.remove(hook)
    assert seen == ["03-projects/a.md", "03-projects/a.md"]


def test_after_write_sees_both_paths_of_an_archive_move(engine):
    from ctxos.services.writes import archive_memory

    engine.save_memory(type="project", id="mv", l0="Move", content="Moved.")
    seen: list[str] = []
    hook = lambda root, rel: seen.append(rel)  # noqa: E731
    write_gate.after_write.append(hook)
    try:
        archive_memory(engine.root, engine.store, "mv")
    finally:
        write_gate.after_write.remove(hook)
    assert seen == ["03-projects/mv.md", "_archive/03-projects/mv.md"]


def test_a_failing_history_hook_does_not_turn_a_write_into_an_error(engine):
    def broken(root, rel):
        raise RuntimeError("history backend down")

    write_gate.after_write.append(broken)
    try:
        memory = engine.save_memory(type="project", id="b", l0="B", content="Kept.")
    finally:
        write_gate.after_write.remove(broken)
    assert memory.version == 1 and (engine.root / "03-projects/b.md").exists()


def test_gate_refuses_a_stale_base_even_inside_the_lock(engine):
    engine.save_memory(type="project", id="c", l0="C", content="One.")
    path = engine.root / "03-projects/c.md"
    old = write_gate.disk_checksum(path)
    path.write_text(path.read_text() + "person\n", encoding="utf-8")
    before = path.read_bytes()
    with write_lock(engine.root), pytest.raises(WriteConflict):
        write_gate.commit_memory(
            engine.root, engine.config, "03-projects/c.md", "---\nid: c\nl0: C\n---\nagent\n", expected_checksum=old
        )
    assert path.read_bytes() == before


def test_generated_files_are_atomic_without_a_memory_parse(tmp_path):
    target = tmp_path / "AGENTS.md"
    write_gate.commit_generated(target, "no frontmatter here\n")
    assert target.read_text() == "no frontmatter here\n"
    assert not list(tmp_path.glob(".*.tmp"))


def test_daily_log_rolls_over_when_the_day_would_pass_the_cap(engine):
    paths = {engine.log_session(f"event {n}", "d" * 900) for n in range(8)}
    assert len(paths) >= 2 and any(p.endswith("-2.md") for p in paths)
    assert not engine.invalid_files()
    for rel in paths:
        assert engine.store.get_by_path(rel) is not None


def test_json_replies_never_fail_on_a_non_utf8_name():
    name = b"bad-\xff.md".decode("utf-8", "surrogateescape")
    line = encode_message({"path": name})
    assert json.loads(line)["path"] == name


def test_orphan_temp_cleanup_keeps_other_hidden_files(tmp_path):
    (tmp_path / "03-projects").mkdir()
    orphan = tmp_path / "03-projects/.x.md.abc123xy.tmp"
    orphan.write_text("half")
    other = tmp_path / "03-projects/.x.md.swp"
    other.write_text("editor")
    assert write_gate.remove_orphan_temps(tmp_path) == ["03-projects/.x.md.abc123xy.tmp"]
    assert other.exists() and not orphan.exists()


@pytest.mark.parametrize("when", ["before the rename", "after the rename"])
def test_an_editor_writing_into_the_old_file_during_a_save_keeps_its_text(engine, monkeypatch, when):
    """A person's editor without our lock opened the file before the gate's rename and writes into
    it in the window (right before the rename, or into the replaced inode right after it).

    The window is reached deterministically by wrapping the gate's rename step; the person's
    write itself is a real append to the real file through a handle opened before the save.
    """
    engine.save_memory(type="project", id="late", l0="Late", content="Start.")
    path = engine.root / "03-projects/late.md"
    current = engine.get_memory("late")
    person = open(path, "a", encoding="utf-8")  # opened before the save: it holds the old inode
    original = write_gate.rename_temp

    def rename_with_a_late_edit(tmp_name, target, before_rename=None):
        def before():
            if before_rename is not None:
                before_rename()
            if when == "before the rename":
                person.write("person's late line\n")
                person.flush()

        original(tmp_name, target, before_rename=before)
        if when == "after the rename":
            person.write("person's late line\n")
            person.flush()

    monkeypatch.setattr(write_gate, "rename_temp", rename_with_a_late_edit)
    try:
        with pytest.raises(WriteConflict, match="edited on disk while your save was being written"):
            engine.save_memory(
                type="project",
                id="late",
                l0="Late",
                content="Agent rewrite.",
                expected_version=current.version,
                expected_checksum=current.checksum,
            )
    finally:
        person.close()
    text = path.read_text(encoding="utf-8")
    assert "person's late line" in text and "Start." in text and "Agent rewrite." not in text
