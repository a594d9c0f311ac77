"""Leiden communities: deterministic, persisted with a fingerprint, and visible in simulate's breakdown."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ctxos.services.communities import (
    communities_path,
    compute_communities,
    ensure_communities,
    load_communities,
    refresh_communities,
)
from ctxos.services.engine import Engine
from daemon_helpers import memory_text


def two_cliques(n: int = 5) -> tuple[list[str], list[tuple[str, str]]]:
    a = [f"a{i}" for i in range(n)]
    b = [f"b{i}" for i in range(n)]
    edges = [(x, y) for group in (a, b) for i, x in enumerate(group) for y in group[i + 1 :]]
    edges.append(("a0", "b0"))
    return a + b, edges


def test_two_cliques_give_two_communities_numbered_canonically():
    nodes, edges = two_cliques()
    cmap = compute_communities(nodes, edges, seed=42)
    assert cmap.sizes == [5, 5]
    assert {cmap.communities[f"a{i}"] for i in range(5)} == {0}  # "a..." sorts first: community 0
    assert {cmap.communities[f"b{i}"] for i in range(5)} == {1}
    assert cmap.modularity > 0.4
    assert cmap.edge_count == len(edges)


def test_input_order_and_dangling_edges_do_not_change_the_result():
    nodes, edges = two_cliques()
    first = compute_communities(nodes, edges, seed=7)
    shuffled = compute_communities(
        list(reversed(nodes)), [(b, a) for a, b in reversed(edges)] + [("a1", "ghost"), ("a2", "a2")], seed=7
    )
    assert shuffled.communities == first.communities
    assert shuffled.fingerprint == first.fingerprint


SCRIPT = """
import json, sys
from ctxos.services.communities import compute_communities
nodes = [f"n{i:03d}" for i in range(300)]
edges = [(nodes[i], nodes[(i * 7 + 3) % 300]) for i in range(300)] + \
        [(nodes[i], nodes[(i + 1) % 300]) for i in range(0, 300, 2)]
