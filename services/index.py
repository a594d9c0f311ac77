"""The full-text index: Whoosh (whoosh-reloaded) under ``<state>/index``.

The index is a cache of the files. Every document carries the file's content
checksum, so an update of an unchanged file costs one dict lookup, and a
missing, corrupt or outdated index is rebuilt from the files with nothing lost.

Concurrency: one writer at a time (Whoosh's own lock file, plus the daemon's
write lock), any number of readers. A reader uses a searcher that sees the last
committed generation; each thread keeps its own searcher (Whoosh searchers
share file handles and are not meant to be used by two threads at once) and
refreshes it when the generation changes. A full rebuild commits with
``mergetype=CLEAR`` so readers switch from the old segments to the new ones in
one step instead of seeing an empty index.

Single-file updates commit without merging (``merge=False``); segments are
merged only once more than ``MAX_SEGMENTS`` have piled up, so a save in the
daemon costs milliseconds instead of a merge of the whole index.
"""
from __future__ import annotations

import logging
import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from whoosh import index as whoosh_index
from whoosh.analysis import StemmingAnalyzer
from whoosh.fields import ID, KEYWORD, STORED, TEXT, Schema
from whoosh.query import Or, Term
from whoosh.writing import CLEAR

from .model import Memory

log = logging.getLogger(__name__)

SCHEMA_VERSION = "2"
SCHEMA_VERSION_FILE = "ctxos-schema-version"
INDEX_NAME = "memories"
MAX_SEGMENTS = 8             # merge small segments once there are more than this
WRITER_TIMEOUT_S = 10.0      # wait this long for another writer's lock

_ANALYZER = StemmingAnalyzer()
_ID_SPLIT_RE = re.compile(r"[-_.\s/]+")


def analyze(text: str) -> list[str]:
    """The index's own tokens for ``text`` (lowercased, stop words dropped, stemmed).

    Exposed so scoring compares query and memory text with the same stemmer
    the index uses.
    """
    return [token.text for token in _ANALYZER(text)]


def build_schema() -> Schema:
    return Schema(
        path=ID(stored=True, unique=True),
        id=ID(stored=True),
        type=ID(stored=True),
        l0=TEXT(analyzer=_ANALYZER, field_boost=2.0),
        body=TEXT(analyzer=_ANALYZER),
        tags=KEYWORD(lowercase=True, commas=True, scorable=True, field_boost=1.5),
        checksum=STORED,
    )


def _document(memory: Memory) -> dict[str, str]:
    id_words = " ".join(w for w in _ID_SPLIT_RE.split(memory.id) if w)
    heading = f"{memory.l0}\n{memory.title}\n{id_words}"
    return {
        "path": memory.rel_path,
        "id": memory.id,
        "type": memory.type,
        "l0": heading,
        "body": f"{memory.l1}\n{memory.l2}",
        "tags": ",".join(t.lower() for t in memory.tags),
        "checksum": memory.checksum,
    }


@dataclass
class Hit:
    """One BM25 hit: the memory's id and path, and Whoosh's raw BM25F score."""

    id: str
    path: str
    score: float


@dataclass
class IndexUpdate:
    """What an update did: paths (re)indexed, paths removed, unchanged count."""

    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0


