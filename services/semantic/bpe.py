"""The packaged WordLlama tokenizer's BPE in compact tables: token ids without the ``tokenizers`` package (issue 16).

WordLlama's tokenizer (``l2_supercat_tokenizer_config.json``, Llama 2's: 32,000 tokens,
61,249 merges, spaces written as ``▁``, unknown characters as their UTF-8 bytes) loaded
by ``tokenizers.Tokenizer`` held **8.2 MiB** in the daemon for as long as it ran, **12.2
MiB** for the first one loaded in a process, plus 5.5 MiB of the library's code pages:
~15 % of the idle daemon at 10,000 memories, which uses it only for a query's few words
and an edited file's opening (measured in one process after ``malloc_trim``; docs/engine.md
"Session 22"). Here the same ids come from two sorted integer arrays (a merge's pair of
ids -> its rank and the merged id: ~0.5 MiB) and a dict of the single-character tokens.

What it reproduces, from that file (``from_file`` refuses a file that asks for more):

- the added tokens (``<unk>``, ``<s>``, ``</s>``: special, not normalized) are cut out of
  the text first, wherever they occur, and become their own ids;
- each remaining piece is normalized (``▁`` prepended when not empty, every space replaced
  by ``▁``) and split into characters: a character that is a token is its id, any other
  becomes one ``<0xNN>`` token per UTF-8 byte (byte fallback; every byte has one);
- BPE as ``tokenizers`` does it (``Word::merge_all``): the lowest-ranked mergeable pair
  first, the leftmost of equal ranks, one merge at a time, new pairs queued as they form.

No token of this vocabulary has a ``▁`` after another character, so no merge joins the
end of a word to the ``▁`` that starts the next: each word (``▁`` run plus the characters
up to the next ``▁``) is merged alone and the result kept in a small word cache, so a
query's words mostly cost a dict lookup. ``tests/test_bpe.py`` checks the ids equal the
library's on texts of each shared corpus it finds (all 16,631 of them were compared once, with
no difference) and on odd text (bytes, special tokens, whitespace runs, astral characters).
"""

from __future__ import annotations

import heapq
import json
import operator
import re
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from pathlib import Path

import numpy as np

SPACE = "\u2581"  # SentencePiece's word marker, which the normalizer writes for each space
WORD_CACHE = 4096  # merged words kept (a query's and an edit's words; cleared when full)
WORD_CACHE_LONGEST = 64  # longer "words" (a path, a URL, a line of code) are merged each time: rarely seen twice
_ID_BITS = 16  # a pair's key: left id << _ID_BITS | right id (ids < 65,536)
_WORD = re.compile(f"{SPACE}*[^{SPACE}]+|{SPACE}+")


class UnsupportedTokenizer(ValueError):
    """The tokenizer file asks for something ``CompactBpe`` does not reproduce; the message says what."""


