"""``ctxos import PATH [--dry-run] [--format F]``: bring existing notes in as typed memories.

Runs through the running daemon when there is one (serialised with its other
writes), in-process otherwise. ``--dry-run`` shows the plan and writes nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ctxos.client.cli import call_backend
from ctxos.services.importers import FORMATS


def register(sub: argparse._SubParsersAction) -> None:
    imp = sub.add_parser(
        "import",
        help="import CLAUDE.md/AGENTS.md/Cursor rules, a Logseq graph, a memory-MCP "
        "JSONL or a basic-memory project as memories (idempotent)",
    )
    imp.add_argument("path", metavar="PATH", help="a file or folder to import (never changed)")
    imp.add_argument("--dry-run", "-n", action="store_true", help="show the plan, write nothing")
    imp.add_argument("--format", choices=FORMATS, help="the source format (default: detected)")
    imp.add_argument("--json", action="store_true", help="machine-readable output")
    imp.set_defaults(func=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    params = {"path": str(Path(args.path).expanduser().resolve()), "dry_run": bool(args.dry_run)}
    if args.format:
        params["format"] = args.format
    data = call_backend(args, "import", params, writes=not args.dry_run)
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    print(format_plan(data))
    return 0


def format_plan(data: dict) -> str:
    verb = "import" if data["applied"] else "plan (dry run, nothing written)"
    lines = [f"{verb}: {data['source']} ({data['format']})"]
    for item in data["items"]:
        status = item.get("result") or item["action"]
        line = f"  {status:<9} {item['path']:<48} <- {item['source']}"
        if item.get("reason") and status in ("skip", "skipped", "refused", "update", "updated"):
            line += f"  ({item['reason']})"
        lines.append(line)
    for warning in data["warnings"]:
        lines.append(f"  warning: {warning}")
    counts = ", ".join(f"{n} {k}" for k, n in sorted(data["counts"].items())) or "nothing to import"
    lines.append(counts)
    return "\n".join(lines)