class MemoryIndex:
    """A Whoosh index of memories, keyed by workspace-relative path."""

    def __init__(self, index_dir: Path) -> None:
        self.dir = Path(index_dir)
        self._ix: whoosh_index.Index | None = None
        self._checksums: dict[str, str] = {}
        self._local = threading.local()
        self.recovered: str | None = None     # why the index was recreated at open, if it was

    # --- opening ---------------------------------------------------------------
    def open(self) -> bool:
        """Open or create the index; return True when it is new and needs a full build.

        A missing, unreadable or outdated (schema version) index is recreated
        empty, and ``recovered`` says why.
        """
        self.recovered = None
        version_file = self.dir / SCHEMA_VERSION_FILE
        try:
            if not whoosh_index.exists_in(str(self.dir), indexname=INDEX_NAME):
                self.recovered = "index missing"
            elif not version_file.exists() or version_file.read_text().strip() != SCHEMA_VERSION:
                self.recovered = "index schema changed"
            else:
                ix = whoosh_index.open_dir(str(self.dir), indexname=INDEX_NAME)
                with ix.searcher() as searcher:
                    self._checksums = {f["path"]: f.get("checksum", "") for f in searcher.all_stored_fields()}
                self._ix = ix
                return False
        except Exception as exc:  # whoosh raises many kinds on a damaged index
            log.warning("index at %s unreadable (%s); rebuilding from files", self.dir, exc)
            self.recovered = f"index unreadable ({type(exc).__name__}: {exc})"
        self._create_empty()
        return True

    def _create_empty(self) -> None:
        self._close_searchers()
        if self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._ix = whoosh_index.create_in(str(self.dir), build_schema(), indexname=INDEX_NAME)
        (self.dir / SCHEMA_VERSION_FILE).write_text(SCHEMA_VERSION + "\n")
        self._checksums = {}

    @property
    def ix(self) -> whoosh_index.Index:
        if self._ix is None:
            raise RuntimeError("MemoryIndex.open() has not been called")
        return self._ix

    # --- what is indexed ---------------------------------------------------------
    def checksums(self) -> dict[str, str]:
        """Path → checksum of every indexed file (a copy)."""
        return dict(self._checksums)

    def checksum_of(self, rel_path: str) -> str | None:
        return self._checksums.get(rel_path)

    def __len__(self) -> int:
        return len(self._checksums)

    # --- writing -----------------------------------------------------------------
    def update(self, memories: Iterable[Memory] = (), remove_paths: Iterable[str] = ()) -> IndexUpdate:
        """Index new or changed memories and remove paths, in one commit.

        A memory whose checksum equals the indexed one is skipped. Removing a
        path that is not indexed is a no-op. Renames are a remove plus an add
        (see ``rename``).
        """
        result = IndexUpdate()
        changed = []
        for memory in memories:
            if self._checksums.get(memory.rel_path) == memory.checksum and memory.checksum:
                result.unchanged += 1
            else:
                changed.append(memory)
        changed_paths = {m.rel_path for m in changed}
        removals = [p for p in dict.fromkeys(remove_paths) if p in self._checksums and p not in changed_paths]
        if not changed and not removals:
            return result
        writer = self.ix.writer(timeout=WRITER_TIMEOUT_S)
        try:
            for path in removals:
                writer.delete_by_term("path", path)
            for memory in changed:
                writer.update_document(**_document(memory))
        except BaseException:
            writer.cancel()
            raise
        many_segments = len(getattr(writer, "segments", ())) >= MAX_SEGMENTS
        writer.commit(merge=many_segments)
        for path in removals:
            self._checksums.pop(path, None)
        for memory in changed:
            self._checksums[memory.rel_path] = memory.checksum
        result.updated = [m.rel_path for m in changed]
        result.removed = removals
        return result

    def remove(self, paths: Iterable[str]) -> IndexUpdate:
        return self.update((), paths)

    def rename(self, old_path: str, memory: Memory) -> IndexUpdate:
        """The file at ``old_path`` is now ``memory.rel_path`` (content may be unchanged)."""
        if old_path == memory.rel_path:
            return self.update([memory])
        return self.update([memory], [old_path])

    def rebuild(self, memories: Iterable[Memory]) -> IndexUpdate:
        """Replace the whole index with ``memories`` in one commit (readers never see it empty)."""
        writer = self.ix.writer(timeout=WRITER_TIMEOUT_S, limitmb=128)
        checksums: dict[str, str] = {}
        try:
            for memory in memories:
                writer.add_document(**_document(memory))
                checksums[memory.rel_path] = memory.checksum
        except BaseException:
            writer.cancel()
            raise
        writer.commit(mergetype=CLEAR)
        self._checksums = checksums
        return IndexUpdate(updated=sorted(checksums))

    # --- reading -----------------------------------------------------------------
    def _searcher(self):
        """This thread's searcher, refreshed to the last committed generation."""
        searcher = getattr(self._local, "searcher", None)
        if searcher is None:
            searcher = self.ix.searcher()
        else:
            fresh = searcher.refresh()
            if fresh is not searcher:
                searcher.close()
                searcher = fresh
        self._local.searcher = searcher
        return searcher

    def search(self, terms: Sequence[tuple[str, float]], limit: int) -> list[Hit]:
        """Top ``limit`` memories by BM25F for weighted query words.

        ``terms`` are raw words with a weight (1.0 for the person's words, less
        for synonyms). Each is analysed like the indexed text and searched in
        the summary line (boosted), the body and the tags.
        """
        clauses = []
        seen: set[tuple[str, str]] = set()
        for word, weight in terms:
            for token in analyze(word):
                for fieldname in ("l0", "body"):
                    if (fieldname, token) not in seen:
                        seen.add((fieldname, token))
                        clauses.append(Term(fieldname, token, boost=weight))
            tag = word.strip().lower()
            if tag and ("tags", tag) not in seen:
                seen.add(("tags", tag))
                clauses.append(Term("tags", tag, boost=weight))
        if not clauses or limit <= 0:
            return []
        searcher = self._searcher()
        results = searcher.search(Or(clauses), limit=limit)
        return [Hit(hit["id"], hit["path"], float(hit.score)) for hit in results]

    def document_frequency(self, token: str) -> int:
        """How many memories contain an analysed ``token`` in their body or summary line."""
        searcher = self._searcher()
        return max(searcher.doc_frequency("body", token), searcher.doc_frequency("l0", token))

    def doc_count(self) -> int:
        return self._searcher().doc_count()

    def info(self) -> dict[str, object]:
        segments = len(self.ix._segments()) if self._ix is not None else 0
        return {"path": str(self.dir), "documents": len(self._checksums), "segments": segments,
                "recovered": self.recovered}

    def _close_searchers(self) -> None:
        searcher = getattr(self._local, "searcher", None)
        if searcher is not None:
            try:
                searcher.close()
            except Exception:
                pass
            self._local.searcher = None

    def close(self) -> None:
        self._close_searchers()
        if self._ix is not None:
            self._ix.close()
            self._ix = None
