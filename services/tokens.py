"""Token counting: a pluggable ``TokenCounter`` and a fast calibrated default.

The budget promise ("the rendered text never exceeds the budget") is made
under whichever counter is in use, so every part of the query path counts with
the same object. The default is a pure-Python heuristic that mimics a GPT-style
BPE pre-tokenizer (words with their leading space, digit groups of up to three,
punctuation runs, newlines) and charges long or non-ASCII words by length. Its
constants were fitted against the ``cl100k_base`` BPE vocabulary shipped by the
``bpe-openai`` package on the shared corpora; ``docs/tokens.md`` has the numbers
and ``tests/test_tokens.py`` re-checks them when that package is installed.

A real BPE counter can be chosen with ``tokens.counter: bpe:cl100k_base`` in
``_config.yaml`` when ``bpe-openai`` is installed (optional extra ``bpe``); it is
exact but slower and needs the 75 MB package, which is why it is not the default.
"""

from __future__ import annotations

import math
import re
from itertools import chain
from typing import NamedTuple, Protocol, TypeGuard, runtime_checkable


@runtime_checkable
class TokenCounter(Protocol):
    """Anything that can count the tokens of a string.

    ``name`` is shown in ``simulate`` output and docs so a reader knows which
    counter a budget was enforced with.
    """

    name: str

    def count(self, text: str) -> int: ...


# One regex alternative per piece kind, in the spirit of the cl100k pre-tokenizer:
#   1. contractions ('s 't 're ...)
#   2. a letter run with an optional leading non-letter/non-digit char (usually the space)
#   3. digit groups of up to three
#   4. a punctuation run with an optional leading space (trailing newlines folded in)
#   5. whitespace ending in newlines, other whitespace
_PIECE_RE = re.compile(
    r"'(?:[sdmt]|ll|ve|re)"
    r"|[^\r\n\w]?[^\W\d_]+"
    r"|\d{1,3}"
    r"| ?[^\s\w]+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+",
    re.IGNORECASE,
)


# A piece made by the symbol-run alternative (4 above) without newlines: in a longer text it
# also takes the newlines that follow it (see ``PieceCosts``).
_SYMBOL_RUN_RE = re.compile(r" ?[^\s\w]+")

# Expected BPE tokens of one piece by its letter count (index = length - 1), fitted
# on 300 files of each shared corpus against cl100k_base (docs/tokens.md).
# "space": " word" (the common case; most English words are one token even when
# long); "bare": a word at line start or after punctuation; "lead": a word glued to
# one leading symbol such as "(word" or "/path"; "punct": a run of symbols.
_SPACE_WORD = (1.0, 1.0, 1.01, 1.01, 1.02, 1.05, 1.11, 1.17, 1.15, 1.16, 1.24, 1.37, 1.24, 1.59, 2.09)
_BARE_WORD = (1.0, 1.03, 1.1, 1.17, 1.13, 1.36, 1.69, 1.6, 1.66, 1.86, 2.36, 2.19, 1.96, 3.66, 3.8)
_LEAD_WORD = (1.0, 1.04, 1.09, 1.24, 1.51, 1.49, 1.65, 2.58, 2.1, 2.15, 2.93, 2.59, 2.76, 3.24, 3.53)
_PUNCT_RUN = (1.0, 1.05, 1.38, 1.85, 3.14, 2.91, 3.62, 2.02)
_LONG_WORD_CHARS_PER_TOKEN = 3.7  # beyond the tables: identifiers, URLs, hashes
_LONG_PUNCT_TOKENS = 2.5  # "-----" rulers and the like compress well
_NON_ASCII_CHARS_PER_TOKEN = 2.0  # accented / non-Latin words


def _table_cost(table: tuple[float, ...], length: int) -> float:
    if length <= len(table):
        return table[length - 1]
    return length / _LONG_WORD_CHARS_PER_TOKEN


def _word_cost(piece: str) -> float:
    """Expected tokens for one letter piece (its leading space or symbol included)."""
    word = piece.lstrip()
    if not word.isascii():
        return max(1.0, len(word) / _NON_ASCII_CHARS_PER_TOKEN)
    if piece[0] == " ":
        return _table_cost(_SPACE_WORD, len(word))
    if word[0].isalpha():
        return _table_cost(_BARE_WORD, len(word))
    return _table_cost(_LEAD_WORD, len(word))


