"""The git CLI, used for history when the workspace is inside a git repository.

Why the CLI (``subprocess``) and not a library: ``git commit --only -- <paths>``
is exactly the operation history needs and no pure-Python library has it. It
commits the working-tree content of the named paths and nothing else: a person's
other uncommitted edits stay uncommitted, their staged changes stay staged (git
builds the commit from a temporary index and then updates only those paths in
the real one). The engine stays free of threads and sockets; a short child
process per write is fine (see docs/history.md for the cost).

Every call runs with ``LC_ALL=C`` (messages are parsed), no pager, no editor,
no prompt, hooks skipped (``--no-verify``: a person's pre-commit hook must not
make the daemon's history disappear or block a save) and signing off (no
pinentry popping up under an agent).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

GIT_TIMEOUT_S = 30.0
EMAIL = "ctxos@localhost"
LOCK_RETRIES = 5


class GitError(Exception):
    """A git command failed; the message carries git's own words."""


def git_binary() -> str | None:
    return shutil.which("git")


def find_repo(root: Path) -> Path | None:
    """The folder holding ``.git`` for ``root`` (``root`` or a parent), or None: cheap, no process."""
    here = Path(root).resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return None


BUSY_MARKERS = ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply")


def git_dir(repo: Path) -> Path | None:
    """The repository's git folder (``.git``, or where a worktree's ``.git`` file points)."""
    dot = repo / ".git"
    if dot.is_dir():
        return dot
    try:
        text = dot.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    if text.startswith("gitdir:"):
        target = Path(text.split(":", 1)[1].strip())
        return target if target.is_absolute() else (repo / target).resolve()
    return None


def busy_reason(root: Path) -> str | None:
    """Why committing now would get in a person's way (a merge, rebase, cherry-pick in progress), or None."""
    repo = find_repo(root)
    folder = git_dir(repo) if repo is not None else None
    if folder is None:
        return None
    for marker in BUSY_MARKERS:
        if (folder / marker).exists():
            what = {"MERGE_HEAD": "a merge", "CHERRY_PICK_HEAD": "a cherry-pick", "REVERT_HEAD": "a revert"}
            return f"{what.get(marker, 'a rebase')} is in progress in the repository"
    return None


def _env(author: str | None = None, email: str = EMAIL) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "LC_ALL": "C",
            "LANG": "C",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat",
            "PAGER": "cat",
            "GIT_EDITOR": "true",
            "GIT_OPTIONAL_LOCKS": "0",
        }
    )
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):  # never aim at another repository
        env.pop(key, None)
    if author:
        env.update(
            {
                "GIT_AUTHOR_NAME": author,
                "GIT_AUTHOR_EMAIL": email,
                "GIT_COMMITTER_NAME": author,
                "GIT_COMMITTER_EMAIL": email,
            }
        )
    return env


@dataclass
class GitResult:
    returncode: int
    stdout: str
    stderr: str


