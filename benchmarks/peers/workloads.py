"""The corpora and query sets every system gets, built the same way for all of them.

Corpora: the real ``tldr`` and ``obsidian-help`` folders as they are, and generated
workspaces of N memories (``corpora.build_workspace``: real tldr/Dendron/Obsidian/Foam
text, repeated and varied). Each system indexes its own copy (``copy_corpus``), since
some write into the folder (basic-memory adds frontmatter; AI Context OS keeps ``.ctxos/``).

Queries: natural-language lines taken from the corpus itself (a tldr page's
description, a note's first sentence), at most ten words, so every query has at least
one document it was written from. On the two real corpora that document is known, so
``known_item`` measures whether it comes back in the top ten: a cheap sanity check
that a system's speed is not bought by returning nothing useful.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from corpora import DATA_DIR, build_workspace

REAL_CORPORA = {"tldr": DATA_DIR / "tldr" / "pages", "obsidian-help": DATA_DIR / "obsidian-help"}
_FRONTMATTER_RE = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.DOTALL)
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9'-]*")


@dataclass
class Corpus:
    name: str  # "tldr", "obsidian-help", "gen-1000" ...
    source: Path  # the folder every system's copy is made from
    generated: bool


def markdown_files(root: Path) -> list[str]:
    """Relative paths of the ``.md`` files (hidden folders skipped), sorted."""
    out = []
    for path in sorted(root.rglob("*.md")):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        out.append(rel.as_posix())
    return out


def prepare_corpus(name: str, scratch: Path, *, log=print) -> Corpus:
    """The source folder for ``name``: a real corpus in place, or a generated one under ``scratch``."""
    if name in REAL_CORPORA:
        return Corpus(name, REAL_CORPORA[name], False)
    match = re.fullmatch(r"gen-(\d+)", name)
    if not match:
        raise ValueError(f"unknown corpus {name!r}: use tldr, obsidian-help or gen-N")
    n = int(match.group(1))
    dest = scratch / "sources" / name
    marker = dest / ".complete"
    if not marker.exists():
        if dest.exists():
            shutil.rmtree(dest)
        log(f"[corpus] generating {n} memories into {dest}")
        build_workspace(dest, n)
        marker.write_text(str(n), encoding="utf-8")
    return Corpus(name, dest, True)


def copy_corpus(corpus: Corpus, dest: Path) -> Path:
    """A private, writable copy of the corpus's markdown files (nothing derived is copied).

    Writable: the shared corpora are read-only, and a copy that kept their modes would
    look read-only to the systems too (AI Context OS would then keep its index under
    ``~/.cache`` instead of ``.ctxos/``, outside the benchmark's scratch folder).
    """
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(
        corpus.source, dest, ignore=shutil.ignore_patterns(".*", "*.json", "*.txt"), copy_function=shutil.copyfile
    )
    for dirpath, _dirnames, filenames in os.walk(dest):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
    return dest


def body_text(text: str) -> str:
    """A file's text without its YAML frontmatter."""
    return _FRONTMATTER_RE.sub("", text, count=1)


def query_line(text: str) -> str | None:
    """A natural query from a document: its tldr description or first prose sentence."""
    body = body_text(text)
    for line in body.splitlines():
        line = line.strip()
        if line.startswith(">"):
            line = line.lstrip("> ").strip()
            if line.lower().startswith(("more information", "see also")):
                continue
        elif not line or line.startswith(("#", "|", "```", "!", "-", "<!--", "[")):
            continue
        words = _WORD_RE.findall(line)
        if len(words) >= 3:
            return " ".join(words[:10])
    return None


def make_queries(root: Path, count: int, *, seed: int = 7) -> list[tuple[str, str]]:
    """``count`` (query, source relative path) pairs drawn from the files under ``root``."""
    files = markdown_files(root)
    rng = random.Random(seed)
    rng.shuffle(files)
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for rel in files:
        try:
            text = (root / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        query = query_line(text)
        if query and query.lower() not in seen:
            seen.add(query.lower())
            out.append((query, rel))
        if len(out) >= count:
            break
    return out


def pick_update_files(root: Path, count: int, *, seed: int = 11) -> list[str]:
    """Files to edit: ones whose name is unique in the corpus (tldr has ``git.md`` in several
    folders, and a memory whose id is taken is not served by AI Context OS, by design), and
    not scratch notes (the daemon archives expired scratch memories when it starts)."""
    files = [rel for rel in markdown_files(root) if not rel.startswith(("09-scratch/", "_archive/"))]
    stems: dict[str, int] = {}
    for rel in files:
        stem = Path(rel).stem.lower()
        stems[stem] = stems.get(stem, 0) + 1
    unique = [
        rel for rel in files if stems[Path(rel).stem.lower()] == 1 and (root / rel).stat().st_size < 65536
    ] or files
    rng = random.Random(seed)
    return sorted(rng.sample(unique, min(count, len(unique))))


def append_marker(root: Path, rel: str, marker: str) -> None:
    """Edit a file as a person would: append a line (the file stays valid for every system)."""
    path = root / rel
    text = path.read_text(encoding="utf-8")
    path.write_text(text.rstrip("\n") + f"\n\nUpdated: {marker} follows this edit.\n", encoding="utf-8")
