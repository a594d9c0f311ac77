"""``ctxos history ID`` and ``ctxos revert ID --to N``: a memory's versions, and restoring one.

Versions are git commits when the workspace is a git repository, else entries
of the journal in ``.ctxos/`` (docs/history.md). ``history`` goes through the
daemon when one runs, else in-process; ``revert`` is a write: through the
daemon, or in-process holding the workspace lock, like governance actions.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ctxos.client.cli import call_backend


def register(sub: argparse._SubParsersAction) -> None:
    hist = sub.add_parser("history", help="a memory's versions: who changed it, when, with which tool")
    hist.add_argument("id", metavar="ID", help="memory id (or the workspace-relative path of an archived file)")
    hist.add_argument("--show", type=int, metavar="N", help="print version N in full")
    hist.add_argument(
        "--diff", type=int, metavar="N", help="print what version N changed (diff against the one before)"
    )
    hist.add_argument("--json", action="store_true", help="machine-readable output")
    hist.set_defaults(func=cmd_history)

    rev = sub.add_parser("revert", help="restore an earlier version of a memory (as a new version)")
    rev.add_argument("id", metavar="ID")
    rev.add_argument("--to", type=int, required=True, metavar="N", help="the version number `ctxos history` shows")
    rev.add_argument(
        "--expected-version",
        type=int,
        metavar="V",
        help="refuse unless the memory is still at this version (the one you looked at)",
    )
    rev.add_argument("--json", action="store_true", help="machine-readable output")
    rev.set_defaults(func=cmd_revert)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def cmd_history(args: argparse.Namespace) -> int:
    if args.show is not None or args.diff is not None:
        n = args.show if args.show is not None else args.diff
        data = call_backend(args, "history_version", {"id": args.id, "n": n})
        if args.json:
            _print_json(data)
        elif args.show is not None:
            print(data["text"], end="" if data["text"].endswith("\n") else "\n")
        else:
            print(data["diff"] or f"(version {n} changed nothing in the text)", end="")
        return 0
    data = call_backend(args, "history", {"id": args.id})
    if args.json:
        _print_json(data)
        return 0
    versions = data["versions"]
    where = {"git": "git commits", "journal": "the journal in .ctxos/", "off": "history is off"}.get(
        data["mode"], data["mode"]
    )
    print(f"{data['id']} ({data.get('path') or 'not on disk'}): {len(versions)} version(s), from {where}")
    for v in versions:
        when = v["at"].replace("T", " ")[:19]
        memory_version = f"v{v['version']}" if v.get("version") else "  "
        print(f"  {v['n']:>3}  {when}  {memory_version:>4}  {v['who']}  [{v['tool']}]  {v['summary']}")
    if versions:
        restore = (
            f"; restore it with `ctxos revert {args.id} --to N`"
            if "/" not in args.id
            else " (unarchive it to restore a version)"
        )
        print(f"\nSee one with `ctxos history {args.id} --diff N`{restore}.")
    return 0


def cmd_revert(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"id": args.id, "to": args.to}
    if args.expected_version is not None:
        params["expected_version"] = args.expected_version
    result = call_backend(args, "revert", params, writes=True)
    if args.json:
        _print_json(result)
    elif result["changed"]:
        print(
            f"Reverted {result['id']} to version {args.to}: it is now version {result['version']} ({result['path']})."
        )
    else:
        print(f"{result['id']} already has the text of version {args.to}; nothing was written.")
    return 0
