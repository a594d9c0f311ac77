"""``ctxos init``, ``ctxos doctor`` and ``ctxos list``: the workspace itself."""
from __future__ import annotations

import argparse
import json

from ctxos.client.cli import CliError, call_backend, require_workspace, resolve_workspace
from ctxos.services.ontology import MEMORY_TYPES
from ctxos.services.workspace import init_workspace


def register(sub: argparse._SubParsersAction) -> None:
    init = sub.add_parser("init", help="create a workspace (folders, _config.yaml, example memories)")
    init.add_argument("path", nargs="?", help="workspace folder (default: --workspace or ~/AI-Context-OS)")
    init.add_argument("--no-examples", action="store_true", help="do not seed example memories")
    init.add_argument("--json", action="store_true", help="machine-readable output")
    init.set_defaults(func=cmd_init)

    doctor = sub.add_parser("doctor", help="list files that are skipped, with the reason")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(func=cmd_doctor)

    lister = sub.add_parser("list", help="list memories")
    lister.add_argument("--type", choices=MEMORY_TYPES, help="only this memory type")
    lister.add_argument("--json", action="store_true", help="machine-readable output")
    lister.set_defaults(func=cmd_list)




def cmd_init(args: argparse.Namespace) -> int:
    root = resolve_workspace(args.path or args.workspace)
    if root.exists() and not root.is_dir():
        raise CliError(f"{root} exists and is not a folder")
    report = init_workspace(root, seed_examples=not args.no_examples)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(f"workspace: {root}")
        for item in report.created:
            print(f"  created {item}")
        if not report.created:
            print("  already initialised; nothing changed")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    root = require_workspace(resolve_workspace(args.workspace))
    data = call_backend(args, "doctor", {})
    if args.json:
        print(json.dumps({"workspace": str(root), **data}, indent=2))
        return 0
    print(f"workspace: {root}")
    print(f"memories: {data['memories']} valid, {data['count']} skipped")
    for problem in filter(None, [data.get("config_error"), *data.get("problems", [])]):
        print(f"config: {problem}")
    for item in data["invalid"]:
        print(f"  {item['path']}: {item['reason']}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    data = call_backend(args, "list", {"type": args.type} if args.type else {})
    memories = data["memories"]
    if args.json:
        print(json.dumps(memories, indent=2))
        return 0
    for memory in memories:
        print(f"{memory['id']:<40} {memory['type']:<9} {memory['importance']:>4.2f}  {memory['l0']}")
    print(f"({len(memories)} memories)")
    return 0
