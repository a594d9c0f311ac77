"""The link graph saved at close and read at the next start (services/graph_cache.py).

Real files in a real workspace, through the engine: a clean close saves the
graph; the next engine on the same files reads it for its first graph instead of
building one, and it equals a full build; a file changed while nothing ran, a
different build setting, or a damaged file means a build. After a restart the
first change batch patches from a full build of the tracker's own maps, with the
same result as a build from scratch. A real daemon reads the graph on restart.
"""

from __future__ import annotations

import random
from pathlib import Path

from ctxos.services.engine import Engine
from ctxos.services.graph_cache import GRAPH_FILENAME, graph_path, load_graph, store_key
from daemon_helpers import lexical_workspace, short_runtime_dir, start_daemon
from test_graph_update import FOLDERS, STEMS, _assert_same, _reference, _text


def _workspace(tmp_path: Path, seed: int = 7, count: int = 40) -> tuple[Path, list[str]]:
    rng = random.Random(seed)
    root = lexical_workspace(tmp_path / "ws")
    files: list[str] = []
    for i in range(count):
        rel = f"{rng.choice(FOLDERS)}/{rng.choice(STEMS)} {i}.md"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(_text(rng, STEMS), encoding="utf-8")
        files.append(rel)
    return root, files


def _graph_builds(engine: Engine) -> list[str]:
    """Record each build the engine's graph tracker makes (its ``last_update`` after the call)."""
    calls: list[str] = []
    tracker = engine._graph_tracker
    build = tracker.graph_for

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        graph = build(*args, **kwargs)
        calls.append(tracker.last_update)
        return graph

    tracker.graph_for = spy  # type: ignore[method-assign]
    return calls


def _assert_built_in_full(root: Path) -> None:
    """A new engine on ``root`` builds its first graph in full, equal to a build from scratch, then closes."""
    engine = Engine(root)
    engine.load()
    builds = _graph_builds(engine)
    try:
        _assert_same(engine.graph(), _reference(engine))
        assert builds == ["full"]
    finally:
        engine.close()  # saves the graph it built


def test_a_restart_reads_the_graph_saved_at_close_and_patches_after_the_first_change(tmp_path: Path) -> None:
    root, files = _workspace(tmp_path)
    first = Engine(root)
    first.load()
    built = first.graph()
    first.close()
    saved = graph_path(first.state_dir)
    assert saved.exists()

    again = Engine(root)
    again.load()
    builds = _graph_builds(again)
    try:
        graph = again.graph()
        assert builds == []  # read, not built
        _assert_same(graph, built)
        _assert_same(graph, _reference(again))
        rng = random.Random(3)
        for step in range(4):  # the first change builds the tracker's maps in full, the next ones patch
            rel = files[step]
            (root / rel).write_text(_text(rng, STEMS), encoding="utf-8")
            again.apply_changes([rel])
            _assert_same(again.refresh_graph(), _reference(again))
        assert builds[0] == "full" and set(builds[1:]) <= {"patched", "unchanged"}, builds
    finally:
        again.close()


