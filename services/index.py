"""The full-text index: Whoosh (whoosh-reloaded) under ``<state>/index``.

The index is a cache of the files. Every document carries the file's content
checksum, so an update of an unchanged file costs one dict lookup, and a
missing, corrupt or outdated index is rebuilt from the files with nothing lost.

Concurrency: one writer at a time (Whoosh's own lock file, plus the daemon's
write lock), any number of readers. A reader uses a searcher that sees the last
committed generation; each thread keeps its own searcher (Whoosh searchers
share file handles and are not meant to be used by two threads at once) and
opens a new one when the generation changes. A full rebuild commits with
``mergetype=CLEAR`` so readers switch from the old segments to the new ones in
one step instead of seeing an empty index.

Single-file updates commit without merging (``merge=False``); segments are
merged only once more than ``MAX_SEGMENTS`` have piled up, so a save in the
daemon costs milliseconds instead of a merge of the whole index.

Searching: Whoosh's matcher tree (a Python object per posting step) was most
of a query's cost, so each query word's postings are read per segment as
arrays (services/postings.py) and scored with Whoosh's BM25F formula in numpy;
results equal a Whoosh search. What was read from a segment is kept across
commits (segments never change once written), so an edit's commit, which adds
one small segment, costs the next query only that segment's reads.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
from whoosh import index as whoosh_index
from whoosh.codec.whoosh3 import W3Codec
from whoosh.fields import ID, KEYWORD, STORED, TEXT, Schema
from whoosh.filedb.filestore import FileStorage
from whoosh.query import Term
from whoosh.writing import CLEAR, NO_MERGE, SegmentWriter

from .analysis import ANALYZER, analyze, index_tokens
from .index_layout import INDEX_NAME, SCHEMA_VERSION, SCHEMA_VERSION_FILE
from .model import Memory
from .postings import Generation, Searcher, SegmentCache, SegmentDocs, top_documents
from .postings_file import PostingsWriter
from .postings_file import path_for as postings_path
from .segment_postings import SortedPostings, counted_text_field, whole_value_field, write_postings
from .segment_sidecar import StoredDocs, read_sidecar, read_stored_fields, remove_stale_temps, write_sidecar

log = logging.getLogger(__name__)

MAX_SEGMENTS = 8  # merge small segments once there are more than this
# With merges deferred (``MemoryIndex.defer_merges``, the daemon's setting) a commit still merges past
# this many, so the segment count stays bounded if nobody calls ``merge_small_segments``.
HARD_MAX_SEGMENTS = 2 * MAX_SEGMENTS
WRITER_TIMEOUT_S = 10.0  # wait this long for another writer's lock
COMMON_TERM_SHARE = 0.2  # words in more than this share of memories skip the top-K walk
COMMON_TERM_MIN_DOCS = 50  # ... but never below this many documents
GENERATION_CHECK_S = 1.0  # readers look for other processes' commits at most this often
PROGRESS_EVERY = 100  # rebuild / extend report progress this often (documents)
# zlib level of the posting blocks a builder writes (Whoosh's own writer uses 3): none. Compressing was
# ~8 % of a builder's CPU, a cold build at 10,000 is 0.5-1.0 s faster without it, for +3 MB of index
# (20 -> 23 MB); readers take either (each block's header says). Segments merged later by Whoosh's
# writer are compressed again.
BUILDER_POSTINGS_COMPRESSION = 0


_ID_SPLIT_RE = re.compile(r"[-_.\s/]+")


def build_schema() -> Schema:
    return Schema(
        path=ID(stored=True, unique=True),
        id=ID(stored=True),
        type=ID(stored=True),
        # No positions: nothing runs a phrase query against the index (the phrase part of the
        # keyword signal reads the text), and BM25F needs only frequencies and lengths. Building
        # without them costs ~20 % less CPU at 10,000 memories, with the same scores.
        text=TEXT(analyzer=ANALYZER, phrase=False),
        tags=KEYWORD(lowercase=True, commas=True, scorable=True, field_boost=1.5),
        checksum=STORED,
    )


def heading_text(memory: Memory) -> str:
    """Summary line, title and id words: the text that says what a memory is."""
    id_words = " ".join(w for w in _ID_SPLIT_RE.split(memory.id) if w)
    return f"{memory.l0}\n{memory.title}\n{id_words}"


def heading_tokens(memory: Memory) -> tuple[str, ...]:
    """The analysed tokens of ``heading_text`` and the tags, distinct and sorted; kept on the memory.

    Every query asks which of its matched words are in each candidate's heading
    (keyword coverage); analysing ~65 headings per query was ~1.5 ms of it. The
    heading's fields are hot (never released), so the tokens are computed once
    per parse, by the cold build's builders before they send the memory back
    (the parse cache keeps them), else at the memory's first query. An edit is a
    new parse, so the value never outlives the text it came from.

    Kept as one space-separated text (the analyser's tokens hold no spaces) and split
    here: a tuple of separate token strings per memory was 16.6 MiB at 100,000
    memories against ~9 as text (issue 16); the split costs ~1 us for a query's candidate.
    """
    found = memory.heading_tokens
    if found is None:
        found = " ".join(sorted(set(index_tokens(heading_text(memory) + "\n" + " ".join(memory.tags)))))
        memory.heading_tokens = found
    return tuple(found.split())


def heading_matches(memory: Memory, tokens: frozenset[str]) -> frozenset[str]:
    """Those of ``tokens`` (analysed tokens) that are among ``heading_tokens(memory)``.

    Looked up in the kept text (``" token "`` in it, spaces around) rather than split
    into a tuple first: a query asks this of ~230 candidates for a few tokens each,
    and the split and the intersection cost ~0.8 us a candidate against ~0.6 us
    (measured apart; more in a query, where the text is not in the CPU's cache).
    """
    found = memory.heading_tokens
    if found is None:
        heading_tokens(memory)  # computed and kept
        found = memory.heading_tokens or ""
    padded = f" {found} "
    return frozenset(token for token in tokens if f" {token} " in padded)


def _document(memory: Memory) -> dict[str, str]:
    heading = heading_text(memory)
    return {
        "path": memory.rel_path,
        "id": memory.id,
        "type": memory.type,
        # The heading twice: title words weigh double in BM25 with one posting
        # list per word (a separate boosted field doubled the query cost).
        "text": f"{heading}\n{heading}\n{memory.l1}\n{memory.l2}",
        "tags": ",".join(t.lower() for t in memory.tags),
        "checksum": memory.checksum,
    }


class Hit(NamedTuple):
    """One BM25 hit: the memory's id and path, and Whoosh's raw BM25F score.

    A named tuple (immutable, as a frozen dataclass was): made ~130 times a query,
    at ~0.25 us each against ~0.55 us for a frozen dataclass's ``__init__``.
    """

    id: str
    path: str
    score: float
    matched: frozenset[str] = frozenset()  # analysed query tokens found in it


@dataclass
class IndexUpdate:
    """What an update did: paths (re)indexed, paths removed, unchanged count."""

    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0


def _storage(index_dir: Path) -> FileStorage:
    """The index folder's storage, read through plain files rather than ``mmap``.

    Whoosh reads a segment's compound file through ``mmap`` by default, and then
    wraps each sub-file in ``BytesIO(memoryview)``, which *copies* it: every
    searcher held the whole terms and postings files in RAM (26.5 MiB at
    10,000 memories, measured with tracemalloc after one query). Plain files
    read only what a lookup needs, from the page cache (~1 ms more CPU per
    query at 10,000, measured p50 10.5 -> 11.5 ms thread time).
    """
    return FileStorage(str(index_dir), supports_mmap=False)


@dataclass
class StagedSegment:
    """A Whoosh segment written outside the index (a builder process's work), not yet committed.

    ``files`` sit in ``folder`` (a staging index of the same schema) until
    ``MemoryIndex.add_segments`` moves them into the index folder and commits.
    They cannot be written in the index folder itself: every commit there
    deletes the files of segments its table of contents does not list.
    ``indexed`` is path -> (checksum, id) of each document in it.
    """

    folder: Path
    segment: object  # whoosh.codec.base.Segment (pickles: it is what Whoosh's own TOC stores)
    files: list[str]
    indexed: dict[str, tuple[str, str]]


def builder_codec() -> W3Codec:
    """The codec of a builder's segment: Whoosh 3's, without compression and per-block length bounds.

    No per-block length bounds: Whoosh looks up every posting's field length to keep a min and max
    per posting block, which only its block-skipping top-K search reads (bounds of 0 are still safe
    upper bounds there); scores read lengths from the per-document columns, written as usual. ~12 %
    of a segment's CPU. No compression: ``BUILDER_POSTINGS_COMPRESSION``.
    """
    codec = W3Codec(compression=BUILDER_POSTINGS_COMPRESSION)
    codec.length_stats = False
    return codec


def write_segment(folder: Path, memories: Sequence[Memory]) -> StagedSegment | None:
    """Analyse ``memories`` and write their postings as one segment in a new staging index at ``folder``.

    Runs in a builder process during a cold build or a rebuild (the CPU of
    indexing: analysis and postings), so the daemon only commits the finished
    segment, as Whoosh's own multi-process writer (``MpWriter`` with
    ``multisegment``) does with its sub-writers' segments. None for no memories.
    """
    if not memories:
        return None
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    storage = _storage(folder)
    ix = storage.create_index(build_schema(), indexname=INDEX_NAME)
    codec = builder_codec()
    writer = SegmentWriter(ix, limitmb=128, codec=codec)
    pool = writer.pool = SortedPostings()  # a plain list, sorted and written by segment_postings
    counted_text_field(writer.schema["text"])  # the text arrives analysed (index_tokens): counted in one pass
    for name in ("path", "id", "type"):
        whole_value_field(writer.schema[name])  # one term each, without Whoosh's token chain
    indexed: dict[str, tuple[str, str]] = {}
    try:
        for memory in memories:
            fields = _document(memory)
            writer.add_document(**{**fields, "text": index_tokens(fields["text"])})
            indexed[memory.rel_path] = (memory.checksum, memory.id)
        # SegmentWriter._finalize_segment, with the postings written by write_postings.
        writer.perdocwriter.close()
        arrays = PostingsWriter()  # the searched fields' postings as arrays too (services/postings_file.py)
        write_postings(writer.fieldwriter, writer.schema, pool, codec, arrays)
        writer._close_segment()
        writer._assemble_segment()
        segment = writer.get_segment()
        arrays.write(postings_path(folder, segment.segment_id()))  # listed with the segment's files below
    except BaseException:
        writer.cancel()
        raise
    files = segment.list_files(storage)
    writer._finish()  # releases the staging lock and temp files; no TOC: the segment is committed elsewhere
    ix.close()
    return StagedSegment(folder, segment, files, indexed)


class MemoryIndex:
    """A Whoosh index of memories, keyed by workspace-relative path."""

    def __init__(self, index_dir: Path) -> None:
        self.dir = Path(index_dir)
        self._ix: whoosh_index.Index | None = None
        self._checksums: dict[str, str] = {}
        self._ids: dict[str, str] = {}  # path -> indexed id (a file's id may change alone: links.qualified_ids)
        self._local = threading.local()
        self._segments = 0
        self._commits = 0
        self._segment_cache = SegmentCache(self.dir)  # per segment: kept across commits
        self._generation: Generation | None = None
        self._last_term_queries: tuple[tuple[tuple[str, float], ...], list[tuple[tuple[str, ...], Term]]] | None = None
        self.recovered: str | None = None  # why the index was recreated at open, if it was
        # The daemon sets it (Engine.defer_index_merges): a commit then does not merge the small
        # segments below HARD_MAX_SEGMENTS, and the daemon calls merge_small_segments after the
        # change is searchable. Merging inside a single save's commit cost 30-60 ms every ~5th save.
        self.defer_merges = False

    # --- opening ---------------------------------------------------------------
    def open(self) -> bool:
        """Open or create the index; return True when it is new and needs a full build.

        A missing, unreadable or outdated (schema version) index is recreated
        empty, and ``recovered`` says why.
        """
        self.recovered = None
        if self._ix is not None:  # re-opening (Engine.load called again)
            self.close()
        version_file = self.dir / SCHEMA_VERSION_FILE
        self._remove_writer_leftovers()
        try:
            if self.dir.exists() and not self.dir.is_dir():
                self.recovered = "index path is not a folder"
            elif not whoosh_index.exists_in(str(self.dir), indexname=INDEX_NAME):
                self.recovered = "index missing"
            elif not version_file.exists() or version_file.read_text().strip() != SCHEMA_VERSION:
                self.recovered = "index schema changed"
            else:
                ix = _storage(self.dir).open_index(INDEX_NAME)
                remove_stale_temps(self.dir)
                with ix.searcher() as searcher:
                    self._read_stored(searcher)
                self._ix = ix
                self._committed()
                return False
        except Exception as exc:  # whoosh raises many kinds on a damaged index
            log.warning("index at %s unreadable (%s); rebuilding from files", self.dir, exc)
            self.recovered = f"index unreadable ({type(exc).__name__}: {exc})"
        self._create_empty()
        return True

    def _remove_writer_leftovers(self) -> None:
        """Delete the temp folder (``memories.tmp``) of a writer killed mid-commit.

        Whoosh's segment writer keeps its sorting runs there and removes it when
        it finishes; a SIGKILL leaves it behind. It is removed only while this
        process holds Whoosh's write lock (a file lock the kernel drops with a
        dead process), so a live writer's folder is never touched. The
        segments it fed were never committed, so nothing in it is needed.
        """
        leftover = self.dir / f"{INDEX_NAME}.tmp"
        if not leftover.is_dir() or leftover.is_symlink():
            return
        lock = _storage(self.dir).lock(f"{INDEX_NAME}_WRITELOCK")
        if not lock.acquire(blocking=False):
            return  # a writer is alive (another process mid-commit): its folder is in use
        try:
            log.info("removing %s, left by an index writer that was stopped mid-commit", leftover)
            shutil.rmtree(leftover, ignore_errors=True)
        finally:
            lock.release()

    def _read_stored(self, searcher: Searcher) -> None:
        """Every document's stored path, id and checksum, read once at open, segment by segment.

        The live documents give the path maps; every document (deleted ones
        too) gives its segment's id and path by document number, which
        searches use instead of Whoosh's stored-field lookups. Each segment's
        come from its sidecar (``services/segment_sidecar.py``) when it has a
        usable one; otherwise from Whoosh's stored fields, and the sidecar is
        written for the next open.
        """
        self._segment_cache.close()
        self._segment_cache = SegmentCache(self.dir)
        checksums: dict[str, str] = {}
        ids: dict[str, str] = {}
        for reader, _ in searcher.reader().leaf_readers():
            segment = reader.segment()
            if segment is None:  # an empty index
                continue
            segid = segment.segment_id()
            stored = read_sidecar(self.dir, segid, reader.doc_count_all())
            if stored is None:
                stored = read_stored_fields(reader)
                write_sidecar(self.dir, segid, stored)
            deleted = set(segment.deleted_docs()) if segment.has_deletions() else set()
            for docnum, path in enumerate(stored.paths):
                if docnum not in deleted:
                    checksums[path] = stored.checksums[docnum]
                    ids[path] = stored.ids[docnum]
            self._segment_cache.put_docs(segid, SegmentDocs.of(stored.ids, stored.paths))
        self._checksums, self._ids = checksums, ids

    def _create_empty(self) -> None:
        self._close_searchers()
        if (self.dir.is_symlink() and not self.dir.exists()) or (self.dir.exists() and not self.dir.is_dir()):
            # Something that is not a folder sits where the index goes: keep it for
            # inspection under another name and build the index in its place.
            aside = self.dir.with_name(f"{self.dir.name}.not-a-folder-{int(time.time())}")
            log.warning("%s is not a folder; moved it to %s and rebuilding the index", self.dir, aside.name)
            try:
                self.dir.rename(aside)
            except OSError:
                self.dir.unlink(missing_ok=True)
            self.recovered = f"{self.dir.name} was not a folder (moved to {aside.name})"
        elif self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._ix = _storage(self.dir).create().create_index(build_schema(), indexname=INDEX_NAME)
        (self.dir / SCHEMA_VERSION_FILE).write_text(SCHEMA_VERSION + "\n")
        self._checksums = {}
        self._ids = {}
        self._committed()

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

    def is_current(self, memory: Memory) -> bool:
        """Is ``memory`` indexed as it is now (same bytes and same id)?"""
        return (
            bool(memory.checksum)
            and self._checksums.get(memory.rel_path) == memory.checksum
            and self._ids.get(memory.rel_path) == memory.id
        )

    def __len__(self) -> int:
        return len(self._checksums)

    def share_strings(self, memories: Iterable[Memory]) -> None:
        """Key the path maps with the store's own strings where they agree with it (after a warm open).

        ``open`` reads every stored path, id and checksum back from Whoosh: a
        second copy of three strings per memory next to the store's (~27 MB at
        100,000). Same contents, so lookups are unchanged; entries the store
        does not hold keep their own strings.
        """
        old_checksums, old_ids = self._checksums, self._ids
        checksums: dict[str, str] = {}
        ids: dict[str, str] = {}
        for memory in memories:
            path = memory.rel_path
            if old_checksums.get(path) == memory.checksum and old_ids.get(path) == memory.id:
                checksums[path] = memory.checksum
                ids[path] = memory.id
        if len(checksums) != len(old_checksums):
            for path, checksum in old_checksums.items():
                if path not in checksums:
                    checksums[path] = checksum
                    ids[path] = old_ids.get(path, "")
        path_keys = {p: p for p in checksums}  # the segments' stored paths and ids take the same strings
        self._checksums, self._ids = checksums, ids
        for segid, docs in self._segment_cache.all_docs():
            seg_paths = [path_keys.get(p, p) for p in docs.paths]
            seg_ids = [mid if ids.get(p) != mid else ids[p] for p, mid in zip(seg_paths, docs.ids)]
            self._segment_cache.put_docs(segid, SegmentDocs.of(seg_ids, seg_paths))

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
            if self.is_current(memory):
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
                if memory.rel_path in self._checksums:
                    writer.update_document(**_document(memory))
                else:
                    # A path the index does not hold has nothing to replace: update_document's
                    # delete-by-path opens a reader over every segment first (~25 ms of a
                    # single new file's ~40 ms at 10,000 memories).
                    writer.add_document(**_document(memory))
        except BaseException:
            writer.cancel()
            raise
        limit = HARD_MAX_SEGMENTS if self.defer_merges else MAX_SEGMENTS
        writer.commit(merge=len(getattr(writer, "segments", ())) >= limit)
        self._committed()
        for path in removals:
            self._checksums.pop(path, None)
            self._ids.pop(path, None)
        for memory in changed:
            self._checksums[memory.rel_path] = memory.checksum
            self._ids[memory.rel_path] = memory.id
        result.updated = [m.rel_path for m in changed]
        result.removed = removals
        return result

    def merge_due(self) -> bool:
        """More small segments than ``MAX_SEGMENTS`` wait for a merge (commits with ``defer_merges`` left them)."""
        return self._ix is not None and self._segments > MAX_SEGMENTS

    def merge_small_segments(self) -> bool:
        """Merge the small segments (Whoosh's ``MERGE_SMALL``) when due; True when a merge was committed.

        A commit with nothing added: readers switch to the merged segments in one
        step, and every document, score and path map stays as it was.
        """
        if not self.merge_due():
            return False
        writer = self.ix.writer(timeout=WRITER_TIMEOUT_S)
        try:
            writer.commit(merge=True)
        except BaseException:
            if not writer.is_closed:
                writer.cancel()
            raise
        self._committed()
        return True

    def remove(self, paths: Iterable[str]) -> IndexUpdate:
        return self.update((), paths)

    def rename(self, old_path: str, memory: Memory) -> IndexUpdate:
        """The file at ``old_path`` is now ``memory.rel_path`` (content may be unchanged)."""
        if old_path == memory.rel_path:
            return self.update([memory])
        return self.update([memory], [old_path])

    def rebuild(
        self,
        memories: Iterable[Memory],
        progress: Callable[[int], None] | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> IndexUpdate:
        """Replace the whole index with ``memories`` in one commit (readers never see it empty).

        ``progress(n)`` after every ``PROGRESS_EVERY`` documents; ``before_commit()`` once all are
        added (the commit, which sorts and writes the postings, is about half the time).
        """
        writer = self.ix.writer(timeout=WRITER_TIMEOUT_S, limitmb=128)
        checksums: dict[str, str] = {}
        ids: dict[str, str] = {}
        try:
            for n, memory in enumerate(memories, 1):
                writer.add_document(**_document(memory))
                checksums[memory.rel_path] = memory.checksum
                ids[memory.rel_path] = memory.id
                if progress is not None and n % PROGRESS_EVERY == 0:
                    progress(n)
            if before_commit is not None:
                before_commit()  # may raise (a shutdown: stop_flag.Cancelled): nothing is committed
        except BaseException:
            writer.cancel()
            raise
        writer.commit(mergetype=CLEAR)
        self._committed()
        self._checksums = checksums
        self._ids = ids
        return IndexUpdate(updated=sorted(checksums))

    def add_segments(self, staged: Sequence[StagedSegment], replace: bool = False) -> None:
        """Commit segments written by ``write_segment`` (one commit; readers see them all at once).

        ``replace`` drops every segment the index held (a rebuild: like
        ``mergetype=CLEAR``, readers switch from the old documents to the new in
        one step); otherwise the new segments join the existing ones unmerged
        (the caller guarantees their paths are not indexed yet). The staging
        folders are removed.
        """
        writer = self.ix.writer(timeout=WRITER_TIMEOUT_S)
        try:
            for item in staged:
                for name in item.files:
                    os.replace(item.folder / name, self.dir / name)
            segments = writer._merge_segments(CLEAR if replace else NO_MERGE, False, False)
            segments = list(segments) + [item.segment for item in staged]
            writer._close_segment()  # the writer's own (empty) segment
            writer._commit_toc(segments)
            writer._finish()
        except BaseException:
            if not writer.is_closed:
                writer.cancel()
            raise
        finally:
            for item in staged:
                shutil.rmtree(item.folder, ignore_errors=True)
        self._committed()
        if replace:
            self._checksums, self._ids = {}, {}
        for item in staged:
            for path, (checksum, mid) in item.indexed.items():
                self._checksums[path] = checksum
                self._ids[path] = mid
            segment = item.segment
            if len(item.indexed) == segment.doc_count_all():  # type: ignore[attr-defined]
                # Documents were added in this order, so these are the segment's stored ids and
                # paths by document number: the first query need not read them back from disk,
                # nor the next open (its sidecar).
                segid = segment.segment_id()  # type: ignore[attr-defined]
                stored = StoredDocs(
                    [mid for _, mid in item.indexed.values()],
                    list(item.indexed),
                    [checksum for checksum, _ in item.indexed.values()],
                )
                self._segment_cache.put_docs(segid, SegmentDocs.of(stored.ids, stored.paths))
                write_sidecar(self.dir, segid, stored)

    # --- reading -----------------------------------------------------------------
    def _searcher(self) -> Searcher:
        """This thread's searcher, refreshed to the last committed generation.

        Whether a newer generation exists is asked of the index folder (a
        directory listing) only when this object committed since the thread's
        last check, or at most every ``GENERATION_CHECK_S`` otherwise (a
        commit by another process); a query asks several times.
        """
        local = self._local
        searcher: Searcher | None = getattr(local, "searcher", None)
        now = time.monotonic()
        if searcher is None:
            searcher = self.ix.searcher()
        elif (
            getattr(local, "commits", None) != self._commits
            or now - getattr(local, "checked", 0.0) > GENERATION_CHECK_S
        ):
            if self.ix.latest_generation() != searcher.reader().generation():
                # A new searcher rather than Searcher.refresh(): whoosh-reloaded 2.7.5's
                # reader reuse keeps segments the new generation dropped and stale
                # deletion sets (tests/test_index.py::test_delete_and_rename).
                searcher.close()
                searcher = self.ix.searcher()
        else:
            return searcher
        local.searcher, local.commits, local.checked = searcher, self._commits, now
        return searcher

    def _term_queries(self, terms: Sequence[tuple[str, float]]) -> list[tuple[tuple[str, ...], Term]]:
        """One Term query per analysed token (text field) and per raw word (tags), deduplicated.

        Each comes with the analysed tokens it stands for, so a match can be
        reported in the same vocabulary whatever the field. The last terms' queries are
        kept: a query searches three times with the same terms (its top hits, its other
        candidates, its graph neighbours). Read-only lists; a torn read between threads
        cannot happen (one tuple is swapped in).
        """
        key = tuple(terms)
        last = self._last_term_queries
        if last is not None and last[0] == key:
            return last[1]
        out: list[tuple[tuple[str, ...], Term]] = []
        seen: set[tuple[str, str]] = set()
        for word, weight in terms:
            for token in analyze(word):
                if ("text", token) not in seen:
                    seen.add(("text", token))
                    out.append(((token,), Term("text", token, boost=weight)))
            tag = word.strip().lower()
            if tag and ("tags", tag) not in seen:
                seen.add(("tags", tag))
                out.append((tuple(analyze(tag)), Term("tags", tag, boost=weight)))
        self._last_term_queries = (key, out)
        return out

    def search(
        self, terms: Sequence[tuple[str, float]], limit: int, restrict_paths: Collection[str] | None = None
    ) -> list[Hit]:
        """Top ``limit`` memories by BM25F for weighted query words.

        ``terms`` are raw words with a weight (1.0 for the person's words, less
        for synonyms). Each is analysed like the indexed text and searched in
        the text (summary line, title and id words count double) and the tags.
        Each hit carries the analysed query tokens it contains (``matched``),
        which the semantic signal uses instead of re-reading the text.
        ``restrict_paths`` scores exactly those files instead (extra candidates
        get the same BM25 as if they had been hits; files matching nothing are
        left out).

        Cost: each query term's postings are arrays read once per segment
        (kept across commits, see services/postings.py) and scored with
        Whoosh's BM25F formula in numpy, so a query sums a few arrays instead
        of running Whoosh's matcher tree over every matching document. The
        top-K ranking uses the selective terms (see ``_selective``); the final
        score of each hit sums all terms. The hits are kept with the generation
        (``Generation.results``, by terms, limit and paths): an agent asks the
        same questions again and again, and a commit makes a new generation, so
        a kept result is never stale. Hits are frozen; each caller gets its own list.
        """
        if limit <= 0:
            return []
        queries = self._term_queries(terms)
        if not queries:
            return []
        searcher = self._searcher()
        gen = self._generation_of(searcher)
        paths = None if restrict_paths is None else tuple(restrict_paths)
        key = (tuple(terms), limit, paths)
        known: tuple[list[Hit], int] | None = gen.results.get(key)
        if known is not None:
            return list(known[0])
        hits = self._search(searcher, gen, queries, limit, restrict_paths)
        # its size in the cache: the hits and the key's paths (a restricted search may find none)
        gen.results.put(key, (hits, 1 + len(hits) + len(paths or ())))
        return list(hits)

    def _search(
        self,
        searcher: Searcher,
        gen: Generation,
        queries: list[tuple[tuple[str, ...], Term]],
        limit: int,
        restrict_paths: Collection[str] | None,
    ) -> list[Hit]:
        """``search`` on one generation, uncached."""
        postings = [(query.boost, gen.scored(searcher, query.fieldname, query.text)) for _, query in queries]
        docnums: list[int]
        if restrict_paths is None:
            keys = {(q.fieldname, q.text) for q in self._selective(searcher, queries, gen)}
            ranking = [p for (_, q), p in zip(queries, postings) if (q.fieldname, q.text) in keys]
            docnums = top_documents(ranking, limit, gen.doc_count)
            if len(docnums) < limit and len(keys) < len(queries):
                # The selective words found fewer than ``limit`` memories: rank by every word
                # instead, so pruning never cuts recall at depth (issue 13).
                docnums = top_documents(postings, limit, gen.doc_count)
        else:
            docnums = []
            for path in dict.fromkeys(restrict_paths):
                found = gen.docnum(searcher, path)
                if found is not None:
                    docnums.append(found)
        if not docnums:
            return []
        targets = np.array(docnums, dtype=np.int64)
        totals = np.zeros(len(docnums))  # all query terms, common ones included
        matched: list[set[str]] = [set() for _ in docnums]
        for (tokens, _), (weight, (ids, scores)) in zip(queries, postings):
            if not len(ids):
                continue
            at = np.minimum(np.searchsorted(ids, targets), len(ids) - 1)
            found = ids[at] == targets
            # term by term, like a running sum per document: the same floats as adding one by one
            totals = totals + np.where(found, scores[at] * weight, 0.0)
            for j in np.flatnonzero(found).tolist():
                matched[j].update(tokens)
        scored = [(d, score, words) for d, score, words in zip(docnums, totals.tolist(), matched) if score > 0.0]
        named = gen.docs(searcher, [d for d, _, _ in scored])
        hits = [Hit(mid, path, score, frozenset(words)) for (mid, path), (_, score, words) in zip(named, scored)]
        hits.sort(key=lambda h: -h.score)
        return hits[:limit]

    def generation_key(self) -> tuple[int, int]:
        """The committed generation queries read now (changes with every commit; caches derived from hits key on it)."""
        return self._generation_of(self._searcher()).key

    def _generation_of(self, searcher: Searcher) -> Generation:
        """The searcher's generation (a new one after each commit; segment reads are kept across them)."""
        key = (id(self._ix), searcher.reader().generation())  # a recreated index restarts numbering
        gen = self._generation
        if gen is None or gen.key != key:
            gen = Generation(key, searcher, self._segment_cache)
            self._generation = gen
        return gen

    @staticmethod
    def _selective(searcher: Searcher, queries: Sequence[tuple[tuple[str, ...], Term]], gen: Generation) -> list[Term]:
        """The query terms worth ranking by for the top-K search.

        A word found in more than ``COMMON_TERM_SHARE`` of all memories has a
        near-zero IDF, so it barely changes the ranking, yet summing its postings
        is most of the cost of a query (e.g. "http" in 87% of 10,000 tldr pages).
        Such words are left out of the top-K ranking only; they still count
        for matched terms and for the scores of every candidate, and when the
        selective words find fewer than ``limit`` memories the ranking uses
        every word (so pruning never costs recall at depth). Document
        frequencies come from the generation ``gen`` (the segments' term infos
        already read for the postings).
        """
        total = max(1, gen.doc_count)
        rated = [(gen.doc_frequency(searcher, q.fieldname, q.text), q) for _, q in queries]
        limit = max(COMMON_TERM_MIN_DOCS, COMMON_TERM_SHARE * total)
        chosen = [q for df, q in rated if 0 < df <= limit]
        if not chosen:
            rated = sorted((r for r in rated if r[0] > 0), key=lambda r: r[0])
            chosen = [q for _, q in rated[:2]]
        return chosen or [q for _, q in queries]

    def idf(self, token: str) -> float:
        """Inverse document frequency of an analysed token (Whoosh's formula, from the segments' term infos)."""
        searcher = self._searcher()
        return self._generation_of(searcher).idf(searcher, "text", token)

    def document_frequency(self, token: str) -> int:
        """How many memories contain an analysed ``token``."""
        searcher = self._searcher()
        return self._generation_of(searcher).doc_frequency(searcher, "text", token)

    def doc_count(self) -> int:
        return self._searcher().doc_count()

    def _committed(self) -> None:
        """After every commit (and open): readers re-check the generation, status gets fresh counts."""
        self._commits += 1
        self._count_segments()

    def _count_segments(self) -> None:
        """Remember the segment count (read here, by the writer, right after its own commit).

        ``info()`` reports this cached value instead of reading the TOC file,
        which a concurrent commit may have just replaced (FileNotFoundError).
        """
        try:
            self._segments = len(self.ix._segments())
        except (OSError, RuntimeError) as exc:
            log.debug("segment count unavailable: %s", exc)

    def info(self) -> dict[str, object]:
        segments = self._segments if self._ix is not None else 0
        return {
            "path": str(self.dir),
            "documents": len(self._checksums),
            "segments": segments,
            "recovered": self.recovered,
        }

    def _close_searchers(self) -> None:
        self._generation = None  # a recreated index restarts its generation numbers
        searcher = getattr(self._local, "searcher", None)
        if searcher is not None:
            try:
                searcher.close()
            except Exception:
                pass
            self._local.searcher = None

    def close(self) -> None:
        self._close_searchers()
        self._segment_cache.close()
        if self._ix is not None:
            self._ix.close()
            self._ix = None