print(json.dumps(compute_communities(nodes, edges, seed=42).communities, sort_keys=True))
"""


def test_same_graph_same_communities_across_processes():
    """Stable across runs: two fresh interpreters (different hash seeds) give identical maps."""
    outputs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        outputs.append(
            subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True).stdout
        )
    assert outputs[0] == outputs[1]
    assert len(set(json.loads(outputs[0]).values())) > 1


def test_persisted_map_is_reused_until_the_graph_changes(tmp_path: Path):
    nodes, edges = two_cliques()
    first, recomputed = ensure_communities(tmp_path, nodes, edges, seed=42)
    assert recomputed and communities_path(tmp_path).exists()
    mtime = communities_path(tmp_path).stat().st_mtime_ns
    again, recomputed = ensure_communities(tmp_path, nodes, edges, seed=42)
    assert not recomputed and again.communities == first.communities
    assert communities_path(tmp_path).stat().st_mtime_ns == mtime  # not even rewritten
    changed, recomputed = ensure_communities(tmp_path, nodes + ["c0"], edges + [("c0", "a1")], seed=42)
    assert recomputed and changed.communities["c0"] == changed.communities["a1"]
    assert load_communities(tmp_path).fingerprint == changed.fingerprint


def test_damaged_map_is_recomputed(tmp_path: Path):
    nodes, edges = two_cliques()
    ensure_communities(tmp_path, nodes, edges)
    communities_path(tmp_path).write_text("{not json", encoding="utf-8")
    assert load_communities(tmp_path) is None
    cmap, recomputed = ensure_communities(tmp_path, nodes, edges)
    assert recomputed and cmap.sizes == [5, 5]


def cluster_workspace(make_workspace) -> Path:
    """Two topic clusters joined by tags (>= 2 shared tags make implicit edges)."""
    files = {}
    for i in range(5):
        files[f"04-skills/deploy-{i}.md"] = memory_text(
            f"deploy-{i}",
            f"Deployment step {i}: kubernetes rollout notes number {i}.",
            type="skill",
            tags=["deploy", "kubernetes", "ops"],
        )
        files[f"05-resources/cook-{i}.md"] = memory_text(
            f"cook-{i}",
            f"Recipe {i}: pasta sauce with basil, variant {i}.",
            type="resource",
            tags=["cooking", "pasta", "recipes"],
        )
    # deploy-0 links to a far neighbour so proximity does not hide the bonus; plus a dangling link
    files["04-skills/deploy-extra.md"] = memory_text(
        "deploy-extra",
        "Rollback checklist for kubernetes rollout failures.",
        type="skill",
        tags=["deploy", "kubernetes"],
        related=["no-such-memory"],
    )
    return make_workspace(files)


def test_engine_picks_up_communities_and_simulate_shows_the_bonus(make_workspace):
    root = cluster_workspace(make_workspace)
    engine = Engine(root)
    engine.load()
    try:
        assert engine.community_of() is None  # nothing computed yet: no bonus, no crash
        before = engine.execute_context_query("rollback checklist kubernetes", 4000, record_access=False)
        cmap, recomputed = refresh_communities(engine)
        assert recomputed
        deploy = {cmap.communities[f"deploy-{i}"] for i in range(5)} | {cmap.communities["deploy-extra"]}
        cook = {cmap.communities[f"cook-{i}"] for i in range(5)}
        assert len(deploy) == 1 and len(cook) == 1 and deploy != cook
        after = engine.execute_context_query("rollback checklist kubernetes", 4000, record_access=False)
        graph_before = {s.id: s.signals["graph"] for s in before.selected}
        graph_after = {s.id: s.signals["graph"] for s in after.selected}
        bonus = engine.config.get("graph.community_bonus")
        gained = [
            mid
            for mid in graph_after
            if mid.startswith("deploy")
            and mid in graph_before
            and graph_after[mid] < 1.0
            and graph_after[mid] == pytest.approx(graph_before[mid] + bonus)
        ]
        assert gained, (graph_before, graph_after)
        assert all(graph_after.get(f"cook-{i}", 0) == graph_before.get(f"cook-{i}", 0) for i in range(5))

        # A fresh engine (another process, e.g. the CLI in-process) reads the persisted map.
        other = Engine(root)
        other.load()
        try:
            assert other.community_of() == cmap.communities
        finally:
            other.close()
        # Unchanged graph: not recomputed.
        assert refresh_communities(engine)[1] is False
    finally:
        engine.close()


def test_graph_rpc_lists_types_communities_edges_and_dangling_links(make_workspace):
    from ctxos.daemon.components import register_rpc_methods
    from ctxos.daemon.context import DaemonContext

    root = cluster_workspace(make_workspace)
    engine = Engine(root)
    engine.load()
    ctx = DaemonContext(root, engine, mode="in-process")
    register_rpc_methods(ctx.rpc)
    ctx.mark_ready()
    try:
        data = ctx.rpc.call_sync(ctx, "graph", {})
        nodes = {n["id"]: n for n in data["nodes"]}
        assert nodes["deploy-1"]["type"] == "skill" and nodes["cook-1"]["type"] == "resource"
        assert nodes["deploy-1"]["community"] == nodes["deploy-2"]["community"] != nodes["cook-1"]["community"]
        kinds = {e["kind"] for e in data["edges"]}
        assert kinds == {"implicit"}
        assert {"source": "deploy-extra", "target": "no-such-memory"} in data["dangling"]
        assert data["community_stats"]["count"] >= 2 == len([c for c in data["communities"] if c["size"] > 1])
        json.dumps(data)
    finally:
        ctx.shutdown_executors()
        engine.close()


def test_refreshed_graph_rereads_the_community_map_only_when_the_file_was_rewritten(make_workspace):
    """The daemon refreshes the graph after every change batch; the map file is parsed again only when
    the communities job replaced it (a new file), not on every editor save."""
    from ctxos.services.communities import save_communities

    root = cluster_workspace(make_workspace)
    engine = Engine(root)
    engine.load()
    engine.allow_stale_graph = True  # as the daemon runs it
    try:
        cmap, _ = refresh_communities(engine)
        engine.set_community_of(None)  # read from the file, as a daemon whose job ran in another process
        note = root / "04-skills" / "deploy-0.md"

        def edit_and_refresh(line: str) -> None:
            note.write_text(note.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
            engine.apply_changes([note])
            engine.refresh_graph()

        edit_and_refresh("One more line.")
        first = engine.community_of(stale_ok=True)
        assert first == cmap.communities
        edit_and_refresh("Another line.")
        assert engine.community_of(stale_ok=True) is first  # same file: the map read before
        moved = dict(cmap.communities, **{"deploy-0": 99})
        save_communities(root, dataclasses.replace(cmap, communities=moved))
        edit_and_refresh("And a third.")
        assert engine.community_of(stale_ok=True) == moved  # rewritten: read again
    finally:
        engine.close()


def test_the_engine_keeps_a_community_map_keyed_by_its_own_ids(make_workspace) -> None:
    """Read from communities.json, each key was a fresh copy of an id the store holds (~6 MiB at
    100,000 memories, issue 16): the engine keeps the store's strings, and ids it does not know as given."""
    root = make_workspace({f"05-resources/note-{i}.md": memory_text(f"note-{i}", f"Note {i}.") for i in range(3)})
    engine = Engine(root)
    engine.load()
    try:
        given = {"".join(["note-", str(i)]): 300 + i % 2 for i in range(3)} | {"gone": 7}
        engine.set_community_of(given)
        held = engine.community_of()
        assert held == given
        for key in held:
            memory = engine.get_memory(key)
            assert (key is memory.id) if memory is not None else key == "gone"
        assert held["note-0"] is held["note-2"]  # one int per community
    finally:
        engine.close()
