"""Workspace init and scanning, the store's duplicate-id handling, and link resolution."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import shared_data, write_files
from ctxos.services.config import load_config
from ctxos.services.model import InvalidFile, Memory
from ctxos.services.store import MemoryStore
from ctxos.services.workspace import init_workspace, iter_memory_paths, load_memory, scan_workspace, state_dir


def scan(root: Path) -> MemoryStore:
    store = MemoryStore.from_items(scan_workspace(root, load_config(root)))
    return store


def test_init_is_idempotent_and_never_overwrites(tmp_path):
    root = tmp_path / "ws"
    first = init_workspace(root)
    assert first.seeded_examples and "_config.yaml" in first.created and ".gitignore" in first.created
    for folder in ("inbox", "sources", "01-context", "08-rules", "09-scratch"):
        assert (root / folder).is_dir()
    (root / "_config.yaml").write_text("query: {default_budget: 999}\n")
    (root / "08-rules" / "memory-hygiene.md").unlink()
    second = init_workspace(root)
    assert second.created == [] and not second.seeded_examples  # not a first run: no re-seed
    assert (root / "_config.yaml").read_text() == "query: {default_budget: 999}\n"
    assert load_config(root).get("query.default_budget") == 999
    store = scan(root)
    assert {m.type for m in store.list()} >= {"skill", "decision", "project", "task"}
    assert store.invalid_files() == []


def test_examples_cover_required_types(tmp_path):
    root = tmp_path / "ws"
    init_workspace(root)
    types = {m.type for m in scan(root).list()}
    assert {"rule", "skill", "decision", "project", "task"} <= types


def test_scan_skips_non_memory_places(make_workspace):
    root = make_workspace(
        {
            "04-skills/a.md": "# A\n\ntext",
            "inbox/new.md": "staged",
            "sources/ref.md": "read-only",
            "_archive/04-skills/old.md": "old",
            ".git/x.md": "git",
            "claude.md": "generated",
            "AGENTS.md": "generated",
            "04-skills/.hidden.md": "hidden",
            "04-skills/notes.txt": "not markdown",
            "Home.md": "# Home\n\nroot note",
        }
    )
    assert sorted(iter_memory_paths(root)) == ["04-skills/a.md", "Home.md", "sources/ref.md"]  # sources: served


def test_symlink_escaping_workspace_is_invalid(make_workspace, tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("# secret\n\ntext")
    root = make_workspace({"04-skills/ok.md": "# ok\n\nfine"})
    os.symlink(outside, root / "04-skills" / "leak.md")
    os.symlink(root / "04-skills" / "ok.md", root / "04-skills" / "inside.md")
    store = scan(root)
    reasons = {f.rel_path: f.reason for f in store.invalid_files()}
    assert "symlink points outside the workspace" in reasons["04-skills/leak.md"]
    assert "04-skills/inside.md" not in reasons  # inside link: a (duplicate-id-free) memory
    assert store.get("inside") is not None


def test_duplicate_ids_name_both_files_and_promote_on_removal(make_workspace):
    root = make_workspace(
        {
            "04-skills/a.md": "---\nid: same\n---\nfirst",
            "06-decisions/b.md": "---\nid: same\n---\nsecond",
        }
    )
    store = scan(root)
    assert store.get("same").rel_path == "04-skills/a.md"
    [dup] = store.invalid_files()
    assert dup.rel_path == "06-decisions/b.md"
    assert "duplicate id 'same'" in dup.reason and "04-skills/a.md" in dup.reason
    changed = store.remove_path("04-skills/a.md")
    assert changed == ["same"]
    assert store.get("same").rel_path == "06-decisions/b.md" and store.invalid_files() == []


def test_store_put_replaces_and_id_change(make_workspace):
    root = make_workspace({"04-skills/a.md": "---\nid: one\n---\ntext"})
    config = load_config(root)
    store = scan(root)
    (root / "04-skills/a.md").write_text("---\nid: two\n---\ntext")
    store.put(load_memory(root, "04-skills/a.md", config))
    assert store.get("one") is None and store.get("two").rel_path == "04-skills/a.md"
    assert len(store) == 1
    store.put_invalid(InvalidFile("04-skills/a.md", "broken"))
    assert len(store) == 0 and store.invalid_files()[0].reason == "broken"


def test_resolve_link_loose_forms(make_workspace):
    root = make_workspace(
        {
            "05-resources/Getting Started.md": "# Getting started\n\ntext",
            "05-resources/api.design.md": "# API design\n\ntext",
        }
    )
    store = scan(root)
    assert store.resolve_link("Getting Started") == "Getting Started"
    assert store.resolve_link("getting-started") == "Getting Started"
    assert store.resolve_link("API Design") == "api.design"  # by title
    assert store.resolve_link("alias|api.design") == "api.design"  # dendron alias first
    assert store.resolve_link("nowhere") is None


def test_state_dir_for_read_only_workspace(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        path = state_dir(ro)  # also as root: the missing write bit marks it read-only
        assert not path.is_relative_to(ro) and path.is_relative_to(tmp_path / "xdg-cache")
    finally:
        ro.chmod(0o755)
    monkeypatch.setenv("CTXOS_STATE_DIR", str(tmp_path / "custom"))
    assert state_dir(ro) == tmp_path / "custom"


def test_obsidian_vault_every_file_served_or_explained():
    vault = shared_data("obsidian-help")
    paths = list(iter_memory_paths(vault))
    store = scan(vault)
    assert len(paths) == len(store) + len(store.invalid_files())
    assert len(store) > 150
    for item in store.invalid_files():
        assert item.reason


def test_cli_init_doctor_list(tmp_path):
    root = tmp_path / "cli-ws"
    ctxos = [sys.executable, "-m", "ctxos.client"]
    out = subprocess.run([*ctxos, "init", str(root)], capture_output=True, text=True, check=True)
    assert "created 08-rules/memory-hygiene.md" in out.stdout
    write_files(root, {"04-skills/bad.md": "---\nimportance: 3\n---\nx"})
    doctor = subprocess.run([*ctxos, "-w", str(root), "doctor"], capture_output=True, text=True, check=True)
    assert "04-skills/bad.md: importance 3 is outside 0.0-1.0" in doctor.stdout
    listed = subprocess.run(
        [*ctxos, "-w", str(root), "list", "--type", "rule", "--json"], capture_output=True, text=True, check=True
    )
    assert '"id": "memory-hygiene"' in listed.stdout
    missing = subprocess.run([*ctxos, "-w", str(tmp_path / "nope"), "doctor"], capture_output=True, text=True)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    bad = subprocess.run([*ctxos, "-w", str(root), "list", "--type", "widget"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_symlink_into_sources_is_not_served_twice(make_workspace):
    root = make_workspace({"sources/ref.md": "# Ref\n\nread-only reference"})
    os.symlink(root / "sources" / "ref.md", root / "05-resources" / "ref-link.md")
    store = scan(root)
    assert store.get("ref-link") is None and store.get("ref").is_source
    assert "symlink points into sources/ (sources/ref.md)" in store.invalid_files()[0].reason
