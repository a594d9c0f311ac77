"""``ctxos import``: bring the knowledge people already keep into the workspace.

One module per format reads its source into ``plan.Draft``s; ``plan`` turns drafts into
a plan (create / update / unchanged / skip) and applies it through the write gate.
``detect`` picks the format of a path; ``build_plan`` and ``run_import`` are what the
RPC method and the CLI call. See docs/import.md.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..config import Config
from ..store import MemoryStore
from . import basic_memory, context_files, logseq, memory_mcp
from .plan import Draft, ImportPlan, apply_plan, make_plan

READERS: dict[str, Callable[[Path], tuple[list[Draft], list[str]]]] = {
    "context-files": context_files.read,
    "logseq": logseq.read,
    "memory-mcp": memory_mcp.read,
    "basic-memory": basic_memory.read,
}
FORMATS: tuple[str, ...] = tuple(READERS)


class ImportError_(ValueError):
    """The path cannot be imported; ``str(err)`` says why in a person's words."""


def detect(path: Path) -> str:
    """The format of ``path``: a memory-MCP JSONL, a Logseq graph, a basic-memory project,
    or context files (one file, or a project folder holding CLAUDE.md, AGENTS.md ...)."""
    path = Path(path)
    if not path.exists():
        raise ImportError_(f"{path} does not exist")
    if path.is_file():
        if memory_mcp.looks_like(path):
            return "memory-mcp"
        if context_files.is_context_file(path):
            return "context-files"
        raise ImportError_(
            f"{path}: not a format ctxos imports (a CLAUDE.md, AGENTS.md, .cursorrules, "
            ".windsurfrules, .mdc rule, copilot-instructions.md, or a memory MCP .jsonl)"
        )
    if logseq.looks_like(path):
        return "logseq"
    if context_files.find_files(path):
        return "context-files"
    if basic_memory.looks_like(path):
        return "basic-memory"
    raise ImportError_(
        f"{path}: no Logseq graph (pages/, journals/), basic-memory project or context files "
        "(CLAUDE.md, AGENTS.md, .cursorrules, .windsurfrules, .cursor/rules/*.mdc, "
        ".github/copilot-instructions.md) found; pass --format to say which it is"
    )


def build_plan(root: Path, store: MemoryStore, config: Config, path: Path, fmt: str | None = None) -> ImportPlan:
    """Read ``path`` (never written) and plan what would go where."""
    path = Path(path).expanduser().resolve()
    if fmt is not None and fmt not in READERS:
        raise ImportError_(f"unknown format {fmt!r}; expected one of: {', '.join(FORMATS)}")
    chosen = fmt or detect(path)
    if Path(root).resolve() in (path, *path.parents) and chosen != "context-files":
        raise ImportError_(f"{path} is inside the workspace; import from outside it")
    try:
        drafts, warnings = READERS[chosen](path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportError_(f"{path} cannot be read: {exc}") from None
    return make_plan(root, store, config, chosen, str(path), drafts, warnings)


def run_import(
    root: Path, store: MemoryStore, config: Config, path: Path, fmt: str | None = None, dry_run: bool = False
) -> ImportPlan:
    plan = build_plan(root, store, config, path, fmt)
    return plan if dry_run else apply_plan(root, store, config, plan)
