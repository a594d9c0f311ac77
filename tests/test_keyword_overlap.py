"""Keyword overlap's phrase part (services/signals.py): a memory's text is read only for phrases it can hold."""

from __future__ import annotations

from pathlib import Path

from ctxos.services.analysis import analyze
from ctxos.services.intent import expand_query
from ctxos.services.model import Memory
from ctxos.services.signals import Candidate, KeywordOverlapScorer, QueryTerms, build_query_terms
from ctxos.services.tier_source import clear_cache, read_cold


def _released(root: Path, name: str, body: str) -> tuple[Memory, list[str]]:
    """A memory whose text was released, read back from its real file by ``read_cold``; the reads are listed."""
    path = root / f"{name}.md"
    path.write_text(body, encoding="utf-8")
    memory = Memory(id=name, type="resource", rel_path=f"{name}.md", path=path, l0=name, l1=body, l2="", checksum="x")
    reads: list[str] = []

    def source(m: Memory, field: str) -> object:
        reads.append(field)
        return read_cold(m, field)

    assert memory.release_text(source)
    return memory, reads


def _candidate(memory: Memory, words: str) -> Candidate:
    return Candidate(memory, bm25_raw=1.0, matched=frozenset(t for w in words.split() for t in analyze(w)))


def test_phrases_count_only_between_word_boundaries_and_unneeded_texts_are_not_read(tmp_path):
    clear_cache()
    terms = build_query_terms(expand_query("sql server backups", {}), analyze, lambda _t: 1.0)
    assert terms.phrases == ["sql server", "server backups"]
    both, both_reads = _released(tmp_path, "both", "Nightly sql server backups to disk.")
    inside, inside_reads = _released(tmp_path, "inside", "Check a postgresql server's backups.")
    neither, neither_reads = _released(tmp_path, "neither", "Backups of the server, weekly.")
    cands = [
        _candidate(both, "sql server backups"),
        _candidate(inside, "server backups"),  # "sql" only inside "postgresql": not a match of the word
        _candidate(neither, "server"),  # no phrase can be in it: its text is not read
    ]
    scores = KeywordOverlapScorer().score(terms, cands)
    assert both_reads and not neither_reads and inside_reads  # "server backups" could be in "inside"
    # coverage is the same share for "both" (every concept in its body); the phrase share decides
    assert scores["both"] > scores["inside"] > scores["neither"]
    assert cands[1].keyword is not None and cands[2].keyword is not None
    # "server backups" is not in "inside" as written ("server's backups"): only coverage counts for it
    only_coverage = KeywordOverlapScorer().score(
        QueryTerms(terms.expanded, terms.group_tokens, terms.group_weights, []), [_candidate(inside, "server backups")]
    )
    assert scores["inside"] == 0.75 * only_coverage["inside"]


def test_terms_made_without_phrase_tokens_read_every_text(tmp_path):
    """A ``QueryTerms`` built by hand (no phrase tokens) keeps the substring rule for every candidate."""
    clear_cache()
    memory, reads = _released(tmp_path, "m", "Restore the sql server from last night.")
    full = build_query_terms(expand_query("sql server", {}), analyze, lambda _t: 1.0)
    bare = QueryTerms(full.expanded, full.group_tokens, full.group_weights, full.phrases)
    cand = Candidate(memory)  # nothing matched: the prefilter alone would skip it
    value = KeywordOverlapScorer().score(bare, [cand])["m"]
    assert reads and value == 0.25  # the phrase found, no coverage credit without matched tokens


def test_a_text_is_read_once_for_both_tiers_and_lowered_as_str_lower_does(tmp_path):
    """The phrase text is the file read back once (``Memory.tier_texts``: one lookup for L1 and L2), lowered
    as ``str.lower`` lowers it: bytes for ASCII text (the same letters change), ``str.lower`` otherwise."""
    clear_cache()
    ascii_memory, ascii_reads = _released(
        tmp_path, "ascii", "Nightly SQL Server BACKUPS.\n\n<!-- L2 -->\nMore SQL SERVER notes."
    )
    accented, accented_reads = _released(tmp_path, "accented", "Élèves de l'ÉCOLE NORMALE Supérieure, à Paris.")
    scorer = KeywordOverlapScorer()
    assert scorer._memory_text_lower(ascii_memory) == (
        f"ascii\n{ascii_memory.title}\n\nNightly SQL Server BACKUPS.\nMore SQL SERVER notes.".lower().encode()
    )
    assert ascii_reads == ["tiers"]  # one read-back for L1 and L2 together
    assert "école normale".encode() in scorer._memory_text_lower(accented) and accented_reads == ["tiers"]
    terms = build_query_terms(expand_query("école normale", {}), analyze, lambda _t: 1.0)
    found = scorer.score(terms, [_candidate(accented, "école normale")])["accented"]
    missing = KeywordOverlapScorer().score(
        QueryTerms(terms.expanded, terms.group_tokens, terms.group_weights, []), [_candidate(accented, "école normale")]
    )["accented"]
    assert found > 0.75 * missing  # the phrase share counted