class CompactBpe:
    """Token ids of texts, equal to ``tokenizers.Tokenizer.encode(text, add_special_tokens=False).ids``."""

    def __init__(
        self,
        singles: dict[str, int],
        byte_ids: Sequence[int],
        pair_keys: array[int],
        pair_values: array[int],
        added: dict[str, int],
    ) -> None:
        self._singles = singles
        self._byte_ids = tuple(byte_ids)
        self._pair_keys = pair_keys  # sorted: left id << _ID_BITS | right id
        self._pair_values = pair_values  # rank << _ID_BITS | merged id, in the keys' order
        self._added = added
        self._added_pattern = (
            re.compile("|".join(re.escape(t) for t in sorted(added, key=len, reverse=True))) if added else None
        )
        self._words: dict[str, tuple[int, ...]] = {}

    @classmethod
    def from_file(cls, path: Path) -> CompactBpe:
        """Tables from a ``tokenizer.json`` of the kind WordLlama packages (see the module doc)."""
        spec = json.loads(Path(path).read_text(encoding="utf-8"))
        model = spec.get("model") or {}
        _require(path, model.get("type") == "BPE", "its model is not BPE")
        _require(path, model.get("byte_fallback") is True, "it has no byte fallback")
        _require(path, not model.get("dropout"), "it uses BPE dropout")
        _require(path, not model.get("ignore_merges"), "it ignores merges for whole-word tokens")
        _require(
            path,
            not model.get("continuing_subword_prefix") and not model.get("end_of_word_suffix"),
            "it marks subwords",
        )
        _require(path, spec.get("pre_tokenizer") is None, "it has a pre-tokenizer")
        _require(path, spec.get("normalizer") == _NORMALIZER, "its normalizer is not Llama's (prepend ▁, spaces as ▁)")
        vocab: dict[str, int] = model["vocab"]
        _require(path, max(vocab.values()) < 1 << _ID_BITS, "its vocabulary is too large")
        _require(
            path,
            not any(SPACE in token.lstrip(SPACE) for token in vocab),
            "a token has ▁ inside a word (words would not merge alone)",
        )
        added: dict[str, int] = {}
        for token in spec.get("added_tokens") or []:
            _require(
                path,
                not (token.get("normalized") or token.get("single_word") or token.get("lstrip") or token.get("rstrip")),
                f"the added token {token.get('content')!r} is normalized or matched with options",
            )
            added[token["content"]] = int(token["id"])
        byte_ids = [vocab.get(f"<0x{b:02X}>") for b in range(256)]
        _require(path, all(i is not None for i in byte_ids), "a byte has no <0xNN> token")
        singles = {token: i for token, i in vocab.items() if len(token) == 1}
        keys, values = _pair_table(path, vocab, model["merges"])
        return cls(singles, [i for i in byte_ids if i is not None], keys, values, added)

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` (no BOS/EOS: ``add_special_tokens=False``)."""
        out: list[int] = []
        pattern = self._added_pattern
        if pattern is None:
            self._encode_piece(text, out)
            return out
        start = 0
        for found in pattern.finditer(text):
            self._encode_piece(text[start : found.start()], out)
            out.append(self._added[found.group()])
            start = found.end()
        self._encode_piece(text[start:], out)
        return out

    def _encode_piece(self, piece: str, out: list[int]) -> None:
        if not piece:
            return
        words = self._words
        for word in _WORD.findall(SPACE + piece.replace(" ", SPACE)):
            ids = words.get(word)
            if ids is None:
                ids = self._merge(self._symbols(word))
                if len(word) <= WORD_CACHE_LONGEST:  # so the cache stays under ~1 MiB
                    if len(words) >= WORD_CACHE:
                        words.clear()
                    words[word] = ids
            out.extend(ids)

    def _symbols(self, word: str) -> list[int]:
        singles, byte_ids = self._singles, self._byte_ids
        ids: list[int] = []
        for char in word:
            found = singles.get(char)
            if found is not None:
                ids.append(found)
            else:  # not a token: its UTF-8 bytes (a lone surrogate as its three bytes, not an error)
                ids.extend(byte_ids[b] for b in char.encode("utf-8", "surrogatepass"))
        return ids

    def _pair(self, left: int, right: int) -> int:
        """``rank << _ID_BITS | merged id`` of the pair, or -1 when it does not merge."""
        key = left << _ID_BITS | right
        keys = self._pair_keys
        at = bisect_left(keys, key)
        return self._pair_values[at] if at < len(keys) and keys[at] == key else -1

    def _merge(self, ids: list[int]) -> tuple[int, ...]:
        """``tokenizers``' ``Word::merge_all`` without dropout (see the module doc).

        A queued entry remembers its pair: when both symbols are still the same ones it is
        merged without looking the pair up again; when one changed, the library's own test
        applies (the pair now there merges into the same id).
        """
        count = len(ids)
        if count < 2:
            return tuple(ids)
        pair = self._pair
        push, pop = heapq.heappush, heapq.heappop
        mask = (1 << _ID_BITS) - 1
        nxt = list(range(1, count + 1))
        nxt[-1] = -1
        prev = list(range(-1, count - 1))
        queue: list[tuple[int, int, int, int, int]] = []  # (rank, position, merged, left, right): lowest rank, leftmost
        for pos in range(count - 1):
            left, right_id = ids[pos], ids[pos + 1]
            found = pair(left, right_id)
            if found >= 0:
                queue.append((found >> _ID_BITS, pos, found & mask, left, right_id))
        heapq.heapify(queue)
        while queue:
            _, pos, merged, left, right_id = pop(queue)
            right = nxt[pos]
            if ids[pos] < 0 or right < 0:
                continue  # merged into its left neighbour, or the last symbol now
            if ids[pos] != left or ids[right] != right_id:
                found = pair(ids[pos], ids[right])
                if found < 0 or found & mask != merged:
                    continue  # a queued pair that has changed since
            ids[pos] = merged
            ids[right] = -1
            after = nxt[right]
            nxt[pos] = after
            if after >= 0:
                prev[after] = pos
            before = prev[pos]
            if before >= 0:
                left = ids[before]
                found = pair(left, merged)
                if found >= 0:
                    push(queue, (found >> _ID_BITS, before, found & mask, left, merged))
            if after >= 0:
                right_id = ids[after]
                found = pair(merged, right_id)
                if found >= 0:
                    push(queue, (found >> _ID_BITS, pos, found & mask, merged, right_id))
        return tuple(i for i in ids if i >= 0)


_NORMALIZER = {
    "type": "Sequence",
    "normalizers": [
        {"type": "Prepend", "prepend": SPACE},
        {"type": "Replace", "pattern": {"String": " "}, "content": SPACE},
    ],
}


def _pair_table(
    path: Path, vocab: dict[str, int], merges: list[str] | list[list[str]]
) -> tuple[array[int], array[int]]:
    """Each merge as ``left id << _ID_BITS | right id`` (sorted) and ``rank << _ID_BITS | merged id`` beside it.

    numpy packs and sorts (this runs at every start: ~40 ms instead of ~120 ms in a Python loop);
    the tables are then plain ``array('q')``, which ``bisect`` searches without making numpy scalars.
    """
    pairs = [m.split(" ") if isinstance(m, str) else m for m in merges]
    lefts = [left for left, _ in pairs]
    rights = [right for _, right in pairs]
    get = vocab.__getitem__
    count = len(pairs)
    left_ids = np.fromiter(map(get, lefts), dtype=np.int64, count=count)
    right_ids = np.fromiter(map(get, rights), dtype=np.int64, count=count)
    merged_ids = np.fromiter(map(get, map(operator.add, lefts, rights)), dtype=np.int64, count=count)
    keys = left_ids << _ID_BITS | right_ids
    values = np.arange(count, dtype=np.int64) << _ID_BITS | merged_ids
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    _require(path, not bool(np.any(keys[1:] == keys[:-1])), "a pair of tokens is merged twice")
    key_table: array[int] = array("q")
    value_table: array[int] = array("q")
    key_table.frombytes(keys.tobytes())
    value_table.frombytes(values.tobytes())
    return key_table, value_table


def _require(path: Path, condition: bool, reason: str) -> None:
    if not condition:
        raise UnsupportedTokenizer(f"{path}: {reason}")
