"""History a person can read and revert (issue 17): real daemon, real git, real MCP sessions.

- git mode: each write by the daemon is a commit authored ``ctxos (<client>)``; a
  person's uncommitted edit to another file is not committed and their staged
  change stays staged; archive is one commit (old and new path);
- ``ctxos history`` / ``ctxos revert`` (CLI, through the daemon), in git and journal mode;
- the journal keeps the last N versions; a person's edit overwritten by an agent is kept.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_helpers import daemon_factory  # noqa: F401  (fixture)
from mcp import Client, StdioServerParameters
from mcp_helpers import mcp_http_client
from mcp_types import Implementation

pytestmark = [pytest.mark.slow]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

CTXOS = shutil.which("ctxos") or str(Path(sys.executable).with_name("ctxos"))

PERSON_FILES = {
    "03-projects/apollo.md": """\
        ---
        id: apollo
        type: project
        l0: Apollo is the billing service rewrite in Rust
        version: 1
        ---
        Apollo replaces the old billing service.
        """,
    "03-projects/zephyr.md": """\
        ---
        id: zephyr
        type: project
        l0: Zephyr is the mobile app
        version: 1
        ---
        Zephyr ships every two weeks.
        """,
}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def git_workspace(make_workspace) -> Path:
    root = make_workspace(PERSON_FILES)
    git(root, "init", "-q")
    git(root, "config", "user.name", "Pat Person")
    git(root, "config", "user.email", "pat@example.com")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "my memories")
    return root


def ctxos(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    result = subprocess.run(
        [CTXOS, "--workspace", str(root), *args], capture_output=True, text=True, env=env, timeout=120
    )
    if check:
        assert result.returncode == 0, (result.stdout, result.stderr)
    return result


def _stdio(root: Path) -> StdioServerParameters:
    env = {
        "CTXOS_RUNTIME_DIR": os.environ["CTXOS_RUNTIME_DIR"],
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    return StdioServerParameters(command=CTXOS, args=["--workspace", str(root), "mcp", "--no-start"], env=env)


@needs_git
@pytest.mark.anyio
async def test_each_write_is_a_commit_by_the_daemon_for_the_client(make_workspace, daemon_factory):  # noqa: F811
    root = git_workspace(make_workspace)
    # A person's work in progress: an unstaged edit to one file, a staged edit to another.
    (root / "03-projects/zephyr.md").write_text((root / "03-projects/zephyr.md").read_text() + "Draft: v2 soon.\n")
    (root / "notes.txt").write_text("staged by me\n")
    git(root, "add", "notes.txt")
    daemon = daemon_factory(root)

    async with Client(_stdio(root), client_info=Implementation(name="claude-code", version="2.1")) as client:
        saved = await client.call_tool(
            "save_memory",
            {
                "type": "decision",
                "l0": "Billing uses Postgres for invoices",
                "content": "Invoices live in Postgres; the ledger is append-only.",
            },
        )
        assert not saved.is_error, saved.content
        memory_id = saved.structured_content["id"]
        updated = await client.call_tool(
            "save_memory",
            {
                "type": "project",
                "id": "apollo",
                "expected_version": 1,
                "l0": "Apollo is the billing service rewrite in Rust",
                "content": "Apollo replaces billing v1.",
            },
        )
        assert not updated.is_error, updated.content
        logged = await client.call_tool("log_session", {"event": "decided on Postgres"})
        assert not logged.is_error

    full_log = git(root, "log", "--format=%an|%s").splitlines()
    # Router files are committed too, one commit per regeneration (by the scheduler, at its own times).
    assert "ctxos (scheduler)|router job: claude.md, _index.yaml" in full_log, full_log
    log = [line for line in full_log if not line.startswith("ctxos (scheduler)")]
    assert log[0].startswith("ctxos (claude-code via MCP)|log_session: daily-"), log
    assert log[1] == "ctxos (claude-code via MCP)|save_memory: apollo (v2)", log
    assert log[2] == f"ctxos (claude-code via MCP)|save_memory: {memory_id} (v1)", log
    assert log[3] == "Pat Person|my memories"
    # Each agent commit holds exactly the file it wrote.
    assert git(root, "show", "--name-only", "--format=", "HEAD~1").split() == ["03-projects/apollo.md"]
    # The person's unstaged edit is not committed; the staged file is still staged, not committed.
    status = git(root, "status", "--porcelain").splitlines()
    assert " M 03-projects/zephyr.md" in status and "A  notes.txt" in status, status
    assert "Draft: v2 soon." not in git(root, "show", "HEAD:03-projects/zephyr.md")
    with pytest.raises(subprocess.CalledProcessError):
        git(root, "cat-file", "-e", "HEAD:notes.txt")
    history_status = daemon.status()["history"]
    assert history_status["mode"] == "git" and history_status["commits"] >= 3 and history_status["failures"] == 0

    # History and revert through the CLI (the daemon runs): apollo's v1 back as v3.
    hist = json.loads(ctxos(root, "history", "apollo", "--json").stdout)
    assert hist["mode"] == "git"
    assert [(v["n"], v["who"], v["tool"]) for v in hist["versions"]] == [
        (2, "ctxos (claude-code via MCP)", "save_memory"),
        (1, "Pat Person", "commit"),
    ]
    text = ctxos(root, "history", "apollo").stdout
    assert "save_memory: apollo (v2)" in text and "Pat Person" in text
    diff = ctxos(root, "history", "apollo", "--diff", "2").stdout
    assert "-Apollo replaces the old billing service." in diff and "+Apollo replaces billing v1." in diff
    reverted = ctxos(root, "revert", "apollo", "--to", "1")
    assert "now version 3" in reverted.stdout
    body = (root / "03-projects/apollo.md").read_text()
    assert "Apollo replaces the old billing service." in body and "version: 3" in body
    author, subject = git(root, "log", "-1", "--format=%an|%s", "--", "03-projects").strip().split("|")
    assert author.startswith("ctxos (CLI as ") and subject == "revert: apollo (v3)"
    # still untouched: the person's own work in progress
    status = git(root, "status", "--porcelain").splitlines()
    assert " M 03-projects/zephyr.md" in status and "A  notes.txt" in status, status

    # Archive: the move is one commit (git sees a rename), and history follows it.
    ctxos(root, "archive", "apollo")
    archive_commit = git(root, "log", "-1", "--format=%H", "--", "_archive").strip()
    assert git(root, "show", "--name-status", "--format=", "-M", archive_commit).split() == [
        "R100",
        "03-projects/apollo.md",
        "_archive/03-projects/apollo.md",
    ]
    archived = json.loads(ctxos(root, "history", "_archive/03-projects/apollo.md", "--json").stdout)
    assert archived["count"] == 4 and archived["versions"][0]["tool"] == "archive"


@needs_git
def test_an_agent_overwriting_a_persons_uncommitted_edit_keeps_it_first(make_workspace, daemon_factory):  # noqa: F811
    """The file the daemon is about to replace differs from HEAD: that version is committed first,
    under the person's own name, so reverting the agent's change brings the person's text back."""
    root = git_workspace(make_workspace)
    path = root / "03-projects/zephyr.md"
    path.write_text(path.read_text().replace("every two weeks", "every week"))
    daemon = daemon_factory(root)
    daemon.wait_for(
        lambda: (
            "every week"
            in daemon.call("get_memory", id="zephyr")["l2"] + daemon.call("get_memory", id="zephyr").get("l1", "")
        ),
        15,
        message="the edit indexed",
    )
    daemon.call(
        "save_memory",
        type="project",
        id="zephyr",
        expected_version=1,
        l0="Zephyr is the mobile app",
        content="Zephyr is paused.",
        _client="cursor via MCP",
    )
    log = [
        line for line in git(root, "log", "--format=%an|%s").splitlines() if not line.startswith("ctxos (scheduler)")
    ]  # router commits come at their own times
    assert log[:2] == [
        "ctxos (cursor via MCP)|save_memory: zephyr (v2)",
        "Pat Person|edit on disk: 03-projects/zephyr.md",
    ], log
    person_commit = git(
        root, "log", "-1", "--format=%H", "--fixed-strings", "--grep=edit on disk: 03-projects/zephyr.md"
    ).strip()  # not HEAD~1: a router
    assert "every week" in git(root, "show", f"{person_commit}:03-projects/zephyr.md")  # commit may sit between
    hist = daemon.call("history", id="zephyr")
    assert [v["tool"] for v in hist["versions"]] == ["save_memory", "edit on disk", "commit"]
    daemon.call("revert", id="zephyr", to=2)
    assert "every week" in path.read_text()


