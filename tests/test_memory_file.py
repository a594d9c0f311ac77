"""Parsing and writing memory files: defaults, tiers, links, every kind of bad input, round trips."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

import pytest
from conftest import shared_data
from ctxos.services.memory_file import MemoryFileError, extract_wikilinks, parse_memory, split_tiers, update_frontmatter
from hypothesis import given, settings
from hypothesis import strategies as st


def parse(text: str | bytes, rel: str = "04-skills/x.md", max_bytes: int = 10_000):
    raw = text.encode() if isinstance(text, str) else text
    folder = {"04-skills": "skill", "08-rules": "rule"}.get(rel.split("/")[0])
    return parse_memory(
        raw, rel_path=rel, path=Path("/ws") / rel, folder_type=folder, mtime=1_700_000_000.0, max_bytes=max_bytes
    )


FULL = """---
id: rust-error-handling
type: skill
l0: "One-line summary"
importance: 0.8
tags: [rust, errors]
related: [api-design]
requires: [toolchain]
created: 2026-03-01
modified: 2026-04-08
version: 3
always_load: false
protected: true
custom_key: {nested: [1, 2]}   # a comment the person wrote
---
Intro text before markers.
<!-- L1 -->
A paragraph-length summary with a [[linked-note]].
<!-- L2 -->
The full detail, see [[other|Other Note]] and [[folder/third#section]].
"""


def test_full_file_fields():
    m = parse(FULL)
    assert m.id == "rust-error-handling" and m.type == "skill"
    assert m.l0 == "One-line summary" and m.importance == 0.8
    assert m.tags == ["rust", "errors"] and m.related == ["api-design"] and m.requires == ["toolchain"]
    assert m.created == date(2026, 3, 1) and m.modified == datetime(2026, 4, 8)
    assert m.version == 3 and m.protected and not m.always_load
    assert m.l1 == "Intro text before markers.\n\nA paragraph-length summary with a [[linked-note]]."
    assert m.l2.startswith("The full detail")
    assert m.wikilinks == ["linked-note", "other|Other Note", "folder/third"]
    assert set(m.links) == {"api-design", "toolchain", "linked-note", "other|Other Note", "folder/third"}
    assert m.metadata["custom_key"] == {"nested": [1, 2]}
    assert m.tier_text("L2").startswith("Intro text") and "full detail" in m.tier_text("L2")


def test_defaults_from_folder_stem_heading_and_mtime():
    m = parse("# Deploying the API\n\nRun the pipeline. Then check.\n\nMore detail here.\n", rel="04-skills/deploy.md")
    assert m.id == "deploy" and m.type == "skill" and m.l0 == "Deploying the API — Run the pipeline."
    assert m.importance == 0.5 and m.version == 1 and m.tags == []
    assert m.modified == datetime(2023, 11, 14, 22, 13, 20)
    assert m.l1 == "# Deploying the API\n\nRun the pipeline. Then check."
    assert m.l2 == "More detail here."


def test_outside_ontology_defaults_to_resource_and_first_sentence():
    m = parse("Plain note. Second sentence.", rel="notes/a.md")
    assert m.type == "resource" and m.l0 == "a — Plain note."


@pytest.mark.parametrize(
    "text,reason",
    [
        ("---\ntags: [a\n---\nbody", "broken YAML"),
        ("---\n- a\n- b\n---\nbody", "must be a mapping"),
        ("---\ntype: widget\n---\nbody", "unknown type 'widget'"),
        ("---\ntype: [skill]\n---\nbody", "type must be a word"),
        ("---\nimportance: 1.5\n---\nbody", "outside 0.0-1.0"),
        ("---\nimportance: high\n---\nbody", "importance must be a number"),
        ("---\ncreated: yesterday\n---\nbody", "is not a date"),
        ("---\nmodified: 2026-13-45\n---\nbody", "YAML cannot build: month must be in 1..12"),
        ("---\nversion: 1.2.3\n---\nbody", "version must be a whole number"),
        ("---\nalways_load: maybe\n---\nbody", "always_load must be true or false"),
        ("---\nid: x\nbody without closing fence", "no closing"),
        ("", "empty file"),
        ("   \n\n", "empty file"),
        ("---\nid: x\n---\n\n", "no content"),
    ],
)
def test_bad_inputs_have_reasons(text, reason):
    with pytest.raises(MemoryFileError, match=reason):
        parse(text)


def test_binary_non_utf8_and_oversize():
    with pytest.raises(MemoryFileError, match="binary"):
        parse(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(MemoryFileError, match="not valid UTF-8: byte 0xff at offset 6"):
        parse(b"hello \xff world")
    with pytest.raises(MemoryFileError, match="over the 100-byte cap"):
        parse("x" * 101, max_bytes=100)


def test_dendron_epoch_ms_dates_and_desc():
    m = parse("---\nid: abc\ntitle: Note\ndesc: A description\nupdated: 1\ncreated: 1636492098692\n---\n")
    assert m.created == date(2021, 11, 9) and m.l0 == "Note — A description"


def test_split_tiers_markers_only_l2():
    assert split_tiers("<!-- L2 -->\ndetail") == ("", "detail")
    assert split_tiers("a\n<!-- L2 -->\nb\n<!-- L1 -->\nc") == ("a\n\nc", "b")


def test_wikilinks_dedupe_and_anchor():
    assert extract_wikilinks("[[A]] [[A#x]] [[b^blk]] [[c.md]]") == ["A", "b", "c"]


def test_wikilinks_the_obsidian_way():
    body = (
        "| a | [[Basic syntax\\|Markdown]] |\n"  # escaped pipe inside a table
        "![[Engelbart.jpg|100]] ![[lucide-cog.svg#icon]] [[Doc.pdf]] ![[Board.canvas]]\n"
        "![[Embedded note]] [[Sync/Security and privacy#^sync-geo-regions|regions]] [[#Local heading]]\n"
        "[[Shown text|dendron://vault/a.b.c#anchor]] [[dev.design]] `[[not a link]]`\n"
    )
    assert extract_wikilinks(body) == [
        "Basic syntax|Markdown",
        "Embedded note",
        "Sync/Security and privacy|regions",
        "Shown text|a.b.c",
        "dev.design",
    ]


@pytest.mark.parametrize(
    "text,rel,l0",
    [
        # a sub-heading is never the summary (Obsidian's "Cards view" used to read "Settings")
        (
            "---\npermalink: bases/views/cards\n---\nCards is a type of [[Views|view]] you can use in "
            "[[Introduction to Bases|Bases]].\n\n## Settings\n\nCard size.",
            "Bases/Cards view.md",
            "Cards view — Cards is a type of view you can use in Bases.",
        ),
        (
            "## Toolbar\n\n- ![[lucide-table.svg#icon]] **View menu** — create views.",
            "Views.md",
            "Views — View menu — create views.",
        ),
        (
            "---\ntitle: Fancy\n---\n# Ignored H1\n\n> [!note] Callouts are *read* as text.",
            "x.md",
            "Fancy — Callouts are read as text.",
        ),
        ("# Templates\n\nTemplates is a core plugin.", "Plugins/Templates.md", "Templates is a core plugin."),
        (
            "```\ncode. first\n```\n\nAfter [the code](https://x.y) comes prose.",
            "a.md",
            "a — After the code comes prose.",
        ),
        ("---\ntitle: Only a title\n---\n", "b.md", "Only a title"),
    ],
)
def test_l0_is_title_plus_first_sentence(text, rel, l0):
    assert parse(text, rel=rel).l0 == l0


def test_update_frontmatter_round_trip_and_targeted_edit():
    assert update_frontmatter(FULL, {}) == FULL
    edited = update_frontmatter(FULL, {"version": 4, "importance": 0.9, "new_key": "v"})
    assert "version: 4\n" in edited and "importance: 0.9\n" in edited and "new_key: v\n---" in edited
    assert "custom_key: {nested: [1, 2]}   # a comment the person wrote\n" in edited
    assert edited.split("---\n", 2)[2] == FULL.split("---\n", 2)[2]  # body byte-for-byte
    multi = "---\ntags:\n- a\n- b\nid: x\n---\nbody\n"
    assert update_frontmatter(multi, {"tags": ["c"]}) == "---\ntags: [c]\nid: x\n---\nbody\n"


def test_update_frontmatter_crlf_and_no_frontmatter():
    crlf = "---\r\nid: x\r\nversion: 1\r\n---\r\nbody\r\n"
    out = update_frontmatter(crlf, {"version": 2})
    assert out == "---\r\nid: x\r\nversion: 2\r\n---\r\nbody\r\n"
    assert update_frontmatter("just body\n", {"id": "x"}) == "---\nid: x\n---\njust body\n"


def test_wikilinks_in_code_are_examples():
    body = "See [[real]].\n\n```\n[[in-fence]]\n```\nand `[[inline]]` too."
    assert extract_wikilinks(body) == ["real"]


_MARKER_PIECES = ["<!--", "-->", "L1", "L2", "L3", " ", "\t", "\n", "\r", "x", "<!-- L1 -->", "<!-- L2 -->", "\n\n"]


@given(st.lists(st.sampled_from(_MARKER_PIECES), max_size=40).map("".join))
@settings(max_examples=400, deadline=None)
def test_marker_split_is_the_line_anchored_rule(body):
    """``_split_markers`` (literal search, then the line checked) splits exactly as the anchored regex does."""
    from ctxos.services.memory_file import _MARKER_RE, _split_markers

    assert _split_markers(body) == _MARKER_RE.split(body)


def test_marker_split_on_the_shared_corpora():
    from ctxos.services.memory_file import _MARKER_RE, _split_markers, split_frontmatter

    files = sorted(shared_data("").rglob("*.md"))[:4000]
    for path in files:
        body = split_frontmatter(path.read_text(encoding="utf-8", errors="replace")).body
        assert _split_markers(body) == _MARKER_RE.split(body), path
