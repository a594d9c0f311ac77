"""Parse and write one memory file (markdown with YAML frontmatter).

Parsing is strict about what would mislead the engine (a wrong type, an
importance outside 0..1, a date that is not a date) and says why in a
``MemoryFileError`` that names the problem, so the caller can list the file
with its reason and keep serving every other file.

Writing is conservative: an existing file is edited key by key inside its
frontmatter, so unknown keys, comments, key order and the body stay
byte-for-byte as the person wrote them.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from frontmatter.default_handlers import YAMLHandler

from .links import display_text, parse_wikilinks, split_link
from .model import Memory
from .ontology import MEMORY_TYPES

L1_MARKER = "<!-- L1 -->"
L2_MARKER = "<!-- L2 -->"
_MARKER_RE = re.compile(r"^[ \t]*<!--\s*(L1|L2)\s*-->[ \t]*$", re.MULTILINE)  # the rule (tests split with it)
_MARKER_TEXT_RE = re.compile(r"<!--\s*(L1|L2)\s*-->")  # the same marker, found by its literal start
_OPEN_RE = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n")
_CLOSE_RE = re.compile(r"^---[ \t]*\r?$\n?", re.MULTILINE)
_WIKILINK_RE = re.compile(r"\[\[([^\[\]\n]+?)\]\]")
_HEADING_RE = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_H1_RE = re.compile(r"^#[ \t]+(.+?)[ \t#]*$")
_CODE_BLOCK_RE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_LIST_KEYS = ("tags", "related", "requires", "optional")
# Compiled once: parsing 10,000 files calls these ~150,000 times (a cold build's parser).
_BLANK_LINE_RE = re.compile(r"\n[ \t]*\n")
_SENTENCE_RE = re.compile(r"(.+?[.!?])(\s|$)")
_RULE_RE = re.compile(r"[-*_=]{3,}")
_QUOTE_RE = re.compile(r"^(?:>\s*)+(?:\[![^\]]*\][-+]?\s*)?")
_LIST_ITEM_RE = re.compile(r"^(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?")
_EMBED_RE = re.compile(r"!\[\[[^\]]*\]\]")
_IMAGE_RE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_MD_LINK_RE = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_EMPHASIS_RE = re.compile(r"(\*\*|__|==|~~)(.+?)\1")
_ITALIC_RE = re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?!\w)")
_CODE_SPAN_RE = re.compile(r"`([^`]*)`")
_HTML_TAG_RE = re.compile(r"<[^>]+>")
_WORD_CHAR_RE = re.compile(r"\w")
_YAML = YAMLHandler()

L0_MAX_CHARS = 200
AUTO_L1_MAX_CHARS = 700


class MemoryFileError(ValueError):
    """The file cannot be used as a memory; ``str(err)`` is the reason for a person."""


@dataclass
class SplitFile:
    """A file's text cut into frontmatter and body, with the exact offsets."""

    has_frontmatter: bool
    frontmatter_text: str  # the YAML between the fences ('' when none)
    body: str  # everything after the closing fence
    fm_start: int  # offset of the YAML text
    fm_end: int  # offset just past the YAML text (start of the closing fence)


def split_frontmatter(text: str) -> SplitFile:
    """Split ``text`` at its ``---`` fences without touching a byte of either part."""
    opening = _OPEN_RE.match(text)
    if not opening:
        return SplitFile(False, "", text, 0, 0)
    start = opening.end()
    close = _CLOSE_RE.search(text, start)
    if close is None:
        raise MemoryFileError("frontmatter starts with '---' but has no closing '---' line")
    return SplitFile(True, text[start : close.start()], text[close.end() :], start, close.start())


def checksum_bytes(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def decode_memory_bytes(raw: bytes, max_bytes: int) -> str:
    """Bytes to text, refusing what is not a text memory (with the reason)."""
    if not raw.strip():
        raise MemoryFileError("empty file")
    if len(raw) > max_bytes:
        raise MemoryFileError(
            f"file is {len(raw):,} bytes, over the {max_bytes:,}-byte cap (limits.max_file_bytes in _config.yaml)"
        )
    if b"\x00" in raw:
        raise MemoryFileError("binary content (contains NUL bytes), not a text memory")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MemoryFileError(
            f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}; save the file as UTF-8"
        ) from None


