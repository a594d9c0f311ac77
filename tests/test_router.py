"""Router files: generated from the query path, within budget, rewritten only when their content changes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ctxos.services import router
from ctxos.services.engine import Engine
from ctxos.services.router import GENERATED_MARKER, regenerate_router
from daemon_helpers import memory_text

ADAPTER_FILES = ["CLAUDE.md", "AGENTS.md", ".cursor/rules/ctxos.mdc", ".cursorrules", ".windsurfrules"]


def files(n: int = 30) -> dict[str, str]:
    out = {
        "08-rules/secrets.md": memory_text(
            "no-secrets", "Never commit secrets or tokens to any repository.", type="rule", importance=0.9
        )
    }
    for i in range(n):
        out[f"04-skills/skill-{i:02d}.md"] = memory_text(
            f"skill-{i:02d}",
            f"Skill {i}: how to handle task number {i} in the build system, step by step. " * 3,
            type="skill",
            importance=round(0.1 + (i % 9) / 10, 1),
        )
    return out


@pytest.fixture
def workspace(make_workspace):
    return make_workspace(files())


def open_engine(root: Path) -> Engine:
    engine = Engine(root)
    engine.load()
    return engine


def set_config(root: Path, text: str) -> None:
    (root / "_config.yaml").write_text(text, encoding="utf-8")


def mtimes(paths: list[Path]) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in paths}


def test_workspace_files_rules_first_index_last_within_budget(workspace):
    set_config(workspace, "router:\n  budgets: {workspace: 600, index: 500}\n")
    engine = open_engine(workspace)
    try:
        report = regenerate_router(engine)
        assert {f.path: f.status for f in report.files} == {"claude.md": "written", "_index.yaml": "written"}
        claude = (workspace / "claude.md").read_text()
        assert claude.startswith("<!-- " + GENERATED_MARKER)
        assert engine.counter.count(claude) <= 600
        rules, catalog = claude.index("## Rules"), claude.index("## Catalog")
        assert rules < catalog and "### no-secrets (rule" in claude[rules:catalog]
        assert "Never commit secrets" in claude
        # the index lists the most important memories not shown above, then points to _index.yaml
        # the first catalog line is one of the most important memories not shown above it
        first = claude[catalog:].splitlines()[1].split()[1]
        above = claude[:catalog]
        hidden = [m for m in engine.list_memories() if f"### {m.id} (" not in above]
        assert engine.get_memory(first).importance == max(m.importance for m in hidden)
        assert "more in _index.yaml" in claude
        index_text = (workspace / "_index.yaml").read_text()
        assert index_text.startswith("# " + GENERATED_MARKER) and engine.counter.count(index_text) <= 500
        index = yaml.safe_load(index_text)
        assert index["count"] == 31 and index["omitted"] > 0
        assert index["memories"][0]["id"] == "no-secrets"  # rules first
        listed = [m["importance"] for m in index["memories"][1:]]
        assert listed == sorted(listed, reverse=True)
        assert engine.reconcile().changed is False  # router files are not memories
    finally:
        engine.close()


def test_unchanged_content_leaves_files_alone_and_an_edit_rewrites(workspace):
    engine = open_engine(workspace)
    try:
        regenerate_router(engine)
        paths = [workspace / "claude.md", workspace / "_index.yaml"]
        before = mtimes(paths)
        again = regenerate_router(engine)
        assert {f.status for f in again.files} == {"unchanged"}
        assert mtimes(paths) == before
        (workspace / "08-rules/secrets.md").write_text(
            memory_text(
                "no-secrets",
                "Never commit secrets, tokens or private keys to any repository.",
                type="rule",
                importance=0.9,
                l0="Secrets never go into git",
            )
        )
        engine.apply_changes(["08-rules/secrets.md"])
        edited = regenerate_router(engine)
        assert {f.path: f.status for f in edited.files} == {"claude.md": "written", "_index.yaml": "written"}
        assert "private keys" in (workspace / "claude.md").read_text()
        assert "Secrets never go into git" in (workspace / "_index.yaml").read_text()
    finally:
        engine.close()


def test_project_adapters_budgets_and_person_written_files(workspace, tmp_path):
    project = tmp_path / "my-project"
    project.mkdir()
    (project / "AGENTS.md").write_text("# My own agent notes\nDo not touch.\n")
    set_config(
        workspace,
        f"router:\n  projects: ['{project}', '{tmp_path / 'missing'}']\n"
        "  budgets: {claude_code: 400, agents: 400, cursor: 250, windsurf: 300}\n",
    )
    engine = open_engine(workspace)
    try:
        report = regenerate_router(engine)
        by_path = {f.path: f for f in report.files}
        for rel in ADAPTER_FILES:
            path = project / rel
            entry = by_path[str(path)]
            if rel == "AGENTS.md":
                assert entry.status == "skipped" and "not generated by ctxos" in entry.reason
                assert path.read_text() == "# My own agent notes\nDo not touch.\n"
                continue
            assert entry.status == "written", entry
            text = path.read_text()
            assert GENERATED_MARKER in text[:400]
            assert engine.counter.count(text) <= entry.budget
            assert "Never commit secrets" in text  # the rules come through
        mdc = (project / ".cursor/rules/ctxos.mdc").read_text()
        assert mdc.startswith("---\n") and "alwaysApply: true" in mdc.split("---")[1]
        missing = [f for f in report.files if f.target == str(tmp_path / "missing")]
        assert missing and all(f.status == "skipped" and "does not exist" in f.reason for f in missing)
        # Once the person removes their file, ctxos manages it.
        (project / "AGENTS.md").unlink()
        assert {f.status for f in regenerate_router(engine).files if f.path == str(project / "AGENTS.md")} == {
            "written"
        }
    finally:
        engine.close()


def test_adding_a_tool_is_one_adapter_function(workspace, tmp_path, monkeypatch):
    def adapter_zed(source: router.RouterSource, budget: int) -> dict[str, str]:
        return {".rules": source.fit(f"{source.header()}\n", budget)}

    monkeypatch.setitem(router.ADAPTERS, "zed", adapter_zed)
    project = tmp_path / "p"
    project.mkdir()
    set_config(workspace, f"router:\n  projects: [{{path: '{project}', adapters: [zed]}}]\n  budgets: {{zed: 300}}\n")
    engine = open_engine(workspace)
    try:
        statuses = {f.path: f.status for f in regenerate_router(engine).files}
        assert statuses[str(project / ".rules")] == "written"
        assert not (project / "CLAUDE.md").exists()
        assert engine.counter.count((project / ".rules").read_text()) <= 300
    finally:
        engine.close()


def test_unknown_adapter_is_a_clear_error(workspace):
    set_config(workspace, "router:\n  workspace_adapters: [no_such_tool]\n")
    engine = open_engine(workspace)
    try:
        with pytest.raises(ValueError, match="unknown router adapter 'no_such_tool'"):
            regenerate_router(engine)
    finally:
        engine.close()


def test_regenerating_does_not_count_as_access(workspace):
    engine = open_engine(workspace)
    try:
        regenerate_router(engine)
        assert engine.access_log.query_count() == 0
    finally:
        engine.close()


def test_tiny_budget_still_fits(workspace):
    set_config(workspace, "router:\n  budgets: {workspace: 40, index: 30}\n")
    engine = open_engine(workspace)
    try:
        regenerate_router(engine)
        assert engine.counter.count((workspace / "claude.md").read_text()) <= 40
        assert engine.counter.count((workspace / "_index.yaml").read_text()) <= 30
    finally:
        engine.close()
