"""``ctxos governance|archive|unarchive|importance|lock|unlock|dismiss|proposals|accept|reject|health|router|graph``.

Reports go through the running daemon when there is one (warm state), else
in-process (said on stderr). The actions a person takes on findings (archive,
unarchive, importance, dismiss, router) also work without a daemon: they then
run in-process holding the workspace lock, so no daemon can start halfway.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ctxos.client.cli import CliError, call_backend

KIND_TITLES = {
    "invalid_file": "Invalid files",
    "sync_conflict": "Team sync stopped on a conflict (git)",
    "flag": "Flagged by agents",
    "conflict": "Conflicts",
    "consolidation": "Near-duplicates to consolidate",
    "god_node": "Central but marked unimportant",
    "scratch_expired": "Scratch past its TTL",
    "decay": "Decay candidates",
}


def register(sub: argparse._SubParsersAction) -> None:
    gov = sub.add_parser("governance", help="what needs your judgment: stale, conflicting, duplicate memories ...")
    gov.add_argument("--kind", choices=list(KIND_TITLES), help="only findings of this kind")
    gov.add_argument("--all", dest="include_dismissed", action="store_true", help="include dismissed findings")
    gov.add_argument("--json", action="store_true", help="machine-readable output")
    gov.set_defaults(func=cmd_governance)

    arch = sub.add_parser("archive", help="move memories to _archive/ (kept, excluded from context)")
    arch.add_argument("ids", nargs="+", metavar="ID")
    arch.add_argument("--json", action="store_true", help="machine-readable output")
    arch.set_defaults(func=cmd_archive)

    unarch = sub.add_parser("unarchive", help="move archived memories back")
    unarch.add_argument("ids", nargs="+", metavar="ID", help="id, file stem or _archive/ path")
    unarch.add_argument("--json", action="store_true", help="machine-readable output")
    unarch.set_defaults(func=cmd_unarchive)

    imp = sub.add_parser("importance", help="set a memory's importance (0.0-1.0)")
    imp.add_argument("id", metavar="ID")
    imp.add_argument("value", type=float, metavar="VALUE")
    imp.add_argument("--json", action="store_true", help="machine-readable output")
    imp.set_defaults(func=cmd_importance)

    for name, func, text in (
        ("lock", cmd_lock, "protect a memory: no agent or governance action may change it"),
        ("unlock", cmd_unlock, "allow changes to a protected memory (a person's explicit unlock)"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("id", metavar="ID")
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        cmd.set_defaults(func=func)

    dis = sub.add_parser("dismiss", help="hide a governance finding until its files change")
    dis.add_argument("fingerprint", metavar="FINGERPRINT")
    dis.add_argument("--json", action="store_true", help="machine-readable output")
    dis.set_defaults(func=cmd_dismiss)

    props = sub.add_parser("proposals", help="merge proposals from agents waiting for you; with ID, its diffs")
    props.add_argument("id", nargs="?", metavar="ID", help="show this proposal with a diff against each source")
    props.add_argument("--all", action="store_true", help="include accepted and rejected proposals")
    props.add_argument("--json", action="store_true", help="machine-readable output")
    props.set_defaults(func=cmd_proposals)

    acc = sub.add_parser("accept", help="accept a merge proposal: write the merged memory, archive the other sources")
    acc.add_argument("id", metavar="ID")
    acc.add_argument("--json", action="store_true", help="machine-readable output")
    acc.set_defaults(func=cmd_accept)

    rej = sub.add_parser("reject", help="reject a merge proposal (no memory changes)")
    rej.add_argument("id", metavar="ID")
    rej.add_argument("--reason", default="", help="why, for the record")
    rej.add_argument("--json", action="store_true", help="machine-readable output")
    rej.set_defaults(func=cmd_reject)

    health = sub.add_parser("health", help="health score 0-100 and what would raise it")
    health.add_argument("--json", action="store_true", help="machine-readable output")
    health.set_defaults(func=cmd_health)

    router = sub.add_parser("router", help="regenerate router files (claude.md, _index.yaml, AGENTS.md, ...)")
    router.add_argument("--json", action="store_true", help="machine-readable output")
    router.set_defaults(func=cmd_router)

    graph = sub.add_parser("graph", help="the link graph: nodes with type and community, edges")
    graph.add_argument("--recompute", action="store_true", help="recompute communities even if the graph is unchanged")
    graph.add_argument("--json", action="store_true", help="machine-readable output")
    graph.set_defaults(func=cmd_graph)


def _call(args: argparse.Namespace, method: str, params: dict[str, Any] | None = None, *, writes: bool = False) -> Any:
    return call_backend(args, method, params, writes=writes)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


# ---------------------------------------------------------------- governance


def cmd_governance(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"include_dismissed": args.include_dismissed}
    if args.kind:
        params["kind"] = args.kind
    report = _call(args, "governance", params)
    if args.json:
        _print_json(report)
        return 0
    findings = report["findings"]
    print(
        f"{len(findings)} findings over {report['memories']} memories "
        f"({report['dismissed']} dismissed, {report['elapsed_ms'] / 1000:.1f} s)"
    )
    for kind, title in KIND_TITLES.items():
        group = [f for f in findings if f["kind"] == kind]
        if not group:
            continue
        print(f"\n{title} ({len(group)})")
        for finding in group:
            print(f"  [{finding['fingerprint']}] {finding['reason']}")
            suggestion = (finding.get("action") or {}).get("suggestion")
            if suggestion:
                print(f"      suggested: {suggestion}")
            if finding.get("command"):
                print(f"      command:   {finding['command']}")
            extra = _evidence_line(finding)
            if extra:
                print(f"      {extra}")
    if findings:
        print("\nDismiss one with: ctxos dismiss FINGERPRINT (it returns when its files change)")
    pending = _call(args, "proposals", {}).get("pending", 0)
    if pending:
        print(f"\n{pending} merge proposal{'s' if pending != 1 else ''} from agents waiting: ctxos proposals")
    return 0


def _evidence_line(finding: dict[str, Any]) -> str:
    evidence = finding.get("evidence") or {}
    if finding["kind"] == "flag":
        return "flags: " + "; ".join(
            f"{f['by']} ({f['at'][:10]}): {f['reason']}" for f in evidence.get("flags", [])[:5]
        )
    statements = evidence.get("contradictions")
    if statements:
        pair = statements[0]
        said = [f"{k}: \"{v}\"" for k, v in pair.items() if k != "overlap"]
        return "says: " + "  vs  ".join(said)
    if finding["kind"] == "consolidation":
        sims = evidence.get("similarity") or []
        return "overlap: " + ", ".join(f"{s['a']}~{s['b']} {s['overlap']:.2f}" for s in sims[:3])
    return ""


def _each(args: argparse.Namespace, method: str, refs: list[str], key: str) -> tuple[list[Any], list[dict[str, str]]]:
    """Run ``method`` per ref; a refused one (e.g. protected) is skipped and reported, the rest go on."""
    done, skipped = [], []
    for ref in refs:
        try:
            done.append(_call(args, method, {"id": ref}, writes=True))
        except CliError as exc:
            if exc.exit_code == 2 and len(refs) == 1:
                raise
            skipped.append({key: ref, "skipped": str(exc)})
    return done, skipped


def cmd_archive(args: argparse.Namespace) -> int:
    results, skipped = _each(args, "archive", args.ids, "archived")
    if args.json:
        _print_json(results + skipped)
    else:
        for item in results:
            print(
                f"archived {item['archived']}: {item['from']} -> {item['to']}  (undo: ctxos unarchive {item['archived']})"
            )
        for item in skipped:
            print(f"skipped {item['archived']}: {item['skipped']}")
    return 1 if skipped else 0


def cmd_unarchive(args: argparse.Namespace) -> int:
    results, skipped = _each(args, "unarchive", args.ids, "unarchived")
    if args.json:
        _print_json(results + skipped)
    else:
        for item in results:
            print(f"unarchived {item['unarchived']}: {item['from']} -> {item['to']}")
        for item in skipped:
            print(f"skipped {item['unarchived']}: {item['skipped']}")
    return 1 if skipped else 0


def cmd_lock(args: argparse.Namespace, protected: bool = True) -> int:
    """A person's explicit lock/unlock, done by this CLI process on the file itself.

    Deliberately not an RPC/MCP method: no agent transport can unlock a memory.
    The running daemon's watcher picks the edit up like any other edit on disk.
    """
    from ctxos.client.cli import require_workspace, resolve_workspace
    from ctxos.services.config import load_config
    from ctxos.services.model import Memory
    from ctxos.services.store import MemoryStore
    from ctxos.services.workspace import scan_workspace
    from ctxos.services.writes import WriteRefused, set_protected

    root = require_workspace(resolve_workspace(args.workspace))
    config = load_config(root)
    store = MemoryStore.from_items([m for m in scan_workspace(root, config) if isinstance(m, Memory)])
    try:
        rel = set_protected(root, store, config, args.id, protected)
    except WriteRefused as exc:
        raise CliError(str(exc), exit_code=1) from None
    state = (
        "locked (protected: agents cannot change it)"
        if protected
        else f"unlocked: it can be changed now; run `ctxos lock {args.id}` when done"
    )
    if args.json:
        _print_json({"id": args.id, "protected": protected, "path": rel})
    else:
        print(f"{args.id} {state} ({rel})")
    return 0


def cmd_unlock(args: argparse.Namespace) -> int:
    return cmd_lock(args, protected=False)


def cmd_importance(args: argparse.Namespace) -> int:
    if not 0.0 <= args.value <= 1.0:
        raise CliError("VALUE must be between 0.0 and 1.0")
    result = _call(args, "set_importance", {"id": args.id, "value": args.value}, writes=True)
    if args.json:
        _print_json(result)
    else:
        print(f"{result['id']}: importance {result['importance']:g} ({result['path']})")
    return 0


def cmd_dismiss(args: argparse.Namespace) -> int:
    result = _call(args, "dismiss", {"fingerprint": args.fingerprint})
    if args.json:
        _print_json(result)
    else:
        about = ", ".join(result["ids"] or result["paths"])
        print(f"dismissed {result['dismissed']} ({result['kind']}: {about}); it returns if those files change")
    return 0


# ---------------------------------------------------------------- proposals


def cmd_proposals(args: argparse.Namespace) -> int:
    if args.id:
        proposal = _call(args, "proposal", {"id": args.id})
        if args.json:
            _print_json(proposal)
            return 0
        _print_proposal(proposal)
        for item in proposal["diffs"]:
            print(f"\n{item['diff'] or '(no difference from ' + item['path'] + ')'}")
        print(f"\nmerged l0: {proposal['l0']}")
        if proposal["status"] == "pending":
            print(f"\naccept: ctxos accept {proposal['id']}    reject: ctxos reject {proposal['id']}")
        return 0
    report = _call(args, "proposals", {"all": args.all})
    if args.json:
        _print_json(report)
        return 0
    if not report["proposals"]:
        print("no merge proposals" + ("" if args.all else " waiting (--all shows decided ones)"))
        return 0
    for proposal in report["proposals"]:
        _print_proposal(proposal)
    print("\nShow one with its diffs: ctxos proposals ID; then ctxos accept ID or ctxos reject ID")
    return 0


def _print_proposal(p: dict[str, Any]) -> None:
    state = "STALE " if p.get("stale") else ""
    origin = f", {p['note']}" if p.get("note") else ""
    print(
        f"[{p['id']}] {state}{p['status']}: merge {', '.join(p['ids'])} into {p['into']} "
        f"(by {p['by']}{origin}, {p['created_at']})"
    )
    print(f"      l0: {p['l0']}")
    for reason in p.get("stale_reasons") or []:
        print(f"      stale: {reason}")


def cmd_accept(args: argparse.Namespace) -> int:
    result = _call(args, "accept_proposal", {"id": args.id}, writes=True)
    if args.json:
        _print_json(result)
        return 0
    print(f"accepted {result['id']}: {result['saved']} is now version {result['version']} ({result['path']})")
    for item in result.get("archived", []):
        print(f"  archived {item['id']}: {item['from']} -> {item['to']}  (undo: ctxos unarchive {item['id']})")
    for problem in result.get("problems", []):
        print(f"  not archived: {problem}")
    return 1 if result.get("problems") else 0


def cmd_reject(args: argparse.Namespace) -> int:
    result = _call(args, "reject_proposal", {"id": args.id, "reason": args.reason}, writes=True)
    if args.json:
        _print_json(result)
    else:
        print(f"rejected {result['id']}; no memory changed")
    return 0


# ---------------------------------------------------------------- health, router, graph


def cmd_health(args: argparse.Namespace) -> int:
    report = _call(args, "health")
    if args.json:
        _print_json(report)
        return 0
    print(f"health: {report['score']}/100 over {report['memories']} memories\n")
    for part in report["parts"]:
        print(f"  {part['name']:<12} {part['points']:5.1f} / {part['max_points']:<4g} {part['detail']}")
    advice = [(p["name"], p["advice"]) for p in report["parts"] if p["advice"]]
    if advice:
        print("\nto raise it:")
        for name, text in advice:
            print(f"  {name}: {text}")
    return 0


def cmd_router(args: argparse.Namespace) -> int:
    report = _call(args, "regenerate_router", writes=True)
    if args.json:
        _print_json(report)
        return 0
    for item in report["files"]:
        note = f"  ({item['reason']})" if item["reason"] else ""
        print(f"  {item['status']:<9} {item['path']}  {item['tokens']}/{item['budget']} tokens{note}")
    counts = report["counts"]
    print(", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no router files configured")
    return 0


def cmd_graph(args: argparse.Namespace) -> int:
    data = _call(args, "graph", {"recompute": args.recompute})
    if args.json:
        _print_json(data)
        return 0
    comm = data["community_stats"]
    explicit = sum(1 for e in data["edges"] if e["kind"] == "explicit")
    print(
        f"{plural(len(data['nodes']), 'memory', 'memories')}, {plural(explicit, 'link')}, "
        f"{plural(len(data['edges']) - explicit, 'shared-tag edge')}, "
        f"{plural(comm['count'], 'community', 'communities')} (modularity {comm['modularity']:.3f}, seed {comm['seed']})"
    )
    groups = [c for c in data["communities"] if c["size"] > 1]
    singles = len(data["communities"]) - len(groups)
    for community in groups[:GRAPH_COMMUNITIES_SHOWN]:
        more = (
            f" +{community['size'] - len(community['top_members'])} more"
            if community["size"] > len(community["top_members"])
            else ""
        )
        print(
            f"  community {community['id']}: {community['name']} ({community['size']}): "
            f"{', '.join(community['top_members'])}{more}"
        )
    hidden = (
        [f"{len(groups) - GRAPH_COMMUNITIES_SHOWN} more not shown"] if len(groups) > GRAPH_COMMUNITIES_SHOWN else []
    )
    if singles:
        hidden.append(f"{plural(singles, 'single-memory community', 'single-memory communities')} not listed")
    if hidden:
        print(f"  ({'; '.join(hidden)}; `ctxos graph --json` has them all)")
    if data["dangling"]:
        print(f"\n{plural(len(data['dangling']), 'dangling link')} (to no memory):")
        for item in data["dangling"][:GRAPH_DANGLING_SHOWN]:
            print(f"  {item['source']} -> {item['target']}")
        if len(data["dangling"]) > GRAPH_DANGLING_SHOWN:
            print(
                f"  ... and {len(data['dangling']) - GRAPH_DANGLING_SHOWN} more (`ctxos graph --json` lists them all)"
            )
    return 0


GRAPH_COMMUNITIES_SHOWN = 15
GRAPH_DANGLING_SHOWN = 20


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``1 link`` / ``2 links``: counts read as English."""
    return f"{count} {singular if count == 1 else (plural_form or singular + 's')}"