def parse_frontmatter_mapping(fm_text: str) -> dict[str, Any]:
    """YAML to a mapping, with a reason for broken YAML or a non-mapping."""
    if not fm_text.strip():
        return {}
    try:
        loaded = _YAML.load(fm_text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise MemoryFileError(f"broken YAML frontmatter{where}: {problem}") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # PyYAML builds dates while parsing: "2026-13-45" fails here, not as a YAMLError.
        raise MemoryFileError(f"frontmatter has a value YAML cannot build: {exc} (dates are YYYY-MM-DD)") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise MemoryFileError(f"frontmatter must be a mapping of keys to values, got a {type(loaded).__name__}")
    return {str(k): v for k, v in loaded.items()}


def parse_memory(
    raw: bytes,
    *,
    rel_path: str,
    path: Path,
    folder_type: str | None,
    mtime: float,
    max_bytes: int,
) -> Memory:
    """Parse raw file bytes into a ``Memory``; raise ``MemoryFileError`` with the reason."""
    text = decode_memory_bytes(raw, max_bytes)
    split = split_frontmatter(text)
    meta = parse_frontmatter_mapping(split.frontmatter_text)
    body = split.body
    summary = _text_field(meta, "l0")
    if not body.strip() and not summary and not _summary_fallback(meta):
        raise MemoryFileError("no content: the body is empty and there is no l0, title or description")

    kind = _memory_type(meta, folder_type)
    l1, l2 = split_tiers(body)
    title = first_heading(body)
    l0 = summary or derived_l0(meta, body, rel_path)
    memory_id = _id_field(meta, Path(rel_path).stem)
    modified = _datetime_field(meta, "modified")
    if modified is None:
        modified = datetime.fromtimestamp(mtime, tz=UTC).replace(tzinfo=None)
    created_dt = _datetime_field(meta, "created")
    return Memory(
        id=memory_id,
        type=kind,
        rel_path=rel_path,
        path=path,
        l0=_one_line(l0),
        l1=l1,
        l2=l2,
        importance=_importance(meta),
        tags=_list_field(meta, "tags"),
        related=_list_field(meta, "related"),
        requires=_list_field(meta, "requires"),
        optional=_list_field(meta, "optional"),
        wikilinks=extract_wikilinks(body),
        created=created_dt.date() if created_dt else None,
        modified=modified,
        version=_version(meta),
        always_load=_bool_field(meta, "always_load"),
        protected=_bool_field(meta, "protected"),
        title=title,
        checksum=checksum_bytes(raw),
        mtime=mtime,
        size=len(raw),
        metadata=meta,
    )


# --- tiers and text helpers -------------------------------------------------


def split_tiers(body: str) -> tuple[str, str]:
    """Return (l1, l2).

    With markers: text before the first marker and the ``<!-- L1 -->`` section
    form L1; the ``<!-- L2 -->`` section is L2. Without markers the first
    paragraph (with its heading) is L1 and the rest is L2, so L2 rendering
    (L1 then L2) is always the whole body.
    """
    parts = _split_markers(body)
    if len(parts) == 1:
        return _auto_split(body)
    l1_chunks = [parts[0]]
    l2_chunks: list[str] = []
    for marker, chunk in zip(parts[1::2], parts[2::2]):
        (l1_chunks if marker == "L1" else l2_chunks).append(chunk)
    l1 = "\n\n".join(c.strip() for c in l1_chunks if c.strip())
    l2 = "\n\n".join(c.strip() for c in l2_chunks if c.strip())
    return l1, l2


def _split_markers(body: str) -> list[str]:
    """``_MARKER_RE.split(body)``, a third of its time: the marker is searched by its literal
    ``<!--`` (a line-anchored pattern is tried at every line start), then its line is checked
    to hold nothing else but blanks. A released memory's tiers are split at every read-back."""
    parts: list[str] = []
    last = 0
    for found in _MARKER_TEXT_RE.finditer(body):
        start, end = found.span()
        line_start = body.rfind("\n", 0, start) + 1
        line_end = body.find("\n", end)
        if line_end < 0:
            line_end = len(body)
        if body[line_start:start].strip(" \t") or body[end:line_end].strip(" \t"):
            continue
        parts += [body[last:line_start], found.group(1)]
        last = line_end
    parts.append(body[last:])
    return parts


def _auto_split(body: str) -> tuple[str, str]:
    text = body.strip()
    if not text:
        return "", ""
    blocks = _BLANK_LINE_RE.split(text)
    head: list[str] = []
    for index, block in enumerate(blocks):
        head.append(block)
        is_heading_only = all(_HEADING_RE.match(line) for line in block.strip().splitlines() if line.strip())
        if not is_heading_only:
            rest = "\n\n".join(blocks[index + 1 :])
            l1 = "\n\n".join(head).strip()
            if len(l1) > AUTO_L1_MAX_CHARS:
                return _cut_long_opening(text, AUTO_L1_MAX_CHARS)
            return l1, rest.strip()
    return "\n\n".join(head).strip(), ""


def _cut_long_opening(text: str, limit: int) -> tuple[str, str]:
    """(L1, L2) for a body whose opening paragraph is too long: L1 is its start cut at a
    sentence end (marked " …"), L2 continues exactly where L1 stopped, so rendering
    L1 then L2 shows every sentence once (issue 13: the cut used to repeat inside L2)."""
    l1 = _cut_at_sentence(text, limit)
    shown = l1[: -len(" …")] if l1.endswith(" …") else l1
    return l1, text[len(shown) :].strip()


def _cut_at_sentence(text: str, limit: int) -> str:
    cut = text[:limit]
    end = max(cut.rfind(". "), cut.rfind(".\n"))
    return (cut[: end + 1] if end > limit // 3 else cut.rstrip()) + " …"


def first_heading(body: str) -> str:
    match = _HEADING_RE.search(body)
    return match.group(1).strip() if match else ""


def derived_l0(meta: dict[str, Any], body: str, rel_path: str) -> str:
    """The one line of a file without ``l0``: its title, then its first sentence.

    The title is the frontmatter ``title``, else the first level-1 heading, else
    the file name; never a sub-heading (``## Settings`` says nothing about a note).
    The sentence is ``description``/``desc`` when set, else the body's first sentence
    (markdown links shown as their text). A sentence that already starts with the
    title stands alone.
    """
    title = _text_field(meta, "title") or first_h1(body) or PurePosixPath(rel_path).stem
    title = " ".join(title.split())
    sentence = ""
    for key in ("description", "desc"):
        value = meta.get(key)
        if isinstance(value, str) and value.strip():
            sentence = value.strip()
            break
    sentence = " ".join((sentence or first_sentence(body)).split())
    if not sentence:
        return _one_line(title)
    if _starts_with_title(sentence, title):
        return _one_line(sentence)
    return _one_line(f"{title} — {sentence}")


def _starts_with_title(sentence: str, title: str) -> bool:
    r"""``re.match(re.escape(title) + r"(?!\w)", sentence, re.IGNORECASE)`` without compiling a pattern per title.

    ASCII text (nearly every title) is compared lowercased, which is what
    ``IGNORECASE`` does for ASCII; anything else goes to the regex.
    """
    head = sentence[: len(title)]
    if not (title.isascii() and head.isascii()):
        return re.match(re.escape(title) + r"(?!\w)", sentence, re.IGNORECASE) is not None
    if head.lower() != title.lower():
        return False
    return _WORD_CHAR_RE.match(sentence, len(title)) is None


def first_h1(body: str) -> str:
    """The first ``# Title`` line outside code, without inline markdown."""
    for line in _CODE_BLOCK_RE.sub("", body).splitlines():
        match = _H1_RE.match(line)
        if match:
            return plain_text(match.group(1))
    return ""


def first_sentence(body: str) -> str:
    """The first sentence of the body's first paragraph of prose (headings, code, tables,
    embeds, HTML comments and rules skipped; list and quote markers removed)."""
    paragraph: list[str] = []
    for line in _CODE_BLOCK_RE.sub("\n", body).splitlines():
        text = _prose_line(line)
        if text:
            paragraph.append(text)
            continue
        if paragraph:
            break
    joined = " ".join(paragraph)
    match = _SENTENCE_RE.match(joined)
    return match.group(1) if match else joined


def _prose_line(line: str) -> str:
    stripped = line.strip()
    if (
        not stripped
        or _HEADING_RE.match(stripped)
        or stripped.startswith(("<!--", "|", "<"))
        or _RULE_RE.fullmatch(stripped)
    ):
        return ""
    stripped = _QUOTE_RE.sub("", stripped)  # quotes, callouts
    stripped = _LIST_ITEM_RE.sub("", stripped)  # list items, tasks
    return plain_text(stripped)


def plain_text(text: str) -> str:
    """Inline markdown as a reader sees it: link text, no embeds, no emphasis marks.

    Each pattern runs only when the character it cannot match without is in
    the text (most lines have no markup: a cold build runs this ~30 times a file).
    """
    if "[" in text:
        text = _EMBED_RE.sub("", text)
        text = _IMAGE_RE.sub("", text)
        text = _WIKILINK_RE.sub(lambda m: _link_text(m.group(1)), text)
        text = _MD_LINK_RE.sub(r"\1", text)
    if "*" in text or "_" in text or "=" in text or "~" in text:
        text = _EMPHASIS_RE.sub(r"\2", text)
    if "*" in text:
        text = _ITALIC_RE.sub(r"\1", text)
    if "`" in text:
        text = _CODE_SPAN_RE.sub(r"\1", text)
    if "<" in text:
        text = _HTML_TAG_RE.sub("", text)
    return " ".join(text.split())


def _link_text(inner: str) -> str:
    link = split_link(inner)
    return display_text(link) if link else inner.lstrip("#^")


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= L0_MAX_CHARS else line[: L0_MAX_CHARS - 1].rstrip() + "…"


def extract_wikilinks(body: str) -> list[str]:
    """``[[target]]`` note links in order, as ``links.parse_wikilinks`` reads them.

    ``#heading``/``^block`` anchors are dropped, a folder path is kept
    (``Plugins/Templates``: the resolver uses it), and ``[[a|b]]`` is kept as
    ``a|b``: Obsidian puts the note first, Dendron the alias first, so the
    resolver tries both sides. Links inside code are examples; links to
    attachments (``![[photo.png]]``, a pdf, a canvas) name files, not notes.
    """
    return list(dict.fromkeys(link.stored for link in parse_wikilinks(body)))


# --- field validation -------------------------------------------------------


def _memory_type(meta: dict[str, Any], folder_type: str | None) -> str:
    value = meta.get("type")
    if value is None:
        return folder_type or "resource"
    if not isinstance(value, str):
        raise MemoryFileError(f"type must be a word, got {value!r}")
    kind = value.strip().lower()
    if kind not in MEMORY_TYPES:
        raise MemoryFileError(f"unknown type {value!r}; expected one of: {', '.join(MEMORY_TYPES)}")
    return kind


def _summary_fallback(meta: dict[str, Any]) -> str:
    """Vault tools keep a summary under other names (Dendron ``desc``, Obsidian/Jekyll ``title``)."""
    for key in ("description", "desc", "title"):
        value = meta.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _id_field(meta: dict[str, Any], default: str) -> str:
    value = meta.get("id")
    if value is None:
        return default
    if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
        return str(value).strip()
    raise MemoryFileError(f"id must be a non-empty string, got {value!r}")


def _text_field(meta: dict[str, Any], key: str) -> str:
    value = meta.get(key)
    if value is None:
        return ""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value).strip()
    raise MemoryFileError(f"{key} must be text, got {type(value).__name__}")


def _importance(meta: dict[str, Any]) -> float:
    value = meta.get("importance")
    if value is None:
        return 0.5
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MemoryFileError(f"importance must be a number from 0.0 to 1.0, got {value!r}")
    if not 0.0 <= float(value) <= 1.0:
        raise MemoryFileError(f"importance {value} is outside 0.0-1.0")
    return float(value)


def _version(meta: dict[str, Any]) -> int:
    value = meta.get("version")
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MemoryFileError(f"version must be a whole number, got {value!r}")
    return value


def _bool_field(meta: dict[str, Any], key: str) -> bool:
    value = meta.get(key)
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise MemoryFileError(f"{key} must be true or false, got {value!r}")


def _list_field(meta: dict[str, Any], key: str) -> list[str]:
    value = meta.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
    elif isinstance(value, list):
        items = []
        for item in value:
            if isinstance(item, (dict, list)) or item is None:
                raise MemoryFileError(f"{key} must be a list of words, got an item {item!r}")
            items.append(str(item).strip())
    else:
        raise MemoryFileError(f"{key} must be a list, got {value!r}")
    cleaned = [_strip_wikilink(item) for item in items if item]
    return list(dict.fromkeys(item for item in cleaned if item))


def _strip_wikilink(item: str) -> str:
    match = _WIKILINK_RE.fullmatch(item)
    if not match:
        return item
    link = split_link(match.group(1))
    return link.target if link else ""


def _datetime_field(meta: dict[str, Any], key: str) -> datetime | None:
    """Dates as YAML dates/datetimes, ISO strings, or epoch seconds/milliseconds (Dendron)."""
    value = meta.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value / 1000.0 if value > 1e11 else float(value)
        try:
            return datetime.fromtimestamp(seconds, tz=UTC).replace(tzinfo=None)
        except (OverflowError, OSError, ValueError):
            raise MemoryFileError(f"{key}: {value!r} is not a valid date") from None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise MemoryFileError(f"{key}: {value!r} is not a date (use YYYY-MM-DD)") from None
        return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed
    raise MemoryFileError(f"{key}: {value!r} is not a date (use YYYY-MM-DD)")


# --- writing ----------------------------------------------------------------


def format_yaml_value(value: Any) -> str:
    """One YAML scalar or flow sequence on one line, quoted where needed so it reads back as given.

    Agent strings may hold ``]``, ``}``, ``:``, ``#``, ``,``, newlines or any unicode:
    a plain scalar is used only when it round-trips (inside a flow sequence for list
    items); otherwise the JSON form, which is a valid YAML double-quoted scalar.
    """
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow_item(v) for v in value) + "]"
    if isinstance(value, datetime):
        return value.replace(microsecond=0).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    dumped = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000)
    dumped = dumped.strip().removesuffix("...").strip()
    if isinstance(value, str) and ("\n" in dumped or not _reads_back(f"k: {dumped}", value)):
        return json.dumps(value, ensure_ascii=False)
    return dumped


