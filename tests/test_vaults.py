"""Vaults served as they are (issue 15): repeated file stems, Obsidian link resolution, L0 lines,
router files kept out of vaults that ``ctxos init`` did not create.

The shared Obsidian, Dendron and Foam vaults (read-only, ``../shared/data``) are the tests;
one test runs a real daemon process on the Obsidian vault.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import shared_data, write_files
from ctxos.services.config import load_config
from ctxos.services.engine import Engine
from ctxos.services.links import qualified_ids
from ctxos.services.router import regenerate_router
from ctxos.services.store import MemoryStore
from ctxos.services.workspace import iter_memory_paths, load_memory, scan_workspace, state_dir
from daemon_helpers import daemon_factory  # noqa: F401  (fixture)


def scan(root: Path) -> MemoryStore:
    store = MemoryStore.from_items(scan_workspace(root, load_config(root)))
    return store


def tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


# --- ids of files that share a stem ---------------------------------------------------------


def test_qualified_ids_use_the_shortest_unique_folder_suffix():
    assert qualified_ids(["Plugins/Templates.md", "Obsidian Web Clipper/Templates.md"]) == {
        "Plugins/Templates.md": "Plugins.Templates",
        "Obsidian Web Clipper/Templates.md": "Obsidian Web Clipper.Templates",
    }
    assert qualified_ids(["a/x/T.md", "b/x/T.md", "x/T.md", "T.md"]) == {
        "a/x/T.md": "a.x.T",
        "b/x/T.md": "b.x.T",
        "x/T.md": "x.T",
        "T.md": "T",
    }
    assert qualified_ids(["only/one.md"]) == {"only/one.md": "one"}


def test_repeated_stems_are_all_served_and_renamed_as_files_come_and_go(make_workspace):
    root = make_workspace(
        {
            "Plugins/Templates.md": "Templates is a core plugin that inserts snippets.",
            "Clipper/Templates.md": "Web Clipper templates capture page metadata.",
            "Clipper/Use.md": "See [[Templates]] and [[Plugins/Templates|the plugin]].",
            "notes/explicit.md": "---\nid: dup\n---\nfirst",
            "notes/other.md": "---\nid: dup\n---\nsecond",
        },
        init=False,
    )
    config = load_config(root)
    store = scan(root)
    assert store.get("Plugins.Templates").rel_path == "Plugins/Templates.md"
    assert store.get("Clipper.Templates").rel_path == "Clipper/Templates.md"
    assert store.get("Templates") is None
    # an explicit id used twice is still a duplicate, explained
    assert [f.rel_path for f in store.invalid_files()] == ["notes/other.md"]
    assert "duplicate id 'dup'" in store.invalid_files()[0].reason
    # Obsidian's resolution: same folder first, an explicit path wins
    assert store.resolve_link("Templates", "Clipper/Use.md") == "Clipper.Templates"
    assert store.resolve_link("Plugins/Templates|the plugin", "Clipper/Use.md") == "Plugins.Templates"
    assert store.resolve_link("Templates", "elsewhere/x.md") in {"Plugins.Templates", "Clipper.Templates"}
    # one of them goes away: the other gets its bare name back
    changed = store.remove_path("Clipper/Templates.md")
    assert set(changed) == {"Clipper.Templates", "Plugins.Templates", "Templates"}
    assert store.get("Templates").rel_path == "Plugins/Templates.md" and store.get("Plugins.Templates") is None
    # it comes back: both are qualified again
    store.put(load_memory(root, "Clipper/Templates.md", config))
    assert {"Plugins.Templates", "Clipper.Templates"} <= set(store.memories) and store.get("Templates") is None


def test_obsidian_link_resolution_rules(make_workspace):
    root = make_workspace(
        {
            "Note.md": "root note",
            "A/Note.md": "note in A",
            "A/Deep/Note.md": "deep note",
            "A/Here.md": "links",
            "B/Sub/Page.md": "a page",
            "Other.md": "# Some Title\n\nother",
        },
        init=False,
    )
    store = scan(root)
    assert store.resolve_link("Note", "A/Here.md") == "A.Note"  # same folder first
    assert store.resolve_link("Note", "B/Sub/Page.md") == "Note"  # else the shortest path
    assert store.resolve_link("/Note", "A/Here.md") == "Note"  # from the vault root
    assert store.resolve_link("Deep/Note", "B/Sub/Page.md") == "Deep.Note"  # a path suffix
    assert store.resolve_link("./Deep/Note", "A/Here.md") == "Deep.Note"  # relative to the linking note
    assert store.resolve_link("../Note", "A/Deep/Note.md") == "A.Note"
    assert store.resolve_link("sub/page", None) == "Page"  # case-insensitive path
    assert store.resolve_link("some title", None) == "Other"  # loose: the title
    assert store.resolve_link("Missing", "A/Here.md") is None


def test_an_id_change_alone_reaches_the_index(make_workspace):
    root = make_workspace({"Plugins/Templates.md": "Templates inserts reusable snippets into a note."}, init=False)
    engine = Engine(root)
    engine.load()
    assert engine.execute_context_query("reusable snippets").selected[0].id == "Templates"
    write_files(root, {"Clipper/Templates.md": "Clipper templates capture metadata."})
    summary = engine.apply_changes([root / "Clipper/Templates.md"])
    assert "Plugins.Templates" in summary.updated and "Templates" in summary.removed
    assert [s.id for s in engine.execute_context_query("reusable snippets").selected][0] == "Plugins.Templates"
    engine.close()
    again = Engine(root)  # a fresh start over the same index finds the ids current
    again.load()
    assert again.execute_context_query("reusable snippets").selected[0].id == "Plugins.Templates"
    again.close()


# --- the shared vaults ----------------------------------------------------------------------


@pytest.mark.parametrize("vault", ["obsidian-help", "dendron-vault", "foam-docs"])
def test_every_note_of_the_shared_vaults_is_served_or_explained(vault):
    root = shared_data(vault)
    engine = Engine(root)
    engine.load()
    paths = set(iter_memory_paths(root))
    served = {m.rel_path for m in engine.store.memories.values()}
    explained = {f.rel_path: f.reason for f in engine.invalid_files()}
    assert served | set(explained) == paths and not served & set(explained)
    for path, reason in explained.items():
        assert reason
        if "duplicate id" in reason:  # only explicit frontmatter ids can clash now
            assert load_memory(root, path, engine.config).metadata.get("id") is not None, path
    dangling = [target for _, target in engine.graph().dangling]
    assert not [t for t in dangling if t.lower().endswith((".png", ".svg", ".jpg", ".pdf", ".canvas"))]
    assert not [t for t in dangling if "\\" in t]
    engine.close()


def test_obsidian_vault_names_links_and_l0_lines():
    engine = Engine(shared_data("obsidian-help"))
    engine.load()
    store = engine.store
    assert engine.invalid_files() == []
    assert store.get_by_path("Plugins/Templates.md").id == "Plugins.Templates"
    assert store.get_by_path("Obsidian Sync/Security and privacy.md").id == "Obsidian Sync.Security and privacy"
    # [[Security and privacy]] written in Obsidian Sync/ names the Sync page, not Publish's
    assert (
        store.resolve_link("Security and privacy", "Obsidian Sync/Headless Sync.md")
        == "Obsidian Sync.Security and privacy"
    )
    assert engine.graph().dangling == []
    l0 = {m.rel_path: m.l0 for m in store.memories.values()}
    assert l0["Bases/Layouts/Cards view.md"] == "Cards view — Cards is a type of view you can use in Bases."
    assert l0["Bases/Views.md"].startswith("Views allow you to organize the information in a Base")
    assert l0["Bases/Layouts/Map view.md"] == "Map view — Map is a type of view you can use in Bases."
    settings_like = [p for p, line in l0.items() if line in {"Settings", "Toolbar", "Install the Maps plugin"}]
    assert settings_like == []
    top = [s.id for s in engine.execute_context_query("insert a template into a note", budget_tokens=2000).selected]
    assert top[0] == "Plugins.Templates", top
    engine.close()


def test_dendron_hierarchy_and_foam_links_keep_resolving():
    dendron = Engine(shared_data("dendron-vault"))
    dendron.load()
    graph = dendron.graph()
    linked = sum(len(targets) for targets in graph.outgoing.values())
    assert linked > 2000 and len(graph.dangling) < 200  # the vault links to notes it does not ship
    dendron.close()
    foam = Engine(shared_data("foam-docs"))
    foam.load()
    assert {"docs.index", "user.index"} <= set(foam.store.memories)  # docs/index.md, docs/user/index.md
    assert len(foam.graph().dangling) <= 3
    foam.close()


# --- router files stay out of vaults init did not create --------------------------------------


def test_router_files_go_to_the_state_dir_in_a_vault_init_did_not_create(make_workspace):
    vault = make_workspace({"Notes/Idea.md": "# Idea\n\nA thought worth keeping."}, init=False)
    before = tree(vault)
    engine = Engine(vault)
    engine.load()
    report = regenerate_router(engine)
    assert {f.status for f in report.files} == {"written"}
    router = state_dir(vault) / "router"
    assert "A thought worth keeping." in (router / "claude.md").read_text()
    assert "l0: Idea — A thought worth keeping." in (router / "_index.yaml").read_text()
    assert {p for p in tree(vault) - before if not p.startswith(".ctxos")} == set()
    # asked for in _config.yaml: written into the vault
    write_files(vault, {"_config.yaml": "router:\n  write_to_workspace: true\n"})
    engine.reload_config()
    regenerate_router(engine)
    assert (vault / "claude.md").is_file()
    engine.close()


def test_init_workspaces_keep_router_files_at_the_root_unless_turned_off(make_workspace):
    root = make_workspace({"04-skills/a.md": "# A\n\nSkill a."})
    engine = Engine(root)
    engine.load()
    regenerate_router(engine)
    assert (root / "claude.md").is_file()
    (root / "claude.md").unlink()
    (root / "_config.yaml").write_text("router:\n  write_to_workspace: false\n")
    engine.reload_config()
    regenerate_router(engine)
    assert not (root / "claude.md").exists() and (state_dir(root) / "router" / "claude.md").is_file()
    (root / "_config.yaml").write_text("router:\n  write_to_workspace: sure\n")
    assert "must be true, false or null" in (load_config(root).error or "")
    engine.close()


@pytest.mark.slow
def test_real_daemon_serves_the_obsidian_vault_and_writes_nothing_into_it(daemon_factory):  # noqa: F811
    vault = shared_data("obsidian-help")
    before = tree(vault)
    daemon = daemon_factory(vault)
    ids = daemon.memory_ids()
    assert {
        "Plugins.Templates",
        "Obsidian Web Clipper.Templates",
        "Obsidian Sync.Security and privacy",
        "Obsidian Publish.Security and privacy",
    } <= ids
    assert daemon.call("doctor")["count"] == 0
    context = daemon.call("get_context", query="insert a template into a note", budget_tokens=2000)
    assert "Plugins.Templates" in context["rendered"]
    router = state_dir(vault) / "router"
    daemon.wait_for(lambda: (router / "_index.yaml").is_file(), timeout=30, message="router files in the state dir")
    index = yaml.safe_load((router / "_index.yaml").read_text())
    lines = {entry["id"]: entry["l0"] for entry in index["memories"]}
    assert lines["Cards view"] == "Cards view — Cards is a type of view you can use in Bases."
    assert tree(vault) == before


@pytest.mark.slow
def test_real_daemon_first_start_creates_nothing_in_a_writable_vault(make_workspace, daemon_factory):  # noqa: F811
    vault = make_workspace(
        {
            "Daily/Plan.md": "# Plan\n\nShip the vault support.",
            "Work/Plan.md": "# Plan\n\nA second plan with the same name.",
            "Home.md": "See [[Plan]] and ![[diagram.png]].",
        },
        init=False,
    )
    before = tree(vault)
    daemon = daemon_factory(vault)
    assert {"Daily.Plan", "Work.Plan", "Home"} <= daemon.memory_ids()
    router = state_dir(vault) / "router"
    daemon.wait_for(lambda: (router / "claude.md").is_file(), timeout=30, message="router files in .ctxos/router")
    assert {p for p in tree(vault) - before if not p.startswith(".ctxos")} == set()
    graph = daemon.call("graph")
    assert graph["dangling"] == []  # the image embed is not a dangling link
