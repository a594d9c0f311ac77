"""The layering holds: the thin client never imports the daemon (issue 14).

A static scan of every module under ``client/`` (imports at any depth, including
ones inside functions): ``ctxos.client`` may use ``ctxos.services`` and its own
socket client, never ``ctxos.daemon``. The CLI starts daemon-side programs
(``ctxos daemon``, ``ctxos mcp``) as processes, which this scan allows.
The use-case layer (``services/api``) must not import the daemon or the client either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in ``path``, relative imports resolved against its package."""
    package = ["ctxos", *path.relative_to(REPO).parent.parts]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def offending(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in sorted((REPO / folder).rglob("*.py")):
        for line, module in imported_modules(path):
            if module.startswith(forbidden):
                bad.append(f"{path.relative_to(REPO)}:{line} imports {module}")
    return bad


def test_client_never_imports_the_daemon() -> None:
    assert offending("client", ("ctxos.daemon",)) == []


def test_use_cases_import_neither_daemon_nor_client() -> None:
    assert offending("services", ("ctxos.daemon", "ctxos.client")) == []


@pytest.mark.parametrize(
    "source,expected",
    [
        ("from ctxos.daemon.rpc import RpcError\n", "ctxos.daemon.rpc"),
        ("def f():\n    import ctxos.daemon.main\n", "ctxos.daemon.main"),
        ("from ..daemon import tray\n", "ctxos.daemon"),
    ],
)
def test_the_scan_sees_every_kind_of_import(tmp_path: Path, source: str, expected: str, monkeypatch) -> None:
    """The scan itself: top-level, inside a function, and relative imports are all found."""
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    (tmp_path / "client").mkdir()
    (tmp_path / "client" / "probe.py").write_text(source, encoding="utf-8")
    assert any(expected in line for line in offending("client", ("ctxos.daemon",)))
