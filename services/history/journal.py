"""The journal: the last N versions of each memory, for a workspace that is not a git repository.

One JSON Lines file per memory id under ``<state dir>/history/journal/``; each line
is one version: ``{"n", "at", "who", "tool", "path", "id", "version", "checksum",
"text"}``. ``n`` counts up per memory and is never reused, so ``ctxos revert ID
--to N`` keeps meaning the same version while older ones are dropped. Appending
is one ``write`` with ``O_APPEND``; the file is rewritten (atomically) only when it
holds half again as many versions as it keeps, so a save costs one small append.

The journal is derived state: deleting ``.ctxos/`` loses the old versions, never a
memory (the files are the truth).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..atomic import atomic_write_text
from ..workspace import state_dir

JOURNAL_FOLDER = ("history", "journal")
DEFAULT_KEEP = 20
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class JournalEntry:
    n: int
    at: str
    who: str
    tool: str
    path: str
    id: str
    version: int | None
    checksum: str
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "at": self.at,
            "who": self.who,
            "tool": self.tool,
            "path": self.path,
            "id": self.id,
            "version": self.version,
            "checksum": self.checksum,
            "text": self.text,
        }


def journal_dir(root: Path) -> Path:
    return state_dir(root).joinpath(*JOURNAL_FOLDER)


def journal_file(root: Path, memory_id: str) -> Path:
    """One file per id: a readable prefix plus a hash (ids from people's files may hold any character)."""
    digest = hashlib.sha1(memory_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return journal_dir(root) / f"{_SAFE.sub('_', memory_id)[:60]}-{digest}.jsonl"


def read_entries(root: Path, memory_id: str) -> list[JournalEntry]:
    """Every kept version of ``memory_id``, oldest first (a damaged line is skipped)."""
    try:
        raw = journal_file(root, memory_id).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    entries: list[JournalEntry] = []
    for line in raw.splitlines():
        try:
            data = json.loads(line)
            entries.append(
                JournalEntry(
                    int(data["n"]),
                    str(data["at"]),
                    str(data["who"]),
                    str(data["tool"]),
                    str(data["path"]),
                    str(data["id"]),
                    data.get("version"),
                    str(data["checksum"]),
                    str(data["text"]),
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return entries


def append(
    root: Path,
    memory_id: str,
    *,
    who: str,
    tool: str,
    path: str,
    version: int | None,
    checksum: str,
    text: str,
    keep: int = DEFAULT_KEEP,
) -> JournalEntry | None:
    """Record one version (call under the history lock); None when it equals the newest kept one."""
    keep = max(1, int(keep))
    target = journal_file(root, memory_id)
    count, last = _tail(target)
    if last is not None and last.get("checksum") == checksum and last.get("path") == path:
        return None
    entry = JournalEntry(
        int(last.get("n", 0)) + 1 if last is not None else 1,
        datetime.now(UTC).isoformat(timespec="seconds"),
        who,
        tool,
        path,
        memory_id,
        version,
        checksum,
        text,
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(entry.to_dict(), ensure_ascii=False) + "\n"
    if count + 1 > keep + max(1, keep // 2):
        kept = [*read_entries(root, memory_id), entry][-keep:]
        atomic_write_text(target, "".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n" for e in kept))
    else:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)
    return entry


def _tail(target: Path) -> tuple[int, dict[str, Any] | None]:
    """(lines in the journal file, its last entry): only the last line is parsed on the write path."""
    try:
        raw = target.read_bytes()
    except OSError:
        return 0, None
    lines = raw.rstrip(b"\n").split(b"\n") if raw.strip() else []
    for line in reversed(lines):
        try:
            data = json.loads(line)
            if isinstance(data, dict):
                return len(lines), data
        except ValueError:
            continue
    return len(lines), None


def trimmed(entries: list[JournalEntry], keep: int) -> list[JournalEntry]:
    """What a reader shows: the newest ``keep`` versions (the file may briefly hold more)."""
    return entries[-max(1, int(keep)) :]
