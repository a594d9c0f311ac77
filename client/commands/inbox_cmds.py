"""``ctxos inbox`` and ``ctxos promote``: files waiting in ``inbox/`` and making one a memory.

Both go through the running daemon when there is one (``promote`` is then
serialised with every other write); without a daemon they run in-process,
``promote`` holding the workspace lock like the other write commands.
"""

from __future__ import annotations

import argparse
import json

from ctxos.client.cli import call_backend
from ctxos.services.ontology import MEMORY_TYPES


def register(sub: argparse._SubParsersAction) -> None:
    inbox = sub.add_parser("inbox", help="list the files waiting in inbox/ (not served until promoted)")
    inbox.add_argument("--json", action="store_true", help="machine-readable output")
    inbox.set_defaults(func=cmd_inbox)

    promote = sub.add_parser("promote", help="move an inbox file into the ontology as a memory of a type")
    promote.add_argument("file", metavar="FILE", help="inbox/x.md, x.md (in inbox/) or its full path")
    promote.add_argument("--type", "-t", required=True, choices=MEMORY_TYPES, help="the memory type")
    promote.add_argument("--id", help="the memory id (default: from the file's id or name)")
    promote.add_argument("--json", action="store_true", help="machine-readable output")
    promote.set_defaults(func=cmd_promote)


def cmd_inbox(args: argparse.Namespace) -> int:
    data = call_backend(args, "inbox", {})
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    for item in data["items"]:
        line = f"{item['path']:<40} {item['problem'] and 'cannot be promoted: ' + item['problem'] or item['l0']}"
        print(line.rstrip())
    print(f"({data['count']} in inbox; promote one with: ctxos promote FILE --type TYPE)")
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    params = {"path": args.file, "type": args.type}
    if args.id:
        params["id"] = args.id
    data = call_backend(args, "promote", params, writes=True)
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    print(
        f"promoted {data['from']} -> {data['to']} (id {data['id']}, {data['type']}; "
        f"filled in: {', '.join(data['filled'])})"
    )
    if data.get("warning"):
        print(f"warning: {data['warning']}")
    return 0
