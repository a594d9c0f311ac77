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

import errno
import fcntl
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .config import Config
from .memory_file import L1_MARKER, L2_MARKER, render_new_file, update_frontmatter
from .model import InvalidFile, Memory
from .ontology import ARCHIVE_FOLDER, MEMORY_TYPES, SOURCES_FOLDER, STATE_FOLDER, TYPE_FOLDERS
from .store import MemoryStore
from .workspace import load_memory, relative_path, state_dir
from .write_gate import WriteConflict, WriteRefused, commit_memory, encode_text, notify_before_write, notify_written

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_CONTENT_CHARS = 200_000
MAX_L0_CHARS = 500  # the loader shows at most 200 (memory_file.L0_MAX_CHARS); longer is refused
MAX_L1_CHARS = 8_000
MAX_TAGS = 64
MAX_TAG_CHARS = 100
MAX_LOG_DETAILS_CHARS = 20_000
MAX_DAILY_ROLLOVER = 50

__all__ = [
    "WriteRefused",
    "WriteConflict",
    "SaveResult",
    "save_memory",
    "log_session",
    "update_fields",
    "set_importance",
    "set_protected",
    "archive_memory",
    "unarchive_memory",
    "list_archived",
]


@dataclass
class SaveResult:
    id: str
    rel_path: str
    version: int
    created: bool

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.rel_path, "version": self.version, "created": self.created}


def utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


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