def _punct_cost(run_length: int) -> float:
    if run_length <= len(_PUNCT_RUN):
        return _PUNCT_RUN[max(run_length, 1) - 1]
    return _LONG_PUNCT_TOKENS


def _piece_cost(piece: str) -> float:
    """Expected tokens for one pre-tokenizer piece (any kind)."""
    first = piece[0]
    if first.isalpha() or (len(piece) > 1 and piece[-1].isalpha()):
        return _word_cost(piece)
    if first.isdigit() or first == "'" or piece.isspace():
        return 1.0
    return _punct_cost(len(piece.strip()))


# Cost per distinct piece, filled as pieces are met. Counting the final text of every query
# is the query path's largest single cost (docs/engine.md, "Footprint"); most pieces repeat,
# so one dict lookup replaces the per-piece branching. Bounded: a full cache stops growing
# (new pieces are still costed, just not kept). Plain dict: reads and inserts are atomic
# under the interpreter lock, and a lost insert only means computing a cost again.
_PIECE_COSTS: dict[str, float] = {}
_PIECE_COSTS_MAX = 65536


class PieceCosts(NamedTuple):
    """One text's piece costs in text order, so the count of texts joined by newlines needs no recount.

    A text that starts and ends with a non-space character splits into the
    same pieces alone as inside a longer text where newlines surround it: the
    pre-tokenizer's pieces never cross a newline, except that a run of symbols
    (``open_end``: the text ends with one) takes the newlines after it
    into its own piece at no extra cost; otherwise the newlines are one piece
    of cost 1. ``join_count`` adds the costs in text order, the same float
    additions ``count`` makes over the joined text, so both give the same int.
    """

    costs: tuple[float, ...]
    open_end: bool


NEWLINES_COST = 1.0  # a run of newlines between two texts (a whitespace piece)


def join_count(chunks: list[tuple[PieceCosts, int]]) -> int:
    """Tokens of texts joined in order; each chunk is a text's costs and the newlines (0: none) before it.

    Equal to ``HeuristicCounter.count`` of the joined text when every text
    starts and ends with a non-space character (``PieceCosts``): both add the
    same costs in the same order with the builtin ``sum``, so they give the same
    float whatever way ``sum`` adds (plain double additions up to Python 3.11,
    compensated from 3.12). ``sum`` keeps a C double where ``reduce(add, ...)``
    made a float object per piece: 47 against 176 us for an answer's ~7,500
    pieces (``finalize`` counts every answer whole).
    """
    seq: list[tuple[float, ...]] = []
    open_end = False
    for costs, newlines in chunks:
        if newlines and not open_end:
            seq.append((NEWLINES_COST,))
        seq.append(costs.costs)
        open_end = costs.open_end
    return math.ceil(sum(chain.from_iterable(seq), 0.0))  # the sum ``HeuristicCounter.count`` makes


def joined_costs(first: PieceCosts, second: PieceCosts) -> PieceCosts:
    """The piece costs of two texts joined by newlines: ``join_count``'s sequence, kept (see ``PieceCosts``)."""
    between = () if first.open_end else (NEWLINES_COST,)
    return PieceCosts(first.costs + between + second.costs, second.open_end)


@runtime_checkable
class JoinableCounter(TokenCounter, Protocol):
    """A counter that can count texts joined by newlines from each text's ``PieceCosts`` (the heuristic)."""

    def piece_costs(self, text: str) -> PieceCosts | None: ...


def is_joinable(counter: TokenCounter) -> TypeGuard[JoinableCounter]:
    """Whether ``counter`` has ``piece_costs`` (a plain attribute test: a runtime-protocol check costs ~10 us)."""
    return callable(getattr(counter, "piece_costs", None))


class HeuristicCounter:
    """The default counter: regex pre-tokenizer plus length-based costs; no data files.

    Cheap enough to count every tier of every candidate at query time (the
    engine also caches counts per file checksum).
    """

    name = "heuristic"

    def count(self, text: str) -> int:
        if not text:
            return 0
        # summed in text order by the builtin ``sum`` (see ``join_count``)
        return math.ceil(sum(_costs_of(_PIECE_RE.findall(text)), 0.0))

    def piece_costs(self, text: str) -> PieceCosts | None:
        """``text``'s piece costs (see ``PieceCosts``); None when it is empty or starts or ends with a space."""
        if not text or text[0].isspace() or text[-1].isspace():
            return None
        pieces = _PIECE_RE.findall(text)
        last = pieces[-1] if pieces else ""
        # pieces skip what no alternative matches (a lone "_"): the run must end the text
        return PieceCosts(_costs_of(pieces), text.endswith(last) and _SYMBOL_RUN_RE.fullmatch(last) is not None)


