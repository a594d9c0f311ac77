"""Rendered answers kept by the blocks they join, so a repeated answer is not read back and counted again.

Agents ask the same questions again and again, and the answer often comes out the
same: at 10,000 memories, on a workspace whose access log already held thousands of
asks, 1,356 of 1,482 repeats of the daemon benchmark's queries rendered the very same
text as the query's previous ask. Each ask still fetched its ~140 blocks from the
block cache and joined their piece costs to count the whole (``render.finalize``):
~15 % of a repeated query's CPU. In a fresh workspace the frequency signal moves the
ranking more between asks, and 24 % of repeats came out the same (docs/engine.md,
"Session 20"); a miss costs nothing measurable.

The query path (``query.select_and_render``) places blocks by their token counts
alone and describes the answer by its *shape*: per part, its section and either what
its text depends on (``render.block_key``: memory id, checksum, tier, and the type
and path the label is made of) or its literal text (the "... more" line). Given the
counter and the budget, the rendered text and its count are a function of the shape
as long as the final check drops no part (which part goes depends on the scores,
which the shape leaves out): only such answers are kept, so a kept answer is what
rendering that shape again gives. Nothing else needs invalidating: an edited file
has a new checksum, hence a new shape.

Bounded by an estimate of its bytes, least recently used out first; shared by
reader threads (``lru.SizedLru``).
"""

from __future__ import annotations

from typing import NamedTuple

from .lru import SizedLru

MAX_BYTES = 1024 * 1024  # ~30 answers of a 4,000-token budget at 10,000 memories (~16 KB of text, ~140 parts)
_PART_BYTES = 130  # a shape entry: its pair, the block key tuple, the slot in the shape tuple (measured ~120)

Shape = tuple[tuple[str, ...], ...]  # per part, in order: (section, id, checksum, type, path, tier) or (section, text)


class KeptAnswer(NamedTuple):
    """A rendered answer: its text and token count."""

    text: str
    tokens: int
    size: int  # estimated bytes held, key included


class AnswerMemo:
    """Answers by (counter, budget, shape); see the module doc."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._answers: SizedLru[tuple[object, int, Shape], KeptAnswer] = SizedLru(max_bytes, lambda a: a.size)
        self.hits = 0
        self.misses = 0

    def get(self, counter: object, budget: int, shape: Shape) -> KeptAnswer | None:
        found = self._answers.get((counter, budget, shape))
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def put(self, counter: object, budget: int, shape: Shape, text: str, tokens: int) -> None:
        """Keep an answer whose final check dropped no part (the caller's to ensure)."""
        size = len(text) + _PART_BYTES * len(shape)
        self._answers.put((counter, budget, shape), KeptAnswer(text, tokens, size))
