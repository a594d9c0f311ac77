"""A cold build's (or rebuild's) unit of work: one chunk of files parsed, indexed and embedded.

``build_chunk`` runs in a builder process (the daemon passes a process pool's
``map`` as ``Engine.build_map``; in-process callers run it inline): it parses
the files, writes their Whoosh segment in a staging folder
(``index.write_segment``) and embeds them with the configured model, and
returns memories whose text is already released (``Memory.release_text``),
the staged segment and float16 embedding rows. It also writes the memories'
L1 blocks and catalog lines, with their piece costs, to a block-store file
(``services/block_store.py``) when asked (``ChunkBuilder.blocks``), so queries
read them back instead of re-reading and re-tokenizing the files. The process that owns the
engine then only commits the segment, puts the memories in its store and
copies the rows: it never analyses text nor runs the model over the corpus,
so after a cold build its heap is what a warm start leaves (measured in
docs/engine.md "Cold build").
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .block_store import records_for, write_file
from .config import Config
from .index import StagedSegment, heading_tokens, write_segment
from .model import InvalidFile, Memory
from .render import keep_counts
from .semantic import ModelError, load_model
from .semantic.models import bulk_embedding
from .semantic.vectors import EMBED_BATCH, embed_text
from .tier_source import read_cold
from .workspace import load_memories

log = logging.getLogger(__name__)

STAGING_FOLDER = "index-build"  # under the state folder; removed before and after a build


@dataclass
class BuiltChunk:
    """What a builder returns for one chunk of paths (see module doc)."""

    items: list[Memory | InvalidFile]
    segment: StagedSegment | None
    model: str | None = None  # name of the model that computed ``rows`` (None: no rows)
    checksums: list[str] = field(default_factory=list)  # one per row
    rows: np.ndarray | None = None  # float16, as the embedding cache stores them
    blocks_file: Path | None = None  # the chunk's block-store file (None: not asked for, or nothing to store)

    def embeddings(self) -> dict[str, np.ndarray]:
        """Checksum -> row (views into ``rows``)."""
        if self.rows is None:
            return {}
        return {checksum: self.rows[i] for i, checksum in enumerate(self.checksums)}


@dataclass(frozen=True)
class ChunkBuilder:
    """``build_chunk`` with what every chunk shares (a picklable callable for a process pool's ``map``)."""

    root: Path
    config: Config
    staging: Path  # a new folder per chunk is made under it
    model_setting: str | None  # semantic.model; None: no embeddings here
    blocks: Path | None = None  # the block-store folder (None: count the blocks without storing them)
    fingerprint: str = ""  # parse_cache.fingerprint of ``config``, written in the block-store file

    def __call__(self, paths: list[str]) -> BuiltChunk:
        return build_chunk(self, paths)


def build_chunk(builder: ChunkBuilder, paths: list[str]) -> BuiltChunk:
    """Parse ``paths``, write their segment, embed them, release their text (see module doc)."""
    items = load_memories(builder.root, paths, config=builder.config)
    memories = [m for m in items if isinstance(m, Memory)]
    folder = builder.staging / f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    segment = write_segment(folder, memories)
    built = BuiltChunk(items, segment)
    _embed(builder.model_setting, memories, built)
    records: list[tuple[int, bytes]] = []
    for memory in memories:
        if builder.blocks is not None:  # sent back with the memory: no query renders these blocks again
            heading_tokens(memory)
            records += records_for(memory)  # ... and counts them as keep_query_values does
        else:
            keep_query_values(memory)
        memory.release_text(read_cold)
    if builder.blocks is not None:
        try:
            built.blocks_file = write_file(builder.blocks, builder.fingerprint, records)
        except OSError as exc:  # a cache: queries render these blocks from the files instead
            log.warning("block store not written (%s)", exc)
    return built


def keep_query_values(memory: Memory) -> None:
    """Keep on ``memory`` what every query that meets it reads, while it still holds its text.

    Its heading's analysed tokens (``index.heading_tokens``) and the token counts
    of its L1 block and catalog line (``render.keep_counts``): a released memory
    without them had its file read back and its heading analysed at the first
    query that met it (~50 us each). Builders call it before sending a memory
    back; the engine calls it for the memories it parses itself (an edit, a
    burst, a warm start's changed files) before releasing them
    (``MemoryStore.compact``).
    """
    heading_tokens(memory)
    keep_counts(memory)


def _embed(setting: str | None, memories: list[Memory], built: BuiltChunk) -> None:
    """Rows for ``memories`` (float16); none when there is no model or it cannot load (the engine embeds then)."""
    if setting is None or not memories:
        return
    try:
        model = load_model(setting)
    except ModelError as exc:  # the engine reports it when it configures the model
        log.debug("builder: no embeddings (%s)", exc)
        return
    if model is None:
        return
    rows = np.empty((len(memories), model.dim), dtype=np.float16)
    with bulk_embedding(model, len(memories)):
        for start in range(0, len(memories), EMBED_BATCH):
            part = memories[start : start + EMBED_BATCH]
            rows[start : start + len(part)] = model.embed([embed_text(m) for m in part])
    built.model = model.name
    built.checksums = [m.checksum for m in memories]
    built.rows = rows
