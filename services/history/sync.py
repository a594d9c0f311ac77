"""The optional team sync: ``git pull --rebase`` then ``git push`` on a schedule (``history.git_sync``).

Nothing is ever lost:

- a person's uncommitted edits are set aside by ``--autostash`` and put back;
- when the rebase stops on a conflict it is aborted (``git rebase --abort``), which
  restores the branch exactly as it was (local commits included) and the autostash;
  the conflict is recorded in ``<state dir>/history/sync.json`` and shown as a
  governance finding (``sync_conflict``) until a later sync succeeds;
- a rejected push (the remote moved on) is simply tried again at the next run.

Call under the write lock (the daemon runs it as a writing job): no write may land
in the middle of a rebase.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..atomic import atomic_write_text
from ..workspace import state_dir
from . import gitrepo

SYNC_FILENAME = ("history", "sync.json")
FINDING_KIND = "sync_conflict"


@dataclass
class SyncResult:
    status: str  # "ok" | "conflict" | "error" | "skipped"
    message: str
    pulled: bool = False
    pushed: bool = False
    files: list[str] = field(default_factory=list)
    remote: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "message": self.message,
            "pulled": self.pulled,
            "pushed": self.pushed,
            "files": list(self.files),
            "remote": self.remote,
        }


def _state_file(root: Path) -> Path:
    return state_dir(root).joinpath(*SYNC_FILENAME)


def load_state(root: Path) -> dict[str, Any]:
    try:
        data = json.loads(_state_file(root).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_state(root: Path, result: SyncResult) -> None:
    state = load_state(root)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    state["last_run"] = {"at": now, **result.to_dict()}
    if result.status == "conflict":
        previous = state.get("conflict") or {}
        state["conflict"] = {"since": previous.get("since", now), "at": now, **result.to_dict()}
    elif result.status == "ok":
        state["conflict"] = None
    path = _state_file(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(state, indent=1) + "\n")


def _target(root: Path, configured: str | None) -> tuple[str, str] | None:
    """(remote, branch) to pull from and push to; None on a detached HEAD."""
    branch = gitrepo.run_git(root, ["symbolic-ref", "--quiet", "--short", "HEAD"], check=False).stdout.strip()
    if not branch:
        return None
    remote = configured
    if not remote:
        remote = gitrepo.run_git(root, ["config", f"branch.{branch}.remote"], check=False).stdout.strip() or "origin"
    merge = gitrepo.run_git(root, ["config", f"branch.{branch}.merge"], check=False).stdout.strip()
    upstream_branch = merge.removeprefix("refs/heads/") if merge and not configured else branch
    return remote, upstream_branch


def _rebasing(root: Path) -> bool:
    git_dir = Path(gitrepo.run_git(root, ["rev-parse", "--absolute-git-dir"]).stdout.strip())
    return (git_dir / "rebase-merge").exists() or (git_dir / "rebase-apply").exists()


def sync(root: Path, remote: str | None = None) -> SyncResult:
    """Pull (rebase, autostash) and push; a conflict is aborted and recorded, never left half-done."""
    root = Path(root)
    if gitrepo.git_binary() is None or gitrepo.find_repo(root) is None:
        return SyncResult("skipped", "the workspace is not a git repository")
    try:
        target = _target(root, remote)
        if target is None:
            result = SyncResult("error", "HEAD is detached: check out a branch to sync")
        else:
            result = _pull_and_push(root, *target)
    except gitrepo.GitError as exc:
        result = SyncResult("error", str(exc))
    _save_state(root, result)
    return result


def _pull_and_push(root: Path, remote: str, branch: str) -> SyncResult:
    where = f"{remote}/{branch}"
    pull = gitrepo.run_git(root, ["pull", "--rebase", "--autostash", "--no-edit", remote, branch], check=False)
    output = (pull.stdout + "\n" + pull.stderr).strip()
    if pull.returncode != 0:
        if _rebasing(root):
            files = [
                f
                for f in gitrepo.run_git(
                    root, ["diff", "--name-only", "--diff-filter=U"], check=False
                ).stdout.splitlines()
                if f
            ]
            gitrepo.run_git(root, ["rebase", "--abort"])
            return SyncResult(
                "conflict",
                (
                    f"pulling {where} conflicts with local commits in {', '.join(files) or 'some files'}; the pull was "
                    "undone (local commits and edits are as they were). Resolve it by hand: git pull --rebase, fix "
                    "the files, git rebase --continue."
                ),
                files=files,
                remote=where,
            )
        return SyncResult("error", f"git pull from {where} failed: {_last_lines(output)}", remote=where)
    if "autostash resulted in conflicts" in output.lower():
        return SyncResult(
            "conflict",
            (
                f"pulled {where}, but your uncommitted edits conflict with it; they are safe in `git stash list` "
                "(apply them by hand with git stash pop)."
            ),
            pulled=True,
            remote=where,
        )
    ahead = gitrepo.run_git(root, ["rev-list", "--count", f"{remote}/{branch}..HEAD"], check=False).stdout.strip()
    pushed = False
    if ahead not in ("", "0"):
        push = gitrepo.run_git(root, ["push", remote, f"HEAD:{branch}"], check=False)
        if push.returncode != 0:
            return SyncResult(
                "error",
                f"git push to {where} failed (tried again next run): {_last_lines(push.stderr or push.stdout)}",
                pulled=True,
                remote=where,
            )
        pushed = True
    return SyncResult("ok", f"in step with {where}", pulled=True, pushed=pushed, remote=where)


def _last_lines(text: str, n: int = 3) -> str:
    return " / ".join(line.strip() for line in text.strip().splitlines()[-n:] if line.strip())


def state_mtime(root: Path) -> int:
    """Changes when a sync ran (governance caches its report on it)."""
    try:
        return _state_file(root).stat().st_mtime_ns
    except OSError:
        return 0


def conflict_record(root: Path) -> dict[str, Any] | None:
    """The unresolved sync conflict, if any (for governance)."""
    record = load_state(root).get("conflict")
    return record if isinstance(record, dict) else None


def sync_findings(root: Path) -> list[Any]:
    """The unresolved sync conflict as a governance ``Finding`` (kind ``sync_conflict``), or nothing."""
    record = conflict_record(root)
    if not record:
        return []
    from ..governance import Finding

    files = [str(f) for f in record.get("files") or []]
    return [
        Finding(
            FINDING_KIND,
            [],
            files or ["(git sync)"],
            str(record.get("message") or "git sync conflict"),
            {
                "remote": record.get("remote"),
                "files": files,
                "since": record.get("since"),
                "last_try": record.get("at"),
            },
            {
                "action": "fix",
                "suggestion": "resolve by hand: git pull --rebase, fix the files, git rebase --continue; "
                "the finding goes away after the next successful sync",
            },
            command="git pull --rebase",
            severity="warning",
        )
    ]
