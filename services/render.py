"""Rendering the chosen memories into one text that never exceeds the budget.

Layout (stable, so agents and people learn where to look):

    ## Rules                      rules and always_load memories, first
    ### <id> (<type>, <tier>)       (<type>, source, <tier>) for a file under sources/
    <text>

    ## Memories                   the scored memories, best first
    ### <id> (<type>, <tier>)
    <text>

    ## Catalog                    one line per further relevant memory, best first
    - <id> (<type>): <l0>
    - ... and N more memories not listed

``Packer`` decides what fits while the query path adds blocks in priority
order, charging each block (and its section heading the first time) with the
token counter in use. Blocks are joined with newlines so no token spans two
blocks; the final text is counted once more as a whole and, should a counter
not be additive, the lowest-priority parts are dropped until it fits. So the
budget holds under any counter, by construction. With the heuristic counter
that whole count comes from the parts' piece costs (``tokens.join_count``:
the same number, without re-tokenizing ~16 KB per query).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .model import Memory
from .tokens import JoinableCounter, PieceCosts, TokenCounter, default_counter, is_joinable, join_count

SECTION_RULES = "## Rules"
SECTION_MEMORIES = "## Memories"
SECTION_CATALOG = "## Catalog"
SECTIONS = (SECTION_RULES, SECTION_MEMORIES, SECTION_CATALOG)
SEPARATOR = "\n\n"


def block_heading(memory: Memory, tier: str) -> str:
    return f"### {memory.id} ({memory.label}, {tier})"


BlockKey = tuple[str, str, str, str]


def block_key(memory: Memory, tier: str) -> BlockKey:
    """What a memory's rendering at ``tier`` depends on, for caches of blocks and their counts.

    The checksum covers the file's text; the label is the heading's type (and ``source``),
    which a move to another folder changes without changing the text.
    """
    return (memory.id, memory.checksum, memory.label, tier)


def memory_block(memory: Memory, tier: str) -> str:
    """A memory rendered at a tier: heading line plus the tier's text."""
    text = memory.tier_text(tier).strip()
    return f"{block_heading(memory, tier)}\n{text}" if text else block_heading(memory, tier)


def catalog_line(memory: Memory) -> str:
    l0 = " ".join(memory.l0.split())
    return f"- {memory.id} ({memory.label}): {l0}" if l0 else f"- {memory.id} ({memory.label})"


def l1_block_tokens(memory: Memory) -> int:
    """Tokens of ``memory_block(memory, "L1")`` under the default counter, counted once per parse.

    Kept on the memory (``Memory.l1_tokens``): the tier planner costs every
    candidate at L1 (~155 per query at 10,000 memories) but shows only some,
    and counting a released memory's block meant reading its file back. It is
    counted while the text is still in the object (``keep_counts``): by the
    cold build's builders, and by the engine for the memories it parses itself
    before it releases them (``index_build.keep_query_values``); here only for
    a memory neither did (one built in a test, say). The block's heading (id,
    type, path) and text are fixed by the parse, so the count never outlives
    what it counts.
    """
    value = memory.l1_tokens
    if value < 0:
        value = memory.l1_tokens = default_counter().count(memory_block(memory, "L1"))
    return value


def catalog_line_tokens(memory: Memory) -> int:
    """Tokens of ``catalog_line(memory)`` under the default counter, counted once per parse (as ``l1_block_tokens``)."""
    value = memory.catalog_tokens
    if value < 0:
        value = memory.catalog_tokens = default_counter().count(catalog_line(memory))
    return value


def keep_counts(memory: Memory) -> None:
    """Count the L1 block and the catalog line now (a builder, while the text is still in the object)."""
    l1_block_tokens(memory)
    catalog_line_tokens(memory)


def more_line(count: int) -> str:
    return f"- ... and {count:,} more {'memory' if count == 1 else 'memories'} not listed"


