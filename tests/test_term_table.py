"""``TermTable`` (services/term_table.py) finds exactly what Whoosh's own term lookup finds, hits and misses."""

from __future__ import annotations

from ctxos.services.index import MemoryIndex
from ctxos.services.postings import read_term
from ctxos.services.term_table import TermTable
from test_index import mem
from whoosh.codec.whoosh3 import W3TermInfo


def _reopened(tmp_path):
    """An index of two segments, reopened from disk (plain files, as a query reads them)."""
    ix = MemoryIndex(tmp_path / "index")
    ix.open()
    words = [f"word{i}" for i in range(300)]
    ix.update([mem(f"m{i}", " ".join(words[i % 250 : i % 250 + 30]), tags=[f"t{i % 9}"]) for i in range(300)])
    ix.update([mem("extra", "word5 zebra", tags=["t1", "striped"])])
    ix.close()
    reopened = MemoryIndex(tmp_path / "index")
    assert reopened.open() is False
    return reopened


def test_every_stored_term_and_some_absent_ones_match_whoosh(tmp_path):
    ix = _reopened(tmp_path)
    try:
        leaves = [r for r, _ in ix._searcher().reader().leaf_readers()]
        assert len(leaves) == 2
        looked_up = 0
        for reader in leaves:
            terms = reader._terms
            table = TermTable.of(terms)
            assert table is not None
            stored = list(terms.items())
            looked_up += len(stored)
            for (fieldname, tbytes), info in stored:
                value = table.get(table.key(fieldname, tbytes))
                assert value is not None
                assert W3TermInfo.from_bytes(value).__dict__ == info.__dict__, (fieldname, tbytes)
            for fieldname, tbytes in [("text", b"absent"), ("tags", b"word5"), ("nofield", b"word5"), ("text", b"")]:
                assert table.get(table.key(fieldname, tbytes)) is None
                assert (fieldname, tbytes) not in terms
        assert looked_up > 300
    finally:
        ix.close()


def test_read_term_gives_the_same_postings_with_and_without_the_table(tmp_path, monkeypatch):
    ix = _reopened(tmp_path)
    try:
        readers = [r for r, _ in ix._searcher().reader().leaf_readers()]
        cases = [("text", "word5"), ("text", "zebra"), ("tags", "t1"), ("tags", "striped"), ("text", "nothing")]
        fast = [read_term(r, f, t) for r in readers for f, t in cases]
        monkeypatch.setattr(TermTable, "of", classmethod(lambda cls, terms: None))  # Whoosh's own lookup
        slow = [read_term(r, f, t) for r in readers for f, t in cases]
        assert [(p.ids.tolist(), p.weights.tolist(), p.df) for p in fast] == [
            (p.ids.tolist(), p.weights.tolist(), p.df) for p in slow
        ]
        assert sum(p.df for p in fast) > 0 and any(p.df == 0 for p in fast)
    finally:
        ix.close()
