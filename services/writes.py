"""Every write the engine makes to memory files, with the safety rules in one place.

Agents (MCP, socket, REST) and people (CLI governance actions) write through
these functions, so the rules hold whatever the front end:

- ids and paths are sanitised: no ``..``, no absolute paths, no symlink escapes;
  nothing is written outside the workspace;
- ``sources/`` is read-only, protected memories are never overwritten by an agent;
- an update names the version it read, and a file changed on disk since it
  was read (or since the engine last indexed it) is not clobbered;
- writes are atomic and serialised across processes by a lock file, so
  parallel tool calls never interleave or lose lines.

Functions return workspace-relative paths they touched; the engine re-indexes them.
"""
from __future__ import annotations

import fcntl
import re
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Sequence

from .atomic import atomic_write_text
from .config import Config
from .memory_file import L1_MARKER, L2_MARKER, render_new_file, update_frontmatter
from .model import InvalidFile, Memory
from .ontology import ARCHIVE_FOLDER, MEMORY_TYPES, SOURCES_FOLDER, STATE_FOLDER, TYPE_FOLDERS
from .store import MemoryStore
from .workspace import load_memory, relative_path, state_dir

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_CONTENT_CHARS = 200_000


class WriteRefused(Exception):
    """A write that the safety rules forbid; the message says why and what to do."""


class WriteConflict(WriteRefused):
    """The file changed since the writer read it (or no version was named): read it again."""


@dataclass
class SaveResult:
    id: str
    rel_path: str
    version: int
    created: bool

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.rel_path, "version": self.version, "created": self.created}


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0)


@contextmanager
def write_lock(root: Path) -> Iterator[None]:
    """Serialise writers across threads and processes (an flock on a file in the state dir)."""
    lock_path = state_dir(root) / "write.lock"
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# --- path safety --------------------------------------------------------------

def validate_id(memory_id: str) -> str:
    memory_id = (memory_id or "").strip()
    if not ID_PATTERN.match(memory_id) or ".." in memory_id:
        raise WriteRefused(
            f"id {memory_id!r} is not allowed: use letters, digits, '.', '_' or '-' "
            "(no '/', no '..', at most 128 characters, not starting with a dot)"
        )
    return memory_id


def slugify(text: str, limit: int = 60) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:limit].rstrip("-") or "memory"


def safe_target(root: Path, rel_path: str, *, allow_archive: bool = False) -> Path:
    """The absolute path for ``rel_path``, refusing anything that would leave or misuse the workspace."""
    rel = relative_path(root, rel_path)
    if rel is None or Path(rel_path).is_absolute() or ".." in Path(rel_path).parts:
        raise WriteRefused(f"path {rel_path!r} leaves the workspace")
    top = rel.split("/", 1)[0]
    if top == SOURCES_FOLDER:
        raise WriteRefused(f"{rel}: sources/ is read-only to agents")
    if top == STATE_FOLDER or (top == ARCHIVE_FOLDER and not allow_archive):
        raise WriteRefused(f"{rel}: {top}/ is not a memory folder")
    target = Path(root) / rel
    real_root = Path(root).resolve()
    if target.is_symlink():
        raise WriteRefused(f"{rel} is a symlink; refusing to write through it")
    if not target.parent.resolve().is_relative_to(real_root):
        raise WriteRefused(f"{rel}: its folder is a symlink that leaves the workspace")
    return target


def _refuse_if_changed(store: MemoryStore, current: Memory, expected_version: int | None,
                       expected_checksum: str | None = None) -> None:
    if expected_version is None:
        raise WriteConflict(
            f"memory {current.id!r} already exists (version {current.version}); read it and pass "
            f"expected_version={current.version} to update it"
        )
    if current.version != expected_version:
        raise WriteConflict(
            f"memory {current.id!r} changed since you read it: you read version {expected_version}, "
            f"the file is at version {current.version}; read it again"
        )
    if expected_checksum and expected_checksum != current.checksum:
        raise WriteConflict(
            f"memory {current.id!r} ({current.rel_path}) changed since you read it: its content "
            "checksum differs (edited without a version bump); read it again"
        )
    known = store.checksum_of(current.rel_path)
    if known is not None and known != current.checksum:
        raise WriteConflict(
            f"memory {current.id!r} ({current.rel_path}) was edited on disk since it was last read; "
            "read it again before updating"
        )


