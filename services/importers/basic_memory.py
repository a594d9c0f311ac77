"""A basic-memory project (github.com/basicmachines-co/basic-memory): a folder of markdown notes.

Each note keeps its text; its frontmatter (``title``, ``type``, ``tags``, ``permalink``
and any other key) is kept, with:

- the id from the ``permalink`` (``/`` written as ``.``), else the title, as a slug,
  prefixed ``bm-``;
- the type: basic-memory's ``type`` when it is one of ours, else ``resource`` (the
  original is kept as ``entity_type``: ``note``, ``Person`` ...);
- ``tags`` plus the ``#tags`` written in observations;
- ``related``: the notes named by relation lines ``- relation_type [[Target]]``
  (a target found by title or permalink in the project; others are reported);
- observation lines ``- [category] text #tag (context)`` stay in the text as they are.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..memory_file import MemoryFileError, derived_l0, parse_frontmatter_mapping, split_frontmatter
from ..ontology import MEMORY_TYPES
from ..writes import slugify
from .plan import IMPORT_TAG, RESERVED_FIELDS, Draft

_OBSERVATION_RE = re.compile(r"^\s*-\s+\[([^\]]+)\]\s+(.+)$", re.MULTILINE)
_RELATION_RE = re.compile(r"^\s*-\s+([A-Za-z_][\w -]*?)\s+\[\[([^\]|#]+)(?:[|#][^\]]*)?\]\]", re.MULTILINE)
_HASHTAG_RE = re.compile(r"(?<![\w&])#([A-Za-z][\w/-]*)")


def notes(root: Path) -> list[Path]:
    return sorted(
        p
        for p in Path(root).rglob("*.md")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def looks_like(path: Path) -> bool:
    """A folder with ``.basic-memory/`` or notes that use basic-memory's ``permalink`` and observations."""
    path = Path(path)
    if not path.is_dir():
        return False
    if (path / ".basic-memory").exists():
        return True
    for note in notes(path)[:50]:
        try:
            head = note.read_text(encoding="utf-8")[:4000]
        except (OSError, UnicodeDecodeError):
            continue
        if re.search(r"^permalink:", head, re.MULTILINE) and (
            _OBSERVATION_RE.search(head) or _RELATION_RE.search(head)
        ):
            return True
    return False


def read(path: Path) -> tuple[list[Draft], list[str]]:
    root = Path(path)
    warnings: list[str] = []
    loaded: list[tuple[str, dict[str, Any], str]] = []
    for note in notes(root):
        rel = note.relative_to(root).as_posix()
        try:
            split = split_frontmatter(note.read_text(encoding="utf-8"))
            meta = parse_frontmatter_mapping(split.frontmatter_text)
        except (OSError, UnicodeDecodeError, MemoryFileError) as exc:
            warnings.append(f"{rel}: {exc}; skipped")
            continue
        if not split.body.strip() and not meta.get("title"):
            warnings.append(f"{rel}: empty note; skipped")
            continue
        loaded.append((rel, meta, split.body))
    ids: dict[str, str] = {}
    for rel, meta, _ in loaded:
        title = str(meta.get("title") or Path(rel).stem)
        key = str(meta.get("permalink") or title)
        mid = "bm-" + ".".join(slugify(part, 60) for part in key.split("/") if part.strip())
        for name in (title, str(meta.get("permalink") or ""), Path(rel).stem):
            if name:
                ids.setdefault(name.lower(), mid)
    drafts = []
    for rel, meta, body in loaded:
        title = str(meta.get("title") or Path(rel).stem)
        related = []
        for _, target in _RELATION_RE.findall(body):
            found = ids.get(target.strip().lower())
            if found is None:
                warnings.append(f"{rel}: relation to [[{target.strip()}]] names no note in the project; kept as text")
            elif found != ids.get(title.lower()) and found not in related:
                related.append(found)
        declared = str(meta.get("type") or "note")
        kind = declared.lower() if declared.lower() in MEMORY_TYPES else "resource"
        tags = meta.get("tags") or []
        tags = [t.strip() for t in tags.split(",")] if isinstance(tags, str) else [str(t) for t in tags]
        for _, text in _OBSERVATION_RE.findall(body):
            tags += _HASHTAG_RE.findall(text)
        extra = {
            k if k not in RESERVED_FIELDS else f"bm_{k}": v
            for k, v in meta.items()
            if k not in ("tags", "type") and v is not None
        }
        extra["title"] = title
        extra["entity_type"] = declared
        drafts.append(
            Draft(
                id=ids[title.lower()],
                type=kind,
                body=body.strip() + "\n",
                l0=derived_l0({"title": title}, body, rel),
                source=f"{root.name}/{rel}",
                tags=list(dict.fromkeys([IMPORT_TAG, "basic-memory", *(slugify(t, 60) for t in tags if t)])),
                related=related,
                extra=extra,
            )
        )
    return drafts, warnings