def _costs_of(pieces: list[str]) -> tuple[float, ...]:
    """Each piece's cost, in order, by one C-level ``map`` over the cache.

    Most pieces repeat, and a per-piece Python loop with a lookup and a branch
    was most of a count. The common case, every piece known, is one pass with no
    set built; a miss costs the pieces the cache lacks first, then maps again.
    The cache only ever grows (until full), so a piece found or added here stays.
    """
    known = _PIECE_COSTS
    try:
        return tuple(map(known.__getitem__, pieces))
    except KeyError:
        pass
    missing = set(pieces).difference(known)
    if len(known) + len(missing) > _PIECE_COSTS_MAX:  # full: cost these pieces without keeping them
        extra = {piece: _piece_cost(piece) for piece in missing}
        return tuple(extra[piece] if piece in extra else known[piece] for piece in pieces)
    for piece in missing:
        known[piece] = _piece_cost(piece)
    return tuple(map(known.__getitem__, pieces))


def heuristic_floor(text: str) -> int:
    """A lower bound of ``HeuristicCounter.count(text)`` without the pre-tokenizer: its whitespace-separated runs.

    Why it holds: every piece costs at least 1 (each cost table starts at 1.0, long
    words and symbol runs cost more), and every run holds a piece of its own: a
    piece's whitespace is only a leading character or the newlines a symbol run
    takes after it, so no piece holds non-space characters of two runs, and every
    non-space character but ``_`` is in some piece (letters, digits and symbols each
    have an alternative; a run of underscores alone matches none: not counted).
    The tier planner uses it to rule out an L2 upgrade that cannot fit without
    tokenizing its ~1,000 characters (``Engine.block_tokens_at_least``).
    """
    runs = text.split()  # str.split's whitespace is the regex's \s (the same code points)
    if "_" in text:  # less the runs of underscores alone (a test per run: ~2x faster than a regex scan)
        return len(runs) - sum(1 for run in runs if run[0] == "_" and not run.strip("_"))
    return len(runs)


class BpeCounter:
    """Exact counts from a real BPE vocabulary shipped by the ``bpe-openai`` package.

    Used as the reference in tests and benchmarks, or as the counter when the
    config asks for ``bpe:<encoding>``. Raises ``ImportError`` when the package
    is missing so the caller can say so.
    """

    def __init__(self, encoding: str = "cl100k_base") -> None:
        import bpe_openai  # optional dependency (extra "bpe")

        self._encoding = bpe_openai.get_encoding(encoding)
        self.name = f"bpe:{encoding}"

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._encoding.encode(text))


_DEFAULT = HeuristicCounter()


def default_counter() -> TokenCounter:
    """The counter used when the config names none (the calibrated heuristic)."""
    return _DEFAULT


def get_counter(name: str | None) -> TokenCounter:
    """Counter for a config value: ``heuristic`` (default) or ``bpe:<encoding>``.

    An unknown name or a missing ``bpe-openai`` raises ``ValueError`` with the
    reason, so a typo in ``_config.yaml`` is reported instead of silently ignored.
    """
    if not name or name == "heuristic":
        return _DEFAULT
    if name.startswith("bpe:") or name == "bpe":
        encoding = name.split(":", 1)[1] if ":" in name else "cl100k_base"
        try:
            return BpeCounter(encoding)
        except ImportError as exc:
            raise ValueError(f"tokens.counter {name!r} needs the 'bpe-openai' package ({exc})") from exc
        except Exception as exc:  # unknown encoding name inside bpe_openai
            raise ValueError(f"tokens.counter {name!r}: {exc}") from exc
    raise ValueError(f"unknown tokens.counter {name!r}; expected 'heuristic' or 'bpe:<encoding>'")


def count_tokens(text: str) -> int:
    """Tokens of ``text`` under the default counter."""
    return _DEFAULT.count(text)