def _refuse_if_changed(
    store: MemoryStore, current: Memory, expected_version: int | None, expected_checksum: str | None = None
) -> None:
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
    if expected_checksum == "ambiguous":
        raise WriteConflict(
            f"memory {current.id!r} ({current.rel_path}) was edited on disk without a version bump: version "
            f"{current.version} was served with two different contents; read it again and pass its "
            "checksum as expected_checksum"
        )
    if expected_checksum and expected_checksum != current.checksum:
        raise WriteConflict(
            f"memory {current.id!r} ({current.rel_path}) changed since you read it: it was "
            "edited on disk without a version bump (its content checksum differs); read it again"
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


# --- input checks (limits in user words) --------------------------------------------


def _check_text(value: Any, what: str, *, max_chars: int, required: bool) -> str:
    if value is None:
        if required:
            raise WriteRefused(f"{what} is required")
        return ""
    if not isinstance(value, str):
        raise WriteRefused(f"{what} must be text, got {type(value).__name__}")
    encode_text(value, what)
    if required and not value.strip():
        raise WriteRefused(f"{what} is empty")
    if len(value) > max_chars:
        raise WriteRefused(f"{what} is {len(value):,} characters, over the {max_chars:,}-character limit")
    return value


def _check_list(values: Sequence[Any] | None, what: str) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        raise WriteRefused(f"{what} must be a list of words, got {type(values).__name__}")
    if len(values) > MAX_TAGS:
        raise WriteRefused(f"{what} has {len(values)} entries, over the limit of {MAX_TAGS}")
    cleaned: list[str] = []
    for item in values:
        if not isinstance(item, (str, int, float)) or isinstance(item, bool):
            raise WriteRefused(f"{what} entries must be words, got {item!r}")
        text = str(item).strip()
        encode_text(text, what)
        if len(text) > MAX_TAG_CHARS:
            raise WriteRefused(
                f"{what} entry {text[:40]!r}... is {len(text):,} characters, over the {MAX_TAG_CHARS}-character limit"
            )
        if "\n" in text or "\r" in text:
            raise WriteRefused(f"{what} entry {text[:40]!r} contains a line break; use one line per entry")
        if text and text not in cleaned:
            cleaned.append(text)
    return cleaned


def _check_expected_version(expected_version: Any) -> int | None:
    if expected_version is None:
        return None
    if isinstance(expected_version, bool) or not isinstance(expected_version, int):
        raise WriteRefused(f"expected_version must be a whole number (the version you read), got {expected_version!r}")
    if expected_version <= 0:
        raise WriteRefused(
            f"expected_version {expected_version} is not a version: versions start at 1; "
            "read the memory and pass the version it shows"
        )
    return expected_version


def _refuse_unfaithful(memory: Memory, tags: list[str] | None, related: list[str] | None) -> None:
    """The stored lists must read back exactly as passed (the loader also strips [[links]])."""
    if tags is not None and memory.tags != tags:
        raise WriteRefused(f"tags {tags!r} would read back as {memory.tags!r}; nothing was written")
    if related is not None and memory.related != related:
        raise WriteRefused(f"related {related!r} would read back as {memory.related!r}; nothing was written")


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

    ``expected_checksum`` (the ``checksum`` of the memory as read; the engine fills it in
    from the versions it served) also catches an edit a person made without bumping
    ``version``. Every file goes through ``write_gate.commit_memory``: refused = unchanged.
    """
    kind = (type or "").strip().lower() if isinstance(type, str) else ""
    if kind not in MEMORY_TYPES:
        raise WriteRefused(f"unknown type {type!r}; expected one of: {', '.join(MEMORY_TYPES)}")
    content = _check_text(content, "content", max_chars=MAX_CONTENT_CHARS, required=True)
    l0 = _check_text(l0, "l0 (the one-line summary)", max_chars=MAX_L0_CHARS, required=True)
    l1 = _check_text(l1, "l1 (the short summary)", max_chars=MAX_L1_CHARS, required=False) or None
    expected_version = _check_expected_version(expected_version)
    if importance is not None and (
        isinstance(importance, bool) or not isinstance(importance, (int, float)) or not 0.0 <= float(importance) <= 1.0
    ):
        raise WriteRefused(f"importance {importance!r} is outside 0.0-1.0")
    clean_tags = _check_list(tags, "tags")
    clean_related = _check_list(related, "related")

    with write_lock(root):
        existing = None
        if id:
            memory_id = validate_id(id)
            existing = store.get(memory_id)
            rel_path = existing.rel_path if existing else f"{TYPE_FOLDERS[kind]}/{memory_id}.md"
        else:
            memory_id, rel_path = _fresh_id(root, store, kind, l0)
        target = safe_target(root, rel_path)
        current = load_memory(root, rel_path, config) if (target.exists() or target.is_symlink()) else None
        if isinstance(current, InvalidFile):
            raise WriteRefused(f"{rel_path} exists but is not a valid memory ({current.reason}); fix it by hand")
        now = utc_now()
        body = compose_body(content, l1)
        if current is None:
            fields: dict[str, Any] = {
                "id": memory_id,
                "type": kind,
                "l0": " ".join(l0.split()),
                "importance": 0.5 if importance is None else float(importance),
                "tags": clean_tags,
                "related": clean_related,
                "created": now.date(),
                "modified": now,
                "version": 1,
                "always_load": bool(always_load),
                "protected": False,
            }
            commit_memory(
                root,
                config,
                rel_path,
                render_new_file(fields, body),
                expected_checksum=None,
                must_be_new=True,
                validate=_unfaithful_checker(clean_tags, clean_related),
            )
            return SaveResult(memory_id, rel_path, 1, True)
        if current.protected:
            raise WriteRefused(
                f"memory {current.id!r} ({rel_path}) is protected; only a person may edit it "
                f"(after `ctxos unlock {current.id}`)"
            )
        if current.type != kind:
            raise WriteRefused(
                f"memory {current.id!r} is a {current.type} ({rel_path}); saving it as a {kind} is refused"
            )
        _refuse_if_changed(store, current, expected_version, expected_checksum)
        changes: dict[str, Any] = {"l0": " ".join(l0.split()), "modified": now, "version": current.version + 1}
        if tags is not None:
            changes["tags"] = clean_tags
        if related is not None:
            changes["related"] = clean_related
        if importance is not None:
            changes["importance"] = float(importance)
        if always_load is not None:
            changes["always_load"] = bool(always_load)
        text = current.path.read_bytes().decode("utf-8")
        new_text = update_frontmatter(text, changes, body=body)
        check_before = _unfaithful_checker(tags is not None and clean_tags, related is not None and clean_related)
        saved = commit_memory(
            root, config, rel_path, new_text, expected_checksum=current.checksum, validate=check_before
        )
        # a file named by its path may be served under a qualified id (links.qualified_ids)
        return SaveResult(existing.id if existing is not None else current.id, rel_path, saved.version, False)


def _unfaithful_checker(tags: list[str] | bool, related: list[str] | bool) -> Callable[[Memory], None]:
    def check(memory: Memory) -> None:
        _refuse_unfaithful(
            memory, tags if isinstance(tags, list) else None, related if isinstance(related, list) else None
        )

    return check


def _fresh_id(root: Path, store: MemoryStore, kind: str, l0: str) -> tuple[str, str]:
    base = slugify(l0)
    for n in range(1, 1000):
        candidate = base if n == 1 else f"{base}-{n}"
        rel_path = f"{TYPE_FOLDERS[kind]}/{candidate}.md"
        if store.get(candidate) is None and not (Path(root) / rel_path).exists():
            return candidate, rel_path
    raise WriteRefused(f"could not find a free id for {l0!r}")


def log_session(root: Path, config: Config, event: str, details: str | None = None, now: datetime | None = None) -> str:
    """Append a timestamped line to ``02-daily/YYYY-MM-DD.md``, creating the day's file.

    Details over ``MAX_LOG_DETAILS_CHARS`` are refused up front. When the day's file
    would go over the byte cap, or a person made it invalid or too big, the entry goes
    to ``YYYY-MM-DD-2.md`` (then ``-3`` ...), so the day's log always stays served.
    """
    event = _check_text(event, "event", max_chars=500, required=True)
    details = _check_text(details, "details", max_chars=MAX_LOG_DETAILS_CHARS, required=False)
    now = now or utc_now()
    day = now.date().isoformat()
    entry = f"- {now.strftime('%H:%M:%S')}Z **{' '.join(event.split())}**"
    if details and details.strip():
        detail_lines = details.strip().splitlines()
        entry += " — " + detail_lines[0]
        entry += "".join(f"\n  {line}" for line in detail_lines[1:])
    reasons: list[str] = []
    with write_lock(root):
        for part in range(1, MAX_DAILY_ROLLOVER + 1):
            stem = day if part == 1 else f"{day}-{part}"
            rel_path = f"{TYPE_FOLDERS['daily']}/{stem}.md"
            target = safe_target(root, rel_path)
            try:
                if target.exists() or target.is_symlink():
                    current = load_memory(root, rel_path, config)
                    if isinstance(current, InvalidFile):
                        reasons.append(f"{rel_path}: {current.reason}")
                        continue
                    if current is None:
                        continue
                    if current.protected:
                        reasons.append(f"{rel_path} is protected")
                        continue
                    text = current.path.read_bytes().decode("utf-8")
                    if not text.endswith("\n"):
                        text += "\n"
                    commit_memory(root, config, rel_path, text + entry + "\n", expected_checksum=current.checksum)
                else:
                    title = f"Session log for {day}" + ("" if part == 1 else f" (part {part})")
                    fields = {
                        "id": f"daily-{stem}",
                        "type": "daily",
                        "l0": title,
                        "importance": 0.3,
                        "tags": ["session-log"],
                        "created": now.date(),
                        "version": 1,
                    }
                    commit_memory(
                        root,
                        config,
                        rel_path,
                        render_new_file(fields, f"# Session log {day}\n\n{entry}\n"),
                        expected_checksum=None,
                        must_be_new=True,
                    )
                return rel_path
            except WriteConflict:
                raise
            except WriteRefused as exc:
                if str(exc).startswith("disk full"):
                    raise
                reasons.append(str(exc))
    raise WriteRefused(f"the session log for {day} could not take this entry: " + "; ".join(reasons[-3:]))


# --- person actions (governance) ------------------------------------------------


def update_fields(
    root: Path, config: Config, rel_path: str, changes: dict[str, Any], *, allow_protected: bool = False
) -> str:
    """Rewrite some frontmatter keys of one file in place (through the gate), bumping ``version``.

    A protected memory is refused unless ``allow_protected`` (a person's explicit unlock).
    """
    with write_lock(root):
        safe_target(root, rel_path, allow_archive=True)
        current = load_memory(root, rel_path, config)
        if not isinstance(current, Memory):
            reason = current.reason if isinstance(current, InvalidFile) else "file not found"
            raise WriteRefused(f"{rel_path}: {reason}")
        if current.protected and not allow_protected:
            raise WriteRefused(
                f"memory {current.id!r} ({rel_path}) is protected; "
                f"a person can unlock it with `ctxos unlock {current.id}`"
            )
        all_changes = {**changes, "modified": utc_now(), "version": current.version + 1}
        text = current.path.read_bytes().decode("utf-8")
        commit_memory(root, config, rel_path, update_frontmatter(text, all_changes), expected_checksum=current.checksum)
    return rel_path


def set_importance(root: Path, store: MemoryStore, config: Config, memory_id: str, value: float) -> str:
    memory = store.get(memory_id)
    if memory is None:
        raise WriteRefused(f"no memory with id {memory_id!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise WriteRefused(f"importance {value!r} is outside 0.0-1.0")
    return update_fields(root, config, memory.rel_path, {"importance": round(float(value), 3)})


def set_protected(root: Path, store: MemoryStore, config: Config, memory_id: str, protected: bool) -> str:
    """A person's explicit lock/unlock (``ctxos lock`` / ``ctxos unlock``; never an MCP tool)."""
    memory = store.get(memory_id)
    if memory is None:
        raise WriteRefused(f"no memory with id {memory_id!r}")
    if memory.protected == protected:
        return memory.rel_path
    return update_fields(root, config, memory.rel_path, {"protected": bool(protected)}, allow_protected=True)


def archive_memory(root: Path, store: MemoryStore, memory_id: str) -> tuple[str, str]:
    """Move a memory to ``_archive/<same path>``: kept, reversible, excluded from context."""
    memory = store.get(memory_id)
    if memory is None:
        raise WriteRefused(f"no memory with id {memory_id!r}")
    if memory.protected:
        raise WriteRefused(
            f"memory {memory.id!r} ({memory.rel_path}) is protected; "
            f"a person can unlock it with `ctxos unlock {memory.id}`"
        )
    return _move(root, memory.rel_path, f"{ARCHIVE_FOLDER}/{memory.rel_path}")


def unarchive_memory(root: Path, archived_rel_path: str) -> tuple[str, str]:
    """Move ``_archive/<path>`` back to ``<path>``."""
    prefix = ARCHIVE_FOLDER + "/"
    rel = archived_rel_path if archived_rel_path.startswith(prefix) else prefix + archived_rel_path
    return _move(root, rel, rel[len(prefix) :])


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
        if _is_protected_file(src):
            raise WriteRefused(f"{src_rel} is protected; a person can unlock it with `ctxos unlock`")
        notify_before_write(root, src)
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)  # no-clobber: fails if dst appeared meanwhile
            os.unlink(src)
        except FileExistsError:
            raise WriteRefused(f"{dst_rel} already exists; refusing to overwrite it") from None
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise WriteRefused(f"disk full: {src_rel} was not moved") from None
            if exc.errno not in (errno.EPERM, errno.EXDEV, errno.EOPNOTSUPP):
                raise WriteRefused(f"{src_rel} could not be moved ({exc.strerror})") from None
            if dst.exists():
                raise WriteRefused(f"{dst_rel} already exists; refusing to overwrite it") from None
            src.rename(dst)  # file systems without hard links
        notify_written(root, src)
        notify_written(root, dst)
    return src_rel, dst_rel


def _is_protected_file(path: Path) -> bool:
    try:
        text = path.read_bytes()[:8192].decode("utf-8", "replace")
    except OSError:
        return False
    return bool(re.search(r"(?m)^protected:[ \t]*true[ \t]*$", text.split("\n---", 1)[0]))
