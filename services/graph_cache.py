"""The link graph saved at a clean close, so a restart's first query does not wait for a full build.

The daemon serves the last graph while it patches the next one (``DerivedState.graph``),
but right after a start there is no last graph: the first ``get_context`` waited for a
full build, ~0.45 s at 10,000 memories in process and seconds at 100,000 (measured
2026-12-07). So the engine saves the current graph at close (``save_graph``), and a
running daemon after a refresh at most every 5 minutes (``save_graph_if_due``: a kill
or a stop before the graph caught up still leaves a recent one), under a key naming
exactly what it was built from: every memory's id, file and content checksum in the
tracker's snapshot, and the build's settings. At the next start the first call for the
graph reads the file when the key of the loaded store is the same (``load_graph``),
instead of building.
In the daemon, which already serves a graph one change behind (``allow_stale_graph``),
a saved graph of other files (changed while it was stopped, or stopped before the
graph caught up with a change) is served the same way while the current one is built
off the query path.

The file is a cache like the rest of ``.ctxos/``: a torn or foreign file, another
format, or any difference in the store means a full build, as before. It holds only
what queries read (``LinkGraph``); the tracker that patches the graph after a change
(``graph_update.GraphTracker``) builds its own maps at the first change batch, off the
query path.
"""

from __future__ import annotations

import gc
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import orjson

from .atomic import atomic_write_bytes
from .graph import LinkGraph, Neighbours
from .model import Memory

log = logging.getLogger(__name__)

GRAPH_FILENAME = "graph.json"
# Bump when what a build makes of the same files changes (link resolution, implicit edges, authority).
FORMAT = 1


def graph_path(state_dir: Path) -> Path:
    return Path(state_dir) / GRAPH_FILENAME


def store_key(memories: Mapping[str, Memory], settings: tuple[Any, ...]) -> str | None:
    """A digest of what a graph of ``memories`` is built from; None when a memory has no file checksum.

    Ids, files and the checksums of their bytes: a link's answer depends on the other
    memories' ids, stems and folders, and everything else a build reads is in the files.
    """
    lines = []
    for mid in sorted(memories):
        memory = memories[mid]
        if not memory.checksum:
            return None  # made in memory, not read from a file: nothing to tell its content by
        lines.append(f"{mid}\0{memory.rel_path}\0{memory.checksum}")
    digest = hashlib.blake2b(digest_size=20)
    digest.update(repr((FORMAT, _release(), settings)).encode("utf-8"))
    digest.update("\n".join(lines).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _release() -> str:
    """The installed release: a new one may resolve links differently, so its graphs are its own."""
    try:
        return version("ai-context-os")
    except PackageNotFoundError:
        return "checkout"


def save_graph(path: Path, key: str, graph: LinkGraph) -> None:
    """Write ``graph`` with ``key`` atomically; a failed write is logged (the next start builds)."""
    data = {
        "format": FORMAT,
        "key": key,
        "nodes": graph.nodes,
        "outgoing": graph.outgoing,
        "incoming": graph.incoming,
        "implicit": graph.implicit,
        "dangling": graph.dangling,
        "authority": graph.authority,
        "skipped_tags": graph.skipped_tags,
    }
    try:
        atomic_write_bytes(path, orjson.dumps(data))
    except (OSError, TypeError) as exc:
        log.warning("link graph %s not saved (%s); the next start builds it", path, exc)


@dataclass(frozen=True)
class SavedGraph:
    """A graph read back, with the key it was saved under (compare it with ``store_key`` of the store)."""

    key: str
    graph: LinkGraph


def load_graph(path: Path) -> SavedGraph | None:
    """The saved graph and its key, or None (no file, another format, or anything odd about it).

    The cyclic collector is paused meanwhile: the read makes ~500,000 objects at
    100,000 memories, and collections triggered by them walked the loaded heap
    (0.46 s for a 10 MB file in a loaded engine against 0.11-0.15 s alone, measured).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_graph(path)
    finally:
        if was_enabled:
            gc.enable()


def _read_graph(path: Path) -> SavedGraph | None:
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        log.info("link graph %s unreadable (%s); building it", path, exc)
        return None
    try:
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("key"), str):
            return None
        shared: dict[float, float] = {}  # one float object per distinct rank, as graph.authority keeps them
        authority = {mid: shared.setdefault(value, value) for mid, value in _floats(data["authority"]).items()}
        graph = LinkGraph(
            nodes=_strings(data["nodes"]),
            outgoing=_neighbours(data["outgoing"]),
            incoming=_neighbours(data["incoming"]),
            implicit=_neighbours(data["implicit"]),
            dangling=_pairs(data["dangling"]),
            authority=authority,
            skipped_tags=_strings(data["skipped_tags"]),
        )
        return SavedGraph(data["key"], graph)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        log.info("link graph %s malformed (%s); building it", path, exc)
        return None


# The file was written by save_graph, so its values have the right types unless it was damaged or
# edited: a check per value (not a conversion) keeps a read at 10,000 memories to tens of ms.
def _all_str(values: Any) -> bool:
    return all(type(value) is str for value in values)


def _strings(values: Any) -> list[str]:
    if not isinstance(values, list) or not _all_str(values):
        raise TypeError("expected a list of strings")
    return values


def _pairs(values: Any) -> list[tuple[str, str]]:
    pairs = [(source, target) for source, target in values]
    if not all(type(source) is str and type(target) is str for source, target in pairs):
        raise TypeError("expected (source, link text) pairs")
    return pairs


def _floats(table: Any) -> dict[str, float]:
    if not isinstance(table, dict) or not all(type(value) is float for value in table.values()):
        raise TypeError("expected numbers")
    return table


def _neighbours(table: Any) -> dict[str, Neighbours]:
    if not isinstance(table, dict):
        raise TypeError("expected a table of neighbours")
    out: dict[str, Neighbours] = {}
    for mid, others in table.items():
        if not isinstance(others, list) or not _all_str(others):
            raise TypeError(f"neighbours of {mid!r} are not a list of ids")
        out[mid] = tuple(others)
    return out
