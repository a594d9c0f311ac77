"""The inbox: files waiting to become memories, and promoting one into the ontology.

``inbox/`` is a staging folder: a person (or a tool) drops notes there, nothing
in it is served, and ``ctxos promote FILE --type T`` makes one a memory: the file
moves to the type's folder (``04-skills/`` for a skill) with its frontmatter
filled in (id, type, l0, created, modified, version, importance, tags; keys the
person wrote are kept), and leaves the inbox.

A move is "write the new file, then remove the old one", both under the
workspace write lock: the new file goes through the write gate (parsed with the
loader, caps checked, atomic, ``after_write`` hooks), and the inbox file is only
removed once the new one is final and only if nobody changed it meanwhile. So
a refusal or a crash leaves the inbox file where it was, and the worst case is
the file in both places, never in neither.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from .config import Config
from .memory_file import (
    MemoryFileError,
    checksum_bytes,
    decode_memory_bytes,
    derived_l0,
    parse_frontmatter_mapping,
    render_new_file,
    split_frontmatter,
    update_frontmatter,
)
from .ontology import MEMORY_TYPES, STAGING_FOLDER, TYPE_FOLDERS
from .store import MemoryStore
from .write_gate import WriteRefused, commit_memory, notify_written
from .writes import safe_target, slugify, utc_now, validate_id, write_lock

INBOX_SUFFIXES = (".md", ".markdown", ".txt")


@dataclass
class InboxItem:
    """One file waiting in ``inbox/``: what it would be called, or why it cannot be promoted yet."""

    path: str
    size: int
    modified: str
    l0: str = ""
    type: str | None = None  # a ``type:`` the file already names
    problem: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "modified": self.modified,
            "l0": self.l0,
            "type": self.type,
            "problem": self.problem,
        }


@dataclass
class PromoteResult:
    id: str
    type: str
    source: str  # the inbox path it came from
    path: str  # where it is now
    filled: list[str] = field(default_factory=list)  # frontmatter keys promote added or set
    warning: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "from": self.source,
            "to": self.path,
            "filled": list(self.filled),
            "warning": self.warning,
        }


def list_inbox(root: Path, config: Config) -> list[InboxItem]:
    """Every note file under ``inbox/`` (sorted), with its would-be one-line summary."""
    folder = Path(root) / STAGING_FOLDER
    items: list[InboxItem] = []
    if not folder.is_dir():
        return items
    max_bytes = config.settings.limits.max_file_bytes
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if (
            any(part.startswith(".") for part in PurePosixPath(rel).parts)
            or not path.is_file()
            or not path.name.lower().endswith(INBOX_SUFFIXES)
        ):
            continue
        stat = path.stat()
        item = InboxItem(
            rel, stat.st_size, datetime.fromtimestamp(stat.st_mtime, tz=UTC).replace(microsecond=0).isoformat()
        )
        try:
            meta, body = _read(path, max_bytes)
            item.l0 = str(meta.get("l0") or "").strip() or derived_l0(meta, body, rel)
            kind = meta.get("type")
            item.type = kind if isinstance(kind, str) else None
        except MemoryFileError as exc:
            item.problem = str(exc)
        items.append(item)
    return items


def _read(path: Path, max_bytes: int) -> tuple[dict[str, Any], str]:
    text = decode_memory_bytes(path.read_bytes(), max_bytes)
    split = split_frontmatter(text)
    return parse_frontmatter_mapping(split.frontmatter_text), split.body


def inbox_path(root: Path, name: str) -> str:
    """The workspace-relative path of an inbox file named as ``inbox/x.md``, ``x.md`` or an absolute path."""
    raw = Path(name).expanduser()
    if raw.is_absolute():
        try:
            rel = raw.resolve().relative_to(Path(root).resolve()).as_posix()
        except ValueError:
            raise WriteRefused(f"{name} is not inside the workspace; put it in {STAGING_FOLDER}/ first") from None
    else:
        rel = PurePosixPath(name).as_posix()
        if not rel.startswith(STAGING_FOLDER + "/"):
            rel = f"{STAGING_FOLDER}/{rel}"
    if not rel.startswith(STAGING_FOLDER + "/") or ".." in PurePosixPath(rel).parts:
        raise WriteRefused(f"{name}: only files in {STAGING_FOLDER}/ are promoted")
    return rel


def promote(
    root: Path, store: MemoryStore, config: Config, name: str, kind: str, *, memory_id: str | None = None
) -> PromoteResult:
    """Move one inbox file into ``TYPE_FOLDERS[kind]`` as a memory (see module doc). Raises ``WriteRefused``."""
    kind = (kind or "").strip().lower()
    if kind not in MEMORY_TYPES:
        raise WriteRefused(f"unknown type {kind!r}; expected one of: {', '.join(MEMORY_TYPES)}")
    root = Path(root)
    src_rel = inbox_path(root, name)
    max_bytes = config.settings.limits.max_file_bytes
    with write_lock(root):
        src = safe_target(root, src_rel)
        if not src.is_file():
            raise WriteRefused(f"{src_rel} does not exist (see `ctxos inbox`)")
        raw = src.read_bytes()
        try:
            text = decode_memory_bytes(raw, max_bytes)
            split = split_frontmatter(text)
            meta = parse_frontmatter_mapping(split.frontmatter_text)
        except MemoryFileError as exc:
            raise WriteRefused(f"{src_rel} cannot be promoted: {exc}; fix it and try again") from None
        chosen = _choose_id(root, store, memory_id, meta, src_rel, kind)
        dst_rel = f"{TYPE_FOLDERS[kind]}/{chosen}.md"
        safe_target(root, dst_rel)
        fields = _filled_fields(meta, split.body, src_rel, kind, chosen, src.stat().st_mtime)
        new_text = update_frontmatter(text, fields) if split.has_frontmatter else render_new_file(fields, split.body)
        commit_memory(root, config, dst_rel, new_text, expected_checksum=None, must_be_new=True)
        result = PromoteResult(chosen, kind, src_rel, dst_rel, sorted(fields))
        try:
            if checksum_bytes(src.read_bytes()) != checksum_bytes(raw):
                result.warning = (
                    f"{src_rel} changed while it was promoted; it was left in the inbox "
                    f"(the version promoted is {dst_rel})"
                )
                return result
            os.unlink(src)
        except OSError as exc:
            result.warning = f"{src_rel} could not be removed ({exc.strerror or exc}); delete it by hand"
            return result
        notify_written(root, src)
    return result


def _choose_id(
    root: Path, store: MemoryStore, wanted: str | None, meta: dict[str, Any], src_rel: str, kind: str
) -> str:
    if wanted:
        chosen = validate_id(wanted)
        if store.get(chosen) is not None or (root / TYPE_FOLDERS[kind] / f"{chosen}.md").exists():
            raise WriteRefused(f"id {chosen!r} is taken; pick another with --id")
        return chosen
    own = meta.get("id")
    base = (
        slugify(str(own)) if isinstance(own, (str, int)) and str(own).strip() else slugify(PurePosixPath(src_rel).stem)
    )
    for n in range(1, 1000):
        candidate = base if n == 1 else f"{base}-{n}"
        if store.get(candidate) is None and not (root / TYPE_FOLDERS[kind] / f"{candidate}.md").exists():
            return candidate
    raise WriteRefused(f"no free id for {src_rel}; pass one with --id")


def _filled_fields(
    meta: dict[str, Any], body: str, src_rel: str, kind: str, memory_id: str, mtime: float
) -> dict[str, Any]:
    """The frontmatter keys promote sets: always id, type and modified; the rest only when missing."""
    now = utc_now()
    fields: dict[str, Any] = {"id": memory_id, "type": kind}
    if not str(meta.get("l0") or "").strip():
        fields["l0"] = derived_l0(meta, body, src_rel)
    if meta.get("created") in (None, ""):
        fields["created"] = datetime.fromtimestamp(mtime, tz=UTC).date()
    if meta.get("importance") is None:
        fields["importance"] = 0.5
    if meta.get("tags") is None:
        fields["tags"] = []
    if meta.get("version") is None:
        fields["version"] = 1
    fields["modified"] = now
    return fields
