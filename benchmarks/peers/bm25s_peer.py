"""Plain BM25 baseline number two: bm25s (BM25 over SciPy sparse matrices, in memory).

Issue 16 sets its query target as a ratio to "plain bm25s" measured in the same
run, so bm25s runs beside Tantivy (``bm25_peer``). It is the fastest pure-Python
BM25 there is: every query is one sparse-matrix product plus a top-k. It has no
incremental update, so an edit re-tokenizes and re-indexes the whole corpus
(measured as such: that is what using it as a live index costs). English
Snowball stemming (PyStemmer) and English stop words, like Tantivy's ``en_stem``;
the document is each markdown file's full text, exactly the bytes the others see.

Run as a script, this module is the worker (inside its own venv).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if __package__:
    from .bm25_peer import iter_markdown
    from .venvs import VenvPeer
else:  # the worker, run as a script inside the peer's venv
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bm25_peer import iter_markdown  # type: ignore[import-not-found,no-redef]

BM25S_REQUIREMENTS = ["bm25s==0.3.16", "PyStemmer==3.1.0"]


if __package__:

    class Bm25sPeer(VenvPeer):
        name = "bm25s"
        label = "BM25 (bm25s)"
        venv_name = "bm25s"
        requirements = tuple(BM25S_REQUIREMENTS)
        script = Path(__file__).resolve()
        index_folder = "bm25s-index"


class _Worker:
    """Holds the corpus paths and the bm25s retriever for the life of the worker."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.work: Path | None = None
        self.paths: list[str] = []
        self.retriever: Any = None
        self.stemmer: Any = None

    def _index(self) -> None:
        import bm25s  # type: ignore[import-not-found]  # the peer's own venv
        import Stemmer  # type: ignore[import-not-found]

        assert self.root is not None and self.work is not None
        if self.stemmer is None:
            self.stemmer = Stemmer.Stemmer("english")
        self.paths = list(iter_markdown(self.root))
        texts = [(self.root / rel).read_text(encoding="utf-8", errors="replace") for rel in self.paths]
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=self.stemmer, show_progress=False)
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        retriever.save(str(self.work / "bm25s-index"))  # on disk, so the index size is measured like the others
        self.retriever = retriever

    def build(self, params: dict[str, Any]) -> dict[str, Any]:
        self.root = Path(params["root"])
        self.work = Path(params["work"])
        self._index()
        return {"docs": len(self.paths)}

    def update(self, params: dict[str, Any]) -> dict[str, Any]:
        self._index()  # no incremental update in bm25s: the whole corpus again
        return {"updated": len(params["paths"])}

    def queries(self, params: dict[str, Any]) -> dict[str, Any]:
        import time

        import bm25s

        assert self.retriever is not None
        k = min(int(params["k"]), len(self.paths))
        hits: list[list[str]] = []
        latencies: list[float] = []
        for text in params["queries"]:
            start = time.perf_counter()
            query = bm25s.tokenize([text], stopwords="en", stemmer=self.stemmer, return_ids=False, show_progress=False)
            found: list[str] = []
            if query and query[0] and k > 0:
                docs, scores = self.retriever.retrieve(query, k=k, show_progress=False, n_threads=1)
                found = [self.paths[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]
            latencies.append(time.perf_counter() - start)
            hits.append(found)
        return {"hits": hits, "latencies_s": latencies}

    def stats(self, params: dict[str, Any]) -> dict[str, Any]:
        return {}


def main() -> None:
    from worker_loop import serve  # type: ignore[import-not-found]

    worker = _Worker()
    serve({"build": worker.build, "update": worker.update, "queries": worker.queries, "stats": worker.stats})


if __name__ == "__main__":
    main()
