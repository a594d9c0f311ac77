"""Plain BM25 baseline: Tantivy (Lucene-style BM25, English stemming) over the same files.

Why Tantivy rather than bm25s: it keeps an on-disk index with real incremental
updates (delete + add + commit), so build, incremental update and index size are
measured the same way as for the other systems; it is one wheel with no numpy.
The document is each markdown file's full text (frontmatter included), so it
sees exactly the bytes the other systems see. No ranking beyond BM25.

Run as a script, this module is the worker (inside its own venv).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

if __package__:
    from .venvs import VenvPeer

TANTIVY_REQUIREMENT = "tantivy==0.27.0"
_WORD_RE = re.compile(r"[A-Za-z0-9]+")


def iter_markdown(root: Path):
    """Relative paths of the ``.md`` files below ``root``, hidden folders skipped (sorted)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel_dir = os.path.relpath(dirpath, root)
        for name in sorted(filenames):
            if name.endswith(".md"):
                yield name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")


if __package__:

    class Bm25Peer(VenvPeer):
        name = "bm25"
        label = "BM25 (tantivy)"
        venv_name = "tantivy"
        requirements = (TANTIVY_REQUIREMENT,)
        script = Path(__file__).resolve()
        index_folder = "tantivy-index"


class _Worker:
    """Holds the Tantivy index and one writer for the life of the worker."""

    def __init__(self) -> None:
        self.index = None
        self.writer = None
        self.root: Path | None = None

    def build(self, params: dict[str, Any]) -> dict[str, Any]:
        import tantivy

        self.root = Path(params["root"])
        index_dir = Path(params["work"]) / "tantivy-index"
        index_dir.mkdir(parents=True, exist_ok=True)
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("path", stored=True, tokenizer_name="raw")
        builder.add_text_field("body", stored=False, tokenizer_name="en_stem")
        self.index = tantivy.Index(builder.build(), path=str(index_dir))
        self.writer = self.index.writer(heap_size=128_000_000)
        docs = 0
        for rel in iter_markdown(self.root):
            text = (self.root / rel).read_text(encoding="utf-8", errors="replace")
            self.writer.add_document(tantivy.Document(path=rel, body=text))
            docs += 1
        self.writer.commit()
        self.writer.wait_merging_threads()
        self.writer = self.index.writer(heap_size=64_000_000)
        self.index.reload()
        return {"docs": docs}

    def update(self, params: dict[str, Any]) -> dict[str, Any]:
        import tantivy

        assert self.root is not None and self.writer is not None and self.index is not None
        for rel in params["paths"]:
            self.writer.delete_documents_by_term("path", rel)
            path = self.root / rel
            if path.exists():
                text = path.read_text(encoding="utf-8", errors="replace")
                self.writer.add_document(tantivy.Document(path=rel, body=text))
        self.writer.commit()
        self.index.reload()
        return {"updated": len(params["paths"])}

    def queries(self, params: dict[str, Any]) -> dict[str, Any]:
        import time

        assert self.index is not None
        k = int(params["k"])
        hits: list[list[str]] = []
        latencies: list[float] = []
        for text in params["queries"]:
            start = time.perf_counter()
            terms = _WORD_RE.findall(text)
            found: list[str] = []
            if terms:
                searcher = self.index.searcher()
                query = self.index.parse_query(" ".join(terms), ["body"])
                for _score, address in searcher.search(query, k).hits:
                    found.append(searcher.doc(address)["path"][0])
            latencies.append(time.perf_counter() - start)
            hits.append(found)
        return {"hits": hits, "latencies_s": latencies}

    def stats(self, params: dict[str, Any]) -> dict[str, Any]:
        return {}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from worker_loop import serve

    worker = _Worker()
    serve({"build": worker.build, "update": worker.update, "queries": worker.queries, "stats": worker.stats})


if __name__ == "__main__":
    main()
