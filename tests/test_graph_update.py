"""The patched link graph (services/graph_update.py) equals a full build after every change.

Real files in a real workspace, applied through the engine as the daemon's
watcher applies them (``apply_changes``): edits, renames (a moved file, a
changed ``id``), deletes and new files, with shared file stems (qualified
ids that change as files come and go), duplicate explicit ids, titles and
loose names, aliases, dangling links and shared tags. After each step the
engine's graph must equal ``build_graph`` on the same store.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from ctxos.services.engine import Engine
from ctxos.services.graph import LinkGraph, build_graph
from ctxos.services.graph_update import GraphTracker
from ctxos.services.workspace import init_workspace
from daemon_helpers import lexical_workspace

FOLDERS = ["03-projects", "03-projects/sub", "05-resources", "05-resources/Plugins", "06-decisions"]
STEMS = ["Templates", "Daily notes", "graph-view", "canvas", "sync", "Start here", "alpha", "beta"]
TAGS = ["obsidian", "plugins", "sync", "graph", "notes", "editor", "mobile"]


def _text(rng: random.Random, names: list[str]) -> str:
    front: dict[str, object] = {}
    if rng.random() < 0.3:
        front["id"] = rng.choice(["shared-id", "alpha", "hub", f"id-{rng.randrange(6)}"])
    if rng.random() < 0.3:
        front["title"] = rng.choice(STEMS + ["Hub page", "A title"])
    tags = rng.sample(TAGS, rng.randrange(0, 4))
    if tags:
        front["tags"] = tags
    if rng.random() < 0.3:
        front["related"] = rng.sample(names + ["nowhere"], 2)
    links = []
    for _ in range(rng.randrange(0, 5)):
        target = rng.choice(names + ["missing note", "Plugins/Templates", "./alpha", "hub-page", "A_title"])
        if rng.random() < 0.2:
            target += "|" + rng.choice(["shown", *names])
        links.append(f"[[{target}]]")
    heading = f"# {rng.choice(STEMS + ['Hub page'])}\n\n" if rng.random() < 0.5 else ""
    body = f"{heading}Some text {rng.random():.6f} {' '.join(links)}\n"
    lines = ["---", *(f"{k}: {json.dumps(v)}" for k, v in front.items()), "---"] if front else []
    return "\n".join([*lines, body])


def _assert_same(patched: LinkGraph, full: LinkGraph) -> None:
    assert patched.nodes == full.nodes
    assert patched.outgoing == full.outgoing
    assert patched.incoming == full.incoming
    assert patched.implicit == full.implicit
    assert patched.dangling == full.dangling
    assert patched.skipped_tags == full.skipped_tags
    assert patched.authority == full.authority


def _reference(engine: Engine) -> LinkGraph:
    min_shared = engine.config.settings.graph.implicit_edge_min_shared_tags
    return build_graph(list(engine.store.memories.values()), engine.store.resolve_link, min_shared_tags=min_shared)


@pytest.mark.parametrize("seed", [1, 2])
def test_patched_graph_equals_a_full_build_after_edits_renames_and_deletes(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    root = lexical_workspace(tmp_path / "ws")
    files: list[str] = []
    for i in range(60):
        rel = f"{rng.choice(FOLDERS)}/{rng.choice(STEMS)}{'' if rng.random() < 0.5 else f' {i}'}.md"
        if rel in files:
            continue
        files.append(rel)
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(_text(rng, STEMS), encoding="utf-8")
    engine = Engine(root)
    engine.load()
    try:
        _assert_same(engine.refresh_graph(), _reference(engine))
        kinds = {"patched": 0, "full": 0, "unchanged": 0}
        for step in range(60):
            op = rng.choice(["edit", "edit", "move", "delete", "add", "retag"])
            changed: list[str] = []
            if op == "edit" and files:
                rel = rng.choice(files)
                (root / rel).write_text(_text(rng, STEMS), encoding="utf-8")
                changed.append(rel)
            elif op == "move" and files:
                rel = rng.choice(files)
                new = f"{rng.choice(FOLDERS)}/{rng.choice(STEMS)}.md"
                if new not in files:
                    (root / new).parent.mkdir(parents=True, exist_ok=True)
                    (root / rel).rename(root / new)
                    files[files.index(rel)] = new
                    changed += [rel, new]
            elif op == "delete" and len(files) > 10:
                rel = rng.choice(files)
                (root / rel).unlink()
                files.remove(rel)
                changed.append(rel)
            elif op == "add":
                rel = f"{rng.choice(FOLDERS)}/{rng.choice(STEMS)} {100 + step}.md"
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(_text(rng, STEMS), encoding="utf-8")
                files.append(rel)
                changed.append(rel)
            elif op == "retag" and files:
                for rel in rng.sample(files, 3):  # three files in one batch
                    text = (root / rel).read_text(encoding="utf-8")
                    (root / rel).write_text(f"---\ntags: {json.dumps(rng.sample(TAGS, 3))}\n---\n{text}\n", "utf-8")
                    changed.append(rel)
            engine.apply_changes(changed)
            graph = engine.refresh_graph()
            kinds[engine._graph_tracker.last_update] += 1
            _assert_same(graph, _reference(engine))
        assert kinds["patched"] > 40, kinds  # the patch path ran (not a full build every time)
    finally:
        engine.close()


def test_a_tag_crossing_the_member_limit_rebuilds_in_full_with_the_same_result(tmp_path: Path) -> None:
    """A tag carried by more than ``max_tag_members`` memories is skipped: crossing it moves many edges."""
    root = tmp_path / "ws"
    init_workspace(root, seed_examples=False)
    folder = root / "03-projects"
    for i in range(6):
        (folder / f"note-{i}.md").write_text(f"---\ntags: [common, t{i % 2}, x]\n---\n# Note {i}\n", "utf-8")
    engine = Engine(root)
    engine.load()
    tracker = GraphTracker()
    try:
        store = engine.store

        def check(expect: str) -> None:
            graph = tracker.graph_for(store.memories, store, min_shared_tags=2, max_tag_members=6)
            assert tracker.last_update == expect
            _assert_same(graph, build_graph(list(store.memories.values()), store.resolve_link, max_tag_members=6))

        check("full")
        (folder / "note-0.md").write_text("---\ntags: [common, t1]\n---\n# Note 0\n", "utf-8")
        engine.apply_changes([folder / "note-0.md"])
        check("patched")
        (folder / "note-6.md").write_text("---\ntags: [common, x]\n---\n# Note 6\n", "utf-8")
        engine.apply_changes([folder / "note-6.md"])  # seven carry "common" now: it is skipped
        check("full")
        assert tracker.graph_for(store.memories, store, min_shared_tags=2, max_tag_members=6).skipped_tags == ["common"]
        assert tracker.last_update == "unchanged"
    finally:
        engine.close()


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_patched_dangling_links_equal_a_full_sort(seed: int) -> None:
    """``patch_dangling`` replaces only the re-resolved sources' runs; the result is the full sort's, duplicates
    and sources that gained or lost every dangling link included."""
    from ctxos.services.graph import dangling_links, patch_dangling

    rng = random.Random(seed)
    ids = [f"m{i:02d}" for i in range(40)]

    def links_of() -> tuple[tuple[str, str | None], ...]:
        return tuple(
            (rng.choice(["x", "y", "Zed", "a b", "x"]), None if rng.random() < 0.5 else rng.choice(ids))
            for _ in range(rng.randrange(0, 4))
        )

    resolved = {mid: links_of() for mid in ids if rng.random() < 0.8}
    dangling = dangling_links(resolved)
    for _ in range(30):
        sources = set(rng.sample(ids, rng.randrange(1, 6)))
        for mid in sources:
            if rng.random() < 0.2:
                resolved.pop(mid, None)  # deleted, or no links left
            else:
                resolved[mid] = links_of()
        dangling = patch_dangling(dangling, resolved, sources)
        assert dangling == dangling_links(resolved)
