"""``ctxos simulate`` and ``ctxos reindex``: the query path and the index, from the shell.

``simulate`` shows exactly what an agent would get for a query and budget:
which memories, at which tier, how many tokens, the composite score and each
signal's weighted share, the detected intent and the expanded query, and
with ``--show`` the rendered context itself.

Both go through ``open_backend``: the running daemon's socket when there is
one (warm index), else the same RPC handlers in-process. The printing works
on the JSON shape (``ContextResult.to_dict()``) either way.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from ctxos.client.cli import CliError, call_backend
from ctxos.services.model import SIGNALS
from ctxos.services.schemas import MAX_BUDGET_TOKENS, ContextRequest, ContractError, validate

SIGNAL_ABBREV = {
    "semantic": "sem",
    "bm25": "bm25",
    "graph": "graph",
    "recency": "rec",
    "importance": "imp",
    "frequency": "freq",
}


def _budget(value: str) -> int | str:
    """A whole number of tokens; anything else is passed on for the contract to refuse (one message)."""
    try:
        return int(value)
    except ValueError:
        return value


def register(sub: argparse._SubParsersAction) -> None:
    sim = sub.add_parser("simulate", help="show the context an agent would get for a query")
    sim.add_argument("query", help="the query text, in quotes")
    sim.add_argument(
        "--budget",
        "-b",
        type=_budget,
        default=None,
        help=f"token budget, 1 to {MAX_BUDGET_TOKENS:,} (default: query.default_budget in _config.yaml)",
    )
    sim.add_argument(
        "--intent",
        "-i",
        default=None,
        help="force an intent (default, debug, brainstorm, recall, or any row in weights:)",
    )
    sim.add_argument("--show", action="store_true", help="also print the rendered context")
    sim.add_argument("--json", action="store_true", help="machine-readable output (the full ContextResult)")
    sim.set_defaults(func=cmd_simulate)

    rx = sub.add_parser("reindex", help="rescan every file and rebuild the search index")
    rx.add_argument("--json", action="store_true", help="machine-readable output")
    rx.set_defaults(func=cmd_reindex)


# --- printing -------------------------------------------------------------------------------


def format_simulation(data: dict[str, Any]) -> str:
    lines = [
        f"query:    {data['query']}",
        f"intent:   {data['intent']}" + (f"  ({data['intent_reason']})" if data.get("intent_reason") else ""),
        f"expanded: {' '.join(data['expanded_query'])}",
        f"semantic: {data.get('semantic_model') or '?'}",
        "weights:  " + "  ".join(f"{SIGNAL_ABBREV.get(k, k)} {v:.2f}" for k, v in data.get("weights", {}).items()),
        f"budget:   {data['tokens_used']:,} of {data['budget_tokens']:,} tokens used"
        f" (counter: {data.get('token_counter', '?')}), {data.get('elapsed_ms', 0):.1f} ms",
        "",
    ]
    headers = ["id", "type", "tier", "tokens", "score"] + [SIGNAL_ABBREV[s] for s in SIGNALS] + ["why", "from"]
    rows = []
    for item in data["selected"]:
        shares = item.get("shares", {})
        kind = f"{item['type']} (source)" if str(item.get("path", "")).startswith("sources/") else item["type"]
        # A federated memory shows its workspace: global:writing-style.
        shown_id = f"{item['workspace']}:{item['id']}" if item.get("workspace") else item["id"]
        rows.append(
            [shown_id, kind, item["tier"], str(item["tokens"]), f"{item['score']:.3f}"]
            + [f"{shares.get(s, 0.0):.3f}" for s in SIGNALS]
            + [item.get("reason", ""), ",".join(item.get("sources", []))]
        )
    if rows:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        numeric = set(range(3, 3 + 2 + len(SIGNALS)))

        def fmt(cells: list[str]) -> str:
            return "  ".join(
                c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
            ).rstrip()

        lines.append(fmt(headers))
        lines.append(fmt(["-" * w for w in widths]))
        lines.extend(fmt(r) for r in rows)
    else:
        lines.append("(nothing selected)")
    lines.append("")
    lines.append(
        f"{len(data['selected']) - len(data['catalog_ids'])} memories rendered, "
        f"{len(data['catalog_ids'])} catalog lines, {data['catalog_omitted']:,} not shown "
        "(score columns are weight x signal; they sum to the score; from = candidate source: bm25, vector, "
        "graph, importance, pinned)"
    )
    return "\n".join(lines)


# --- commands --------------------------------------------------------------------------------


def cmd_simulate(args: argparse.Namespace) -> int:
    """A simulation is not a load: ``simulate`` is not written to the access log."""
    params = {
        k: v
        for k, v in {"query": args.query, "budget_tokens": args.budget, "intent": args.intent}.items()
        if v is not None
    }
    try:  # checked here too, so a bad budget never starts an engine; the daemon gives the same message
        validate(ContextRequest, params)
    except ContractError as exc:
        raise CliError(exc.message) from None
    data = call_backend(args, "simulate", params)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(format_simulation(data))
    if args.show:
        print("\n" + "=" * 72)
        print(data["rendered"])
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    data = call_backend(args, "reindex", {"full": True}, writes=True, follow_progress=True)
    data["elapsed_ms"] = round((time.perf_counter() - started) * 1000.0, 1)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"indexed {data['indexed']:,} memories in {data['elapsed_ms']:.0f} ms")
    if data["invalid"]:
        print(f"{len(data['invalid'])} files skipped (see: ctxos doctor)")
    return 0
