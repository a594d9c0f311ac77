"""Reading history back: the versions of one memory, the text of one, a diff, and revert.

The same calls answer in both modes: in git mode a version is a commit that
changed the file (renames followed, so an archived memory keeps its past); in
journal mode it is a journal entry. Versions are numbered from 1 (the oldest
kept) and listed newest first; in journal mode the numbers never change, in git
mode they are the position in the file's log.

``revert_memory`` writes an old text back **through the write gate**: it becomes a
new version (``version`` is bumped past the current one, so an agent holding the
current version sees a conflict), a protected memory is refused, and a file a
person changed since it was last read is a ``WriteConflict`` like any write.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Config
from ..memory_file import update_frontmatter
from ..model import InvalidFile, Memory
from ..store import MemoryStore
from ..workspace import load_memory
from ..write_gate import WriteConflict, WriteRefused, commit_memory, disk_checksum
from . import gitrepo, journal
from .recorder import HistoryRecorder, frontmatter_fields

MAX_VERSIONS = 500
DIFF_CONTEXT = 3


class HistoryError(Exception):
    """History cannot answer (no such version, no such memory); the message says why."""


@dataclass
class Version:
    n: int
    at: str
    who: str
    tool: str
    summary: str
    path: str
    ref: str  # commit id (git) or journal entry number
    version: int | None = None
    added: int | None = None
    removed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "at": self.at,
            "who": self.who,
            "tool": self.tool,
            "summary": self.summary,
            "path": self.path,
            "ref": self.ref,
            "version": self.version,
            "added": self.added,
            "removed": self.removed,
        }


def _trailer(body: str, key: str) -> str | None:
    for line in body.splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    return None


def list_versions(recorder: HistoryRecorder, memory_id: str, rel_path: str | None) -> tuple[str, list[Version]]:
    """(mode, versions newest first) of a memory, by id and its current path (None: not on disk)."""
    mode = recorder.mode()
    root = recorder.root
    if mode == "git" and rel_path:
        log = gitrepo.file_log(root, rel_path, MAX_VERSIONS)
        total = len(log)
        versions = []
        for i, item in enumerate(log):
            tool = _trailer(item.body, "Tool") or "commit"
            client = _trailer(item.body, "Client")
            version = None
            if "(v" in item.subject and item.subject.endswith(")"):
                tail = item.subject.rsplit("(v", 1)[1][:-1]
                version = int(tail) if tail.isdigit() else None
            versions.append(
                Version(
                    n=total - i,
                    at=item.date,
                    who=item.author if not client else f"ctxos ({client})",
                    tool=tool,
                    summary=f"{item.subject} (+{item.added} -{item.removed})",
                    path=item.path,
                    ref=item.commit,
                    version=version,
                    added=item.added,
                    removed=item.removed,
                )
            )
        return mode, versions
    entries = journal.trimmed(journal.read_entries(root, memory_id), recorder.keep())
    versions = []
    previous: list[str] | None = None
    for entry in entries:
        lines = entry.text.splitlines()
        added, removed = _line_changes(previous, lines)
        previous = lines
        summary = (
            f"{entry.tool}"
            + (f" v{entry.version}" if entry.version else "")
            + (f" (+{added} -{removed})" if added is not None else " (first kept version)")
        )
        versions.append(
            Version(
                entry.n,
                entry.at,
                entry.who,
                entry.tool,
                summary,
                entry.path,
                str(entry.n),
                entry.version,
                added,
                removed,
            )
        )
    return ("journal" if mode != "off" or entries else "off"), list(reversed(versions))


def _line_changes(before: list[str] | None, after: list[str]) -> tuple[int | None, int | None]:
    if before is None:
        return None, None
    added = removed = 0  # line opcodes only (ndiff's character-level pass is quadratic on long lines)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed


def version_text(recorder: HistoryRecorder, memory_id: str, versions: list[Version], n: int) -> str:
    """The full file text of version ``n`` (from ``list_versions``)."""
    chosen = next((v for v in versions if v.n == n), None)
    if chosen is None:
        known = ", ".join(str(v.n) for v in versions[:10]) or "none"
        raise HistoryError(f"{memory_id} has no version {n} (versions: {known}; see `ctxos history {memory_id}`)")
    if recorder.mode() == "git":
        text = gitrepo.show_file(recorder.root, chosen.ref, chosen.path)
        if text is None:
            raise HistoryError(
                f"version {n} of {memory_id} removed the file ({chosen.summary}); pick an earlier version"
            )
        return text
    for entry in journal.read_entries(recorder.root, memory_id):
        if entry.n == n:
            return entry.text
    raise HistoryError(f"version {n} of {memory_id} is no longer kept")  # pragma: no cover


def unified_diff(old: str, new: str, old_label: str, new_label: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), old_label, new_label, n=DIFF_CONTEXT
        )
    )


def revert_memory(
    root: Path,
    store: MemoryStore,
    config: Config,
    memory: Memory,
    old_text: str,
    n: int,
    *,
    expected_version: int | None = None,
    expected_checksum: str | None = None,
) -> tuple[str, bool]:
    """Write ``old_text`` (version ``n``) back as a new version of ``memory``; (path, changed).

    Call under ``writes.write_lock``. ``expected_version`` / ``expected_checksum``, when
    given, must be the current file's (the one the person looked at): an edit made
    since, even one that did not bump ``version``, is a conflict.
    """
    rel = memory.rel_path
    current = load_memory(root, rel, config)
    if not isinstance(current, Memory):
        reason = current.reason if isinstance(current, InvalidFile) else "the file is gone"
        raise WriteConflict(f"{rel}: {reason}; nothing was reverted")
    if current.protected:
        raise WriteRefused(
            f"memory {current.id!r} ({rel}) is protected; reverting it is refused "
            f"(a person can unlock it with `ctxos unlock {current.id}`)"
        )
    known = store.checksum_of(rel)
    if known is not None and known != current.checksum:
        raise WriteConflict(
            f"memory {current.id!r} ({rel}) was edited on disk since it was last read; "
            "look at its history again before reverting"
        )
    if expected_version is not None and expected_version != current.version:
        raise WriteConflict(
            f"memory {current.id!r} changed: you looked at version {expected_version}, "
            f"the file is at version {current.version}; look at its history again"
        )
    if expected_checksum and expected_checksum != current.checksum:
        raise WriteConflict(
            f"memory {current.id!r} ({rel}) was edited since you looked at it (same version, "
            "different content); reload it before reverting"
        )
    old_id, _ = frontmatter_fields(old_text)
    body_now = current.path.read_bytes().decode("utf-8", "replace")
    if old_text == body_now:
        return rel, False
    changes: dict[str, Any] = {"version": current.version + 1}
    if old_id is not None and old_id != current.id:
        changes["id"] = current.id
    from ..writes import utc_now

    changes["modified"] = utc_now()
    new_text = update_frontmatter(old_text, changes)
    commit_memory(root, config, rel, new_text, expected_checksum=current.checksum)
    if disk_checksum(root / rel) is None:  # pragma: no cover - commit_memory raises instead
        raise WriteRefused(f"{rel} was not written")
    return rel, True
