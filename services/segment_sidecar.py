"""A segment's stored path, id and checksum per document, in one file beside the segment.

Opening the index reads every document's stored fields back from Whoosh (the
path maps and each segment's ids and paths by document number): one pickled,
zlib-compressed record per document, ~11 us each, 1.1 s of a warm restart at
100,000 memories. A segment's documents never change once it is written (a
deletion is recorded in the table of contents, not in the segment), so their
stored fields are written once more, as three JSON lists, to
``<index folder>/<segment id>.docs``, and a warm open reads that instead.

The file is a cache: it is used only when it names its segment and holds one
entry per document of it; anything else (missing, torn, another format) falls
back to the stored fields, and the next open writes it again. Whoosh's own
clean-up deletes it with its segment: it removes every file named like a
segment's (``memories_<id>.<ext>``) whose segment is no longer in the index.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)

SIDECAR_SUFFIX = ".docs"
SIDECAR_FORMAT = 1


@dataclass(frozen=True, slots=True)
class StoredDocs:
    """One segment's stored fields by local document number (deleted documents too)."""

    ids: list[str]
    paths: list[str]
    checksums: list[str]


def read_stored_fields(reader: Any) -> StoredDocs:
    """A segment's stored path, id and checksum per document, read through Whoosh (one record each).

    What a sidecar saves reading; also what a segment without one costs (``postings.SegmentDocs.read``).
    """
    ids: list[str] = []
    paths: list[str] = []
    checksums: list[str] = []
    for docnum in range(reader.doc_count_all()):
        fields = reader.stored_fields(docnum)
        ids.append(fields.get("id", ""))
        paths.append(fields.get("path", ""))
        checksums.append(fields.get("checksum", ""))
    return StoredDocs(ids, paths, checksums)


def sidecar_path(folder: Path, segment_id: str) -> Path:
    return folder / f"{segment_id}{SIDECAR_SUFFIX}"


def read_sidecar(folder: Path, segment_id: str, doc_count: int) -> StoredDocs | None:
    """The segment's stored fields from its sidecar, or None when there is no usable one."""
    try:
        data = orjson.loads(sidecar_path(folder, segment_id).read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        log.debug("segment sidecar for %s unreadable (%s): reading stored fields", segment_id, exc)
        return None
    if not isinstance(data, dict) or data.get("format") != SIDECAR_FORMAT or data.get("segment") != segment_id:
        return None
    columns = [data.get(name) for name in ("ids", "paths", "checksums")]
    for column in columns:
        if not isinstance(column, list) or len(column) != doc_count or not all(isinstance(v, str) for v in column):
            return None
    ids, paths, checksums = columns
    assert ids is not None and paths is not None and checksums is not None  # checked above
    return StoredDocs(ids, paths, checksums)


def remove_stale_temps(folder: Path) -> int:
    """Delete sidecar temp files a process stopped mid-write left behind; returns how many.

    A concurrent writer whose temp file goes this way only loses its rename
    (``write_sidecar`` returns False): the sidecar is a cache.
    """
    removed = 0
    for temp in folder.glob(f".*{SIDECAR_SUFFIX}.*"):
        try:
            temp.unlink()
            removed += 1
        except OSError:
            pass
    return removed


def write_sidecar(folder: Path, segment_id: str, docs: StoredDocs) -> bool:
    """Write the segment's sidecar (temp file, then rename); False when it could not be written.

    The temporary name starts with a dot: Whoosh's clean-up skips such files,
    and a reader never takes one for a sidecar.
    """
    fields = {"ids": docs.ids, "paths": docs.paths, "checksums": docs.checksums}
    try:
        body = orjson.dumps({"format": SIDECAR_FORMAT, "segment": segment_id, **fields})
    except orjson.JSONEncodeError as exc:  # a path that is not valid UTF-8 (kept as surrogates): no sidecar
        log.debug("segment sidecar for %s not written: %s", segment_id, exc)
        return False
    target = sidecar_path(folder, segment_id)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    except OSError as exc:
        log.debug("segment sidecar for %s not written: %s", segment_id, exc)
        return False
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(body)
        os.replace(temp, target)
        return True
    except OSError as exc:
        log.debug("segment sidecar for %s not written: %s", segment_id, exc)
        try:
            os.unlink(temp)
        except OSError:
            pass
        return False
