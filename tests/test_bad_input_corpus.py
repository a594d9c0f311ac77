"""The bad-input corpus (docs/file-format.md lists the same kinds): every kind is put into one workspace,
a REAL daemon starts on it, keeps serving the good memory, and ``doctor`` names each bad file with a reason.

Kinds that need a special file (symlinks, FIFO, socket, non-UTF-8 name, a folder too deep for
PATH_MAX) are made for real on this file system.
"""

from __future__ import annotations

import os
from pathlib import Path

from daemon_helpers import daemon_factory, make_special_files, memory_text  # noqa: F401  (daemon_factory is a fixture)


def fm(body: str, **fields: str) -> bytes:
    """Frontmatter with raw YAML values (so each case can be exactly as broken as it needs to be)."""
    lines = "".join(f"{key}: {value}\n" for key, value in fields.items())
    return f"---\n{lines}---\n{body}\n".encode()


# (kind, file name under 03-projects/, bytes, words expected in the reason)
CONTENT_CASES: list[tuple[str, str, bytes, str]] = [
    ("broken YAML (unclosed list)", "yaml-unclosed.md", fm("x", tags="[a, b"), "broken YAML"),
    ("YAML tab indentation", "yaml-tab.md", b"---\nid: a\n\tl0: b\n---\nx\n", "YAML"),
    ("YAML python tag", "yaml-python.md", fm("x", l0="!!python/object:os.system x"), "YAML"),
    ("frontmatter is a list", "fm-list.md", b"---\n- a\n- b\n---\nx\n", "mapping"),
    ("frontmatter is a scalar", "fm-scalar.md", b"---\njust text\n---\nx\n", "mapping"),
    ("no closing fence", "fm-open.md", b"---\nid: a\nl0: b\nbody with no fence\n", "closing"),
    ("unknown type", "type-unknown.md", fm("x", type="banana"), "unknown type"),
    ("type is a list", "type-list.md", fm("x", type="[a, b]"), "type"),
    ("importance over 1", "imp-high.md", fm("x", importance="1.5"), "importance"),
    ("importance negative", "imp-neg.md", fm("x", importance="-0.1"), "importance"),
    ("importance is text", "imp-text.md", fm("x", importance="high"), "importance"),
    ("importance is a boolean", "imp-bool.md", fm("x", importance="true"), "importance"),
    ("importance is NaN", "imp-nan.md", fm("x", importance=".nan"), "importance"),
    ("created is an impossible date", "date-bad.md", fm("x", created="2026-13-45"), "date"),
    ("modified is a word", "date-word.md", fm("x", modified="yesterday"), "date"),
    ("created in year 99999", "date-far.md", fm("x", created="'99999-01-01'"), "date"),
    ("version is text", "ver-text.md", fm("x", version="two"), "version"),
    ("version negative", "ver-neg.md", fm("x", version="-3"), "version"),
    ("version a fraction", "ver-frac.md", fm("x", version="1.5"), "version"),
    ("always_load is text", "al-text.md", fm("x", always_load="'yes please'"), "always_load"),
    ("protected is text", "prot-text.md", fm("x", protected="maybe"), "protected"),
    ("id is a list", "id-list.md", fm("x", id="[a, b]"), "id"),
    ("id is empty", "id-empty.md", fm("x", id="''"), "id"),
    ("l0 is a mapping", "l0-map.md", fm("x", l0="{a: b}"), "l0"),
    ("tags is a mapping", "tags-map.md", fm("x", tags="{a: b}"), "tags"),
    ("a tag is a mapping", "tags-item.md", fm("x", tags="[{a: b}]"), "tags"),
    ("related is a number", "rel-num.md", fm("x", related="5"), "related"),
    ("duplicate id", "zz-dup-second.md", memory_text("good", "Second file claiming the id good.").encode(), "good"),
    ("binary (NUL bytes)", "binary.md", b"---\nl0: x\n---\n\x00\x01\x02", "binary"),
    ("UTF-16 with BOM", "utf16.md", "---\nl0: x\n---\nhello\n".encode("utf-16"), "binary"),
    ("not UTF-8 (Latin-1)", "latin1.md", "---\nl0: caf\xe9\n---\nx\n".encode("latin-1"), "UTF-8"),
    ("over the byte cap", "huge.md", fm("y" * 300_000, l0="big"), "cap"),
    ("empty file", "empty.md", b"", "empty"),
    ("whitespace only", "blank.md", b"  \n\n\t\n", "empty"),
    ("frontmatter only, no summary", "fm-only.md", b"---\ntags: [a]\n---\n", "no content"),
]