@dataclass(slots=True)
class Part:
    """One rendered piece: a memory block or a catalog line, with its cost."""

    section: str
    text: str
    tokens: int
    memory_id: str | None = None
    priority: float = 0.0  # lower is dropped first when the final check trims
    costs: PieceCosts | None = None  # the text's piece costs when the caller has them (render_cache)


@dataclass
class Packer:
    """Greedy budget accounting shared by the tier choice and the final render."""

    counter: TokenCounter
    budget: int
    parts: list[Part] = field(default_factory=list)
    used: int = 0
    _sections: set[str] = field(default_factory=set)

    def cost(self, section: str, text: str, tokens: int | None = None) -> int:
        """Tokens adding ``text`` to ``section`` would charge (heading included when new).

        ``tokens`` is the text's own count when the caller has it cached.
        """
        own = self.counter.count(text) if tokens is None else tokens
        total = own + (1 if self.parts else 0)  # +1 for the separator
        if section not in self._sections:
            total += self.counter.count(section) + 1
        return total

    def add(
        self,
        section: str,
        text: str,
        *,
        tokens: int | None = None,
        memory_id: str | None = None,
        priority: float = 0.0,
        reserve: int = 0,
        costs: PieceCosts | None = None,
    ) -> Part | None:
        """Add ``text`` if it fits under ``budget - reserve``; return the part or None."""
        own = self.counter.count(text) if tokens is None else tokens
        charge = self.cost(section, text, own)
        if self.used + charge > self.budget - reserve:
            return None
        part = Part(section, text, own, memory_id, priority, costs)
        self.parts.append(part)
        self._sections.add(section)
        self.used += charge
        return part

    @property
    def remaining(self) -> int:
        return self.budget - self.used


def assemble(parts: list[Part]) -> str:
    """Join parts under their section headings, sections in fixed order."""
    chunks: list[str] = []
    for section in SECTIONS:
        texts = [p.text for p in parts if p.section == section]
        if not texts:
            continue
        joiner = "\n" if section == SECTION_CATALOG else SEPARATOR
        chunks.append(section + "\n" + joiner.join(texts))
    return SEPARATOR.join(chunks)


def finalize(parts: list[Part], counter: TokenCounter, budget: int) -> tuple[str, int, list[Part]]:
    """Render ``parts``; drop lowest-priority parts until the whole text fits the budget.

    Returns ``(text, tokens, kept_parts)``. With a budget of 0 (or less) the text is empty.
    """
    kept = list(parts)
    if budget <= 0:
        return "", 0, []
    joinable = counter if is_joinable(counter) and _with_costs(kept, counter) else None
    while True:
        if joinable is not None:
            tokens = assembled_count(kept, joinable)
            text = ""
        else:
            text = assemble(kept)
            tokens = counter.count(text)
        if tokens <= budget:
            return text or assemble(kept), tokens, kept
        victim = min(range(len(kept)), key=lambda i: (kept[i].priority, -i))
        kept.pop(victim)


def _with_costs(parts: list[Part], counter: JoinableCounter) -> bool:
    """Give every part its piece costs; False when a text cannot join counts."""
    for part in parts:
        if part.costs is None:
            part.costs = counter.piece_costs(part.text)
            if part.costs is None:
                return False
    return True


def assembled_count(parts: list[Part], counter: JoinableCounter) -> int:
    """``counter.count(assemble(parts))`` from the parts' piece costs (each part has them)."""
    chunks: list[tuple[PieceCosts, int]] = []
    for section in SECTIONS:
        costs = [p.costs for p in parts if p.section == section]
        if not costs:
            continue
        heading = counter.piece_costs(section)
        if heading is None:  # a heading always starts and ends with a symbol or a letter
            raise ValueError(f"section heading {section!r} cannot be joined")
        chunks.append((heading, 2 if chunks else 0))
        chunks.extend((c, 1) for c in costs if c is not None)
    return join_count(chunks) if chunks else 0
