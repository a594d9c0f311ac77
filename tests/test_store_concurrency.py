"""The store while an edit is applied: readers on other threads never find an edited memory missing.

The daemon answers queries and ``get_memory`` on read threads while its write thread
applies file changes to the same ``MemoryStore`` (daemon/context.py). An edit used to
remove the old entry and then place the new one, and a reader in between got "no
memory" (a REST test failed with it now and then). These tests run a real reader
thread against a real writer, with the interpreter switching threads as often as it can.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ctxos.services.config import load_config
from ctxos.services.model import Memory
from ctxos.services.store import MemoryStore
from ctxos.services.workspace import load_memory, scan_workspace

FILES = {
    "07-tasks/ship.md": "---\nid: ship-release\ntitle: Ship it\n---\nv0",
    "05-resources/Notes.md": "# Notes\n\nv0",  # named by its path; shares the stem with the next
    "05-resources/other/Notes.md": "# Notes\n\nw0",
}
FILES_BY_ID = {
    "ship-release": "07-tasks/ship.md",
    "05-resources.Notes": "05-resources/Notes.md",
    "other.Notes": "05-resources/other/Notes.md",
}


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Let the interpreter hand the lock to the other thread after (almost) every instruction."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _edits(root: Path, rounds: int) -> list[list[Memory]]:
    """Parsed versions of the first two files: new bodies, and a title that changes the link names."""
    config = load_config(root)
    out = []
    for i in range(rounds):
        (root / "07-tasks/ship.md").write_text(f"---\nid: ship-release\ntitle: Ship it {i % 3}\n---\nv{i}")
        (root / "05-resources/Notes.md").write_text(f"# Notes\n\nv{i}")
        out.append([load_memory(root, rel, config) for rel in ("07-tasks/ship.md", "05-resources/Notes.md")])
    return out


def test_readers_never_see_an_edited_memory_missing(make_workspace, fast_switching) -> None:
    root = make_workspace(FILES)
    store = MemoryStore.from_items(scan_workspace(root, load_config(root)))
    ids = sorted(store.memories)
    assert ids == ["05-resources.Notes", "other.Notes", "ship-release"]
    edits = _edits(root, 20)
    stop = threading.Event()
    seen = {"reads": 0, "missing": 0}

    def reader() -> None:
        while not stop.is_set():
            for memory_id in ids:
                seen["reads"] += 1
                if store.get(memory_id) is None or store.get_by_path(FILES_BY_ID[memory_id]) is None:
                    seen["missing"] += 1

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(100):
            for edit in edits:
                for memory in edit:
                    store.put(memory)
    finally:
        stop.set()
        thread.join()
    assert seen["reads"] > 1000  # the reader really ran alongside
    assert seen["missing"] == 0
    assert sorted(store.memories) == ids


def test_an_edit_in_place_leaves_the_store_as_a_fresh_scan_would(make_workspace) -> None:
    """Ids, paths, link names (old title gone, new one found) and texts as a new scan of the files."""
    root = make_workspace(FILES)
    config = load_config(root)
    store = MemoryStore.from_items(scan_workspace(root, config))
    assert store.resolve_link("Ship it") == "ship-release"
    (root / "07-tasks/ship.md").write_text("---\nid: ship-release\ntitle: Launch plan\n---\nnew body")
    (root / "05-resources/Notes.md").write_text("# Notes\n\nnew notes")
    # Only the edited memories changed (the long way also renamed the stem's other file twice).
    assert store.put(load_memory(root, "07-tasks/ship.md", config)) == ["ship-release"]
    assert store.put(load_memory(root, "05-resources/Notes.md", config)) == ["05-resources.Notes"]
    fresh = MemoryStore.from_items(scan_workspace(root, config))
    assert {i: m.rel_path for i, m in store.memories.items()} == {i: m.rel_path for i, m in fresh.memories.items()}
    assert {p: m.id for p, m in store.by_path.items()} == {p: m.id for p, m in fresh.by_path.items()}
    for link in ("Launch plan", "launch-plan", "ship-release", "Notes", "other/Notes", "Ship it"):
        assert store.resolve_link(link, "03-projects/x.md") == fresh.resolve_link(link, "03-projects/x.md"), link
    assert store.resolve_link("Ship it") is None
    assert "new body" in store.get("ship-release").tier_text("L2")
    assert "new notes" in store.get("05-resources.Notes").tier_text("L2")
    assert store.invalid_files() == fresh.invalid_files() == []


def test_an_edit_that_changes_the_id_or_frees_a_duplicate_still_takes_the_long_way(make_workspace) -> None:
    root = make_workspace(
        {
            "04-skills/a.md": "---\nid: same\n---\nfirst",
            "06-decisions/b.md": "---\nid: same\n---\nsecond",
            "07-tasks/t.md": "---\nid: one\n---\ntext",
        }
    )
    config = load_config(root)
    store = MemoryStore.from_items(scan_workspace(root, config))
    # A duplicate waits for "same": an edit of the served file hands the id over as before.
    (root / "04-skills/a.md").write_text("---\nid: same\n---\nfirst, edited")
    store.put(load_memory(root, "04-skills/a.md", config))
    assert store.get("same").rel_path == "06-decisions/b.md"
    assert [f.rel_path for f in store.invalid_files()] == ["04-skills/a.md"]
    # A new id: the old one is gone, the new one served.
    (root / "07-tasks/t.md").write_text("---\nid: two\n---\ntext")
    assert store.put(load_memory(root, "07-tasks/t.md", config)) == ["one", "two"]
    assert store.get("one") is None and store.get("two").rel_path == "07-tasks/t.md"
