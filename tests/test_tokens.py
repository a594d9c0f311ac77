"""The token counters: the heuristic default, the config switch, and its accuracy against real BPE."""

from __future__ import annotations

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