def test_a_file_changed_while_stopped_or_another_setting_means_a_build(tmp_path: Path) -> None:
    root, files = _workspace(tmp_path, seed=11)
    engine = Engine(root)
    engine.load()
    engine.graph()
    engine.close()
    state = engine.state_dir
    assert state is not None

    (root / files[0]).write_text("---\nid: changed-while-stopped\n---\n[[Templates 1]] and [[nowhere]]\n", "utf-8")
    _assert_built_in_full(root)  # and saves the graph of the changed store

    settings = Engine(root)
    settings.load()
    key = store_key(dict(settings.store.memories), settings._graph_settings())
    saved = load_graph(graph_path(state))
    assert key is not None and saved is not None and saved.key == key  # saved again at that close
    other = (settings._graph_settings()[0] + 1, *settings._graph_settings()[1:])
    assert store_key(dict(settings.store.memories), other) != key  # another setting: another graph
    settings.close()

    data = graph_path(state).read_bytes()
    for damage in (data[: len(data) // 2], b"[]", data.replace(b'"format":1', b'"format":99')):
        graph_path(state).write_bytes(damage)
        _assert_built_in_full(root)


def test_in_the_daemon_a_saved_graph_of_other_files_is_served_while_the_current_one_is_built(tmp_path: Path) -> None:
    """With ``allow_stale_graph`` (the daemon), a file changed while nothing ran: the query path serves the
    saved graph at once, as it serves the graph a change leaves behind, and ``refresh_graph`` (which the
    daemon runs right after ready) builds the current one in full."""
    root, files = _workspace(tmp_path, seed=17)
    engine = Engine(root)
    engine.load()
    before = engine.graph()
    engine.close()
    (root / files[1]).write_text("---\nid: edited-while-stopped\n---\n[[Templates 2]] and [[sync 3]]\n", "utf-8")

    daemon_like = Engine(root)
    daemon_like.allow_stale_graph = True  # as DaemonContext sets it
    daemon_like.load()
    builds = _graph_builds(daemon_like)
    try:
        served = daemon_like.graph(stale_ok=True)
        assert builds == [] and daemon_like.graph_is_stale()
        _assert_same(served, before)  # the saved graph, not a build
        current = daemon_like.refresh_graph()
        assert builds == ["full"] and not daemon_like.graph_is_stale()
        _assert_same(current, _reference(daemon_like))
        assert "edited-while-stopped" in current.nodes and "edited-while-stopped" not in served.nodes
        assert daemon_like.graph() is current  # every caller gets the current graph from now on
    finally:
        daemon_like.close()

    one_shot = Engine(root)  # a CLI engine never serves another store's graph: it builds
    one_shot.load()
    (root / files[2]).write_text("---\nid: edited-again\n---\nbody\n", "utf-8")
    one_shot.apply_changes([files[2]])
    builds = _graph_builds(one_shot)
    try:
        _assert_same(one_shot.graph(stale_ok=True), _reference(one_shot))
        assert builds == ["full"]
    finally:
        one_shot.close()


def test_a_refreshed_graph_is_saved_at_most_once_per_interval(tmp_path: Path) -> None:
    """``save_graph_if_due`` (the daemon calls it after each refresh): the first current graph is saved,
    a later one only once the interval has passed, and a graph read from the file is not written back."""
    root, files = _workspace(tmp_path, seed=19, count=20)
    engine = Engine(root)
    engine.load()
    try:
        engine.refresh_graph()
        assert engine.state_dir is not None and engine.save_graph_if_due(300.0)
        path = graph_path(engine.state_dir)
        first = load_graph(path)
        (root / files[0]).write_text("---\nid: renamed-note\n---\n[[Templates 3]]\n", "utf-8")
        engine.apply_changes([files[0]])
        engine.refresh_graph()
        assert not engine.save_graph_if_due(300.0)  # saved moments ago
        assert load_graph(path) == first
        assert engine.save_graph_if_due(0.0)
        second = load_graph(path)
        assert second is not None and first is not None and second.key != first.key
        assert second.key == store_key(dict(engine.store.memories), engine._graph_settings())
    finally:
        engine.close()
    again = Engine(root)
    again.load()
    try:
        again.refresh_graph()  # read from the file: nothing to write back
        assert not again.save_graph_if_due(0.0)
    finally:
        again.close()


def test_a_stale_graph_is_not_saved(tmp_path: Path) -> None:
    """A close right after a change the graph has not caught up with leaves no graph of the old files."""
    root, files = _workspace(tmp_path, seed=5, count=12)
    engine = Engine(root)
    engine.load()
    engine.graph()
    (root / files[0]).write_text("---\nid: fresh\n---\nnew text\n", "utf-8")
    engine.apply_changes([files[0]])
    engine.close()
    assert engine.state_dir is not None and not graph_path(engine.state_dir).exists()


def test_a_restarted_daemon_serves_its_first_query_from_the_saved_graph(tmp_path: Path) -> None:
    """A real daemon process: stopped cleanly it saves the graph; the next one reads it (its log says so)."""
    root, _ = _workspace(tmp_path, seed=13)
    runtime = short_runtime_dir()
    daemon = start_daemon(root, runtime_dir=runtime)
    try:
        daemon.call("get_context", query="templates and sync")
    finally:
        daemon.stop()
    assert (root / ".ctxos" / GRAPH_FILENAME).exists()
    again = start_daemon(root, runtime_dir=runtime)
    try:
        answer = again.call("get_context", query="templates and sync")
        assert answer["selected"]
    finally:
        again.stop()
    assert f"link graph read from {GRAPH_FILENAME}" in again.output()


def test_a_running_daemon_saves_its_graph_so_a_killed_one_restarts_without_a_build(tmp_path: Path) -> None:
    """The daemon saves the graph after its first refresh, not only at a clean stop: after SIGKILL (a crash,
    the OOM killer) the next daemon still reads it."""
    import time

    root, _ = _workspace(tmp_path, seed=23)
    runtime = short_runtime_dir()
    daemon = start_daemon(root, runtime_dir=runtime)
    saved = root / ".ctxos" / GRAPH_FILENAME
    try:
        daemon.call("get_context", query="templates and sync")
        deadline = time.monotonic() + 30
        while not saved.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert saved.exists()  # written while it runs
    finally:
        daemon.kill()
    again = start_daemon(root, runtime_dir=runtime)
    try:
        assert again.call("get_context", query="templates and sync")["selected"]
    finally:
        again.stop()
    assert f"link graph read from {GRAPH_FILENAME}" in again.output()
