"""Cold builds: chunked, answering queries from what is indexed so far, with progress a person can see.

Real engine, real Whoosh index, a real parser process, a real daemon process and
the real ``ctxos`` command (issue 16).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ctxos.client.commands.daemon_cmds import format_status
from ctxos.client.progress import ProgressDisplay
from ctxos.services.analysis import ANALYZER, analyze, index_tokens
from ctxos.services.engine import Engine
from ctxos.services.engine import lifecycle as engine_lifecycle
from ctxos.services.index_build import STAGING_FOLDER
from ctxos.services.semantic.vectors import CACHE_FOLDER
from daemon_helpers import memory_text, start_daemon


def _files(n: int) -> dict[str, str]:
    return {
        f"05-resources/note-{i:05d}.md": memory_text(f"note-{i:05d}", f"Note {i} about topic{i % 50} and w{i}.")
        for i in range(n)
    }


def test_cold_build_answers_from_the_first_chunks_and_reports_progress(make_workspace, monkeypatch) -> None:
    monkeypatch.setattr(engine_lifecycle, "COLD_FIRST_CHUNK", 40)
    monkeypatch.setattr(engine_lifecycle, "COLD_MAX_CHUNK", 100)
    root = make_workspace(_files(300))
    engine = Engine(root)
    seen, answers = [], []

    def on_progress(progress) -> None:
        seen.append(progress)
        # Mid-build, from the callback: the memories of the chunks committed so far are searchable.
        if progress.partial and 40 <= progress.done < 300 and not answers:
            answers.append(
                (progress.done, len(engine.store), [s.id for s in engine.execute_context_query("w7", 8000).selected])
            )

    engine.on_progress = on_progress
    summary = engine.load()
    try:
        assert summary.index_recovered == "index missing" and len(summary.updated) == 300
        assert engine.progress is None  # nothing running any more
        done, in_store, ids = answers[0]
        assert in_store == done < 300  # the store holds what is indexed
        assert "note-00007" in ids
        counts = [p.done for p in seen if p.phase == "indexing"]
        assert counts == sorted(counts) and counts[-1] == 300 and all(p.total == 300 for p in seen)
        assert [p for p in seen if p.phase == "indexing"][-1].line() == "indexing 300 of 300"
        assert engine.index.info()["segments"] >= 3  # one commit per chunk
        hits = {s.id for s in engine.execute_context_query("w299", 8000).selected}
        assert "note-00299" in hits
    finally:
        engine.close()


def test_parsing_in_a_parser_process_gives_the_same_store(make_workspace) -> None:
    from ctxos.daemon.parse_pool import parse_pool, pooled_map

    files = _files(120)
    files["05-resources/dup.md"] = memory_text("note-00003", "A second file claiming an id already used.")
    files["05-resources/broken.md"] = "---\nid: [unclosed\n---\nbody\n"
    root = make_workspace(files)
    serial = Engine(root)
    serial.load()
    (root / ".ctxos" / "index").rename(root / ".ctxos" / "index-serial")
    shutil.rmtree(serial.state_dir / CACHE_FOLDER)  # the builders embed, not the cache
    pool = parse_pool()
    assert pool is not None, "needs two cores"
    pooled = Engine(root)
    pooled.build_map = pooled_map(pool)
    try:
        pooled.load()
        assert {m.rel_path: m.checksum for m in pooled.list_memories()} == {
            m.rel_path: m.checksum for m in serial.list_memories()
        }
        assert [f.rel_path for f in pooled.invalid_files()] == [f.rel_path for f in serial.invalid_files()]
        # the first path in sorted order keeps the id, as in a full scan
        assert {"05-resources/note-00003.md", "05-resources/broken.md"} <= {f.rel_path for f in pooled.invalid_files()}
        # The builders indexed and embedded: the index holds exactly the served files (not the
        # shadowed duplicate), the rows came from the builders, the text was released there.
        assert pooled.index.checksums() == serial.index.checksums()
        assert pooled.vectors.embedded == len(pooled.store) and pooled.vectors.name == serial.vectors.name
        assert all(m.released for m in pooled.list_memories())
        # ... and counted each L1 block and catalog line first (no query reads a file back to cost one)
        assert all(m.l1_tokens > 0 and m.catalog_tokens > 0 for m in pooled.list_memories())
        assert not (root / ".ctxos" / STAGING_FOLDER).exists()
        for query in ("w7", "topic3 note", "note 119"):
            assert [(h.id, round(h.score, 9)) for h in pooled.index.search([(query, 1.0)], 20)] == [
                (h.id, round(h.score, 9)) for h in serial.index.search([(query, 1.0)], 20)
            ]
            assert pooled.execute_context_query(query, 4000, record_access=False).rendered == (
                serial.execute_context_query(query, 4000, record_access=False).rendered
            )
        # A rebuild (ctxos reindex) goes through the builders too and replaces every segment.
        pooled.rebuild_index()
        assert pooled.index.checksums() == serial.index.checksums()
        assert pooled.index.info()["segments"] == len(engine_lifecycle.cold_chunks([f"{i}" for i in range(122)]))
        assert "note-00007" in {h.id for h in pooled.index.search([("w7", 1.0)], 5)}
    finally:
        pool.shutdown()
        serial.close()
        pooled.close()


def test_index_tokens_are_the_analyzers_tokens() -> None:
    """The builders' one-loop analysis gives exactly Whoosh's StemmingAnalyzer tokens."""
    texts = [
        "Running runners ran; the quick brown foxes jumped over lazy dogs.",
        "İstanbul ÇAĞ straße ǅemal ﬁle x.y.z a.b. *foo* f**k 3.14 x_y __init__ ΣΊΣΥΦΟΣ ǈ",
        "git commit --amend -m 'message' && docker-compose up -d; a I to of 1 22",
        "",
        "Ünïcödé wörds, e-mail@example.com http://example.org/path?q=1#frag 10.0.0.1",
    ]
    for text in texts:
        expected = [token.text for token in ANALYZER(text)]
        assert index_tokens(text) == expected, text
        assert analyze(text) == expected, text
        assert analyze(text[:40]) == [token.text for token in ANALYZER(text[:40])], text  # the cached short path


def test_plain_progress_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    display = ProgressDisplay(out)
    assert display.bar is False
    for done in range(0, 1001, 50):
        display.update({"phase": "indexing", "done": done, "total": 1000, "text": f"indexing {done:,} of 1,000"})
    display.update({"phase": "writing the index", "done": 1000, "total": 1000, "text": "writing the index"})
    lines = out.getvalue().splitlines()
    assert lines[0] == "ctxos: indexing 0 of 1,000" and lines[-1] == "ctxos: writing the index"
    assert 10 <= len(lines) <= 13  # about every 10 %, not one line per update
    assert "\r" not in out.getvalue()


def test_status_text_shows_indexing() -> None:
    text = format_status(
        {
            "state": "indexing",
            "pid": 1,
            "uptime_s": 3,
            "indexing": {"text": "indexing 2,000 of 10,000", "job": "cold build", "elapsed_s": 4.2, "partial": True},
        }
    )
    assert "ctxos daemon: indexing" in text
    assert "indexing        indexing 2,000 of 10,000 (cold build, 4 s; queries are answered" in text


@pytest.mark.slow
def test_reindex_prints_progress_lines_in_a_pipe(make_workspace) -> None:
    root = make_workspace(_files(300))
    proc = subprocess.run(
        [sys.executable, "-m", "ctxos.client", "--workspace", str(root), "reindex"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^ctxos: reading files [\d,]+ of 300$", proc.stderr, re.M)
    assert re.search(r"^ctxos: indexing [\d,]+ of 300$", proc.stderr, re.M)
    assert "ctxos: writing the index" in proc.stderr
    assert proc.stdout.startswith("indexed 300 memories")


@pytest.mark.slow
def test_daemon_answers_while_a_cold_build_continues(make_workspace) -> None:
    root = make_workspace(_files(4000))
    daemon = start_daemon(root, wait_ready=False)
    try:
        partial = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            status = daemon.status()
            if status["state"] == "indexing":
                found = daemon.call("get_context", query="w3", budget_tokens=8000)
                partial = (status, found, daemon.status())
                builders_server = [p for p in _children(daemon.pid) if "ctxos.services.builder_preload" in _cmdline(p)]
                break
            assert status["state"] == "loading", status
            time.sleep(0.01)
        assert partial is not None, "never saw the daemon answering mid-build"
        status, found, after = partial
        assert builders_server  # started by the daemon's first line, preloading the builders
        assert re.fullmatch(r"indexing [\d,]+ of 4,000", status["indexing"]["text"])
        assert status["indexing"]["partial"] is True and status["indexing"]["job"] == "cold build"
        assert "note-00003" in {s["id"] for s in found["selected"]}  # the first chunk holds it
        daemon.wait_for(lambda: daemon.status()["state"] == "ready", 600, message="the build to finish")
        final = daemon.status()
        assert final["indexing"] is None and final["memories"] == 4000
        assert "note-03999" in {
            s["id"] for s in daemon.call("get_context", query="w3999", budget_tokens=8000)["selected"]
        }
        # The forkserver the daemon's first line started for this build (the one preloading the builders;
        # a job after ready may start a plain one) is stopped once the daemon is ready.
        daemon.wait_for(
            lambda: not [pid for pid in _children(daemon.pid) if "ctxos.services.builder_preload" in _cmdline(pid)],
            30,
            message="the build's forkserver to stop",
        )
    finally:
        daemon.stop()


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
def test_builders_start_early_only_without_an_index(make_workspace) -> None:
    """``start_builders_early`` (the daemon's first line): a forkserver for a cold build, none for a warm start."""
    from multiprocessing import forkserver

    from ctxos.daemon.parse_pool import start_builders_early, stop_early_builders
    from ctxos.services.index_layout import index_looks_built

    root = make_workspace(_files(3))
    assert not index_looks_built(root)
    assert start_builders_early(root)
    try:
        server = forkserver._forkserver._forkserver_pid
        assert server is not None and Path(f"/proc/{server}").exists()
    finally:
        stopping = stop_early_builders()
    assert stopping is not None
    stopping.join(30)
    assert forkserver._forkserver._forkserver_pid is None and not Path(f"/proc/{server}").exists()
    engine = Engine(root)
    engine.load()
    engine.close()
    assert index_looks_built(root) and not start_builders_early(root)


def test_tray_tooltip_shows_indexing() -> None:
    from ctxos.daemon.tray import TrayState

    state = TrayState(indexing="indexing 2,000 of 10,000", paused=True)
    assert state.title() == "AI Context OS: indexing 2,000 of 10,000 - watching paused"
    assert "health" in TrayState().title()


@pytest.mark.slow
def test_builder_maps_keep_order_and_build_small_jobs_here() -> None:
    """The daemon's and the CLI's ``build_map``: real builder processes for 3+ chunks, results in order."""
    from ctxos.client.backend import builder_map
    from ctxos.daemon.parse_pool import building_map

    chunks = [list(range(n)) for n in (3, 1, 4, 1, 5)]
    assert list(builder_map(len, chunks)) == [3, 1, 4, 1, 5]
    assert list(building_map()(len, chunks)) == [3, 1, 4, 1, 5]
    here = os.getpid()
    # two chunks or fewer: no processes are started (a pid-returning function tells where it ran)
    assert set(building_map()(_pid, [[1], [2]])) == {here}
    assert set(builder_map(_pid, [[1], [2]])) == {here}
    assert here not in set(building_map()(_pid, [[1], [2], [3]]))


def _pid(_chunk: list[int]) -> int:
    return os.getpid()
