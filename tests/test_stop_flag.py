"""Stopping long engine work at shutdown (services/stop_flag.py): a daemon exits within seconds of SIGTERM.

Real components: the real engine and Whoosh index, governance on real files, a
real Leiden child process (daemon/leiden_process.py) and a real daemon process
stopped with SIGTERM in the middle of its cold build, then started again.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from ctxos.daemon.leiden_process import IsolatedDetector
from ctxos.services.engine import Engine
from ctxos.services.governance import expire_scratch, governance_report
from ctxos.services.graph import build_graph
from ctxos.services.semantic import VectorIndex
from ctxos.services.similarity import similarity_join
from ctxos.services.stop_flag import Cancelled, StopFlag, checked
from daemon_helpers import memory_text, start_daemon


def _files(n: int) -> dict[str, str]:
    return {
        f"05-resources/note-{i:05d}.md": memory_text(f"note-{i:05d}", f"Note {i} about topic{i % 50} and w{i}.")
        for i in range(n)
    }


def test_flag_stops_a_loop_at_its_next_check() -> None:
    flag = StopFlag()
    seen = []
    with pytest.raises(Cancelled, match="shutting down"):
        for n in checked(range(10_000), flag.check, every=100):
            seen.append(n)
            if n == 250:
                flag.stop()
    assert seen[-1] == 299 and flag.stopped  # stopped at the check before item 300, not at the end


def test_similarity_join_stops_when_asked_and_is_unchanged_otherwise() -> None:
    sets = [frozenset({f"t{i % 97}", f"u{i % 89}", f"v{i}"}) for i in range(5_000)]
    flag = StopFlag()
    assert similarity_join(sets, 0.5, check=flag.check) == similarity_join(sets, 0.5)
    calls = []

    def stop_on_third() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise Cancelled("test")

    with pytest.raises(Cancelled):
        similarity_join(sets, 0.5, check=stop_on_third)
    assert len(calls) == 3  # checked every 1,024 sets: the third check is at set 2,048 of 5,000


def test_link_graph_build_stops_when_asked(make_workspace) -> None:
    root = make_workspace(_files(300))
    engine = Engine(root)
    engine.load()
    try:
        memories = list(engine.store.memories.values())
        assert len(build_graph(memories, engine.store.resolve_link).nodes) == 300
        flag = StopFlag()
        flag.stop()
        with pytest.raises(Cancelled):
            build_graph(memories, engine.store.resolve_link, check=flag.check)
    finally:
        engine.close()


class _StopAfter(StopFlag):
    """A stop flag whose owner stops after ``checks`` checks (a stop arriving mid-job, deterministically)."""

    __slots__ = ("left",)

    def __init__(self, checks: int) -> None:
        super().__init__()
        self.left = checks

    def check(self) -> None:
        if self.left == 0:
            self.stop()
        self.left -= 1
        super().check()


def test_scratch_expiry_stops_between_two_moves(make_workspace) -> None:
    """At 100,000 generated memories the start-up expiry moved 12,599 files in ~45 s: a stop must not wait."""
    old = "created: 2020-01-01\nmodified: 2020-01-01T00:00:00\n"
    files = {f"09-scratch/s{i}.md": f"---\nid: s{i}\ntype: scratch\n{old}---\nScratch {i}.\n" for i in range(5)}
    root = make_workspace(files)
    engine = Engine(root)
    engine.load()
    try:
        engine.stop_flag = _StopAfter(2)  # two moves, then the owner stops
        with pytest.raises(Cancelled):
            expire_scratch(engine)
        left = sorted(p.name for p in (root / "09-scratch").glob("*.md"))
        assert len(left) == 3  # two moved whole, the rest untouched
    finally:
        engine.close()
    again = Engine(root)
    again.load()
    try:
        assert sorted(m.id for m in again.store.memories.values() if m.type == "scratch") == [
            p.removesuffix(".md") for p in left
        ]
    finally:
        again.close()


def test_governance_report_stops_with_the_engine_flag(make_workspace) -> None:
    root = make_workspace(_files(600))
    engine = Engine(root)
    engine.load()
    try:
        full = governance_report(engine, save=False)
        engine.governance_reports.clear()
        engine.stop_flag.stop()
        with pytest.raises(Cancelled):
            governance_report(engine, save=False)
        assert full.memories == 600
        # A stopped engine's change batch stops too, before the first file (the next start rescans).
        path = root / "05-resources/note-00001.md"
        path.write_text(path.read_text(encoding="utf-8") + "\nmore\n", encoding="utf-8")
        with pytest.raises(Cancelled):
            engine.apply_changes([path])
    finally:
        engine.close()


def test_stopped_embedding_leaves_the_vector_cache_consistent(make_workspace, tmp_path: Path) -> None:
    """Rows are only recorded (and saved) once embedded: a stopped sync never caches zero rows."""
    root = make_workspace({**_files(700), "_config.yaml": "semantic:\n  model: wordllama\n"})
    engine = Engine(root)
    engine.load()
    try:
        memories = list(engine.store.memories.values())
        assert engine.vectors is not None
        model = engine.vectors.model
    finally:
        engine.close()
    flag = StopFlag()
    calls = []

    def stop_on_second() -> None:
        calls.append(1)
        if len(calls) == 2:
            flag.stop()
        flag.check()

    vectors = VectorIndex(model, tmp_path / "state", check=stop_on_second)
    with pytest.raises(Cancelled):
        vectors.sync(memories)
    vectors.flush()
    assert len(vectors) == 0  # nothing recorded: the first 256 rows were computed but not kept
    again = VectorIndex(model, tmp_path / "state")
    assert again.sync(memories) == len(memories)  # all embedded afresh: no zero rows came from a cache


def test_leiden_child_is_killed_when_the_daemon_stops() -> None:
    """A random graph of 6,000 nodes takes Leiden tens of seconds; stopping takes well under 2 s."""
    rng = random.Random(7)
    nodes = [f"n{i}" for i in range(6_000)]
    edges = [(rng.choice(nodes), rng.choice(nodes), 1.0) for _ in range(20_000)]
    edges = [e for e in edges if e[0] != e[1]]
    flag = StopFlag()
    detector = IsolatedDetector(flag)
    timer = threading.Timer(1.0, flag.stop)
    timer.start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        detector(nodes, edges, 42, 1.0)
    elapsed = time.monotonic() - started
    timer.cancel()
    assert 1.0 <= elapsed < 3.0


@pytest.mark.slow
def test_sigterm_during_a_cold_build_exits_within_seconds_and_the_next_start_finishes(make_workspace) -> None:
    root = make_workspace(_files(4000))
    daemon = start_daemon(root, wait_ready=False)
    try:
        deadline = time.monotonic() + 300
        status = daemon.status()
        while time.monotonic() < deadline:
            status = daemon.status()
            if status["state"] == "indexing" and status["indexing"]["done"] >= 500:
                break
            assert status["state"] in ("loading", "indexing"), status
            time.sleep(0.02)
        assert status["state"] == "indexing" and status["indexing"]["done"] < 4000, status
        started = time.monotonic()
        code = daemon.stop(timeout=30)
        stop_s = time.monotonic() - started
    finally:
        daemon.stop()
    assert code == 0, daemon.output()
    assert stop_s < 5.0, f"SIGTERM to exit took {stop_s:.1f} s mid-build\n{daemon.output()[-2000:]}"
    assert "loading stopped: the daemon is shutting down" in daemon.output()
    again = start_daemon(root, timeout=300)
    try:
        assert again.status()["memories"] == 4000
        assert "note-03999" in again.context_ids("w3999", 8000)
    finally:
        again.stop()
