"""A Logseq graph: ``pages/*.md`` and ``journals/*.md`` become memories.

- Page properties (the ``key:: value`` lines at the top of a page) go to the
  frontmatter: ``title`` names the page, ``tags`` become tags, ``alias`` becomes
  ``aliases``, ``type`` is used when it names one of our types; any other key is
  kept under its own name (``logseq_<key>`` when it is one of our reserved keys).
- Block properties (``id:: <uuid>``, ``collapsed:: true`` ...) are dropped from
  the text; ``id::`` makes the block referable.
- Block references ``((uuid))`` (and ``{{embed ((uuid))}}``) are replaced by the
  referenced block's text, and its page goes to ``related``; an unknown uuid is
  reported and left as it is.
- ``[[links]]`` and ``#tags`` are kept as written (a link resolves by page title).
- Page file names decode Logseq's namespaces: ``a___b.md`` (``:file/name-format
  :triple-lowbar``) and ``a%2Fb.md`` are the page ``a/b`` (a ``title::`` wins);
  ids are the title as a slug with ``/`` as ``.`` (``a.b``), prefixed ``logseq-``.
- ``journals/2024_01_31.md`` is the ``daily`` memory ``logseq-journal-2024-01-31``
  created on that day. A page with no text is reported and skipped.
"""

from __future__ import annotations

import re
import urllib.parse
from datetime import date
from pathlib import Path
from typing import Any

from ..memory_file import derived_l0
from ..ontology import MEMORY_TYPES
from ..writes import slugify
from .plan import IMPORT_TAG, RESERVED_FIELDS, Draft

_PROPERTY_RE = re.compile(r"^\s*(?:-\s+)?([A-Za-z0-9_][A-Za-z0-9_.-]*)::\s?(.*)$")
_BLOCK_START_RE = re.compile(r"^(\s*)-\s+(.*)$")
_REF_RE = re.compile(r"\{\{embed \(\(([0-9a-fA-F-]{36})\)\)\}\}|\(\(([0-9a-fA-F-]{36})\)\)")
_JOURNAL_RE = re.compile(r"^(\d{4})[_-](\d{2})[_-](\d{2})$")
HIDDEN_BLOCK_PROPERTIES = {"id", "collapsed", "heading"}


def looks_like(path: Path) -> bool:
    path = Path(path)
    return path.is_dir() and (
        (path / "logseq" / "config.edn").is_file() or ((path / "pages").is_dir() and (path / "journals").is_dir())
    )


def page_name(file: Path) -> str:
    stem = urllib.parse.unquote(file.stem)
    if "___" in stem:
        return stem.replace("___", "/")
    return stem


def _parse(text: str) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """(page properties, body lines without block properties, {uuid: block text})."""
    lines = text.splitlines()
    props: dict[str, str] = {}
    index = 0
    while index < len(lines):  # the first block: page properties
        match = _PROPERTY_RE.match(lines[index])
        if not match:
            break
        props[match.group(1).lower()] = match.group(2).strip()
        index += 1
    body: list[str] = []
    blocks: dict[str, str] = {}
    current: str | None = None
    for line in lines[index:]:
        prop = _PROPERTY_RE.match(line)
        if prop and not _BLOCK_START_RE.match(line):
            key, value = prop.group(1).lower(), prop.group(2).strip()
            if key == "id" and current is not None:
                blocks[value.lower()] = current
            if key in HIDDEN_BLOCK_PROPERTIES:
                continue
        start = _BLOCK_START_RE.match(line)
        if start:
            current = start.group(2).strip()
        body.append(line)
    return props, body, blocks


def _split_list(value: str) -> list[str]:
    items = re.findall(r"\[\[([^\]]+)\]\]|#\[\[([^\]]+)\]\]|#?([^,\[\]#]+)", value)
    return [next(part for part in item if part).strip() for item in items if any(p.strip() for p in item)]


def read(path: Path) -> tuple[list[Draft], list[str]]:
    root = Path(path)
    warnings: list[str] = []
    parsed: list[tuple[Path, str, bool, dict[str, str], list[str]]] = []
    blocks: dict[str, tuple[str, str]] = {}  # uuid -> (page title, block text)
    for folder, journal in (("pages", False), ("journals", True)):
        for file in sorted((root / folder).glob("*.md")) if (root / folder).is_dir() else []:
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                warnings.append(f"{folder}/{file.name}: cannot be read ({exc}); skipped")
                continue
            props, body, page_blocks = _parse(text)
            day = _JOURNAL_RE.match(file.stem) if journal else None
            title = props.get("title") or ("-".join(day.groups()) if day else page_name(file))
            for uuid, block in page_blocks.items():
                blocks[uuid] = (title, block)
            parsed.append((file, title, journal, props, body))
    page_ids = {title.lower(): _page_id(file, title, journal) for file, title, journal, _, _ in parsed}
    drafts: list[Draft] = []
    for file, title, journal, props, body in parsed:
        rel = f"{'journals' if journal else 'pages'}/{file.name}"
        related: list[str] = []

        def resolve(match: re.Match[str], rel: str = rel, related: list[str] = related, title: str = title) -> str:
            uuid = (match.group(1) or match.group(2)).lower()
            found = blocks.get(uuid)
            if found is None:
                warnings.append(f"{rel}: block reference (({uuid})) names no block in the graph; kept as is")
                return match.group(0)
            page, text = found
            target = page_ids.get(page.lower())
            if target and target not in related and page != title:
                related.append(target)
            return text if page == title else f"{text} (from [[{page}]])"

        text = _REF_RE.sub(resolve, "\n".join(body)).strip()
        if not re.sub(r"^\s*-\s*$", "", text, flags=re.MULTILINE).strip():
            warnings.append(f"{rel}: empty page; skipped")
            continue
        drafts.append(_draft(file, title, journal, props, text, rel, related))
    return drafts, warnings


def _page_id(file: Path, title: str, journal: bool) -> str:
    if journal:
        match = _JOURNAL_RE.match(file.stem)
        if match:
            return "logseq-journal-" + "-".join(match.groups())
    return "logseq-" + ".".join(slugify(part, 60) for part in title.split("/") if part.strip())


def _draft(
    file: Path, title: str, journal: bool, props: dict[str, str], text: str, rel: str, related: list[str]
) -> Draft:
    created = None
    kind = "resource"
    if journal:
        kind = "daily"
        match = _JOURNAL_RE.match(file.stem)
        if match:
            created = date(*map(int, match.groups()))
    declared = props.get("type", "").strip().lower()
    if declared in MEMORY_TYPES:
        kind = declared
    tags = [IMPORT_TAG, "logseq"] + [slugify(t, 60) for t in _split_list(props.get("tags", ""))]
    extra: dict[str, Any] = {"title": title}
    if props.get("alias"):
        extra["aliases"] = _split_list(props["alias"])
    for key, value in props.items():
        if key in ("title", "tags", "alias", "type") and (key != "type" or declared in MEMORY_TYPES):
            continue
        extra[f"logseq_{key}" if key in RESERVED_FIELDS else key] = value
    body = f"# {title}\n\n{text}\n"
    return Draft(
        id=_page_id(file, title, journal),
        type=kind,
        body=body,
        l0=derived_l0({"title": title}, text, rel),
        source=f"{file.parent.parent.name}/{rel}",
        tags=list(dict.fromkeys(t for t in tags if t)),
        related=related,
        created=created,
        extra=extra,
    )
