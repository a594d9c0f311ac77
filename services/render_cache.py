"""Rendered memory blocks kept between queries, so a query re-renders only what it has not shown lately.

A query at 10,000 memories renders ~100 blocks; re-reading each one's text
(``services/tier_source.py``: a file read, a checksum and a tier split) and
re-counting it was a third of the query's CPU (docs/engine.md, "Start and
latency"). This cache keeps, per ``render.block_key`` (memory id, checksum, label, tier), the block's text
and its piece costs (``tokens.PieceCosts``), from which ``render.finalize``
counts the whole answer without re-tokenizing it.

On a miss, an L1 or L2 block or a catalog line comes from the block store when the
caller passes one (``services/block_store.py``: what the cold build's builders
rendered, checked against the memory); otherwise, or when the store misses, it
is rendered from the file as before.

Bounded by an estimate of its bytes (``max_bytes``), least recently used out
first. A memory whose file changes gets a new checksum, hence a new key; its
old blocks age out. One lock: queries may run on several threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

from .block_store import CATALOG_CODE, L1_CODE, L2_CODE, BlockStore
from .model import Memory
from .render import BlockKey, block_key, catalog_line, memory_block
from .tokens import PieceCosts, TokenCounter, is_joinable

# About every L1 block and catalog line of 10,000 memories (~300 bytes each). At 4 MiB, 800 distinct
# queries found 67 % of their ~140 blocks here; at 8 MiB 84 %, and each query took ~5 % less time
# (paired in one process, docs/engine.md "Session 20"). The cache is empty at idle and bounded.
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
CATALOG = "catalog"  # the pseudo-tier of a memory's catalog line (render.catalog_line)
_STORE_CODES = {"L1": L1_CODE, CATALOG: CATALOG_CODE, "L2": L2_CODE}  # the tiers the block store holds
_ENTRY_OVERHEAD = 300  # key tuple, the entry tuple, the str and tuple headers, the dict slot (measured ~280)


class RenderedBlock(NamedTuple):
    """A memory's block at a tier: its text and piece costs (None when the counter cannot join counts)."""

    text: str
    costs: PieceCosts | None


class BlockCache:
    """Least recently used rendered blocks, bounded by their estimated size in bytes."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._blocks: OrderedDict[BlockKey, RenderedBlock] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def block(self, memory: Memory, tier: str, counter: TokenCounter, store: BlockStore | None = None) -> RenderedBlock:
        """``memory`` rendered at ``tier`` (``render.memory_block``; ``CATALOG``: its catalog line), cached.

        ``store``: where a missed L1 or L2 block or catalog line is looked up first; pass it only
        under the default counter (the costs it holds are that counter's).
        """
        key = block_key(memory, tier)
        with self._lock:
            found = self._blocks.get(key)
            if found is not None:
                self._blocks.move_to_end(key)
                self.hits += 1
                return found
            self.misses += 1
        stored = store.get(memory, _STORE_CODES[tier]) if store is not None and tier in _STORE_CODES else None
        if stored is not None:
            block = RenderedBlock(stored.text, stored.costs)
        else:
            text = catalog_line(memory) if tier == CATALOG else memory_block(memory, tier)
            block = RenderedBlock(text, counter.piece_costs(text) if is_joinable(counter) else None)
        with self._lock:
            if key not in self._blocks:
                self._blocks[key] = block
                self._size += _size_of(block)
                while self._size > self.max_bytes and len(self._blocks) > 1:
                    _, old = self._blocks.popitem(last=False)
                    self._size -= _size_of(old)
        return block

    def clear(self) -> None:
        """Forget every block (the token counter changed)."""
        with self._lock:
            self._blocks.clear()
            self._size = 0

    def __len__(self) -> int:
        return len(self._blocks)

    @property
    def size_bytes(self) -> int:
        """The estimated bytes held."""
        return self._size


def _size_of(block: RenderedBlock) -> int:
    return len(block.text) + (8 * len(block.costs.costs) if block.costs is not None else 0) + _ENTRY_OVERHEAD
