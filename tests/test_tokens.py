"""The token counters: the heuristic default, the config switch, and its accuracy against real BPE."""

from __future__ import annotations

import math
import random

import pytest
from conftest import SHARED_DATA
from ctxos.services.tokens import HeuristicCounter, TokenCounter, count_tokens, default_counter, get_counter


def test_default_counter_is_the_heuristic_and_satisfies_the_protocol():
    counter = default_counter()
    assert isinstance(counter, TokenCounter)
    assert counter.name == "heuristic"
    assert count_tokens("") == 0
    assert 1 <= count_tokens("hello") <= 2  # expected costs are fractional, rounded up
    assert 7 <= count_tokens("Hello world, this is a test.") <= 10  # cl100k_base: 8


def test_heuristic_grows_with_text_and_charges_symbols_and_long_words():
    counter = HeuristicCounter()
    short = counter.count("the cat sat on the mat")
    assert counter.count("the cat sat on the mat " * 10) >= 8 * short
    assert counter.count("x" * 400) >= 50  # one long "word" is many tokens
    assert counter.count("!!!!!!!!!!!!") >= 2
    assert counter.count("数据库连接池配置") >= 4  # non-Latin text costs per character


def test_get_counter_names_and_errors():
    assert get_counter(None) is default_counter()
    assert get_counter("heuristic") is default_counter()
    with pytest.raises(ValueError, match="unknown tokens.counter"):
        get_counter("words")


def test_bpe_counter_from_config_is_exact():
    pytest.importorskip("bpe_openai")
    counter = get_counter("bpe:cl100k_base")
    assert counter.name == "bpe:cl100k_base"
    assert counter.count("Hello world, this is a test.") == 8
    with pytest.raises(ValueError):
        get_counter("bpe:no_such_encoding")


@pytest.mark.parametrize("corpus", ["obsidian-help", "tldr", "dendron-vault", "foam-docs", "locomo-dev"])
def test_heuristic_within_ten_percent_of_cl100k_on_shared_corpora(corpus):
    """The acceptance criterion of docs/tokens.md, re-measured on a sample of each corpus."""
    pytest.importorskip("bpe_openai")
    if not (SHARED_DATA / corpus).exists():
        pytest.skip(f"{corpus} not present")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from corpora import corpus_texts
    from ctxos.services.tokens import BpeCounter

    texts = corpus_texts(corpus)
    random.Random(11).shuffle(texts)
    texts = texts[:150]
    bpe, heuristic = BpeCounter("cl100k_base"), HeuristicCounter()
    ref = sum(bpe.count(t) for t in texts)
    est = sum(heuristic.count(t) for t in texts)
    assert ref > 1000
    assert abs(est - ref) / ref < 0.10, (corpus, est, ref)


def _paragraphs(limit_files: int = 600) -> list[str]:
    """Stripped paragraphs of real markdown (the shared corpora), plus texts that end in tricky pieces."""
    texts: list[str] = []
    for path in sorted(SHARED_DATA.glob("**/*.md"))[:limit_files]:
        for chunk in path.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            if chunk.strip():
                texts.append(chunk.strip())
    # a lone "_" is no piece at all; "'" and ")" are symbol runs that take the newlines after them
    return texts + ["a.", "x'", "(b", "123", "--", "é", "## Rules", "_", "a_", "._", "x)", "'", "'s", "- x (y): z"]


def test_join_count_equals_counting_the_joined_text():
    """``join_count`` (the render path's whole-answer count from cached piece costs) is exactly ``count``."""
    from ctxos.services.tokens import join_count

    counter = HeuristicCounter()
    texts = _paragraphs()
    assert len(texts) > 1000
    rng = random.Random(7)
    for _ in range(4000):
        parts = [
            rng.choice(texts) if rng.random() < 0.8 else rng.choice(texts[-14:]) for _ in range(rng.randint(1, 12))
        ]
        joins = [rng.choice(("\n", "\n\n", "\n\n\n")) for _ in parts]
        joined = parts[0] + "".join(j + p for j, p in zip(joins[1:], parts[1:], strict=True))
        costs = [counter.piece_costs(p) for p in parts]
        assert all(c is not None for c in costs)
        chunks = [(c, len(j) if i else 0) for i, (c, j) in enumerate(zip(costs, joins, strict=True)) if c is not None]
        assert join_count(chunks) == counter.count(joined), joined[:200]
    for edge in ("", " leading", "trailing\n"):
        assert counter.piece_costs(edge) is None  # such a text would merge with the newlines around it


def test_piece_costs_are_the_same_whether_the_cost_cache_knows_the_pieces_or_is_full(monkeypatch):
    """``_costs_of``: all pieces known (one map), some missing (costed, then kept) and a full cache (not kept)."""
    from ctxos.services import tokens

    text = "Deploy the zqxj-release (v12.3): run `make ship` --now, then check ürlaub.example"
    pieces = tokens._PIECE_RE.findall(text)
    expected = tuple(tokens._piece_cost(p) for p in pieces)
    monkeypatch.setattr(tokens, "_PIECE_COSTS", {})
    counter = HeuristicCounter()
    assert counter.piece_costs(text).costs == expected  # every piece missing: costed and kept
    assert set(tokens._PIECE_COSTS) == set(pieces)
    assert counter.piece_costs(text).costs == expected  # every piece known
    monkeypatch.setattr(tokens, "_PIECE_COSTS_MAX", len(tokens._PIECE_COSTS))
    assert counter.piece_costs(text + " brandnewword").costs == (*expected, tokens._piece_cost(" brandnewword"))
    assert " brandnewword" not in tokens._PIECE_COSTS  # full: costed without being kept
    assert counter.count(text) == math.ceil(sum(expected))  # summed in text order, as before


def test_heuristic_floor_never_exceeds_the_count():
    """``heuristic_floor`` (the tier planner's bound on an L2 block) is at most ``count``: corpus paragraphs,
    runs of underscores (no piece), Unicode spaces and symbols; and it is not trivially zero."""
    from ctxos.services.tokens import heuristic_floor

    counter = HeuristicCounter()
    texts = _paragraphs()[:400]
    for text in texts:
        assert heuristic_floor(text) <= counter.count(text)
    assert sum(map(heuristic_floor, texts)) > 0.3 * sum(map(counter.count, texts))
    alphabet = "ab_Z9'\u00e9\u00bd.-/ \t\n\r\x1c\u00a0\u2003#*"
    rng = random.Random(3)
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
        assert heuristic_floor(text) <= counter.count(text), repr(text)
    assert heuristic_floor("a __ b") == 2 and heuristic_floor("one two\nthree") == 3


def test_heuristic_floor_counts_the_runs_that_are_not_underscores_alone():
    """The floor is its definition: whitespace-separated runs, less those made of underscores only (``_`` is in no
    piece); one regex scan finds those, so it must agree with testing run by run, whatever the whitespace."""
    from ctxos.services.tokens import heuristic_floor

    def by_runs(text: str) -> int:
        return sum(1 for run in text.split() if run.strip("_"))

    alphabet = "a_9. \t\n\r\x0b\x0c\x1c\x1f\x85\u00a0\u2003\u3000é"
    rng = random.Random(5)
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))
        assert heuristic_floor(text) == by_runs(text), repr(text)
    assert heuristic_floor("__ a_b _\u3000__\x1c___x") == 2
