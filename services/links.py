"""How notes are named and found by name, the way Obsidian does it.

Three pure pieces that the parser (``memory_file``) and the catalog (``store``) share:

- ``parse_wikilinks``: the ``[[...]]`` links of a body, with ``|alias``, ``#heading``
  and ``^block`` handled, ``\\|`` (the escaped pipe Obsidian writes inside tables)
  read as ``|``, and links to attachments (``![[photo.png]]``, a pdf, a canvas ...)
  left out: they name files, not notes, so they are never "dangling";
- ``qualified_ids``: the ids of files that share a file stem (``Plugins/Templates.md``
  and ``Obsidian Web Clipper/Templates.md``): each is qualified by the shortest
  folder suffix that tells it apart, written with ``.`` between the parts
  (``Plugins.Templates``), so ids never hold a ``/`` (they go into ``memory://{id}``
  and ``/api/memories/{id}``);
- ``pick_target``: Obsidian's choice among several notes a link may name: a path
  from the vault root, else the note in the linking note's folder, else the one
  with the shortest path.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

WIKILINK_RE = re.compile(r"(!?)\[\[([^\[\]\n]+?)\]\]")
# Code fences and inline code: a [[link]] written there is an example, not a link.
CODE_RE = re.compile(r"^(```|~~~).*?^\1[ \t]*$|`[^`\n]+`", re.MULTILINE | re.DOTALL)
NOTE_SUFFIXES = (".md", ".markdown")
# Files Obsidian opens that are not notes (help.obsidian.md "Accepted file formats"), plus the
# canvas and base files it creates: a link to one is an attachment, not a missing note.
ATTACHMENT_EXTENSIONS = frozenset(
    {
        "avif",
        "bmp",
        "gif",
        "jpeg",
        "jpg",
        "png",
        "svg",
        "webp",
        "ico",
        "tif",
        "tiff",
        "heic",
        "flac",
        "m4a",
        "mp3",
        "ogg",
        "wav",
        "3gp",
        "webm",
        "mkv",
        "mov",
        "mp4",
        "ogv",
        "pdf",
        "canvas",
        "base",
        "excalidraw",
        "csv",
        "json",
        "txt",
        "zip",
        "html",
        "xml",
        "docx",
        "xlsx",
        "pptx",
        "epub",
    }
)
QUALIFIER_SEPARATOR = "."
# Dendron's cross-vault link prefix: [[dendron://vault-name/note.name]] names note.name.
_DENDRON_VAULT_RE = re.compile(r"dendron://[^/|\]]*/")


@dataclass(frozen=True)
class WikiLink:
    """One ``[[...]]`` link: the note it names (``target``), the alias, the anchor, and ``!`` embeds."""

    target: str
    alias: str = ""
    anchor: str = ""
    embed: bool = False

    @property
    def stored(self) -> str:
        """The form kept in ``Memory.wikilinks``: ``target`` or ``target|alias`` (Dendron puts the
        note after the pipe, Obsidian before it: the resolver tries both sides)."""
        return f"{self.target}|{self.alias}" if self.alias else self.target


def strip_code(text: str) -> str:
    return CODE_RE.sub(" ", text)


def is_attachment(target: str) -> bool:
    """``photo.png``, ``Doc.pdf``, ``Board.canvas``: a file that is not a note.

    Dendron names notes with dots (``dev.design``), so only known attachment
    extensions count; ``.md`` is a note.
    """
    name = target.rsplit("/", 1)[-1]
    if "." not in name:
        return False
    return name.rsplit(".", 1)[-1].strip().lower() in ATTACHMENT_EXTENSIONS


def split_link(inner: str, embed: bool = False) -> WikiLink | None:
    """Parse the text between ``[[`` and ``]]``; None for a same-note anchor (``[[#Heading]]``)."""
    inner = _DENDRON_VAULT_RE.sub("", inner.replace("\\|", "|"))
    target, _, alias = inner.partition("|")
    target = target.strip().rstrip("\\").strip()
    anchor = ""
    for mark in ("#", "^"):
        if mark in target:
            target, _, rest = target.partition(mark)
            anchor = anchor or (mark + rest if mark == "^" else rest)
    target = target.strip()
    lowered = target.lower()
    for suffix in NOTE_SUFFIXES:
        if lowered.endswith(suffix):
            target = target[: -len(suffix)]
            break
    alias = alias.split("#", 1)[0].split("^", 1)[0].strip()  # Dendron: [[shown|note#anchor]]
    if not target:
        return None
    return WikiLink(target, alias if alias and alias != target else "", anchor.strip(), embed)


def parse_wikilinks(body: str) -> list[WikiLink]:
    """Every note link in ``body`` in order (attachments and same-note anchors left out)."""
    links: list[WikiLink] = []
    for match in WIKILINK_RE.finditer(strip_code(body)):
        link = split_link(match.group(2), embed=bool(match.group(1)))
        if link is None or is_attachment(link.target):
            continue
        if link.alias and is_attachment(link.alias) and not link.embed:
            continue  # Dendron-style [[caption|picture.png]]
        links.append(link)
    return links


def display_text(link: WikiLink) -> str:
    """What a reader sees for a link: the alias (Obsidian's ``[[note|shown]]``), but the
    left side when the right one looks like a Dendron note name (``[[Shown text|a.b.c]]``)."""
    if not link.alias:
        return link.target.rsplit("/", 1)[-1]
    if " " not in link.alias and ("." in link.alias or "/" in link.alias) and " " in link.target:
        return link.target
    return link.alias


# --- naming: ids for repeated stems -------------------------------------------------


def stem_of(rel_path: str) -> str:
    """The file name without its extension (``a/b.c.md`` → ``b.c``): Obsidian's note name."""
    name = rel_path.rpartition("/")[2]
    dot = name.rfind(".")
    return name[:dot] if dot > 0 else name


def qualified_ids(rel_paths: Iterable[str]) -> dict[str, str]:
    """Ids for files sharing one stem: the shortest folder suffix unique among them, plus the stem.

    ``{"Plugins/Templates.md": "Plugins.Templates", "Obsidian Web Clipper/Templates.md":
    "Obsidian Web Clipper.Templates"}``. A file at the root keeps the bare stem (its full
    path). A lone file keeps its stem.
    """
    paths = sorted(set(rel_paths))
    if len(paths) == 1:
        return {paths[0]: stem_of(paths[0])}
    folders = {p: PurePosixPath(p).parts[:-1] for p in paths}
    ids: dict[str, str] = {}
    for path in paths:
        mine = folders[path]
        chosen = mine
        for k in range(1, len(mine) + 1):
            suffix = mine[-k:]
            if not any(len(folders[o]) >= k and folders[o][-k:] == suffix for o in paths if o != path):
                chosen = suffix
                break
        ids[path] = QUALIFIER_SEPARATOR.join((*chosen, stem_of(path)))
    return ids


# --- resolving: which note a link names --------------------------------------------------


def normalise_target(target: str, source_rel_path: str | None) -> tuple[str, bool]:
    """(path-like target without ``.md``, anchored-at-root?) with ``./`` and ``../`` applied."""
    text = target.strip()
    if text.startswith("/"):
        return text.lstrip("/"), True
    if text.startswith(("./", "../")) and source_rel_path:
        folder = posixpath.dirname(source_rel_path)
        joined = posixpath.normpath(posixpath.join(folder, text))
        return joined.lstrip("/"), True
    return text, False


def pick_target(candidates: list[str], source_rel_path: str | None) -> str | None:
    """Among note paths a link may name, Obsidian's choice: the one in the linking note's
    folder, else the shortest path (fewest folders, then alphabetical)."""
    if not candidates:
        return None
    if len(candidates) == 1:
        return candidates[0]
    if source_rel_path:
        here = posixpath.dirname(source_rel_path)
        local = [c for c in candidates if posixpath.dirname(c) == here]
        if local:
            return sorted(local)[0]
    return min(candidates, key=lambda p: (p.count("/"), len(p), p))


def path_key(rel_path_without_suffix: str) -> str:
    """Case-folded form used to match a link's path against file paths (Obsidian ignores case)."""
    return rel_path_without_suffix.strip().casefold()


def without_suffix(rel_path: str) -> str:
    lowered = rel_path.lower()
    for suffix in NOTE_SUFFIXES:
        if lowered.endswith(suffix):
            return rel_path[: -len(suffix)]
    return rel_path