def test_journal_without_git_keeps_versions_and_reverts(make_workspace, daemon_factory):  # noqa: F811
    root = make_workspace(PERSON_FILES)
    config = root / "_config.yaml"
    config.write_text(config.read_text().replace("journal_versions: 20", "journal_versions: 3"))
    path = root / "03-projects/apollo.md"
    path.write_text(path.read_text().replace("old billing service", "legacy billing system"))  # a person's edit
    daemon = daemon_factory(root)
    version = 1
    for n in range(1, 5):
        saved = daemon.call(
            "save_memory",
            type="project",
            id="apollo",
            expected_version=version,
            l0="Apollo is the billing service rewrite in Rust",
            content=f"Revision {n}.",
            _client="codex via MCP",
        )
        version = saved["version"]
    hist = daemon.call("history", id="apollo")
    assert hist["mode"] == "journal"
    # the person's edit (kept before the first save) and four saves; only the newest three are kept
    assert [v["n"] for v in hist["versions"]] == [5, 4, 3]
    assert {v["who"] for v in hist["versions"]} == {"codex via MCP"}
    older = daemon.call("history_version", id="apollo", n=4)
    assert "Revision 3." in older["text"] and "-Revision 2." in older["diff"] and "+Revision 3." in older["diff"]
    assert "-Revision 3." in older["diff_to_current"] and "+Revision 4." in older["diff_to_current"]
    oldest = daemon.call("history_version", id="apollo", n=3)  # the oldest kept: diffed against nothing
    assert "Revision 2." in oldest["text"] and oldest["diff"].startswith("--- (before)")
    result = daemon.call("revert", id="apollo", to=3)
    assert result["changed"] and result["version"] == 6
    assert "Revision 2." in path.read_text()
    journal_dir = root / ".ctxos" / "history" / "journal"
    assert len(list(journal_dir.glob("apollo-*.jsonl"))) == 1
    text = ctxos(root, "history", "apollo").stdout
    assert "revert" in text and "codex via MCP" in text