def _flow_item(value: Any) -> str:
    text = format_yaml_value(value)
    if isinstance(value, str) and not _reads_back(f"k: [{text}]", [value]):
        return json.dumps(value, ensure_ascii=False)
    return text


def _reads_back(doc: str, expected: Any) -> bool:
    try:
        loaded: object = yaml.safe_load(doc)
        return loaded == {"k": expected}
    except yaml.YAMLError:
        return False


def _is_continuation(line: str) -> bool:
    """A line that belongs to the previous key's multi-line value (indented, a list item, blank)."""
    stripped = line.strip()
    return not stripped or line[0] in " \t" or stripped == "-" or line.startswith("- ")


def render_new_file(fields: dict[str, Any], body: str) -> str:
    """A new memory file: every field on its own line, then the body."""
    lines = ["---"]
    for key, value in fields.items():
        if value is None:
            continue
        lines.append(f"{key}: {format_yaml_value(value)}")
    lines.append("---")
    text = "\n".join(lines) + "\n" + body
    return text if text.endswith("\n") else text + "\n"


def update_frontmatter(text: str, changes: dict[str, Any], body: str | None = None) -> str:
    """Return ``text`` with ``changes`` applied to its frontmatter, other bytes untouched.

    A key on a single line (``key: value``) is rewritten in place; a key whose
    value spans several lines is replaced with its new one-line form; a
    missing key is added before the closing fence. ``body`` replaces the body
    when given. A file without frontmatter gains one.
    """
    split = split_frontmatter(text)
    new_body = split.body if body is None else body
    if not split.has_frontmatter:
        return render_new_file(changes, new_body)
    fm_lines = split.frontmatter_text.splitlines(keepends=True)
    newline = "\r\n" if fm_lines and fm_lines[0].endswith("\r\n") else "\n"
    pending = dict(changes)
    output: list[str] = []
    index = 0
    while index < len(fm_lines):
        line = fm_lines[index]
        key_match = re.match(r"^([A-Za-z_][\w-]*)[ \t]*:", line)
        key = key_match.group(1) if key_match else None
        if key in pending:
            value = pending.pop(key)
            index += 1
            # skip continuation lines of a multi-line value
            while index < len(fm_lines) and _is_continuation(fm_lines[index]):
                index += 1
            if value is not None:
                output.append(f"{key}: {format_yaml_value(value)}{newline}")
            continue
        output.append(line)
        index += 1
    if output and not output[-1].endswith(("\n", "\r")):
        output[-1] += newline
    for key, value in pending.items():
        if value is not None:
            output.append(f"{key}: {format_yaml_value(value)}{newline}")
    new_fm = "".join(output)
    closing_and_rest = text[split.fm_end :]
    closing = closing_and_rest[: len(closing_and_rest) - len(split.body)]
    return text[: split.fm_start] + new_fm + closing + new_body
