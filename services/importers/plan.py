"""The common half of every importer: drafts become a plan, a plan is applied through the write gate.

An importer reads its source and returns ``Draft``s: the memories it wants, each
with a deterministic id (same source, same id), a type, a body, tags and links.
``make_plan`` decides what to do with each against the workspace:

- ``create``: no memory has the id yet;
- ``unchanged``: the memory was imported from the same source and its
  ``import_hash`` (a hash of what the importer produced) is the same: not rewritten;
- ``update``: the source changed and the memory is still as the last import wrote it
  (its content hashes to its recorded ``import_hash``): rewritten through the gate,
  version bumped, with the checksum of the version read (a concurrent edit wins);
- ``skip``: the id belongs to a memory that was not imported from this source, or a
  person edited the imported memory since (a person's edit wins), or the draft is
  not a valid memory; the reason is in the plan.

``apply_plan`` performs the plan one file at a time under the workspace write lock,
every file through ``write_gate.commit_memory``. The source is only ever read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from ..config import Config
from ..memory_file import (
    L1_MARKER,
    L2_MARKER,
    MemoryFileError,
    parse_frontmatter_mapping,
    render_new_file,
    split_frontmatter,
    split_tiers,
    update_frontmatter,
)
from ..model import InvalidFile, Memory
from ..ontology import MEMORY_TYPES, TYPE_FOLDERS
from ..store import MemoryStore
from ..workspace import load_memory
from ..write_gate import WriteRefused, commit_memory
from ..writes import ID_PATTERN, slugify, utc_now, write_lock

IMPORT_TAG = "imported"


@dataclass
class Draft:
    """One memory an importer wants to exist."""

    id: str
    type: str
    body: str  # markdown, without frontmatter
    l0: str
    source: str  # provenance, e.g. "myapp/CLAUDE.md#Testing" (kept as imported_from)
    tags: list[str] = field(default_factory=list)
    related: list[str] = field(default_factory=list)
    l1: str = ""  # the short tier; the first paragraph when empty
    extra: dict[str, Any] = field(default_factory=dict)  # other frontmatter keys (title, globs ...)
    created: date | None = None
    importance: float = 0.5
    always_load: bool = False

    def import_hash(self) -> str:
        return content_hash(self.type, self.l0, self.tags, self.related, self.rendered_body())

    def rendered_body(self) -> str:
        l1, l2 = (self.l1.strip(), self.body.strip()) if self.l1.strip() else split_tiers(self.body)
        if not l2:
            return (l1 or self.body.strip()) + "\n"
        return f"{L1_MARKER}\n{l1}\n{L2_MARKER}\n{l2}\n"


def content_hash(kind: str, l0: str, tags: Iterable[str], related: Iterable[str], body: str) -> str:
    """What an import wrote, as a short hash: equal hashes mean the same memory text and links."""
    payload = json.dumps(
        [kind, " ".join(str(l0).split()), list(tags), list(related), body.strip()], ensure_ascii=False, default=str
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


@dataclass
class PlanItem:
    draft: Draft
    action: str  # create | update | unchanged | skip
    path: str
    reason: str = ""
    result: str = ""  # after apply: created | updated | unchanged | skipped | refused

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.draft.id,
            "type": self.draft.type,
            "action": self.action,
            "path": self.path,
            "source": self.draft.source,
            "l0": self.draft.l0,
            "reason": self.reason,
            **({"result": self.result} if self.result else {}),
        }


@dataclass
class ImportPlan:
    format: str
    source: str
    items: list[PlanItem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    applied: bool = False

    def counts(self) -> dict[str, int]:
        key = "result" if self.applied else "action"
        out: dict[str, int] = {}
        for item in self.items:
            value = getattr(item, key) or item.action
            out[value] = out.get(value, 0) + 1
        return out

    def written_paths(self) -> list[str]:
        return [i.path for i in self.items if i.result in ("created", "updated")]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "source": self.source,
            "applied": self.applied,
            "counts": self.counts(),
            "items": [i.to_dict() for i in self.items],
            "warnings": list(self.warnings),
        }


def unique_ids(drafts: list[Draft]) -> list[Draft]:
    """Make ids valid and unique within one import, deterministically (``x``, ``x-2`` ... in source order)."""
    seen: set[str] = set()
    for draft in drafts:
        base = draft.id if ID_PATTERN.match(draft.id) and ".." not in draft.id else slugify(draft.id)
        candidate, n = base, 1
        while candidate in seen:
            n += 1
            candidate = f"{base}-{n}"
        draft.id = candidate
        seen.add(candidate)
    return drafts


def make_plan(
    root: Path,
    store: MemoryStore,
    config: Config,
    fmt: str,
    source: str,
    drafts: list[Draft],
    warnings: list[str] | None = None,
) -> ImportPlan:
    """Decide create/update/unchanged/skip for every draft (nothing is written)."""
    plan = ImportPlan(fmt, source, warnings=list(warnings or []))
    for draft in unique_ids(drafts):
        if draft.type not in MEMORY_TYPES:
            draft.type = "resource"
        existing = store.get(draft.id)
        path = existing.rel_path if existing else f"{TYPE_FOLDERS[draft.type]}/{draft.id}.md"
        current = existing if existing is not None else _load_if_present(root, path, config)
        if current is None:
            plan.items.append(PlanItem(draft, "create", path))
            continue
        if isinstance(current, InvalidFile):
            plan.items.append(
                PlanItem(draft, "skip", path, f"{path} exists and is not a valid memory: {current.reason}")
            )
            continue
        meta = current.metadata
        if meta.get("imported_from") != draft.source:
            where = f" (imported from {meta['imported_from']})" if meta.get("imported_from") else ""
            plan.items.append(PlanItem(draft, "skip", path, f"id {draft.id!r} is taken by {path}{where}"))
            continue
        if meta.get("import_hash") == draft.import_hash() and all(meta.get(k) == v for k, v in draft.extra.items()):
            plan.items.append(PlanItem(draft, "unchanged", path))
            continue
        if _hash_of_file(current) != meta.get("import_hash"):
            plan.items.append(
                PlanItem(
                    draft,
                    "skip",
                    path,
                    f"{path} was edited since it was imported; a person's edit wins (delete it to import it again)",
                )
            )
            continue
        if current.protected:
            plan.items.append(PlanItem(draft, "skip", path, f"{path} is protected"))
            continue
        plan.items.append(PlanItem(draft, "update", path, "the source changed"))
    return plan


def _load_if_present(root: Path, path: str, config: Config) -> Memory | InvalidFile | None:
    target = Path(root) / path
    if not (target.exists() or target.is_symlink()):
        return None
    return load_memory(root, path, config)


def _hash_of_file(memory: Memory) -> str:
    """The import hash of the file as it is on disk (to tell whether a person edited it)."""
    try:
        text = memory.path.read_bytes().decode("utf-8")
        split = split_frontmatter(text)
        meta = parse_frontmatter_mapping(split.frontmatter_text)
    except (OSError, UnicodeDecodeError, MemoryFileError):
        return ""
    return content_hash(
        str(meta.get("type", "")),
        str(meta.get("l0", "")),
        meta.get("tags") or [],
        meta.get("related") or [],
        split.body,
    )


# Frontmatter keys the plan writes or the loader owns: a source's own property with one of these
# names is kept under a prefixed name by its reader (``bm_``, ``logseq_``) instead of overriding ours.
RESERVED_FIELDS = frozenset(
    {
        "id",
        "type",
        "l0",
        "importance",
        "version",
        "created",
        "modified",
        "always_load",
        "protected",
        "related",
        "requires",
        "optional",
        "imported_from",
        "import_hash",
    }
)


def _fields(draft: Draft, version: int) -> dict[str, Any]:
    now = utc_now()
    fields: dict[str, Any] = {
        "id": draft.id,
        "type": draft.type,
        "l0": " ".join(draft.l0.split()),
        "importance": draft.importance,
        "tags": list(draft.tags),
        "related": list(draft.related),
        "created": draft.created or now.date(),
        "modified": now,
        "version": version,
    }
    if draft.always_load:
        fields["always_load"] = True
    fields.update(draft.extra)
    fields["imported_from"] = draft.source
    fields["import_hash"] = draft.import_hash()
    return fields


def apply_plan(root: Path, store: MemoryStore, config: Config, plan: ImportPlan) -> ImportPlan:
    """Write every create/update of ``plan`` through the gate (one file at a time, under the write lock)."""
    for item in plan.items:
        if item.action in ("unchanged", "skip"):
            item.result = "unchanged" if item.action == "unchanged" else "skipped"
            continue
        try:
            with write_lock(root):
                if item.action == "create":
                    text = render_new_file(_fields(item.draft, 1), item.draft.rendered_body())
                    commit_memory(root, config, item.path, text, expected_checksum=None, must_be_new=True)
                    item.result = "created"
                else:
                    current = load_memory(root, item.path, config)
                    if not isinstance(current, Memory):
                        raise WriteRefused(f"{item.path} changed or went away since the plan was made")
                    text = current.path.read_bytes().decode("utf-8")
                    fields = _fields(item.draft, current.version + 1)
                    fields["created"] = current.metadata.get("created") or fields["created"]
                    new_text = update_frontmatter(text, fields, body=item.draft.rendered_body())
                    commit_memory(root, config, item.path, new_text, expected_checksum=current.checksum)
                    item.result = "updated"
        except WriteRefused as exc:
            item.result = "refused"
            item.reason = str(exc)
    plan.applied = True
    return plan