def compose_body(content: str, l1: str | None) -> str:
    content = content.strip("\n")
    if l1 and l1.strip():
        return f"{L1_MARKER}\n{l1.strip()}\n{L2_MARKER}\n{content}\n"
    return content + "\n"


# --- agent writes -----------------------------------------------------------------

def save_memory(
    root: Path,
    store: MemoryStore,
    config: Config,
    *,
    type: str,
    content: str,
    l0: str,
    id: str | None = None,
    tags: Sequence[str] | None = None,
    related: Sequence[str] | None = None,
    importance: float | None = None,
    l1: str | None = None,
    expected_version: int | None = None,
    expected_checksum: str | None = None,
    always_load: bool | None = None,
) -> SaveResult:
    """Create a memory, or update one (naming the version read). Raises ``WriteRefused``.

    ``expected_checksum`` (the ``checksum`` of the memory as read) also catches an edit a
    person made without bumping ``version``.
    """
    kind = (type or "").strip().lower()
    if kind not in MEMORY_TYPES:
        raise WriteRefused(f"unknown type {type!r}; expected one of: {', '.join(MEMORY_TYPES)}")
    if not isinstance(content, str) or not content.strip():
        raise WriteRefused("content is empty")
    if len(content) > MAX_CONTENT_CHARS:
        raise WriteRefused(f"content is {len(content):,} characters, over the {MAX_CONTENT_CHARS:,} limit")
    if not l0 or not str(l0).strip():
        raise WriteRefused("l0 (the one-line summary) is required")
    if importance is not None and (isinstance(importance, bool) or not 0.0 <= float(importance) <= 1.0):
        raise WriteRefused(f"importance {importance!r} is outside 0.0-1.0")
    clean_tags = [str(t).strip() for t in (tags or []) if str(t).strip()]
    clean_related = [str(r).strip() for r in (related or []) if str(r).strip()]

    with write_lock(root):
        if id:
            memory_id = validate_id(id)
            existing = store.get(memory_id)
            rel_path = existing.rel_path if existing else f"{TYPE_FOLDERS[kind]}/{memory_id}.md"
        else:
            memory_id, rel_path = _fresh_id(root, store, kind, l0)
        target = safe_target(root, rel_path)
        current = load_memory(root, rel_path, config) if target.exists() else None
        if isinstance(current, InvalidFile):
            raise WriteRefused(f"{rel_path} exists but is not a valid memory ({current.reason}); fix it by hand")
        now = utc_now()
        body = compose_body(content, l1)
        if current is None:
            fields: dict[str, Any] = {
                "id": memory_id, "type": kind, "l0": " ".join(str(l0).split()),
                "importance": 0.5 if importance is None else float(importance),
                "tags": clean_tags, "related": clean_related,
                "created": now.date(), "modified": now, "version": 1,
                "always_load": bool(always_load), "protected": False,
            }
            atomic_write_text(target, render_new_file(fields, body))
            return SaveResult(memory_id, rel_path, 1, True)
        if current.protected:
            raise WriteRefused(f"memory {current.id!r} ({rel_path}) is protected; only a person may edit it")
        if current.type != kind:
            raise WriteRefused(
                f"memory {current.id!r} is a {current.type} ({rel_path}); saving it as a {kind} is refused"
            )
        _refuse_if_changed(store, current, expected_version, expected_checksum)
        changes: dict[str, Any] = {"l0": " ".join(str(l0).split()), "modified": now, "version": current.version + 1}
        if tags is not None:
            changes["tags"] = clean_tags
        if related is not None:
            changes["related"] = clean_related
        if importance is not None:
            changes["importance"] = float(importance)
        if always_load is not None:
            changes["always_load"] = bool(always_load)
        text = current.path.read_text(encoding="utf-8")
        atomic_write_text(target, update_frontmatter(text, changes, body=body))
        return SaveResult(current.id, rel_path, current.version + 1, False)


def _fresh_id(root: Path, store: MemoryStore, kind: str, l0: str) -> tuple[str, str]:
    base = slugify(l0)
    for n in range(1, 1000):
        candidate = base if n == 1 else f"{base}-{n}"
        rel_path = f"{TYPE_FOLDERS[kind]}/{candidate}.md"
        if store.get(candidate) is None and not (Path(root) / rel_path).exists():
            return candidate, rel_path
    raise WriteRefused(f"could not find a free id for {l0!r}")