def test_revert_refuses_protected_and_newer_person_edits(make_workspace, daemon_factory):  # noqa: F811
    from ctxos.client import RpcCallError

    root = make_workspace(PERSON_FILES)
    daemon = daemon_factory(root)
    daemon.call(
        "save_memory",
        type="project",
        id="apollo",
        expected_version=1,
        l0="Apollo is the billing service rewrite in Rust",
        content="Second text.",
    )
    path = root / "03-projects/apollo.md"
    # a stale expected_version is a conflict; nothing changes
    before = path.read_bytes()
    with pytest.raises(RpcCallError) as err:
        daemon.call("revert", id="apollo", to=1, expected_version=1)
    assert err.value.data["reason"] == "conflict" and path.read_bytes() == before
    # a person's edit that kept the version number: the checksum the reverter saw no longer matches
    seen = daemon.call("get_memory", id="apollo")
    path.write_text(path.read_text().replace("Second text.", "Second text, edited by hand."))
    daemon.wait_for(
        lambda: (
            "edited by hand"
            in daemon.call("get_memory", id="apollo")["l1"] + daemon.call("get_memory", id="apollo")["l2"]
        ),
        15,
        message="the hand edit indexed",
    )
    before = path.read_bytes()
    with pytest.raises(RpcCallError) as err:
        daemon.call("revert", id="apollo", to=1, expected_version=seen["version"], expected_checksum=seen["checksum"])
    assert err.value.data["reason"] == "conflict" and "edited since you looked" in err.value.message
    assert path.read_bytes() == before
    # protected: refused
    ctxos(root, "lock", "apollo")
    before = path.read_bytes()
    refused = ctxos(root, "revert", "apollo", "--to", "1", check=False)
    assert refused.returncode == 1 and "protected" in refused.stderr
    assert path.read_bytes() == before


@needs_git
@pytest.mark.anyio
async def test_http_mcp_writes_name_the_client_too(make_workspace, daemon_factory):  # noqa: F811
    """The daemon's own MCP endpoint (Streamable HTTP) attributes writes like the stdio bridge does."""
    root = git_workspace(make_workspace)
    daemon = daemon_factory(root, http=True)
    assert daemon.http_url, daemon.output()[-2000:]
    async with mcp_http_client(
        daemon.http_url + "/mcp", client_info=Implementation(name="cursor", version="1")
    ) as client:
        saved = await client.call_tool(
            "save_memory",
            {
                "type": "decision",
                "l0": "Releases are cut on Thursdays by the on-call engineer",
                "content": "Thursday releases.",
            },
        )
        assert not saved.is_error, saved.content
    memory_id = saved.structured_content["id"]
    assert f"ctxos (cursor via MCP)|save_memory: {memory_id} (v1)" in git(root, "log", "--format=%an|%s").splitlines()
