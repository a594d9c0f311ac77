"""The scheduled team sync (``history.git_sync``): two real clones of a bare repository in tmp
(real git, no network), a real daemon on one of them.

- in step: a memory pushed from the other clone arrives and is served; an agent's save is pushed;
- a conflict: the pull is undone (the local commit and a person's uncommitted edit are intact, no
  rebase left half-done) and a ``sync_conflict`` governance finding says what happened.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from daemon_helpers import daemon_factory  # noqa: F401  (fixture)
from web_helpers import http

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")]

SYNC_CONFIG = """\
history:
  git_sync: true
  git_sync_interval: 1
schedule:
  after_change_delay: 0.2
governance:
  scratch_auto_archive: false
"""

APOLLO = """---
id: apollo
type: project
l0: Apollo is the billing service rewrite in Rust
version: 1
---
Apollo replaces the old billing service.
"""


def git(root: Path, *args: str, check: bool = True) -> str:
    result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if check:
        assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def clones(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A bare 'team' repository holding a workspace, and two clones of it (A runs the daemon)."""
    from ctxos.services.workspace import init_workspace

    seed = tmp_path / "seed"
    init_workspace(seed, seed_examples=False)
    (seed / "_config.yaml").write_text(SYNC_CONFIG)
    (seed / "03-projects").mkdir(exist_ok=True)
    (seed / "03-projects/apollo.md").write_text(APOLLO)
    bare = tmp_path / "team.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    git(seed, "init", "-q", "-b", "main")
    for clone in (seed,):
        git(clone, "config", "user.name", "Seed")
        git(clone, "config", "user.email", "seed@example.com")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "team workspace")
    git(seed, "push", "-q", str(bare), "main")
    a, b = tmp_path / "a", tmp_path / "b"
    for clone, name in ((a, "Ann"), (b, "Bob")):
        subprocess.run(["git", "clone", "-q", str(bare), str(clone)], check=True)
        git(clone, "config", "user.name", name)
        git(clone, "config", "user.email", f"{name.lower()}@example.com")
    return bare, a, b


def test_sync_pulls_and_pushes_in_step(tmp_path, daemon_factory):  # noqa: F811
    bare, a, b = clones(tmp_path)
    daemon = daemon_factory(a)
    # Bob adds a memory and pushes; Ann's daemon pulls it and serves it.
    (b / "06-decisions").mkdir(exist_ok=True)
    (b / "06-decisions/use-postgres.md").write_text(
        "---\nid: use-postgres\ntype: decision\nl0: Invoices are stored in Postgres\n---\nPostgres it is.\n"
    )
    git(b, "add", "-A")
    git(b, "commit", "-q", "-m", "Bob: postgres")
    git(b, "push", "-q")
    daemon.wait_for(lambda: daemon.has_memory("use-postgres"), 30, message="Bob's memory pulled and indexed")
    # Ann's agent saves; the sync pushes it; Bob pulls it.
    daemon.call(
        "save_memory",
        type="project",
        id="apollo",
        expected_version=1,
        l0="Apollo is the billing service rewrite in Rust",
        content="Apollo ships in May.",
        _client="claude-code via MCP",
    )
    daemon.wait_for(
        lambda: "save_memory: apollo (v2)" in git(bare, "log", "--format=%s", "main"),
        30,
        message="the agent's commit pushed",
    )
    git(b, "pull", "-q", "--rebase")
    assert "Apollo ships in May." in (b / "03-projects/apollo.md").read_text()
    assert git(b, "log", "-1", "--format=%an", "--", "03-projects/apollo.md").strip() == "ctxos (claude-code via MCP)"
    status = daemon.status()
    assert status["jobs"]["git_sync"]["last_ok"] is True
    assert status["jobs"]["git_sync"]["last_result"]["status"] == "ok"


def test_sync_conflict_becomes_a_finding_and_nothing_is_lost(tmp_path, daemon_factory):  # noqa: F811
    bare, a, b = clones(tmp_path)
    (b / "03-projects/apollo.md").write_text(APOLLO.replace("the old billing service", "Bob's version"))
    git(b, "commit", "-q", "-am", "Bob: apollo")
    git(b, "push", "-q")
    (a / "03-projects/apollo.md").write_text(APOLLO.replace("the old billing service", "Ann's version"))
    git(a, "commit", "-q", "-am", "Ann: apollo")
    local_head = git(a, "rev-parse", "HEAD").strip()
    (a / "notes.txt").write_text("Ann's uncommitted notes\n")
    git(a, "add", "notes.txt")  # a person's staged work in progress
    daemon = daemon_factory(a, http=True)

    def finding():
        report = daemon.call("governance")
        return next((f for f in report["findings"] if f["kind"] == "sync_conflict"), None)

    daemon.wait_for(lambda: finding() is not None, 30, message="the sync conflict reported")
    found = finding()
    assert found["paths"] == ["03-projects/apollo.md"] and "conflicts" in found["reason"]
    assert found["evidence"]["remote"] == "origin/main" and found["command"] == "git pull --rebase"
    # Nothing lost: the local commit is still on the branch (the daemon may have added router commits on
    # top), Bob's is not merged in, no rebase is left half-done, the staged work is still staged.
    git(a, "merge-base", "--is-ancestor", local_head, "HEAD")
    assert "Bob: apollo" not in git(a, "log", "--format=%s")
    assert not (a / ".git" / "rebase-merge").exists() and not (a / ".git" / "rebase-apply").exists()
    assert "Ann's version" in (a / "03-projects/apollo.md").read_text()
    assert "A  notes.txt" in git(a, "status", "--porcelain").splitlines()
    assert (a / "notes.txt").read_text() == "Ann's uncommitted notes\n"
    # Bob's commit is on the remote, untouched.
    assert "Bob's version" in git(bare, "show", "main:03-projects/apollo.md")
    # The CLI shows it in the queue, and so does REST (the page's governance cards).
    out = subprocess.run(
        ["ctxos", "--workspace", str(a), "governance", "--json"], capture_output=True, text=True, check=True
    ).stdout
    assert any(f["kind"] == "sync_conflict" for f in json.loads(out)["findings"])
    text = subprocess.run(
        ["ctxos", "--workspace", str(a), "governance"], capture_output=True, text=True, check=True
    ).stdout
    assert "Team sync stopped on a conflict (git)" in text and "git pull --rebase" in text
    cards = http("GET", daemon.http_url + "/api/governance").json()["findings"]
    card = next(f for f in cards if f["kind"] == "sync_conflict")
    assert card["suggestion"].startswith("resolve by hand: git pull --rebase") and "dismiss" in card["actions"]