def log_session(root: Path, config: Config, event: str, details: str | None = None,
                now: datetime | None = None) -> str:
    """Append a timestamped line to ``02-daily/YYYY-MM-DD.md``, creating the day's file."""
    if not event or not str(event).strip():
        raise WriteRefused("event is empty")
    now = now or utc_now()
    day = now.date().isoformat()
    rel_path = f"{TYPE_FOLDERS['daily']}/{day}.md"
    entry = f"- {now.strftime('%H:%M:%S')}Z **{' '.join(str(event).split())}**"
    if details and str(details).strip():
        detail_lines = str(details).strip().splitlines()
        entry += " — " + detail_lines[0]
        entry += "".join(f"\n  {line}" for line in detail_lines[1:])
    with write_lock(root):
        target = safe_target(root, rel_path)
        if target.exists():
            current = load_memory(root, rel_path, config)
            if isinstance(current, InvalidFile):
                raise WriteRefused(f"{rel_path} is not a valid memory ({current.reason}); fix it by hand")
            if current is not None and current.protected:
                raise WriteRefused(f"{rel_path} is protected; only a person may edit it")
            text = target.read_text(encoding="utf-8")
            if not text.endswith("\n"):
                text += "\n"
            atomic_write_text(target, text + entry + "\n")
        else:
            fields = {"id": f"daily-{day}", "type": "daily", "l0": f"Session log for {day}",
                      "importance": 0.3, "tags": ["session-log"], "created": now.date(), "version": 1}
            atomic_write_text(target, render_new_file(fields, f"# Session log {day}\n\n{entry}\n"))
    return rel_path


# --- person actions (governance) ------------------------------------------------

def update_fields(root: Path, config: Config, rel_path: str, changes: dict[str, Any]) -> str:
    """Rewrite some frontmatter keys of one file in place (atomic), bumping ``version``."""
    with write_lock(root):
        target = safe_target(root, rel_path, allow_archive=True)
        current = load_memory(root, rel_path, config)
        if not isinstance(current, Memory):
            reason = current.reason if isinstance(current, InvalidFile) else "file not found"
            raise WriteRefused(f"{rel_path}: {reason}")
        all_changes = {**changes, "modified": utc_now(), "version": current.version + 1}
        atomic_write_text(target, update_frontmatter(target.read_text(encoding="utf-8"), all_changes))
    return rel_path


def set_importance(root: Path, store: MemoryStore, config: Config, memory_id: str, value: float) -> str:
    memory = store.get(memory_id)
    if memory is None:
        raise WriteRefused(f"no memory with id {memory_id!r}")
    if isinstance(value, bool) or not 0.0 <= float(value) <= 1.0:
        raise WriteRefused(f"importance {value!r} is outside 0.0-1.0")
    return update_fields(root, config, memory.rel_path, {"importance": round(float(value), 3)})


def archive_memory(root: Path, store: MemoryStore, memory_id: str) -> tuple[str, str]:
    """Move a memory to ``_archive/<same path>``: kept, reversible, excluded from context."""
    memory = store.get(memory_id)
    if memory is None:
        raise WriteRefused(f"no memory with id {memory_id!r}")
    return _move(root, memory.rel_path, f"{ARCHIVE_FOLDER}/{memory.rel_path}")


def unarchive_memory(root: Path, archived_rel_path: str) -> tuple[str, str]:
    """Move ``_archive/<path>`` back to ``<path>``."""
    prefix = ARCHIVE_FOLDER + "/"
    rel = archived_rel_path if archived_rel_path.startswith(prefix) else prefix + archived_rel_path
    return _move(root, rel, rel[len(prefix):])


def list_archived(root: Path) -> list[str]:
    folder = Path(root) / ARCHIVE_FOLDER
    if not folder.is_dir():
        return []
    return sorted(p.relative_to(root).as_posix() for p in folder.rglob("*.md") if p.is_file())


def _move(root: Path, src_rel: str, dst_rel: str) -> tuple[str, str]:
    with write_lock(root):
        src = safe_target(root, src_rel, allow_archive=True)
        dst = safe_target(root, dst_rel, allow_archive=True)
        if not src.is_file():
            raise WriteRefused(f"{src_rel} does not exist")
        if dst.exists():
            raise WriteRefused(f"{dst_rel} already exists; refusing to overwrite it")
        dst.parent.mkdir(parents=True, exist_ok=True)
        src.rename(dst)
    return src_rel, dst_rel
