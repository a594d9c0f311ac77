"""Benchmark: governance and community detection on the tldr corpus (~7,000 files).

Builds a workspace from ``../shared/data/tldr`` in a temporary folder (never in
the repo): each page becomes a ``resource`` memory with tags (platform, command
family, first verb of its description), ``related`` links from its "See also"
line, and a modification date spread deterministically over the last 400 days
so decay has something to find. Then it times, on a loaded engine:

- building the link graph, Leiden community detection (cold, then the
  fingerprint check on an unchanged graph), naming the communities (c-TF-IDF)
  and the graph view's layout (``graph_layout.community_layout``), and
- a full governance run (all finding kinds), and
- router regeneration (first write, then with nothing changed: no file rewritten).

Target (issue 5): governance and community detection each finish in < 30 s.
Prints a table and writes JSON (``--json PATH``). ``--small`` uses 300 pages
(what the test runs).

    python benchmarks/bench_governance.py [--small] [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

TLDR = Path(__file__).resolve().parents[2] / "shared" / "data" / "tldr" / "pages"
TARGET_S = 30.0
STOP = {"a", "an", "the", "and", "or", "of", "to", "in", "on", "for", "with", "from", "is"}
_SEE_ALSO = re.compile(r"^>\s*See also:(.*)$", re.MULTILINE)
_CODE = re.compile(r"`([^`]+)`")
NOW = datetime(2026, 12, 1, 12, 0, 0)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def build_tldr_workspace(dest: Path, limit: int | None = None) -> int:
    """Write tldr pages as memory files under ``dest``; return the number written."""
    from ctxos.services.workspace import init_workspace

    init_workspace(dest, seed_examples=False)
    pages = sorted(p for platform in ("common", "linux", "osx") for p in (TLDR / platform).glob("*.md"))
    if limit:
        pages = pages[:limit]
    names = {}
    for page in pages:
        names.setdefault(page.stem, f"{page.parent.name}-{_slug(page.stem)}")
    folder = dest / "05-resources"
    written = 0
    for page in pages:
        platform, name = page.parent.name, page.stem
        memory_id = f"{platform}-{_slug(name)}"
        text = page.read_text(encoding="utf-8", errors="replace")
        description = next(
            (
                line[1:].strip()
                for line in text.splitlines()
                if line.startswith(">") and "More information" not in line and "See also" not in line
            ),
            name,
        )
        verb = next((w for w in re.findall(r"[a-z]+", description.lower()) if w not in STOP), "misc")
        related = []
        for match in _SEE_ALSO.findall(text):
            for command in _CODE.findall(match):
                target = names.get(command.strip())
                if target and target != memory_id:
                    related.append(target)
        days = int(hashlib.sha1(memory_id.encode()).hexdigest()[:6], 16) % 400
        modified = NOW - timedelta(days=days)
        front = {
            "id": memory_id,
            "type": "resource",
            "l0": description[:190],
            "importance": 0.5,
            "tags": [platform, _slug(name.split("-")[0]), verb],
            "related": sorted(set(related)),
            "modified": modified.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        lines = ["---"] + [f"{k}: {json.dumps(v)}" for k, v in front.items()] + ["---", text]
        (folder / f"{memory_id}.md").write_text("\n".join(lines), encoding="utf-8")
        written += 1
    return written


def run(limit: int | None) -> dict[str, object]:
    from ctxos.services.communities import community_names, refresh_communities
    from ctxos.services.engine import Engine
    from ctxos.services.governance import governance_report
    from ctxos.services.graph_layout import community_layout
    from ctxos.services.router import regenerate_router

    with tempfile.TemporaryDirectory(prefix="ctxos-bench-gov-") as tmp:
        root = Path(tmp) / "tldr"
        started = time.perf_counter()
        pages = build_tldr_workspace(root, limit)
        build_s = time.perf_counter() - started
        engine = Engine(root)
        started = time.perf_counter()
        engine.load()
        load_s = time.perf_counter() - started
        try:
            started = time.perf_counter()
            graph = engine.graph()
            graph_s = time.perf_counter() - started
            started = time.perf_counter()
            cmap, recomputed = refresh_communities(engine)
            communities_cold_s = time.perf_counter() - started
            started = time.perf_counter()
            _, again = refresh_communities(engine)
            communities_unchanged_s = time.perf_counter() - started
            started = time.perf_counter()
            named = community_names(engine, cmap)
            names_s = time.perf_counter() - started
            started = time.perf_counter()
            community_layout(graph.nodes, [(a, b) for a, b, _ in graph.edges()], cmap.communities)
            layout_s = time.perf_counter() - started
            started, cpu = time.perf_counter(), time.process_time()
            report = governance_report(engine)
            governance_s = time.perf_counter() - started
            governance_cpu_s = time.process_time() - cpu
            started = time.perf_counter()
            regenerate_router(engine)
            router_s = time.perf_counter() - started
            started = time.perf_counter()
            unchanged = regenerate_router(engine)
            router_unchanged_s = time.perf_counter() - started
            return {
                "corpus": "tldr",
                "pages": pages,
                "memories": len(engine.store),
                "explicit_edges": len(graph.explicit_edges()),
                "implicit_edges": len(graph.implicit_edges()),
                "dangling_links": len(graph.dangling),
                "communities": len(cmap.sizes),
                "largest_community": cmap.sizes[0] if cmap.sizes else 0,
                "modularity": round(cmap.modularity, 4),
                "build_workspace_s": round(build_s, 3),
                "engine_load_s": round(load_s, 3),
                "graph_s": round(graph_s, 3),
                "communities_cold_s": round(communities_cold_s, 3),
                "communities_unchanged_s": round(communities_unchanged_s, 3),
                "communities_unchanged_recomputed": again,
                "community_names_s": round(names_s, 3),
                "map_layout_s": round(layout_s, 3),
                "largest_community_name": named[0]["name"] if named else "",
                "governance_s": round(governance_s, 3),
                "governance_cpu_s": round(governance_cpu_s, 3),
                "findings": report.counts(),
                "router_s": round(router_s, 3),
                "router_unchanged_s": round(router_unchanged_s, 3),
                "router_rewrote_unchanged": bool(unchanged.written),
                "target_s": TARGET_S,
            }
        finally:
            engine.close()


def main(argv: list[str] | None = None) -> int:
    from common import add_common_args, machine_info, print_table, write_results

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--limit", type=int, default=None, help="use only the first N pages")
    args = parser.parse_args(argv)
    if not TLDR.is_dir():
        print(f"tldr corpus not found at {TLDR}", file=sys.stderr)
        return 2
    result = run(300 if args.small else args.limit)
    print(f"governance benchmark, tldr corpus (target: < {TARGET_S:g} s each); machine: {machine_info()}")
    print_table(
        ["measure", "value"],
        [
            ("memories", result["memories"]),
            ("edges (explicit / shared-tag)", f"{result['explicit_edges']} / {result['implicit_edges']}"),
            ("communities (largest)", f"{result['communities']} ({result['largest_community']})"),
            ("engine load", f"{result['engine_load_s']:.2f} s"),
            ("link graph", f"{result['graph_s']:.2f} s"),
            ("Leiden communities, cold", f"{result['communities_cold_s']:.2f} s"),
            ("communities, graph unchanged", f"{result['communities_unchanged_s']:.2f} s"),
            ("community names (c-TF-IDF)", f"{result['community_names_s']:.2f} s ({result['largest_community_name']})"),
            ("map layout (communities apart)", f"{result['map_layout_s']:.2f} s"),
            ("governance (all kinds)", f"{result['governance_s']:.2f} s (CPU {result['governance_cpu_s']:.2f} s)"),
            ("router files, first / unchanged", f"{result['router_s']:.2f} s / {result['router_unchanged_s']:.2f} s"),
            ("findings", ", ".join(f"{k} {v}" for k, v in result["findings"].items())),
        ],
    )
    ok = result["governance_s"] < TARGET_S and result["communities_cold_s"] < TARGET_S
    print("result: " + ("PASS" if ok else "FAIL"))
    write_results("bench_governance", {**result, "pass": ok}, args.json, small=args.small)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
