"""Footprint benchmark: where a daemon's idle memory and a query's time go, by component.

One process, the steps a daemon takes, in order, on a workspace built from the
shared corpora (``corpora.build_workspace``) whose index already exists (as
after any restart; the cold build is ``bench_daemon.py``'s job):

1. the HTTP/MCP stack imported (aiohttp, mcp, uvicorn, pydantic: what
   ``daemon.http_server`` pulls in);
2. ``Engine.load()``: the store (every memory parsed, text included), the
   Whoosh index opened (checksums), the access log;
3. the link graph (``refresh_graph``), the Leiden communities, a governance
   report (the daemon keeps the last one cached);
4. 160 queries (``execute_context_query``, access logged): posting arrays,
   token-count and heading caches, per-thread searchers.

For each step: RSS before/after (``/proc``) and, with ``tracemalloc`` on, the
Python allocations still held at the end, attributed to the *innermost*
project frame that made them (so a YAML node built by ``parse_memory``
counts for the store, a posting array for the posting cache). C-level memory
(igraph, SQLite, Whoosh's mmap) shows in RSS only. Then the query time: a
cProfile of the same queries, own time per component (profiling inflates
small Python functions, so read these as shares, not milliseconds).

    python benchmarks/bench_footprint.py            # 10,000 memories: ~2 min
    python benchmarks/bench_footprint.py --small    # 200 memories; what the tests run
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DOC_QUERIES as QUERIES  # noqa: E402
from common import add_common_args, current_rss_mb, machine_info, print_table, write_results  # noqa: E402
from corpora import DOC_CORPORA, build_workspace  # noqa: E402

N_QUERIES = 160
TRACE_FRAMES = 12  # frames kept per allocation: deep enough to find the project frame under library calls
# --small (the test suite's run): tracemalloc slows this process ~20x (the governance report alone took
# 36 s of a 64 s test at 200 memories), so the traced child keeps fewer frames and runs fewer queries.
SMALL_TRACE_FRAMES = 2
SMALL_TRACE_QUERIES = 10

# Innermost project frame (file stem, function) -> component. First match wins; "*" = any function.
MEMORY_COMPONENTS: list[tuple[str, str, str]] = [
    ("index", "postings", "posting cache (BM25F arrays)"),
    ("index", "doc", "posting cache (BM25F arrays)"),
    ("index", "docnum", "posting cache (BM25F arrays)"),
    ("index", "heading_tokens", "token-count / heading caches"),  # kept on each memory
    ("index", "*", "Whoosh index (checksums, searchers)"),
    ("derived", "block_tokens", "token-count / heading caches"),  # services/engine/derived.py
    ("derived", "catalog_tokens", "token-count / heading caches"),
    ("facade", "note_served", "token-count / heading caches"),  # services/engine/facade.py
    ("graph", "*", "link graph"),
    ("communities", "*", "communities"),
    ("analysis", "*", "governance report cache"),  # services/governance/
    ("report", "*", "governance report cache"),
    ("findings", "*", "governance report cache"),
    ("dismissals", "*", "governance report cache"),
    ("actions", "*", "governance report cache"),
    ("similarity", "*", "governance report cache"),
    ("health", "*", "governance report cache"),
    ("access_log", "*", "access log"),
    ("memory_file", "*", "store (parsed memories)"),
    ("parse_cache", "*", "store (parsed memories)"),
    ("links", "*", "store (parsed memories)"),
    ("workspace", "*", "store (parsed memories)"),
    ("store", "*", "store (parsed memories)"),
    ("model", "*", "store (parsed memories)"),
    ("lifecycle", "*", "store (parsed memories)"),  # services/engine/: load, cold build
    ("changes", "*", "store (parsed memories)"),
    ("state", "*", "store (parsed memories)"),
    ("facade", "*", "store (parsed memories)"),
    ("config", "*", "config"),
    ("query", "*", "query path (other)"),
    ("signals", "*", "query path (other)"),
    ("render", "*", "query path (other)"),
    ("intent", "*", "query path (other)"),
    ("tokens", "*", "query path (other)"),
]

# Own time per source file -> component (package folder or project module).
TIME_COMPONENTS: list[tuple[str, str]] = [
    ("/whoosh/", "Whoosh (searcher, doc frequency, stored fields)"),
    ("services/semantic/", "embeddings (vectors, similarity)"),
    ("/numpy/", "embeddings (vectors, similarity)"),
    ("services/index.py", "BM25 sums (posting arrays)"),
    ("services/signals.py", "signals"),
    ("services/graph.py", "link graph"),
    ("services/render.py", "render + budget"),
    ("services/render_cache.py", "render + budget"),
    ("services/tier_source.py", "render + budget"),
    ("services/tokens.py", "token counting"),
    ("services/access_log.py", "access log (SQLite)"),
    ("sqlite3", "access log (SQLite)"),
    ("services/intent.py", "intent + expansion"),
    ("services/query.py", "query (candidates, tiers)"),
    ("services/engine/", "engine caches"),
]


def _component_of(stem: str, function: str) -> str:
    for file_stem, fn, component in MEMORY_COMPONENTS:
        if file_stem == stem and (fn == "*" or fn == function):
            return component
    return "other project code"


def memory_by_component(snapshot: tracemalloc.Snapshot) -> dict[str, float]:
    """MiB of live Python allocations per component (innermost services/ frame decides)."""
    out: dict[str, float] = defaultdict(float)
    functions = _function_names()
    for stat in snapshot.statistics("traceback"):
        comp = "outside the engine (imports, interpreter, benchmark)"
        for frame in reversed(stat.traceback):  # most recent (innermost) first
            name = frame.filename.replace(os.sep, "/")
            if "/services/semantic/" in name and "site-packages" not in name:
                comp = "embeddings (model + vectors)"
                break
            if "/services/" in name and "site-packages" not in name:
                comp = _component_of(Path(name).stem, functions(frame.filename, frame.lineno))
                break
        out[comp] += stat.size / 2**20
    return dict(out)


def _function_names():
    """filename, lineno -> name of the enclosing function (tracemalloc frames carry no names)."""
    import ast

    tables: dict[str, list[tuple[int, int, str]]] = {}

    def lookup(filename: str, lineno: int) -> str:
        table = tables.get(filename)
        if table is None:
            table = []
            try:
                tree = ast.parse(Path(filename).read_text(encoding="utf-8"))
                for node in ast.walk(tree):
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        table.append((node.lineno, node.end_lineno or node.lineno, node.name))
            except (OSError, SyntaxError):
                pass
            table.sort(key=lambda t: t[1] - t[0])  # innermost (shortest) first
            tables[filename] = table
        for start, end, name in table:
            if start <= lineno <= end:
                return name
        return ""

    return lookup


def time_by_component(profile: cProfile.Profile) -> dict[str, float]:
    """Share (%) of own CPU time per component over the profiled queries."""
    stats = pstats.Stats(profile)
    totals: dict[str, float] = defaultdict(float)
    for (filename, _line, function), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        name = filename.replace(os.sep, "/")
        comp = "other (Python runtime, dataclasses, regex...)"
        if name == "~" and "sqlite3" in function:
            comp = "access log (SQLite)"
        else:
            for needle, component in TIME_COMPONENTS:
                if needle in name:
                    comp = component
                    break
        totals[comp] += tottime
    whole = sum(totals.values()) or 1.0
    return {k: 100.0 * v / whole for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def measure(root: Path, n_queries: int, trace: bool, frames: int = TRACE_FRAMES) -> dict[str, Any]:
    """In this process: the steps a daemon takes, RSS and seconds after each.

    ``trace``: the same steps with ``tracemalloc`` on (started after the imports,
    which it would slow down tenfold), for the attribution by component; its
    own bookkeeping inflates RSS, so the RSS and time columns come from a run
    without it.
    """
    steps: list[tuple[str, float, float]] = []

    def step(name: str, fn) -> Any:
        gc.collect()
        before, t0 = current_rss_mb(), time.perf_counter()
        value = fn()
        elapsed = time.perf_counter() - t0
        gc.collect()
        steps.append((name, current_rss_mb() - before, elapsed))
        return value

    base_rss = current_rss_mb()

    def http_stack():
        import ctxos.daemon.http_server  # noqa: F401  (aiohttp, mcp, pydantic, uvicorn via the bridge)
        import ctxos.daemon.mcp_server  # noqa: F401

    step("import the HTTP/MCP stack (aiohttp, mcp, pydantic)", http_stack)
    from ctxos.services.communities import refresh_communities
    from ctxos.services.engine import Engine
    from ctxos.services.governance import governance_report

    if trace:
        tracemalloc.start(frames)
    engine = Engine(root)
    engine.allow_stale_graph = True  # as the daemon runs it
    step("Engine.load (store + index open + access log)", engine.load)
    step("link graph (refresh_graph)", engine.refresh_graph)
    step("communities (Leiden, map loaded)", lambda: (refresh_communities(engine), engine._load_communities()))
    step("governance report (cached)", lambda: governance_report(engine, save=False))

    def queries():
        for i in range(n_queries):
            engine.execute_context_query(QUERIES[i % len(QUERIES)], 4000)

    step(f"{n_queries} queries (posting arrays, token caches)", queries)
    result: dict[str, Any] = {
        "memories": len(engine.store),
        "base_rss_mb": base_rss,
        "final_rss_mb": current_rss_mb(),
        "steps": [{"step": s, "rss_delta_mb": d, "seconds": t} for s, d, t in steps],
    }
    if trace:
        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
        result["traced_mb_by_component"] = memory_by_component(snapshot)
        engine.close()
        return result
    memories = list(engine.store.memories.values())
    result["memory_text_mb"] = sum(len(m.l1.encode()) + len(m.l2.encode()) for m in memories) / 2**20
    plain: list[float] = []
    for i in range(n_queries):
        t0 = time.perf_counter()
        engine.execute_context_query(QUERIES[i % len(QUERIES)], 4000)
        plain.append((time.perf_counter() - t0) * 1000)
    # Query time: a profile of the same queries (caches warm, as in a running daemon).
    profile = cProfile.Profile()
    profile.enable()
    for i in range(n_queries):
        engine.execute_context_query(QUERIES[i % len(QUERIES)], 4000)
    profile.disable()
    engine.close()
    plain.sort()
    result.update(
        {
            "query_time_share_pct": time_by_component(profile),
            "query_ms_p50": plain[len(plain) // 2],
            "query_ms_p95": plain[int(len(plain) * 0.95) - 1],
        }
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser)
    parser.add_argument("--memories", type=int, help="workspace size (default 10,000; small 200)")
    parser.add_argument("--workspace", type=Path, help="measure this existing workspace instead of building one")
    parser.add_argument("--_child", choices=("rss", "trace"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    n = args.memories or (200 if args.small else 10_000)
    if args._child:  # the measuring process: nothing else loaded before it starts
        import json

        trace = args._child == "trace"
        if args.small:
            n_queries, frames = (SMALL_TRACE_QUERIES, SMALL_TRACE_FRAMES) if trace else (40, TRACE_FRAMES)
        else:
            n_queries, frames = N_QUERIES, TRACE_FRAMES
        print(json.dumps(measure(args.workspace, n_queries, trace, frames)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-footprint-"))
    try:
        root = args.workspace
        if root is None:
            from ctxos.services.workspace import init_workspace

            root = work / "ws"
            init_workspace(root, seed_examples=False)
            build_workspace(root, n, source=("obsidian-help", "foam-docs") if args.small else DOC_CORPORA)
        # Build the index once (a restart finds it), then measure in a fresh process.
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from ctxos.services.engine import Engine; e = Engine(sys.argv[1]); e.load(); e.close()",
                str(root),
            ],
            check=True,
        )
        import json

        runs = {}
        for mode in ("rss", "trace"):
            child = subprocess.run(
                [sys.executable, __file__, "--_child", mode, "--workspace", str(root)]
                + (["--small"] if args.small else []),
                capture_output=True,
                text=True,
            )
            if child.returncode:
                raise RuntimeError(child.stderr[-3000:])
            runs[mode] = json.loads(child.stdout.strip().splitlines()[-1])
        result = {**runs["rss"], "traced_mb_by_component": runs["trace"]["traced_mb_by_component"]}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info = machine_info()
    print(
        f"bench_footprint ({'small' if args.small else 'full'}): {result['memories']:,} memories on "
        f"{info['cpu']} x{info['cores']}, Python {info['python']}"
    )
    print(
        f"RSS: {result['base_rss_mb']:.0f} MiB after importing the engine, {result['final_rss_mb']:.0f} MiB at the end"
    )
    print_table(
        ["step", "RSS delta MiB", "seconds"],
        [[s["step"], f"{s['rss_delta_mb']:+.1f}", f"{s['seconds']:.2f}"] for s in result["steps"]],
    )
    print(
        f"\nlive Python allocations by component (MiB, tracemalloc, after the imports); bodies + tiers as text: {result['memory_text_mb']:.1f} MiB"
    )
    print_table(
        ["component", "MiB"],
        [[k, f"{v:.1f}"] for k, v in sorted(result["traced_mb_by_component"].items(), key=lambda kv: -kv[1])],
    )
    print(
        f"\nquery time by component (cProfile own time, % of total); unprofiled p50 / p95 "
        f"{result['query_ms_p50']:.1f} / {result['query_ms_p95']:.1f} ms"
    )
    print_table(["component", "% of query time"], [[k, f"{v:.1f}"] for k, v in result["query_time_share_pct"].items()])
    write_results("bench_footprint", result, args.json, small=args.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
