"""The signed parse cache: a warm start re-parses only changed files, and never trusts a forged cache."""

from __future__ import annotations

import os

import pytest
from ctxos.services import parse_cache
from ctxos.services.engine import Engine
from daemon_helpers import memory_text


def _load(root):
    engine = Engine(root)
    engine.load()
    return engine


def _hits(root) -> int:
    engine = _load(root)
    engine.close()
    return engine.parse_cache_hits


def test_warm_start_reuses_unchanged_files_and_reparses_edited_ones(make_workspace) -> None:
    root = make_workspace({f"05-resources/n{i}.md": memory_text(f"n{i}", f"Note {i}.") for i in range(30)})
    _load(root).close()  # cold build writes the cache
    assert (root / ".ctxos" / parse_cache.CACHE_FILENAME).exists()
    key = parse_cache.key_path()
    assert key.stat().st_mode & 0o777 == 0o600
    warm = _load(root)
    assert warm.parse_cache_hits == 30
    warm.close()
    edited = root / "05-resources/n3.md"
    edited.write_text(memory_text("n3", "Edited while the daemon was down."))
    os.utime(edited, (1_900_000_000, 1_900_000_000))  # a new mtime whatever the clock's resolution
    again = _load(root)
    try:
        assert again.parse_cache_hits == 29
        assert "Edited while" in again.get_memory("n3").l1 + again.get_memory("n3").l2
    finally:
        again.close()
    assert _hits(root) == 30  # the cache followed the edit


def test_a_forged_or_foreign_cache_is_ignored(make_workspace) -> None:
    root = make_workspace({f"05-resources/n{i}.md": memory_text(f"n{i}", f"Note {i}.") for i in range(5)})
    _load(root).close()
    cache = root / ".ctxos" / parse_cache.CACHE_FILENAME
    blob = bytearray(cache.read_bytes())
    blob[-5] ^= 0xFF  # someone else rewrote the payload
    cache.write_bytes(bytes(blob))
    engine = _load(root)
    try:
        assert engine.parse_cache_hits == 0 and len(engine.store) == 5
    finally:
        engine.close()
    # A different configuration means a different parse: the cache is not used either.
    assert _hits(root) == 5
    (root / "_config.yaml").write_text((root / "_config.yaml").read_text() + "\nlimits:\n  max_file_bytes: 100000\n")
    assert _hits(root) == 0


def test_editing_what_the_parse_does_not_read_keeps_the_cache_and_the_blocks(make_workspace) -> None:
    """Weights, synonyms or budgets change scoring, not parsing: the next start still reuses every parse
    and the builders' blocks (before, any edit of ``_config.yaml`` re-parsed every file in the daemon)."""
    root = make_workspace({f"05-resources/n{i}.md": memory_text(f"n{i}", f"Note {i}.") for i in range(30)})
    cold = _load(root)
    blocks = len(cold._block_store)
    cold.close()
    assert blocks > 0
    config = root / "_config.yaml"
    text = config.read_text()
    assert "default_budget: 4000" in text and "  bug: [error, fix, exception, failure]" in text
    config.write_text(
        text.replace("default_budget: 4000", "default_budget: 2500").replace(
            "  bug: [error, fix, exception, failure]", "  bug: [error, fix, defect]"
        )
    )
    warm = _load(root)
    try:
        assert warm.config.get("query.default_budget") == 2500  # the edit is in force
        assert warm.parse_cache_hits == 30 and len(warm._block_store) == blocks
        assert all(m.l1_tokens >= 0 for m in warm.store.memories.values())  # counted by the builders, kept
    finally:
        warm.close()
    config.write_text(config.read_text() + "\nlimits:\n  max_file_bytes: 100000\n")  # the parse reads this one
    capped = _load(root)
    try:
        assert capped.parse_cache_hits == 0  # a new cap: every file parsed again
        assert parse_cache.parse_settings(capped.config) == {"limits.max_file_bytes": 100000}
    finally:
        capped.close()


def test_deferred_save_writes_the_cache_after_the_load(make_workspace) -> None:
    """The daemon sets ``defer_parse_cache`` and writes the cache once it is ready (not in its start's wait)."""
    root = make_workspace({f"05-resources/n{i}.md": memory_text(f"n{i}", f"Note {i}.") for i in range(12)})
    cache = root / ".ctxos" / parse_cache.CACHE_FILENAME
    engine = Engine(root)
    engine.defer_parse_cache = True
    engine.load()
    try:
        assert not cache.exists()  # due, not written by the load
        assert engine.save_parse_cache() is True and cache.exists()
        assert engine.save_parse_cache() is False  # nothing due any more
    finally:
        engine.close()
    assert _hits(root) == 12


def test_close_writes_what_changed_while_loaded_so_the_next_start_parses_nothing(make_workspace) -> None:
    """Issue 16: the cache was only written after a load, so every file changed while a daemon ran was
    parsed again at its next start. Files named by their stem (qualified ids) are kept as parsed."""
    files = {f"05-resources/n{i}.md": memory_text(f"n{i}", f"Note {i}.") for i in range(20)}
    files["03-projects/a/Templates.md"] = "---\ntype: project\n---\nTemplates of project a.\n"
    files["05-resources/b/Templates.md"] = "---\ntype: resource\n---\nTemplates of resource b.\n"
    root = make_workspace(files)
    engine = _load(root)
    edited = root / "05-resources/n3.md"
    edited.write_text(memory_text("n3", "Edited while the engine ran."))
    os.utime(edited, (1_900_000_000, 1_900_000_000))
    (root / "05-resources/n20.md").write_text(memory_text("n20", "Added while the engine ran."))
    (root / "05-resources/n4.md").unlink()
    engine.apply_changes(["05-resources/n3.md", "05-resources/n20.md", "05-resources/n4.md"])
    served = sorted(engine.store.memories)
    assert "n20" in served and "n4" not in served and len(served) == 22
    engine.close()  # writes the cache: the store changed since the load wrote it
    again = _load(root)
    try:
        assert again.parse_cache_hits == 22  # nothing parsed afresh
        assert sorted(again.store.memories) == served  # the two Templates keep their qualified ids
        assert "Edited while" in again.get_memory("n3").l1 + again.get_memory("n3").l2
    finally:
        again.close()


def test_close_does_not_write_parses_made_under_an_older_config(make_workspace) -> None:
    root = make_workspace({f"05-resources/n{i}.md": memory_text(f"n{i}", f"Note {i}.") for i in range(6)})
    engine = _load(root)
    (root / "05-resources/n6.md").write_text(memory_text("n6", "Added."))
    engine.apply_changes(["05-resources/n6.md"])
    (root / "_config.yaml").write_text((root / "_config.yaml").read_text() + "\nlimits:\n  max_file_bytes: 100000\n")
    engine.reload_config()
    engine.close()  # parsed under the old config: not written under the new one's fingerprint
    assert _hits(root) == 0  # the new config's first start parses every file (and writes the cache)
    assert _hits(root) == 7


@pytest.mark.slow
def test_the_daemon_writes_the_parse_cache_after_it_is_ready(make_workspace) -> None:
    from daemon_helpers import start_daemon

    root = make_workspace({f"05-resources/n{i}.md": memory_text(f"n{i}", f"Note {i}.") for i in range(12)})
    daemon = start_daemon(root)
    try:
        daemon.wait_for(lambda: "parse cache written" in daemon.output(), 60, message="the parse cache")
    finally:
        daemon.stop()
    assert _hits(root) == 12