def _make_special(root: Path) -> dict[str, str]:
    """Special files; returns {doctor path: words expected in the reason}."""
    folder = root / "03-projects"
    outside = root.parent / "outside-secret.md"
    outside.write_text(memory_text("secret", "Outside the workspace."))
    (folder / "link-out.md").symlink_to(outside)
    (root / "sources").mkdir(exist_ok=True)
    (root / "sources/ref.md").write_text(memory_text("ref", "A source."))
    (folder / "link-sources.md").symlink_to(root / "sources/ref.md")
    special = make_special_files(folder)
    (folder / "dangling.md").symlink_to(folder / "does-not-exist.md")
    (folder / "folder.md").mkdir()  # a folder named like a file: walked into, never read as one
    (folder / "folder.md/inner.txt").write_text("not a memory")
    with open(os.fsencode(str(folder)) + b"/name-\xe9\xff.md", "wb") as handle:
        handle.write(memory_text("odd-name", "Name not UTF-8.").encode())
    # A folder chain deeper than PATH_MAX (4096 bytes), built with dir fds (paths that long cannot be opened).
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    depth_name = "d" * 200
    for _ in range(22):
        os.mkdir(depth_name, dir_fd=fd)
        new_fd = os.open(depth_name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = new_fd
    file_fd = os.open("deep.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(file_fd, memory_text("deep", "Very deep.").encode())
    os.close(file_fd)
    os.close(fd)
    return {
        "03-projects/link-out.md": "outside the workspace",
        "03-projects/link-sources.md": "points into sources/",
        **{f"03-projects/{name}": words for name, words in special.items()},
        "03-projects/dangling.md": "broken symlink",
        "03-projects/name-\\xe9\\xff.md": "UTF-8",
        "PATH_MAX": "File name too long",
    }


def test_bad_input_corpus_daemon_keeps_serving_and_doctor_explains(make_workspace, daemon_factory):
    files: dict[str, str | bytes] = {"03-projects/good.md": memory_text("good", "Kiwis are flightless birds.")}
    for _, name, data, _ in CONTENT_CASES:
        files[f"03-projects/{name}"] = data
    root = make_workspace(files)
    special = _make_special(root)
    kinds = len(CONTENT_CASES) + len(special)
    assert kinds >= 40, kinds
    daemon = daemon_factory(root)
    reasons = {item["path"]: item["reason"] for item in daemon.call("doctor")["invalid"]}
    missing = []
    for kind, name, _, words in CONTENT_CASES:
        reason = reasons.get(f"03-projects/{name}")
        if reason is None or words.lower() not in reason.lower():
            missing.append((kind, name, reason))
    for rel, words in special.items():
        if rel == "PATH_MAX":
            deep = [r for p, r in reasons.items() if p.startswith("03-projects/ddd")]
            if not deep or not any(words.lower() in r.lower() for r in deep):
                missing.append(("path over PATH_MAX", rel, deep))
            continue
        reason = reasons.get(rel)
        if reason is None or words.lower() not in reason.lower():
            missing.append((rel, words, reason))
    assert not missing, missing
    # ... and it keeps serving everything else, over every read path.
    assert "good" in daemon.memory_ids()
    assert "good" in daemon.context_ids("kiwis flightless")
    daemon.call("graph")
    daemon.call("governance")
    assert daemon.call("status")["state"] == "ready"
