"""Data safety against a REAL daemon (issue 11): refused writes change nothing, a person's edit wins,
the daily log stays valid, odd files never stop the daemon, protected means protected.

Every test starts the real daemon process (tests/daemon_helpers.py) and talks to it over its real
Unix socket; files are edited on disk as a person would, and the watcher's real inotify events
carry those edits in.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ctxos.client import RpcCallError
from daemon_helpers import daemon_factory, make_special_files, memory_text  # noqa: F401  (daemon_factory is a fixture)
from web_helpers import http


def _refused(daemon, **params) -> str:
    with pytest.raises(RpcCallError) as info:
        daemon.call("save_memory", **params)
    return info.value.message


def _doctor_reasons(daemon) -> dict[str, str]:
    return {item["path"]: item["reason"] for item in daemon.call("doctor")["invalid"]}


def test_refused_updates_leave_the_file_untouched_and_agent_strings_round_trip(make_workspace, daemon_factory):
    root = make_workspace()
    daemon = daemon_factory(root)
    saved = daemon.call("save_memory", type="project", id="alpha", l0="Alpha project", content="Original body.")
    path = root / saved["path"]
    # YAML-hostile agent strings are stored quoted and read back exactly as passed.
    odd_tags = ["x]", "}", "a: b", "#hash", "c,d", "日本語", "é"]
    updated = daemon.call(
        "save_memory",
        type="project",
        id="alpha",
        l0="Alpha: the [first] one # yes",
        content="Body v2.",
        tags=odd_tags,
        related=["b]", "{c}"],
        expected_version=1,
    )
    assert updated["version"] == 2
    got = daemon.call("get_memory", id="alpha")
    assert got["tags"] == odd_tags and got["related"] == ["b]", "{c}"]
    assert got["l0"] == "Alpha: the [first] one # yes"
    before = path.read_bytes()
    cases = {
        "content over the byte cap": dict(content="é" * 150_000),
        "huge l0": dict(content="x", l0="y" * 300_000),
        "huge l1": dict(content="x", l1="z" * 300_000),
        "lone surrogate": dict(content="bad \ud800 char"),
        "expected_version 0": dict(content="x", expected_version=0),
        "expected_version -1": dict(content="x", expected_version=-1),
        "tag with newline": dict(content="x", tags=["a\nb"]),
    }
    messages = {}
    for name, overrides in cases.items():
        params = dict(type="project", id="alpha", l0="Alpha project", content="x", expected_version=2)
        params.update(overrides)
        messages[name] = _refused(daemon, **params)
        assert path.read_bytes() == before, f"{name}: the refused write changed the file"
    assert "byte" in messages["content over the byte cap"]
    assert "300,000 characters" in messages["huge l0"]
    assert "surrogate" in messages["lone surrogate"]
    assert "expected_version: must be at least 1" in messages["expected_version 0"]  # services/schemas.py
    assert daemon.call("get_memory", id="alpha")["version"] == 2  # still served
    # A refused create leaves no file behind.
    _refused(daemon, type="project", id="beta", l0="Beta", content="é" * 150_000)
    assert not (root / "03-projects/beta.md").exists()
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_persons_unversioned_edit_wins_over_an_agents_stale_save(make_workspace, daemon_factory):
    root = make_workspace()
    daemon = daemon_factory(root)
    daemon.call("save_memory", type="project", id="notes", l0="Notes", content="Line one.")
    read = daemon.call("get_memory", id="notes")  # the agent reads version 1
    path = root / read["path"]
    with open(path, "a", encoding="utf-8") as handle:  # a person appends, no version bump
        handle.write("A person's line.\n")

    def indexed_checksum() -> str:
        return next(m["checksum"] for m in daemon.call("list")["memories"] if m["id"] == "notes")

    daemon.wait_for(lambda: indexed_checksum() != read["checksum"], message="the edit to be indexed")
    message = _refused(
        daemon, type="project", id="notes", l0="Notes", content="Agent rewrite.", expected_version=read["version"]
    )  # expected_version alone is enough
    assert "changed since you read it" in message and "read it again" in message
    assert "A person's line." in path.read_text(encoding="utf-8")
    # Re-reading gives the person's text; a save based on it goes through.
    again = daemon.call("get_memory", id="notes")
    daemon.call(
        "save_memory",
        type="project",
        id="notes",
        l0="Notes",
        content=again["l1"] + "\nAgent line.",
        expected_version=again["version"],
        expected_checksum=again["checksum"],
    )
    assert "A person's line." in path.read_text(encoding="utf-8")


def test_person_appends_race_agent_saves_and_none_is_lost(make_workspace, daemon_factory):
    root = make_workspace()
    daemon = daemon_factory(root, debounce_ms=10)
    daemon.call("save_memory", type="project", id="race", l0="Race", content="Start.")
    path = root / "03-projects/race.md"
    stop = threading.Event()
    appended: list[str] = []

    def person() -> None:
        for n in range(13):
            line = f"person line {n}"
            with open(path, "a", encoding="utf-8") as handle:  # a person's editor: no lock of ours
                handle.write(line + "\n")
            appended.append(line)
            time.sleep(0.1)
        stop.set()

    thread = threading.Thread(target=person)
    thread.start()
    client = daemon.client()
    agent_saves = conflicts = 0
    deadline = time.monotonic() + 15
    while (not stop.is_set() or agent_saves == 0) and time.monotonic() < deadline:
        current = client.call("get_memory", {"id": "race"})
        body = (current["l1"] + "\n\n" + current["l2"]).strip()
        try:
            client.call(
                "save_memory",
                {
                    "type": "project",
                    "id": "race",
                    "l0": "Race",
                    "content": body + "\nagent.",
                    "expected_version": current["version"],
                    "expected_checksum": current["checksum"],
                },
            )
            agent_saves += 1
        except RpcCallError:
            conflicts += 1
    thread.join()
    assert agent_saves > 0, "the agent never saved: the race was not exercised"
    text = path.read_text(encoding="utf-8")
    lost = [line for line in appended if line not in text]
    assert not lost, f"a person's lines were overwritten: {lost} ({agent_saves} saves, {conflicts} conflicts)"


def test_daily_log_refuses_oversize_details_and_rolls_over_a_person_made_oversize_log(make_workspace, daemon_factory):
    root = make_workspace()
    daemon = daemon_factory(root)
    with pytest.raises(RpcCallError) as info:
        daemon.call("log_session", event="huge", details="d" * 200_000)
    assert "20,000" in info.value.message
    first = daemon.call("log_session", event="started")
    day_file = root / first["path"]
    # A person pastes a huge block into today's log: over the cap, no longer served.
    with open(day_file, "a", encoding="utf-8") as handle:
        handle.write("x" * 300_000 + "\n")
    daemon.wait_for(lambda: first["path"] in _doctor_reasons(daemon), message="doctor to report the big log")
    assert "cap" in _doctor_reasons(daemon)[first["path"]]
    later = daemon.call("log_session", event="after the paste", details="still logged")
    assert later["path"].endswith("-2.md")
    assert (
        "still logged"
        in daemon.call("get_memory", id=later["id"])["l2"] + daemon.call("get_memory", id=later["id"])["l1"]
    )


def _make_odd_files(root: Path) -> list[str]:
    """The odd files of the issue; returns the doctor paths expected (non-UTF-8 name escaped)."""
    folder = root / "03-projects"
    special = make_special_files(folder)
    bad = os.fsencode(str(folder)) + b"/bad-\xff-name.md"
    with open(bad, "wb") as handle:
        handle.write(memory_text("badname", "A file whose name is not UTF-8.").encode())
    return [*(f"03-projects/{name}" for name in special), "03-projects/bad-\\xff-name.md"]


def test_odd_files_never_stop_the_daemon_and_doctor_explains_each(make_workspace, daemon_factory):
    root = make_workspace({"03-projects/good.md": memory_text("good", "A good memory about kiwis.")})
    expected = _make_odd_files(root)
    daemon = daemon_factory(root)
    reasons = _doctor_reasons(daemon)
    for rel in expected:
        assert rel in reasons, (rel, reasons)
    assert "loop" in reasons["03-projects/self.md"]
    assert "pipe" in reasons["03-projects/pipe.md"] and "socket" in reasons["03-projects/sock.md"]
    assert "UTF-8" in reasons["03-projects/bad-\\xff-name.md"]
    assert "good" in daemon.memory_ids()
    assert "good" in daemon.context_ids("kiwis")
    daemon.call("graph")
    # One bad path never blocks the batch: a loop and a good file created together.
    (root / "03-projects/loop2.md").symlink_to(root / "03-projects/loop2.md")
    (root / "03-projects/fresh.md").write_text(memory_text("fresh", "Fresh next to a loop."), encoding="utf-8")
    daemon.wait_for(lambda: daemon.has_memory("fresh"), message="the good file in the same batch")
    daemon.wait_for(lambda: "03-projects/loop2.md" in _doctor_reasons(daemon), message="the loop in doctor")
    # REST-shaped JSON and the CLI's JSON never fail on a name.
    out = subprocess.run(
        [sys.executable, "-m", "ctxos.client", "--workspace", str(root), "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CTXOS_RUNTIME_DIR": str(daemon.runtime_dir)},
    )
    assert out.returncode in (0, 1), out.stderr
    assert "bad-\\\\xff-name.md" in out.stdout


def test_protected_memories_refuse_governance_actions_until_a_person_unlocks(make_workspace, daemon_factory):
    root = make_workspace(
        {
            "08-rules/keep.md": memory_text("keep", "Never deploy on Fridays.", protected=True),
            "08-rules/other.md": memory_text("other", "Other rule."),
        }
    )
    daemon = daemon_factory(root)
    path = root / "08-rules/keep.md"
    before = path.read_bytes()
    for method, params in (("archive", {"id": "keep"}), ("set_importance", {"id": "keep", "value": 0.9})):
        with pytest.raises(RpcCallError) as info:
            daemon.call(method, **params)
        assert "protected" in info.value.message
    assert _refused(daemon, type="rule", id="keep", l0="x", content="agent", expected_version=1)
    assert path.read_bytes() == before
    env = {**os.environ, "CTXOS_RUNTIME_DIR": str(daemon.runtime_dir)}
    cli = [sys.executable, "-m", "ctxos.client", "--workspace", str(root)]
    bulk = subprocess.run(cli + ["archive", "keep", "other"], capture_output=True, text=True, env=env, timeout=60)
    assert bulk.returncode == 1 and "skipped keep" in bulk.stdout and "archived other" in bulk.stdout, bulk
    assert path.read_bytes() == before
    unlock = subprocess.run(cli + ["unlock", "keep"], capture_output=True, text=True, env=env, timeout=60)
    assert unlock.returncode == 0, unlock.stderr
    daemon.wait_for(lambda: not daemon.call("get_memory", id="keep")["protected"], message="the unlock")
    assert daemon.call("set_importance", id="keep", value=0.9)["importance"] == 0.9
    lock = subprocess.run(cli + ["lock", "keep"], capture_output=True, text=True, env=env, timeout=60)
    assert lock.returncode == 0, lock.stderr
    daemon.wait_for(lambda: daemon.call("get_memory", id="keep")["protected"], message="the lock")


def test_orphaned_temp_files_are_removed_at_start(make_workspace, daemon_factory):
    root = make_workspace({"03-projects/a.md": memory_text("a", "A.")})
    orphan = root / "03-projects/.a.md.k2j3h4g5.tmp"
    orphan.write_text("half a write", encoding="utf-8")
    keep = root / "03-projects/.notes.txt"
    keep.write_text("not ours", encoding="utf-8")
    daemon = daemon_factory(root)
    assert daemon.has_memory("a")
    assert not orphan.exists() and keep.exists()


def test_rest_serves_odd_names_and_refuses_protected_governance_actions(make_workspace, daemon_factory):
    """Over the real HTTP server on 127.0.0.1: /api/memories never 500s on a name, and the web
    view's governance actions refuse a protected memory."""
    import json as jsonlib

    root = make_workspace({"08-rules/keep.md": memory_text("keep", "Keep this rule.", protected=True)})
    _make_odd_files(root)
    daemon = daemon_factory(root, http=True)
    base = daemon.http_url

    def rest(method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        result = http(method, base + path, body, timeout=30)
        return result.status, result.json() if result.body else {}

    status, listing = rest("GET", "/api/memories")
    assert status == 200 and "keep" in {m["id"] for m in listing["memories"]}
    status, _ = rest("GET", "/api/graph")
    assert status == 200
    before = (root / "08-rules/keep.md").read_bytes()
    for action in (
        {"action": "archive", "memory_id": "keep"},
        {"action": "set_importance", "memory_id": "keep", "importance": 0.1},
    ):
        status, reply = rest("POST", "/api/governance/actions", action)
        assert status in (403, 409, 422, 400) and "protected" in jsonlib.dumps(reply), (status, reply)
    status, reply = rest("PUT", "/api/memories/keep", {"version": 1, "content": "agent edit"})
    assert status >= 400 and "protected" in jsonlib.dumps(reply), (status, reply)
    assert (root / "08-rules/keep.md").read_bytes() == before
