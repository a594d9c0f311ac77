"""``ctxos init``, ``doctor``, ``list`` and ``workspace add|list|remove``: the workspace itself.

``init`` registers the new workspace in the per-user registry
(``services/workspace_registry.py``) so the per-user daemon serves it and
``--workspace NAME`` finds it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ctxos.client.cli import CliError, call_backend, require_workspace, resolve_workspace
from ctxos.services.ontology import MEMORY_TYPES
from ctxos.services.workspace import init_workspace
from ctxos.services.workspace_registry import (
    RegistryError,
    add_workspace,
    load_registry,
    registry_path,
    remove_workspace,
)


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

    workspace = sub.add_parser(
        "workspace",
        help="the registered workspaces the per-user daemon serves",
        description=f"Names and folders of the workspaces one daemon serves (kept in {registry_path()}).",
    )
    actions = workspace.add_subparsers(dest="workspace_action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="register a workspace folder")
    add.add_argument("path", help="the workspace folder")
    add.add_argument(
        "--name", help="short name (default: from the folder name); used in --workspace NAME and /w/NAME/mcp"
    )
    add.add_argument("--default", action="store_true", help="make it the default workspace (served at /mcp)")
    add.set_defaults(func=cmd_workspace_add)
    listing = actions.add_parser("list", help="registered workspaces")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(func=cmd_workspace_list)
    remove = actions.add_parser("remove", help="forget a workspace (its folder is not touched)")
    remove.add_argument("name", help="the registered name")
    remove.set_defaults(func=cmd_workspace_remove)


def cmd_init(args: argparse.Namespace) -> int:
    root = resolve_workspace(args.path or args.workspace)
    if root.exists() and not root.is_dir():
        raise CliError(f"{root} exists and is not a folder")
    report = init_workspace(root, seed_examples=not args.no_examples)
    name, added = _register(root)
    if args.json:
        print(json.dumps({**report.to_dict(), "registered_as": name}, indent=2))
        return 0
    print(f"workspace: {root}")
    for item in report.created:
        print(f"  created {item}")
    if not report.created:
        print("  already initialised; nothing changed")
    if added:
        print(f"  registered as '{name}' (ctxos workspace list)")
    return 0


def _register(root: Path) -> tuple[str | None, bool]:
    """Register ``root`` for the per-user daemon; a registry problem is a warning, never a failed init."""
    try:
        return add_workspace(root)
    except (RegistryError, OSError) as exc:
        print(f"ctxos: warning: {root} was not registered: {exc}", file=sys.stderr)
        return None, False


def cmd_workspace_add(args: argparse.Namespace) -> int:
    root = Path(args.path).expanduser().resolve()
    if not root.is_dir():
        raise CliError(f"{root} is not a folder; create a workspace there with: ctxos init {root}")
    try:
        name, added = add_workspace(root, args.name, make_default=args.default)
    except RegistryError as exc:
        raise CliError(str(exc)) from None
    print(f"{'registered' if added else 'already registered'}: {name} -> {root}")
    _tell_daemon()
    return 0


def _tell_daemon() -> None:
    """A running per-user daemon re-reads the registry (SIGHUP): it opens or closes workspaces now."""
    from ctxos.client.launch import LaunchError, notify_user_daemon

    try:
        pid = notify_user_daemon()
    except LaunchError as exc:
        print(f"ctxos: warning: {exc}", file=sys.stderr)
        return
    if pid:
        print(f"the running daemon (pid {pid}) was told")


def cmd_workspace_list(args: argparse.Namespace) -> int:
    try:
        registry = load_registry()
    except RegistryError as exc:
        raise CliError(str(exc)) from None
    default = registry.default_name()
    rows = [
        {"name": name, "path": str(path), "default": name == default, "exists": path.is_dir()}
        for name, path in registry.workspaces.items()
    ]
    if args.json:
        print(json.dumps({"registry": str(registry.path), "workspaces": rows}, indent=2))
        return 0
    if not rows:
        print(f"no workspaces registered ({registry.path}); add one with: ctxos workspace add PATH")
        return 0
    width = max(len(name) for name in registry.workspaces)
    for name, path in registry.workspaces.items():
        marks = " (default)" * (name == default) + " (missing)" * (not path.is_dir())
        print(f"{name:<{width}}  {path}{marks}")
    return 0


def cmd_workspace_remove(args: argparse.Namespace) -> int:
    try:
        folder = remove_workspace(args.name)
    except RegistryError as exc:
        raise CliError(str(exc)) from None
    print(f"removed {args.name} ({folder} is unchanged)")
    _tell_daemon()
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    root = require_workspace(resolve_workspace(args.workspace))
    data = call_backend(args, "doctor", {})
    if args.json:
        print(json.dumps({"workspace": str(root), **data}, indent=2))
        return 0
    print(f"workspace: {root}")
    print(f"memories: {data['memories']} valid, {data['count']} skipped")
    # The summary first, then each setting that failed on its own line (file, line, field, reason).
    for problem in dict.fromkeys(filter(None, [data.get("config_error"), *data.get("problems", [])])):
        print(f"config: {problem}")
    for item in data["invalid"]:
        print(f"  {item['path']}: {item['reason']}")
    never = data.get("never_load_at_l1") or []
    if never:
        plan = data.get("l1_budget") or {}
        print(
            f"{len(never)} memories can never load at L1 under the default {plan.get('default_budget')}-token "
            f"budget (at most {plan.get('available')} tokens for one memory); shorten their l1:"
        )
        for item in never:
            print(f"  {item['path']}: L1 is {item['l1_tokens']} tokens")
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
