"""Workspaces and texts built from the shared real corpora (``../shared/data``).

``build_workspace(dest, n, source=...)`` writes ``n`` memory files whose bodies are
real documents (tldr pages, Dendron, Obsidian and Foam notes), repeated and varied
when ``n`` exceeds the corpus: each repeat mixes in a paragraph of another document
and gets its own id, tags, importance, dates and links, so a 10,000- or
50,000-memory workspace is not 10,000 copies of one index posting. The data is
read in place and never copied into the repository.
"""

from __future__ import annotations

import json
import os
import random
import re
from datetime import date, timedelta
from functools import cache
from pathlib import Path

from ctxos.services.ontology import TYPE_FOLDERS


def _find_data_dir() -> Path:
    env = os.environ.get("CTXOS_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "data"


DATA_DIR = _find_data_dir()
DOC_CORPORA = ("tldr", "dendron-vault", "obsidian-help", "foam-docs")
_FRONTMATTER_RE = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.DOTALL)
_TYPES = [t for t in TYPE_FOLDERS if t != "rule"]


def _corpus_files(name: str) -> list[Path]:
    root = DATA_DIR / name
    if name == "tldr":
        root = root / "pages"
    skip = {"LICENSE.md", "SOURCE.md", "README.md"}
    return sorted(p for p in root.rglob("*.md") if p.name not in skip and p.is_file())


@cache
def _corpus_texts_cached(name: str) -> tuple[str, ...]:
    if name == "locomo-dev":
        return tuple(_locomo_session_texts())
    texts = []
    for path in _corpus_files(name):
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return tuple(texts)


def corpus_texts(name: str) -> list[str]:
    """Raw texts of one corpus (files as they are; LoCoMo: one text per dialog session)."""
    return list(_corpus_texts_cached(name))


def _locomo_session_texts() -> list[str]:
    data = json.loads((DATA_DIR / "locomo-dev" / "locomo-dev.json").read_text(encoding="utf-8"))
    texts = []
    for sample in data:
        conv = sample["conversation"]
        for key, turns in conv.items():
            if key.startswith("session_") and isinstance(turns, list):
                texts.append("\n".join(f"{t.get('speaker', '')}: {t.get('text', '')}" for t in turns))
    return texts


def _strip_frontmatter(text: str) -> str:
    return _FRONTMATTER_RE.sub("", text, count=1).strip()


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def _title_words(text: str) -> list[str]:
    heading = re.search(r"^#\s+(.+)$", text, re.MULTILINE)
    words = re.findall(r"[a-z][a-z0-9]+", (heading.group(1) if heading else text[:80]).lower())
    return words[:3]


def build_workspace(
    dest: Path, n: int, source: str | tuple[str, ...] = DOC_CORPORA, *, seed: int = 1234, link_prob: float = 0.3
) -> list[str]:
    """Write ``n`` memory files into ``dest`` (an existing or new folder); return their ids.

    ``source`` is a corpus name or a tuple of names from ``DOC_CORPORA``. Files are
    spread over the ontology folders with varied type, importance, dates, tags and
    ``related`` links; a small set of rules is included (at most 5). The result is
    deterministic for a given ``seed``.
    """
    dest = Path(dest)
    names = (source,) if isinstance(source, str) else tuple(source)
    docs: list[str] = []
    for name in names:
        docs.extend(_strip_frontmatter(t) for t in corpus_texts(name))
    docs = [d for d in docs if len(d) > 40]
    if not docs:
        raise ValueError(f"no documents found for {names} under {DATA_DIR}")
    rng = random.Random(seed)
    order = list(range(len(docs)))
    rng.shuffle(order)
    tag_pool = [
        "linux",
        "git",
        "network",
        "files",
        "notes",
        "sync",
        "plugin",
        "search",
        "editor",
        "publish",
        "shell",
        "python",
        "docker",
        "security",
        "graph",
        "markdown",
        "vault",
        "workflow",
        "api",
        "config",
    ]
    ids: list[str] = []
    today = date(2026, 12, 1)
    for i in range(n):
        doc = docs[order[i % len(docs)]]
        repeat = i // len(docs)
        words = _title_words(doc) or ["note"]
        mem_id = "-".join(words) + f"-{i}"
        kind = "rule" if i < 5 else _TYPES[rng.randrange(len(_TYPES))]
        paragraphs = _paragraphs(doc)
        if repeat:
            other = _paragraphs(docs[rng.randrange(len(docs))])
            if other:
                paragraphs.insert(rng.randrange(len(paragraphs) + 1), other[rng.randrange(len(other))])
        l1 = paragraphs[0] if paragraphs else doc
        rest = "\n\n".join(paragraphs[1:])
        tags = rng.sample(tag_pool, rng.randint(0, 3)) + words[:1]
        related = (
            [ids[rng.randrange(len(ids))] for _ in range(rng.randint(1, 3))] if ids and rng.random() < link_prob else []
        )
        created = today - timedelta(days=rng.randint(30, 900))
        modified = created + timedelta(days=rng.randint(0, 29))
        lines = [
            "---",
            f"id: {mem_id}",
            f"type: {kind}",
            f"importance: {rng.choice([0.2, 0.4, 0.5, 0.5, 0.6, 0.8, 0.9])}",
            f"tags: [{', '.join(dict.fromkeys(tags))}]",
        ]
        if related:
            lines.append(f"related: [{', '.join(dict.fromkeys(related))}]")
        lines += [f"created: {created.isoformat()}", f"modified: {modified.isoformat()}", "---"]
        body = l1 + ("\n<!-- L2 -->\n" + rest if rest else "") + "\n"
        folder = dest / TYPE_FOLDERS[kind]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{mem_id}.md").write_text("\n".join(lines) + "\n" + body, encoding="utf-8")
        ids.append(mem_id)
    # Generated scratch notes carry dates months old; a daemon would archive them at once
    # (scratch expiry) and the benchmark would measure fewer memories than it says.
    config = dest / "_config.yaml"
    if not config.exists():
        config.write_text(
            "governance:\n  scratch_auto_archive: false   # benchmark workspace: keep all N memories\n",
            encoding="utf-8",
        )
    return ids
