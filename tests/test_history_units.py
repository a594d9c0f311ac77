"""History's engine parts in process, with real git repositories in tmp (no daemon): which paths a
commit takes, mode selection (no git binary, not a repository, ``off``), and the sync state."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ctxos.services.engine import Engine
from ctxos.services.history import Actor, gitrepo, memory_history, scope
from ctxos.services.history import sync as team_sync
from ctxos.services.workspace import init_workspace

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(root: Path, *args: str, check: bool = True) -> str:
    result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if check:
        assert result.returncode == 0, (args, result.stderr)
    return result.stdout


def repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Pat")
    git(path, "config", "user.email", "pat@example.com")
    return path


@needs_git
def test_commit_paths_takes_only_what_it_is_given(tmp_path):
    root = repo(tmp_path / "r")
    (root / ".gitignore").write_text("ignored.md\n")
    (root / "a.md").write_text("a\n")
    (root / "ignored.md").write_text("secret\n")
    (root / "staged.md").write_text("staged\n")
    git(root, "add", "staged.md")
    # First commit of a repository without HEAD; an ignored path and a never-known gone path are skipped.
    assert gitrepo.commit_paths(root, ["a.md", "ignored.md", "gone.md"], "save a\n", "ctxos (t)")
    assert git(root, "show", "--name-only", "--format=%an", "HEAD").split() == ["ctxos", "(t)", "a.md"]
    assert "A  staged.md" in git(root, "status", "--porcelain").splitlines()
    # Nothing changed: no empty commit.
    assert gitrepo.commit_paths(root, ["a.md"], "again\n", "ctxos (t)") is False
    # A deletion of a tracked file is committed.
    (root / "a.md").unlink()
    assert gitrepo.commit_paths(root, ["a.md"], "remove a\n", "ctxos (t)")
    assert git(root, "show", "--name-status", "--format=", "HEAD").split() == ["D", "a.md"]


@needs_git
def test_workspace_inside_a_larger_repository(tmp_path):
    outer = repo(tmp_path / "outer")
    (outer / "README").write_text("code\n")
    git(outer, "add", "-A")
    git(outer, "commit", "-q", "-m", "code")
    root = outer / "memory"
    init_workspace(root, seed_examples=False)
    engine = Engine(root)
    engine.load()
    try:
        assert engine.history.mode() == "git"
        with scope(Actor("claude-code via MCP", "save_memory")):
            saved = engine.save_memory(type="decision", l0="Tabs are for indentation here", content="Tabs.")
        assert (
            git(outer, "log", "-1", "--format=%an|%s").strip()
            == f"ctxos (claude-code via MCP)|save_memory: {saved.id} (v1)"
        )
        assert git(outer, "show", "--name-only", "--format=", "HEAD").split() == [f"memory/{saved.rel_path}"]
        history = memory_history(engine, saved.id)
        assert [v["tool"] for v in history["versions"]] == ["save_memory"]
    finally:
        engine.close()


def test_mode_follows_the_workspace_and_the_config(tmp_path, monkeypatch):
    root = tmp_path / "ws"
    init_workspace(root, seed_examples=False)
    engine = Engine(root)
    engine.load()
    try:
        assert engine.history.mode() == "journal"  # not a repository
        if shutil.which("git"):
            repo(root)
            assert engine.history.mode() == "git"
            monkeypatch.setenv("PATH", str(tmp_path / "no-binaries"))  # a machine without git
            assert engine.history.mode() == "journal"
        config = root / "_config.yaml"
        text = config.read_text()
        assert "  mode: auto                  # auto (git" in text
        config.write_text(text.replace("  mode: auto                  # auto (git", "  mode: off  # (git"))
        engine.reload_config()
        assert engine.history.mode() == "off"
        engine.save_memory(type="scratch", l0="Nothing records this scratch note", content="x")
        assert not (root / ".ctxos" / "history" / "journal").exists()
    finally:
        engine.close()


@needs_git
def test_sync_conflict_is_recorded_and_cleared_by_a_good_sync(tmp_path):
    bare = tmp_path / "team.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    seed = repo(tmp_path / "seed")
    (seed / "m.md").write_text("one\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "seed")
    git(seed, "push", "-q", str(bare), "main")
    a, b = tmp_path / "a", tmp_path / "b"
    for clone in (a, b):
        subprocess.run(["git", "clone", "-q", str(bare), str(clone)], check=True)
        git(clone, "config", "user.name", clone.name)
        git(clone, "config", "user.email", f"{clone.name}@example.com")
    (b / "m.md").write_text("bob\n")
    git(b, "commit", "-q", "-am", "bob")
    git(b, "push", "-q")
    (a / "m.md").write_text("ann\n")
    git(a, "commit", "-q", "-am", "ann")
    result = team_sync.sync(a)
    assert result.status == "conflict" and result.files == ["m.md"]
    assert (a / "m.md").read_text() == "ann\n" and git(a, "log", "-1", "--format=%s").strip() == "ann"
    [finding] = team_sync.sync_findings(a)
    assert finding.kind == "sync_conflict" and finding.paths == ["m.md"]
    # A person resolves it (keeps Bob's text on top of theirs); the next sync pushes and clears the finding.
    git(a, "fetch", "-q")
    git(a, "reset", "-q", "--hard", "origin/main")
    (a / "m.md").write_text("ann and bob\n")
    git(a, "commit", "-q", "-am", "merged by hand")
    result = team_sync.sync(a)
    assert result.status == "ok" and result.pushed, result
    assert team_sync.sync_findings(a) == []
    assert git(bare, "show", "main:m.md") == "ann and bob\n"
    plain = tmp_path / "plain"
    plain.mkdir()
    assert team_sync.sync(plain).status == "skipped"


@needs_git
def test_no_commit_during_a_persons_merge_then_caught_up(tmp_path):
    """A person is in the middle of a merge: the daemon's writes stand but are not committed into it;
    the next commit after the merge carries them, still under the daemon's name."""
    root = tmp_path / "ws"
    init_workspace(root, seed_examples=False)
    repo(root)
    (root / "notes.txt").write_text("base\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    git(root, "checkout", "-q", "-b", "other")
    (root / "notes.txt").write_text("other\n")
    git(root, "commit", "-q", "-am", "other")
    git(root, "checkout", "-q", "main")
    (root / "notes.txt").write_text("main\n")
    git(root, "commit", "-q", "-am", "main")
    assert subprocess.run(["git", "-C", str(root), "merge", "-q", "other"], capture_output=True).returncode != 0
    engine = Engine(root)
    engine.load()
    try:
        with scope(Actor("codex via MCP", "save_memory")):
            first = engine.save_memory(type="decision", l0="Merges are resolved by the author", content="Yes.")
        head = git(root, "rev-parse", "HEAD")
        assert engine.history.status()["waiting_to_commit"] == [first.rel_path]
        assert "merge is in progress" in engine.history.status()["last_error"]
        git(root, "merge", "--abort")
        assert git(root, "rev-parse", "HEAD") == head
        with scope(Actor("codex via MCP", "save_memory")):
            second = engine.save_memory(type="decision", l0="Rebases are fine on feature branches", content="Ok.")
        assert engine.history.status()["waiting_to_commit"] == []
        assert sorted(git(root, "show", "--name-only", "--format=", "HEAD").split()) == sorted(
            [first.rel_path, second.rel_path]
        )
        assert git(root, "log", "-1", "--format=%an").strip() == "ctxos (codex via MCP)"
        assert "Also written earlier by ctxos for codex via MCP" in git(root, "log", "-1", "--format=%B")
    finally:
        engine.close()


@needs_git
def test_archiving_a_file_with_a_persons_uncommitted_edit_commits_their_edit_first(tmp_path):
    """The move commit is a pure rename by the daemon; the person's edit is its own commit under their name."""
    root = tmp_path / "ws"
    init_workspace(root, seed_examples=False)
    (root / "09-scratch").mkdir(exist_ok=True)
    note = root / "09-scratch/idea.md"
    note.write_text("---\nid: idea\ntype: scratch\nl0: A half-formed idea about caching\n---\nCache it.\n")
    repo(root)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "mine")
    note.write_text(note.read_text() + "Maybe in Redis.\n")  # the person's uncommitted edit
    engine = Engine(root)
    engine.load()
    try:
        from ctxos.services.writes import archive_memory

        with scope(Actor("scheduler", "scratch_expiry job")):
            archive_memory(root, engine.store, "idea")
        log = git(root, "log", "--format=%an|%s").splitlines()
        assert log[:2] == ["ctxos (scheduler)|scratch_expiry job: idea", "Pat|edit on disk: 09-scratch/idea.md"], log
        assert git(root, "show", "-M", "--name-status", "--format=", "HEAD").split() == [
            "R100",
            "09-scratch/idea.md",
            "_archive/09-scratch/idea.md",
        ]
        assert "Maybe in Redis." in git(root, "show", "HEAD~1:09-scratch/idea.md")
    finally:
        engine.close()


@needs_git
def test_an_import_is_one_commit_naming_the_cli(tmp_path):
    """``ctxos import`` (in-process, no daemon): every imported file goes through the gate, one commit."""
    root = tmp_path / "ws"
    init_workspace(root, seed_examples=False)
    repo(root)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "mine")
    source = Path(__file__).parent / "fixtures" / "import" / "basic-memory" / "project"
    ctxos = shutil.which("ctxos") or str(Path(sys.executable).with_name("ctxos"))
    done = subprocess.run([ctxos, "--workspace", str(root), "import", str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    author, subject = git(root, "log", "-1", "--format=%an|%s").strip().split("|")
    assert author.startswith("ctxos (CLI as ") and subject.startswith("import: ")
    committed = git(root, "show", "--name-only", "--format=", "HEAD").split()
    assert committed and all(path.endswith(".md") for path in committed)
    assert git(root, "status", "--porcelain").strip() == ""
