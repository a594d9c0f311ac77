"""Named communities and their layout on the shared Obsidian help vault (read-only: state goes to the XDG cache).

``ctxos graph --json`` and ``ctxos simulate --json`` run as real subprocesses;
the router topics and the layout are checked on the same engine in-process.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from conftest import shared_data
from ctxos.services.communities import name_communities, refresh_communities
from ctxos.services.engine import Engine
from ctxos.services.graph_layout import community_layout
from ctxos.services.model import Memory

CTXOS = str(Path(sys.executable).with_name("ctxos"))


def _json(*args: str) -> dict:
    proc = subprocess.run([CTXOS, *args, "--json"], capture_output=True, text=True, timeout=180, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_obsidian_vault_communities_are_named_by_their_distinctive_terms():
    vault = shared_data("obsidian-help")
    data = _json("-w", str(vault), "graph")
    communities = data["communities"]
    assert (
        sum(c["size"] for c in communities) == len(data["nodes"])
        and len(communities) == data["community_stats"]["count"]
    )
    groups = [c for c in communities if c["size"] > 1]
    assert len(groups) >= 4
    names = [c["name"] for c in groups]
    assert len(set(names)) == len(names) and not any(n.startswith("community ") for n in names)
    for c in groups:
        assert 1 <= len(c["terms"]) <= 3 and c["name"] == " · ".join(c["terms"])
        assert 1 <= len(c["top_members"]) <= 5 and len(c["top_members"]) <= c["size"]
    # The terms say what the notes are about: Sync's notes, the Web Clipper's, Publish's.
    node_community = {n["id"]: n["community"] for n in data["nodes"]}
    terms_of = {c["id"]: set(c["terms"]) for c in communities}
    assert "sync" in terms_of[node_community["Introduction to Obsidian Sync"]]
    assert "clipper" in terms_of[node_community["Introduction to Obsidian Web Clipper"]]
    assert "publish" in terms_of[node_community["Publish limitations"]]
    # No term that is in nearly every community (the vault's own name) names one.
    assert not any("obsidian" in c["terms"] for c in groups)
    assert all(
        n["community_name"] == next(c["name"] for c in communities if c["id"] == n["community"])
        for n in data["nodes"]
        if n["community"] is not None
    )
    assert all(n["title"] for n in data["nodes"])
    # Titles are what a person calls the note: the file name, not the first section heading ("Settings").
    cards = next(n for n in data["nodes"] if n["id"] == "Cards view")
    assert cards["title"] == "Cards view"


def test_simulate_names_the_community_of_each_selected_memory():
    vault = shared_data("obsidian-help")
    _json("-w", str(vault), "graph")  # computes and keeps the community map (a daemon does it at start)
    result = _json("-w", str(vault), "simulate", "set up obsidian sync on a new device")
    selected = {s["id"]: s for s in result["selected"]}
    assert "Set up Obsidian Sync" in selected
    assert "sync" in selected["Set up Obsidian Sync"]["community_name"].split(" · ")


def test_router_topics_and_layout_keep_communities_apart():
    from ctxos.services.router import engine_source, workspace_claude_md

    engine = Engine(shared_data("obsidian-help"))
    engine.load()
    try:
        cmap, _ = refresh_communities(engine)
        source = engine_source(engine)
        assert source.topics and source.topics[0].endswith(f"({max(cmap.sizes)})")
        text = workspace_claude_md(source, 3000)
        assert "Topics (communities of linked memories): " + source.topics[0] in text
        assert engine.counter.count(text) <= 3000

        graph = engine.graph()
        edges = [(a, b) for a, b, _ in graph.edges()]
        positions = community_layout(graph.nodes, edges, cmap.communities)
        assert positions == community_layout(graph.nodes, edges, cmap.communities)  # deterministic
        assert set(positions) == set(graph.nodes)
        # Each community's members sit in their own disc: no member is closer to another
        # community's centre than to its own.
        centre = {}
        for number in set(cmap.communities.values()):
            members = [positions[m] for m in cmap.members(number)]
            centre[number] = (sum(x for x, _ in members) / len(members), sum(y for _, y in members) / len(members))
        big = [n for n, size in enumerate(cmap.sizes) if size >= 5]
        misplaced = [
            m
            for m, c in cmap.communities.items()
            if c in big and min(big, key=lambda o: math.dist(positions[m], centre[o])) != c
        ]
        assert not misplaced, misplaced
    finally:
        engine.close()


def test_names_made_in_a_child_process_equal_the_names_made_here():
    """The daemon's namer (daemon/leiden_process.py) runs the pass in a real child process."""
    from ctxos.daemon.leiden_process import IsolatedNamer
    from ctxos.services.communities import community_names
    from ctxos.services.stop_flag import StopFlag

    engine = Engine(shared_data("obsidian-help"))
    engine.load()
    try:
        cmap, _ = refresh_communities(engine)
        here = name_communities(list(engine.store.memories.values()), cmap.communities, engine.graph().authority)
        assert len(here) >= 4
        engine.community_namer = IsolatedNamer(StopFlag(), in_process_max=0)  # every map goes to the child
        assert community_names(engine, cmap) == here
        assert community_names(engine, cmap) == here  # the second ask reads the cached bytes
    finally:
        engine.close()


def test_c_tf_idf_prefers_tags_and_terms_unique_to_a_community():
    def memory(memory_id: str, title: str, tags: list[str]) -> Memory:
        return Memory(
            id=memory_id,
            type="resource",
            rel_path=f"05-resources/{memory_id}.md",
            path=Path("/x"),
            l0=title,
            l1=f"# {title}\n",
            l2="",
            tags=tags,
        )

    memories = [
        memory("a1", "Deploy the api", ["deploy", "kubernetes"]),
        memory("a2", "Deploy rollback", ["deploy"]),
        memory("b1", "Bread recipe", ["baking"]),
        memory("b2", "Sourdough starter", ["baking", "bread"]),
    ]
    named = name_communities(memories, {"a1": 0, "a2": 0, "b1": 1, "b2": 1}, {"a2": 0.9})
    assert [c["terms"][0] for c in named] == ["deploy", "baking"]
    assert named[0]["top_members"] == ["a2", "a1"] and named[1]["size"] == 2
    alone = name_communities([memories[0]], {"a1": 3})
    assert alone == [{"id": 3, "name": "Deploy the api", "terms": alone[0]["terms"], "size": 1, "top_members": ["a1"]}]
