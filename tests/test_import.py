"""``ctxos import`` (issue 15): each format from a small fixture written from its project's public docs.

Real processes: the ``ctxos`` CLI as a subprocess against a real workspace (in-process backend),
and once through a real daemon's socket. The fixtures under tests/fixtures/import/ are the
sources and must come out of every run byte for byte unchanged.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ctxos.services.config import load_config
from ctxos.services.importers import ImportError_, build_plan, detect, run_import
from ctxos.services.importers.context_files import classify
from ctxos.services.store import MemoryStore
from ctxos.services.workspace import scan_workspace
from daemon_helpers import daemon_factory  # noqa: F401  (fixture)

FIXTURES = Path(__file__).parent / "fixtures" / "import"
SOURCES = {
    "context-files": FIXTURES / "context-files" / "myapp",
    "logseq": FIXTURES / "logseq" / "graph",
    "memory-mcp": FIXTURES / "memory-mcp" / "memory.jsonl",
    "basic-memory": FIXTURES / "basic-memory" / "project",
}


def ctxos(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxos.client", "-w", str(root), *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=180,
    )


def snapshot(path: Path) -> dict[str, bytes]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): p.read_bytes() for p in files}


def memory_files(root: Path) -> dict[str, bytes]:
    return {k: v for k, v in snapshot(root).items() if "/.ctxos/" not in k}


def store_of(root: Path) -> MemoryStore:
    store = MemoryStore.from_items(scan_workspace(root, load_config(root)))
    return store


def frontmatter(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8").split("---", 2)[1])


EXPECTED = {  # id -> (type, a phrase of its l0)
    "context-files": {
        "myapp-claude-overview": ("context", "guidance for working in this repository"),
        "myapp-claude-commands": ("skill", "Commands"),
        "myapp-claude-code-style": ("rule", "Code style"),
        "myapp-claude-architecture": ("project", "The API lives in api/"),
        "myapp-claude-decisions": ("decision", "We chose PostgreSQL"),
        "myapp-agents-setup-commands": ("skill", "Install dependencies"),
        "myapp-agents-pull-requests": ("rule", "Pull requests"),
        "myapp-cursor-overview": ("context", "expert in TypeScript"),
        "myapp-windsurf-project-rules": ("rule", "Use pnpm"),
        "myapp-copilot-overview": ("context", "Next.js app"),
        "myapp-cursor-style": ("rule", "House style for TypeScript files"),
        "myapp-cursor-testing": ("skill", "How to write tests with Vitest"),
    },
    "logseq": {
        "logseq-project-alpha": ("project", "rewrites the billing service in Rust"),
        "logseq-tools.git": ("resource", "Rebase feature branches"),
        "logseq-journal-2024-01-31": ("daily", "Met Dana about Project Alpha rewrites"),
    },
    "memory-mcp": {
        "mcp-dana-reyes": ("context", "Dana Reyes (person) — Leads the billing team"),
        "mcp-billing-service": ("project", "Rewritten in Rust in 2024"),
        "mcp-use-postgres": ("decision", "Chosen over MongoDB"),
    },
    "basic-memory": {
        "bm-coffee-brewing-methods": ("resource", "Coffee Brewing Methods"),
        "bm-coffee-bean-origins": ("resource", "Ethiopian beans have floral notes"),
        "bm-decisions.use-jwt": ("decision", "Using JWT tokens"),
    },
}


@pytest.mark.parametrize("fmt", list(SOURCES))
def test_each_format_is_detected_and_planned(make_workspace, fmt):
    root = make_workspace()
    assert detect(SOURCES[fmt]) == fmt
    plan = build_plan(root, store_of(root), load_config(root), SOURCES[fmt])
    assert {i.draft.id: i.draft.type for i in plan.items} == {k: v[0] for k, v in EXPECTED[fmt].items()}
    assert {i.action for i in plan.items} == {"create"}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(SOURCES))
def test_cli_import_dry_run_apply_and_rerun(make_workspace, fmt):
    root = make_workspace()
    before_source = snapshot(SOURCES[fmt])
    before_ws = memory_files(root)
    dry = json.loads(ctxos(root, "import", str(SOURCES[fmt]), "--dry-run", "--json").stdout)
    assert dry["applied"] is False and dry["counts"] == {"create": len(EXPECTED[fmt])}
    assert memory_files(root) == before_ws  # a dry run writes nothing
    out = ctxos(root, "import", str(SOURCES[fmt]))
    assert f"{len(EXPECTED[fmt])} created" in out.stdout
    for item in json.loads(ctxos(root, "import", str(SOURCES[fmt]), "-n", "--json").stdout)["items"]:
        assert item["action"] == "unchanged", item  # idempotent
    store = store_of(root)
    assert store.invalid_files() == []  # every memory is valid
    for memory_id, (kind, phrase) in EXPECTED[fmt].items():
        memory = store.get(memory_id)
        assert memory is not None and memory.type == kind, memory_id
        assert phrase in memory.l0, (memory_id, memory.l0)
        assert "imported" in memory.tags and memory.l1
        assert memory.metadata["imported_from"] and memory.metadata["import_hash"]
    again = ctxos(root, "import", str(SOURCES[fmt]), "--json")
    assert json.loads(again.stdout)["counts"] == {"unchanged": len(EXPECTED[fmt])}
    assert snapshot(SOURCES[fmt]) == before_source  # the source is never changed


def test_format_details(make_workspace):
    root = make_workspace()
    config = load_config(root)
    for source in SOURCES.values():
        run_import(root, store_of(root), config, source)
    store = store_of(root)
    # memory MCP: relations become related links, unknown targets are reported
    dana = store.get("mcp-dana-reyes")
    assert dana.related == ["mcp-billing-service"] and "- works_at [[Acme Corp]]" in dana.l2
    assert store.get("mcp-billing-service").related == ["mcp-use-postgres"]
    # Logseq: properties to frontmatter, block properties dropped, block references resolved
    alpha = store.get("logseq-project-alpha")
    assert alpha.tags == ["imported", "logseq", "rust", "backend"]
    assert alpha.metadata["owner"] == "Dana" and alpha.metadata["logseq_importance"] == "high"
    assert "id::" not in alpha.tier_text("L2") and "collapsed::" not in alpha.tier_text("L2")
    journal = store.get("logseq-journal-2024-01-31")
    assert "Rebase feature branches before merging" in journal.tier_text("L2")
    assert "((65a1b2c3-0000-4000-8000-00000000ffff))" in journal.tier_text("L2")
    assert journal.related == ["logseq-project-alpha", "logseq-tools.git"] and str(journal.created) == "2024-01-31"
    assert store.resolve_link("tools/git", alpha.rel_path) == "logseq-tools.git"  # [[links]] kept, resolved
    # basic-memory: relations to related, observation #tags to tags, frontmatter kept
    brewing = store.get("bm-coffee-brewing-methods")
    assert brewing.related == ["bm-coffee-bean-origins"] and "brewing" in brewing.tags
    assert brewing.metadata["permalink"] == "coffee-brewing-methods" and brewing.metadata["entity_type"] == "note"
    assert "security" in store.get("bm-decisions.use-jwt").tags
    # Cursor rules: frontmatter kept, alwaysApply -> always loaded rule
    style = store.get("myapp-cursor-style")
    assert style.always_load and style.metadata["globs"] == ["**/*.ts", "**/*.tsx"]
    assert store.get("myapp-cursor-testing").metadata["alwaysApply"] is False


def test_a_changed_source_updates_and_a_person_edit_wins(make_workspace, tmp_path):
    root = make_workspace()
    config = load_config(root)
    source = tmp_path / "export" / "memory.jsonl"
    source.parent.mkdir()
    shutil.copy(SOURCES["memory-mcp"], source)
    run_import(root, store_of(root), config, source)
    person = root / "01-context" / "mcp-dana-reyes.md"
    person.write_text(person.read_text() + "- Added by a person\n")
    source.write_text(
        source.read_text()
        .replace("Prefers async updates", "Prefers written updates")
        .replace("Rewritten in Rust in 2024", "Rewritten in Rust in 2025")
    )
    plan = run_import(root, store_of(root), config, source)
    results = {i.draft.id: (i.result, i.reason) for i in plan.items}
    assert results["mcp-dana-reyes"][0] == "skipped" and "edited since it was imported" in results["mcp-dana-reyes"][1]
    assert results["mcp-billing-service"][0] == "updated" and results["mcp-use-postgres"][0] == "unchanged"
    assert "Added by a person" in person.read_text()
    billing = frontmatter(root / "03-projects" / "mcp-billing-service.md")
    assert billing["version"] == 2 and "2025" in billing["l0"]


def test_ids_taken_by_other_memories_are_skipped_and_bad_paths_refused(make_workspace, tmp_path):
    root = make_workspace({"01-context/mcp-dana-reyes.md": "---\nid: mcp-dana-reyes\n---\nMine."})
    plan = run_import(root, store_of(root), load_config(root), SOURCES["memory-mcp"])
    dana = next(i for i in plan.items if i.draft.id == "mcp-dana-reyes")
    assert dana.result == "skipped" and "is taken by 01-context/mcp-dana-reyes.md" in dana.reason
    assert (root / "01-context/mcp-dana-reyes.md").read_text() == "---\nid: mcp-dana-reyes\n---\nMine."
    (tmp_path / "notes.txt").write_text("plain")
    for path, reason in (
        (tmp_path / "missing", "does not exist"),
        (tmp_path / "notes.txt", "not a format"),
        (tmp_path, "pass --format"),
    ):
        with pytest.raises(ImportError_, match=reason):
            build_plan(root, store_of(root), load_config(root), path)


@pytest.mark.parametrize(
    "heading,text,kind",
    [
        ("Testing", "Run `pytest -q`.", "skill"),
        ("Conventions", "- Use tabs", "rule"),
        ("Notes", "- Always squash merges.\n- Never push to main.", "rule"),
        ("Notes", "```bash\nmake\n```", "skill"),
        ("Why we use Rust", "Speed.", "decision"),
        ("Background", "The team is small.", "context"),
    ],
)
def test_classify(heading, text, kind):
    assert classify(heading, text) == kind


@pytest.mark.slow
def test_import_through_a_real_daemon(make_workspace, daemon_factory):  # noqa: F811
    root = make_workspace()
    daemon = daemon_factory(root)
    out = ctxos(root, "import", str(SOURCES["memory-mcp"]), "--json")
    assert "in-process" not in out.stderr and json.loads(out.stdout)["counts"] == {"created": 3}
    assert daemon.has_memory("mcp-dana-reyes")  # indexed before the reply
    assert "mcp-billing-service" in daemon.context_ids("who leads the billing team")