def run_git(
    cwd: Path,
    args: Sequence[str],
    *,
    author: str | None = None,
    email: str = EMAIL,
    check: bool = True,
    timeout: float = GIT_TIMEOUT_S,
    input_text: str | None = None,
) -> GitResult:
    """Run ``git args`` in ``cwd``; retries while another git holds ``index.lock``."""
    binary = git_binary()
    if binary is None:
        raise GitError("git is not installed")
    command = [binary, "-c", "commit.gpgsign=false", "-c", "core.quotepath=false", *args]
    for attempt in range(LOCK_RETRIES):
        try:
            proc = subprocess.run(
                command,
                cwd=str(cwd),
                env=_env(author, email),
                capture_output=True,
                timeout=timeout,
                input=input_text.encode("utf-8") if input_text is not None else None,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GitError(f"git {args[0]} could not run: {exc}") from None
        result = GitResult(
            proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
        )
        if result.returncode != 0 and "index.lock" in result.stderr and attempt < LOCK_RETRIES - 1:
            time.sleep(0.05 * (attempt + 1))  # a person's git is busy: wait a little
            continue
        if check and result.returncode != 0:
            raise GitError(f"git {' '.join(args[:2])} failed: {(result.stderr or result.stdout).strip()}")
        return result
    raise AssertionError("unreachable")  # pragma: no cover


def commit_paths(
    root: Path,
    paths: Sequence[str],
    message: str,
    author: str,
    *,
    email: str = EMAIL,
    known_tracked: frozenset[str] = frozenset(),
) -> bool:
    """Commit exactly ``paths`` (relative to ``root``) as they are on disk; True when a commit was made.

    New files are announced to git with ``add --intent-to-add`` (nothing else is
    staged); paths git ignores, and gone paths git never knew, are skipped.
    ``known_tracked``: paths the caller committed before, so listing them can be
    skipped (one process per write instead of two); if git disagrees, they are
    listed after all. False when there was nothing to commit.
    """
    if not paths:
        return False
    if all(p in known_tracked for p in paths):
        result = _commit_only(root, list(paths), message, author, email)
        if result.returncode == 0 or "did not match any file" not in result.stderr:
            return _committed(result)
    listed = run_git(root, ["ls-files", "-z", "-t", "--cached", "--others", "--exclude-standard", "--", *paths])
    tracked: set[str] = set()
    untracked: set[str] = set()
    for entry in listed.stdout.split("\0"):
        if len(entry) > 2:
            (untracked if entry[0] == "?" else tracked).add(entry[2:])
    wanted = [p for p in paths if p in tracked or p in untracked]
    if not wanted:
        return False
    new = [p for p in wanted if p in untracked and p not in tracked]
    if new:
        run_git(root, ["add", "--intent-to-add", "--", *new])
    return _committed(_commit_only(root, wanted, message, author, email))


def _commit_only(root: Path, paths: list[str], message: str, author: str, email: str) -> GitResult:
    return run_git(
        root,
        ["commit", "--quiet", "--only", "--no-verify", "--allow-empty-message", "-F", "-", "--", *paths],
        author=author,
        email=email,
        check=False,
        input_text=message,
    )


def _committed(result: GitResult) -> bool:
    if result.returncode == 0:
        return True
    text = (result.stdout + result.stderr).lower()
    if "nothing to commit" in text or "no changes added" in text or "nothing added" in text:
        return False
    raise GitError(f"git commit failed: {(result.stderr or result.stdout).strip()}")


def blob_id(data: bytes) -> str:
    """git's object id for ``data`` as a blob (no process): what a commit of these bytes stores."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def has_uncommitted_change(root: Path, rel_path: str) -> bool:
    """True when ``rel_path`` differs from ``HEAD`` (modified, or untracked and not ignored)."""
    result = run_git(root, ["status", "--porcelain=v1", "-z", "--untracked-files=all", "--", rel_path])
    return bool(result.stdout.strip("\0"))


def person_identity(root: Path) -> tuple[str, str]:
    """The person's git identity (``user.name``/``user.email``), or a name that says it is unknown."""
    name = run_git(root, ["config", "user.name"], check=False).stdout.strip()
    email = run_git(root, ["config", "user.email"], check=False).stdout.strip()
    return (name or "unknown person (edit found on disk by ctxos)", email or "unknown@localhost")


@dataclass
class GitVersion:
    commit: str
    author: str
    date: str  # ISO 8601
    subject: str
    body: str
    path: str  # the file's path (relative to the repository top) in this commit
    added: int
    removed: int


_FIELD = "\x1f"
_RECORD = "\x1e"


def file_log(root: Path, rel_path: str, limit: int = 200) -> list[GitVersion]:
    """Commits that changed ``rel_path`` (following renames), newest first."""
    fmt = _RECORD + _FIELD.join(["%H", "%an", "%aI", "%s", "%b"]) + _FIELD
    result = run_git(
        root,
        ["log", "--follow", f"--max-count={limit}", "--numstat", "-z", f"--format={fmt}", "--", rel_path],
        check=False,
    )
    if result.returncode != 0:
        if "does not have any commits" in result.stderr or "bad default revision" in result.stderr:
            return []
        raise GitError(f"git log failed: {result.stderr.strip()}")
    versions: list[GitVersion] = []
    for record in result.stdout.split(_RECORD):
        if not record.strip("\0\n"):
            continue
        parts = record.split(_FIELD)
        if len(parts) < 6:
            continue
        commit, author, date, subject, body, stat = parts[0], parts[1], parts[2], parts[3], parts[4], parts[5]
        added = removed = 0
        path = ""
        fields = [f.lstrip("\n") for f in stat.strip("\0\n").split("\0")]
        if fields and fields[0]:
            numbers = fields[0].split("\t")
            if len(numbers) >= 3:
                added = int(numbers[0]) if numbers[0].isdigit() else 0
                removed = int(numbers[1]) if numbers[1].isdigit() else 0
                # "a\tb\tpath" or, for a rename, "a\tb\t" followed by old and new path fields
                path = numbers[2] or (fields[2] if len(fields) > 2 else (fields[1] if len(fields) > 1 else ""))
        versions.append(GitVersion(commit, author, date, subject, body.strip(), path, added, removed))
    return versions


def show_file(root: Path, commit: str, repo_path: str) -> str | None:
    """The file's text at ``commit`` (``repo_path`` relative to the repository top); None if absent there."""
    result = run_git(root, ["show", f"{commit}:{repo_path}"], check=False)
    if result.returncode != 0:
        return None
    return result.stdout


def repo_relative(root: Path, rel_path: str) -> str:
    """``rel_path`` (relative to the workspace) relative to the repository top."""
    repo = find_repo(root)
    if repo is None:
        return rel_path
    return (Path(root).resolve() / rel_path).relative_to(repo).as_posix()
