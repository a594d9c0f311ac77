"""AI Context OS side by side with basic-memory and a plain BM25 baseline, on the same corpora.

One command runs every system on every corpus, each system in its own worker process
(basic-memory and Tantivy in their own venvs, installed here on first use):

    python benchmarks/bench_peers.py                # full run (tens of minutes; see PEERS.md)
    python benchmarks/bench_peers.py --small        # seconds: ctxos + BM25 on tiny corpora (the test)

Per corpus (``tldr``, ``obsidian-help``, generated ``gen-1000`` / ``gen-10000`` /
``gen-50000``) and system: full index build time, incremental update cost (one edited
file, median of several, checked to be searchable afterwards), query latency p50/p95
(after warm-up; the systems of a corpus are all built first and take turns on batches
of the same queries, so a slow spell of the machine lands on all of them), peak RSS of
the system's process, index size on disk, and a known-item sanity check on the real
corpora. On LoCoMo dev: evidence recall@k and evidence recall within a token budget,
per retrieval unit, against the paper's numbers.
The headline is the ratio of each peer to AI Context OS on the same machine and run.

``--systems``, ``--corpora`` and ``--locomo-units`` run a subset (same code, same
parameters); ``--merge A.json B.json`` combines such partial runs into one table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import percentile, print_table, write_results  # noqa: E402
from corpora import DATA_DIR  # noqa: E402
from peers import SYSTEMS, make_peer  # noqa: E402
from peers.client import Peer, PeerUnavailable, WorkerError  # noqa: E402
from peers.locomo import PAPER_RECALL, UNITS, load_samples, summarise_recall, write_workspace  # noqa: E402
from peers.venvs import CACHE_DIR  # noqa: E402
from peers.workloads import (  # noqa: E402
    REAL_CORPORA,
    append_marker,
    body_text,
    copy_corpus,
    make_queries,
    pick_update_files,
    prepare_corpus,
)

FULL_CORPORA = ("obsidian-help", "tldr", "gen-1000", "gen-10000", "gen-50000")
SMALL_CORPORA = ("obsidian-help", "gen-300")
RECALL_KS = (5, 10, 25, 50)
BUDGETS = (500, 1000, 2000, 4000)
INTERACTIVE_P95_MS = 100.0  # a query answered within 100 ms feels instant; above it, it does not
WARMUP = 5
QUERY_K = 10
LATENCY_BATCH = 10  # measured queries a system runs before the next one takes its turn


def log(message: str) -> None:
    print(message, flush=True)


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


# ---------------------------------------------------------------------------------------
# corpus cells: build, update, query latency, memory, size
# ---------------------------------------------------------------------------------------
def open_cell(peer: Peer, corpus, scratch: Path) -> tuple[dict[str, Any], Path | None]:
    """Copy the corpus for one system, start it and build its index: the cell so far and the copy (None: failed).

    Never raises for the system's own errors: a failed cell carries ``error`` and its
    worker is stopped.
    """
    cell: dict[str, Any] = {"system": peer.name, "corpus": corpus.name}
    base = _cell_dir(scratch, corpus.name, peer.name)
    try:
        copy = copy_corpus(corpus, base / "corpus")
        cell["files"] = sum(1 for _ in copy.rglob("*.md"))
        peer.start(copy, base / "work")
        built = peer.build()
        res = built["result"]
        cell.update(
            docs=res.get("docs"),
            build_s=round(res.get("build_s", built["elapsed_s"]), 3),
            rss_after_build_mb=round(res.get("proc_rss_mb", built["rss_mb"]), 1),
            peak_rss_build_mb=round(res.get("proc_peak_rss_mb", built["peak_rss_mb"]), 1),
        )
        for extra in ("search_mode", "settle_s", "archived_at_start"):
            if extra in res:
                cell[extra] = res[extra]
        return cell, copy
    except (WorkerError, PeerUnavailable, OSError) as exc:
        _fail(peer, cell, corpus.name, exc, base)
        return cell, None


def measure_latencies(
    opened: list[tuple[Peer, dict[str, Any]]], corpus_name: str, queries: list[tuple[str, str]]
) -> None:
    """Every system's query latency, the systems taking turns on the same query batches.

    Each system first runs the warm-up queries; then the measured queries go in
    batches of ``LATENCY_BATCH``, each batch to every system in an order that
    rotates from batch to batch, so a slow spell of this shared machine lands on
    all of them alike and the ratios compare like with like. One system measured
    after another had differed by a third between two runs a minute apart
    (ctxos p50 7.2 to 9.6 ms on gen-10000 while bm25s stayed at 1.45-1.56 ms).
    """
    texts = [q for q, _src in queries]
    measured = _measured(queries)
    sources = [src for _q, src in queries][WARMUP:] or [src for _q, src in queries]
    latencies: dict[str, list[float]] = {peer.name: [] for peer, _ in opened}
    hits: dict[str, list[list[str]]] = {peer.name: [] for peer, _ in opened}
    errors: dict[str, int] = {peer.name: 0 for peer, _ in opened}
    live = list(opened)
    for peer, cell in opened:
        try:
            peer.queries(texts[:WARMUP], QUERY_K)
        except (WorkerError, PeerUnavailable, OSError) as exc:
            live = [(p, c) for p, c in live if p is not peer]
            _fail(peer, cell, corpus_name, exc)
    for turn, at in enumerate(range(0, len(measured), LATENCY_BATCH)):
        batch = measured[at : at + LATENCY_BATCH]
        order = live[turn % len(live) :] + live[: turn % len(live)] if live else []
        for peer, cell in order:
            if "error" in cell:
                continue
            try:
                result = peer.queries(batch, QUERY_K)["result"]
            except (WorkerError, PeerUnavailable, OSError) as exc:
                _fail(peer, cell, corpus_name, exc)
                continue
            latencies[peer.name] += result["latencies_s"]
            hits[peer.name] += result["hits"]
            errors[peer.name] += result.get("errors", 0)
    for peer, cell in opened:
        lat = latencies[peer.name]
        if "error" in cell or not lat:
            continue
        cell.update(
            queries=len(lat),
            query_p50_ms=_ms(percentile(lat, 50)),
            query_p95_ms=_ms(percentile(lat, 95)),
            query_mean_ms=_ms(sum(lat) / len(lat)),
            query_errors=errors[peer.name],
            latency_turns=f"batches of {LATENCY_BATCH}, {len(opened)} systems in turn",
        )
        if corpus_name in REAL_CORPORA:
            found = sum(1 for src, found_hits in zip(sources, hits[peer.name]) if src in found_hits)
            cell["known_item_at10"] = round(100.0 * found / max(1, len(sources)), 1)


def finish_cell(
    peer: Peer, cell: dict[str, Any], corpus, copy: Path, scratch: Path, queries: list[tuple[str, str]], updates: int
) -> None:
    """The rest of one system's cell (ranking time, incremental updates, memory, index size); stops the system."""
    base = _cell_dir(scratch, corpus.name, peer.name)
    try:
        if "error" in cell:
            return
        measured = _measured(queries)
        if peer.name == "ctxos":  # ranking alone (no tiers, no rendering): the part comparable to a search
            rank = peer.queries(measured, QUERY_K, mode="rank")["result"]["latencies_s"]
            cell.update(rank_p50_ms=_ms(percentile(rank, 50)), rank_p95_ms=_ms(percentile(rank, 95)))
        # incremental update: edit one file, let the system index it, time it; then check it is found
        times, marks = [], []
        for i, rel in enumerate(pick_update_files(copy, updates)):
            marker = f"zqxmark{i}edit"
            append_marker(copy, rel, marker)
            times.append(peer.update([rel], marker=marker)["elapsed_s"])
            marks.append((marker, rel))
        if marks:
            found_hits = peer.queries([m for m, _ in marks], QUERY_K)["result"]["hits"]
            visible = sum(1 for (_m, rel), hits in zip(marks, found_hits) if rel in hits)
            cell.update(
                update_ms_median=_ms(percentile(times, 50)),
                update_ms_max=_ms(max(times)),
                updates=len(times),
                updates_visible=visible,
            )
        last = peer.stats()
        cell["peak_rss_mb"] = round(last["result"].get("proc_peak_rss_mb", last["peak_rss_mb"]), 1)
        cell["index_mb"] = round(peer.index_bytes() / (1024 * 1024), 2)
    except (WorkerError, PeerUnavailable, OSError) as exc:
        cell["error"] = str(exc)[-1500:]
        log(f"[{peer.name}] {corpus.name}: FAILED: {str(exc)[:300]}")
    finally:
        peer.stop()
        shutil.rmtree(base, ignore_errors=True)


def run_corpus_cells(
    peers: list[Peer], corpus, scratch: Path, queries: list[tuple[str, str]], updates: int
) -> list[dict[str, Any]]:
    """Measure the systems on one corpus (each on its own copy); never raises for a system's own errors.

    Every system is built first and kept running, so their query latencies can be
    measured taking turns (``measure_latencies``); the rest of each cell follows.
    """
    opened: list[tuple[Peer, dict[str, Any], Path | None]] = []
    for peer in peers:
        log(f"[{peer.name}] {corpus.name}: building ...")
        cell, copy = open_cell(peer, corpus, scratch)
        opened.append((peer, cell, copy))
    measure_latencies([(p, c) for p, c, copy in opened if copy is not None], corpus.name, queries)
    for peer, cell, copy in opened:
        if copy is not None:
            log(f"[{peer.name}] {corpus.name}: updating ...")
            finish_cell(peer, cell, corpus, copy, scratch, queries, updates)
        log(f"[{peer.name}] {corpus.name}: build {cell.get('build_s')} s, p50 {cell.get('query_p50_ms')} ms")
    return [cell for _peer, cell, _copy in opened]


def _cell_dir(scratch: Path, corpus_name: str, peer_name: str) -> Path:
    """Where one system's copy of a corpus and its own files live during its cell."""
    return scratch / f"{corpus_name}--{peer_name}"


def _measured(queries: list[tuple[str, str]]) -> list[str]:
    """The measured query texts: those after the warm-up ones (all of them when there are no more)."""
    texts = [q for q, _src in queries]
    return texts[WARMUP:] or texts


def _fail(peer: Peer, cell: dict[str, Any], corpus_name: str, exc: Exception, base: Path | None = None) -> None:
    """Record a system's failure in its cell and stop its worker."""
    cell["error"] = str(exc)[-1500:]
    log(f"[{peer.name}] {corpus_name}: FAILED: {str(exc)[:300]}")
    peer.stop()
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# LoCoMo: evidence recall@k and within a token budget
# ---------------------------------------------------------------------------------------
def _body_tokens(root: Path, rels: list[str]) -> dict[str, int]:
    """Tokens of each file's text (frontmatter left out), by the project's own counter for every system."""
    from ctxos.services.tokens import count_tokens

    out = {}
    for rel in rels:
        try:
            out[rel] = count_tokens(body_text((root / rel).read_text(encoding="utf-8")).strip())
        except OSError:
            out[rel] = 0
    return out


def pack_within_budget(hits: list[str], tokens: dict[str, int], budget: int) -> list[str]:
    """A peer's ranked results packed greedily into ``budget`` (full text, skip what does not fit)."""
    used, chosen = 0, []
    for rel in hits:
        cost = tokens.get(rel, 0)
        if used + cost <= budget:
            chosen.append(rel)
            used += cost
    return chosen


def run_locomo(
    peer: Peer, unit: str, samples: list[dict], scratch: Path, *, max_questions: int | None
) -> dict[str, Any]:
    """Recall of one system on one unit over all given conversations."""
    cell: dict[str, Any] = {"system": peer.name, "unit": unit}
    top_k = max(RECALL_KS)
    at_k: dict[int, list] = {k: [] for k in RECALL_KS}
    at_budget: dict[int, list] = {b: [] for b in BUDGETS}
    build_s, lat, docs, skipped = 0.0, [], 0, 0
    try:
        for sample in samples:
            src = scratch / "locomo-src" / unit / str(sample.get("sample_id"))
            if src.exists():
                shutil.rmtree(src)
            ws = write_workspace(sample, unit, src, max_questions=max_questions)
            skipped += ws.skipped_questions
            base = scratch / f"locomo--{unit}--{peer.name}--{ws.sample_id}"
            copy = base / "corpus"
            if copy.exists():
                shutil.rmtree(copy)
            shutil.copytree(src, copy)
            tokens = _body_tokens(src, list(ws.files))
            try:
                peer.start(copy, base / "work")
                built = peer.build()
                build_s += built["elapsed_s"]
                docs += int(built["result"].get("docs") or 0)
                texts = [q.text for q in ws.questions]
                peer.queries(texts[:3], top_k, **({"mode": "rank"} if peer.name == "ctxos" else {}))
                if peer.name == "ctxos":
                    reply = peer.queries(texts, top_k, mode="rank")
                else:
                    reply = peer.queries(texts, top_k)
                ranked = reply["result"]["hits"]
                lat.extend(reply["result"]["latencies_s"])
                for q, hits in zip(ws.questions, ranked):
                    for k in RECALL_KS:
                        at_k[k].append((q, ws.recall(q, hits[:k])))
                for budget in BUDGETS:
                    if peer.name == "ctxos":
                        delivered = peer.queries(texts, top_k, mode="context", budget=budget)["result"]["hits"]
                    else:
                        delivered = [pack_within_budget(h, tokens, budget) for h in ranked]
                    for q, hits in zip(ws.questions, delivered):
                        at_budget[budget].append((q, ws.recall(q, hits)))
                cell["peak_rss_mb"] = max(cell.get("peak_rss_mb", 0.0), round(peer.stats()["peak_rss_mb"], 1))
            finally:
                peer.stop()
                shutil.rmtree(base, ignore_errors=True)
        cell.update(
            conversations=len(samples),
            docs=docs,
            build_s_total=round(build_s, 2),
            query_p50_ms=_ms(percentile(lat, 50)),
            query_p95_ms=_ms(percentile(lat, 95)),
            skipped_questions=skipped,
            recall_at_k={str(k): summarise_recall(v) for k, v in at_k.items()},
            recall_in_budget={str(b): summarise_recall(v) for b, v in at_budget.items()},
        )
    except (WorkerError, PeerUnavailable, OSError) as exc:
        cell["error"] = str(exc)[-1500:]
        log(f"[{peer.name}] locomo {unit}: FAILED: {str(exc)[:300]}")
    return cell


# ---------------------------------------------------------------------------------------
# ratios, tables
# ---------------------------------------------------------------------------------------
RATIO_FIELDS = (
    ("build_s", "build"),
    ("update_ms_median", "update"),
    ("query_p50_ms", "p50"),
    ("query_p95_ms", "p95"),
    ("peak_rss_mb", "peak RSS"),
    ("index_mb", "index size"),
)


def ratios(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """peer / ctxos for each measure on each corpus (>1: the peer costs more than AI Context OS)."""
    out = []
    by = {(c["corpus"], c["system"]): c for c in cells if "error" not in c}
    for (corpus, system), cell in sorted(by.items()):
        ours = by.get((corpus, "ctxos"))
        if system == "ctxos" or ours is None:
            continue
        row: dict[str, Any] = {"corpus": corpus, "peer": system}
        for key, label in RATIO_FIELDS:
            if cell.get(key) and ours.get(key):
                row[label] = float(f"{cell[key] / ours[key]:.3g}")
        if len(row) > 2:
            out.append(row)
    out.sort(key=lambda r: (_corpus_order(r["corpus"]), _system_order(r["peer"])))
    return out


def scale_curve(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Query latency and memory against N for the generated corpora, and where ours stops being interactive."""
    curve: dict[str, list] = {}
    for cell in cells:
        if cell.get("corpus", "").startswith("gen-") and "error" not in cell and "skipped" not in cell:
            n = int(cell["corpus"].split("-")[1])
            curve.setdefault(cell["system"], []).append(
                {
                    "n": n,
                    "query_p50_ms": cell.get("query_p50_ms"),
                    "query_p95_ms": cell.get("query_p95_ms"),
                    "peak_rss_mb": cell.get("peak_rss_mb"),
                    "build_s": cell.get("build_s"),
                    "index_mb": cell.get("index_mb"),
                }
            )
    for points in curve.values():
        points.sort(key=lambda p: p["n"])
    first_slow = {}
    for system, points in curve.items():
        slow = [p["n"] for p in points if (p["query_p95_ms"] or 0) > INTERACTIVE_P95_MS]
        first_slow[system] = slow[0] if slow else None
    ours = curve.get("ctxos", [])
    return {
        "points": curve,
        "interactive_p95_ms": INTERACTIVE_P95_MS,
        "first_n_not_interactive": first_slow,
        "ctxos_first_n_not_interactive": first_slow.get("ctxos"),
        "ctxos_largest_n_measured": ours[-1]["n"] if ours else None,
    }


def print_report(data: dict[str, Any]) -> None:
    cells = data.get("corpus_cells", [])
    if cells:
        log("\n== Build, update, latency, memory, size (per corpus and system) ==")
        rows = []
        for c in cells:
            if "error" in c:
                rows.append([c["corpus"], c["system"], "FAILED: " + c["error"].splitlines()[0][:60]] + [""] * 8)
                continue
            if "skipped" in c:
                rows.append([c["corpus"], c["system"], "skipped"] + [""] * 8)
                continue
            rows.append(
                [
                    c["corpus"],
                    c["system"],
                    c.get("docs"),
                    c.get("build_s"),
                    c.get("update_ms_median"),
                    c.get("query_p50_ms"),
                    c.get("query_p95_ms"),
                    c.get("peak_rss_mb"),
                    c.get("index_mb"),
                    c.get("known_item_at10", "-"),
                    f"{c.get('updates_visible', '-')}/{c.get('updates', '-')}",
                ]
            )
        print_table(
            [
                "corpus",
                "system",
                "docs",
                "build s",
                "update ms",
                "p50 ms",
                "p95 ms",
                "peak RSS MB",
                "index MB",
                "known@10 %",
                "edits found",
            ],
            rows,
        )
        for c in cells:
            if "skipped" in c:
                log(f"  {c['system']} on {c['corpus']}: {c['skipped']}")
        ratio_rows = data.get("ratios", [])
        if ratio_rows:
            log("\n== Ratios peer / AI Context OS (>1 = the peer is slower / bigger) ==")
            labels = [label for _k, label in RATIO_FIELDS]
            print_table(
                ["corpus", "peer", *labels],
                [[r["corpus"], r["peer"], *[r.get(x, "-") for x in labels]] for r in ratio_rows],
            )
        curve = data.get("scale_curve", {})
        if curve.get("points"):
            log(f"\n== Scale curve (interactive = p95 <= {INTERACTIVE_P95_MS:.0f} ms) ==")
            rows = [
                [system, p["n"], p["query_p50_ms"], p["query_p95_ms"], p["peak_rss_mb"], p["build_s"]]
                for system, points in curve["points"].items()
                for p in points
            ]
            print_table(["system", "N", "p50 ms", "p95 ms", "peak RSS MB", "build s"], rows)
    locomo = data.get("locomo_cells", [])
    if locomo:
        log("\n== LoCoMo dev: evidence recall (%), categories 1-4 [all categories] ==")
        rows = []
        for c in locomo:
            if "error" in c:
                rows.append([c["unit"], c["system"], "FAILED"] + [""] * 8)
                continue
            rk, rb = c["recall_at_k"], c["recall_in_budget"]
            rows.append(
                [c["unit"], c["system"]]
                + [f"{rk[str(k)]['cat1_4']} [{rk[str(k)]['all']}]" for k in RECALL_KS]
                + [f"{rb[str(b)]['cat1_4']}" for b in BUDGETS]
                + [rk[str(RECALL_KS[0])]["questions"]]
            )
        for unit, paper in PAPER_RECALL.items():
            if any(c.get("unit") == unit for c in locomo):
                rows.append(
                    [unit, "paper (DRAGON)"] + [paper.get(k, "-") for k in RECALL_KS] + ["-"] * len(BUDGETS) + ["-"]
                )
        print_table(
            ["unit", "system", *[f"R@{k}" for k in RECALL_KS], *[f"in {b} tok" for b in BUDGETS], "questions"], rows
        )


# ---------------------------------------------------------------------------------------
# profiling our query path at the largest corpus
# ---------------------------------------------------------------------------------------
def profile_ctxos(corpus, scratch: Path, queries: list[str], out: Path) -> dict[str, Any]:
    peer = make_peer("ctxos")
    base = scratch / f"profile--{corpus.name}"
    try:
        copy = copy_corpus(corpus, base / "corpus")
        peer.start(copy, base / "work")
        peer.build()
        peer.queries(queries[:WARMUP], QUERY_K)
        return peer.call("profile", queries=queries, out=str(out))["result"]
    finally:
        peer.stop()
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------------------
def code_fingerprint() -> dict[str, Any]:
    """Which engine code was measured: sha1 over ``services/*.py`` (and the git commit, if any)."""
    import hashlib
    import subprocess

    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha1()
    for path in sorted((root / "services").glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {"services_sha1": digest.hexdigest()[:12], "git_commit": out.stdout.strip() if out.returncode == 0 else None}


def _split(value: str | None, default: tuple[str, ...]) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else list(default)


def merge(paths: list[Path]) -> dict[str, Any]:
    data: dict[str, Any] = {"corpus_cells": [], "locomo_cells": [], "merged_from": [], "systems": {}}
    for path in paths:
        part = json.loads(path.read_text(encoding="utf-8"))
        data["merged_from"].append(
            {"file": path.name, "ran_at": part.get("ran_at"), "argv": part.get("argv"), "code": part.get("code")}
        )
        for key in ("corpus_cells", "locomo_cells"):
            new = part.get(key, [])
            keyf = (
                (lambda c: (c.get("corpus"), c["system"]))
                if key == "corpus_cells"
                else (lambda c: (c.get("unit"), c["system"]))
            )
            replaced = {keyf(c) for c in new}
            data[key] = [c for c in data[key] if keyf(c) not in replaced] + new
        data["systems"].update(part.get("systems", {}))
        for extra in ("profile", "unavailable"):
            if part.get(extra):
                data.setdefault(extra, {}).update(part[extra])
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--small", action="store_true", help="tiny corpora; ctxos, its daemon and BM25 (used by the test)"
    )
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON results")
    parser.add_argument("--systems", help=f"comma list from {','.join(SYSTEMS)} (default: all; --small: ctxos,bm25)")
    parser.add_argument("--with-basic-memory", action="store_true", help="include basic-memory in --small")
    parser.add_argument("--corpora", help="comma list: tldr, obsidian-help, gen-N (default: all five; 'none' to skip)")
    parser.add_argument("--locomo-units", help="comma list from turns,observations,summaries ('none' to skip)")
    parser.add_argument("--locomo-samples", type=int, default=None, help="how many conversations (default: all 5)")
    parser.add_argument("--queries", type=int, default=None, help="measured queries per corpus (default 100; small 20)")
    parser.add_argument("--updates", type=int, default=None, help="edited files per corpus (default 5; small 3)")
    parser.add_argument(
        "--basic-memory-max-docs",
        type=int,
        default=None,
        help="skip basic-memory on corpora larger than this (default 10000 in the full run, "
        "none in --small; 0 = no cap): its build runs at ~10 files/s here",
    )
    parser.add_argument(
        "--daemon-max-docs",
        type=int,
        default=None,
        help="skip the daemon peer on corpora larger than this (default 10000 in the full run; "
        "0 = no cap): see CAP_NOTES",
    )
    parser.add_argument(
        "--profile", action="store_true", help="profile ctxos queries on the largest corpus (pyinstrument)"
    )
    parser.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temp dir, removed)")
    parser.add_argument("--merge", type=Path, nargs="+", help="merge earlier JSON results into one report")
    args = parser.parse_args(argv)

    if args.merge:
        data = merge(args.merge)
        data["corpus_cells"].sort(key=lambda c: (_corpus_order(c["corpus"]), _system_order(c["system"])))
        data["locomo_cells"].sort(key=lambda c: (UNITS.index(c["unit"]), _system_order(c["system"])))
        data["corpus_cells"] = [
            _skipped_cell(
                c["system"], c["corpus"], c["files"], _cap_of(c), data["corpus_cells"], CAP_NOTES.get(c["system"], "")
            )
            if "skipped" in c
            else c
            for c in data["corpus_cells"]
        ]
        data["ratios"] = ratios(data["corpus_cells"])
        data["scale_curve"] = scale_curve(data["corpus_cells"])
        print_report(data)
        write_results("peers", data, args.json)
        return 0

    small = args.small
    systems = _split(
        args.systems,
        ("ctxos", "ctxos-daemon", "bm25") + (("basic-memory",) if args.with_basic_memory else ()) if small else SYSTEMS,
    )
    corpora = [] if args.corpora == "none" else _split(args.corpora, SMALL_CORPORA if small else FULL_CORPORA)
    units = [] if args.locomo_units == "none" else _split(args.locomo_units, ("turns",) if small else UNITS)
    n_queries = args.queries or (20 if small else 100)
    updates = args.updates or (3 if small else 5)
    n_samples = args.locomo_samples or (1 if small else None)
    max_questions = 40 if small else None
    caps = {
        "basic-memory": args.basic_memory_max_docs
        if args.basic_memory_max_docs is not None
        else (0 if small else 10000),
        "ctxos-daemon": args.daemon_max_docs if args.daemon_max_docs is not None else (0 if small else 10000),
    }

    own_scratch = args.workdir is None
    scratch = Path(tempfile.mkdtemp(prefix="ctxos-peers-")) if own_scratch else args.workdir
    scratch.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "argv": sys.argv[1:] if argv is None else argv,
        "code": code_fingerprint(),
        "systems": {},
        "unavailable": {},
        "corpus_cells": [],
        "locomo_cells": [],
        "settings": {
            "queries": n_queries,
            "warmup": WARMUP,
            "latency_batch": LATENCY_BATCH,
            "k": QUERY_K,
            "updates": updates,
            "recall_ks": list(RECALL_KS),
            "budgets": list(BUDGETS),
            "interactive_p95_ms": INTERACTIVE_P95_MS,
        },
    }
    started = time.perf_counter()
    try:
        peers: list[Peer] = []
        for name in systems:
            peer = make_peer(name)
            try:
                peer.prepare()
                peers.append(peer)
                data["systems"][name] = {"label": peer.label, "version": peer.version}
            except PeerUnavailable as exc:
                data["unavailable"][name] = str(exc)
                log(f"[{name}] not run: {exc}")
        for name in corpora:
            corpus = prepare_corpus(name, scratch, log=log)
            queries = make_queries(corpus.source, n_queries + WARMUP)
            size = sum(1 for _ in corpus.source.rglob("*.md"))
            runnable = []
            for peer in peers:
                cap = caps.get(peer.name, 0)
                if cap and size > cap:
                    data["corpus_cells"].append(
                        _skipped_cell(peer.name, name, size, cap, data["corpus_cells"], CAP_NOTES.get(peer.name, ""))
                    )
                    log(f"[{peer.name}] {name}: skipped ({size} files > cap {cap})")
                    continue
                runnable.append(peer)
            t0 = time.perf_counter()
            data["corpus_cells"] += run_corpus_cells(runnable, corpus, scratch, queries, updates)
            log(f"{name}: {len(runnable)} systems measured in {time.perf_counter() - t0:.0f} s")
            _checkpoint(data, args.json)
        if units:
            samples = load_samples(DATA_DIR)
            if n_samples:
                samples = samples[:n_samples]
            for unit in units:
                for peer in peers:
                    if peer.name == "ctxos-daemon":
                        continue  # the same engine and ranking as "ctxos": identical recall
                    log(f"[{peer.name}] locomo {unit}: {len(samples)} conversations ...")
                    data["locomo_cells"].append(run_locomo(peer, unit, samples, scratch, max_questions=max_questions))
                    _checkpoint(data, args.json)
        if args.profile and corpora:
            largest = max(corpora, key=_corpus_order)
            corpus = prepare_corpus(largest, scratch, log=log)
            queries = [q for q, _ in make_queries(corpus.source, n_queries + WARMUP)]
            # The profile holds this machine's paths: it stays in the git-ignored cache, never in results/.
            CACHE_DIR.mkdir(parents=True, exist_ok=True)
            out = CACHE_DIR / f"profile-ctxos-{largest}"
            log(f"[ctxos] profiling {len(queries)} queries on {largest} ...")
            data["profile"] = {largest: profile_ctxos(corpus, scratch, queries, out)}
    finally:
        if own_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    data["wall_s"] = round(time.perf_counter() - started, 1)
    data["ratios"] = ratios(data["corpus_cells"])
    data["scale_curve"] = scale_curve(data["corpus_cells"])
    print_report(data)
    write_results("peers", data, args.json, small=small)
    if args.json is not None:
        args.json.with_name(args.json.stem + ".partial.json").unlink(missing_ok=True)
    failed = [c for c in data["corpus_cells"] + data["locomo_cells"] if "error" in c]
    return 1 if failed else 0


CAP_NOTES = {
    "ctxos-daemon": (
        "; on its first start over the generated 50,000-memory workspace the daemon archives "
        "its ~6,300 expired scratch memories one file at a time (scratch-expiry job): measured "
        "once with --daemon-max-docs 0, it was ready after 178 s but settled only 607 s later, "
        "with a peak RSS of 3.1 GB (see PEERS.md)"
    ),
}
CAP_FLAGS = {"basic-memory": "--basic-memory-max-docs", "ctxos-daemon": "--daemon-max-docs"}


def _skipped_cell(
    system: str, corpus: str, size: int, cap: int, done: list[dict[str, Any]], note: str = ""
) -> dict[str, Any]:
    """A cell not run because of a size cap, with the build time the measured rate implies."""
    measured = sorted(
        (c for c in done if c["system"] == system and c.get("build_s") and c.get("docs")), key=lambda c: c["docs"]
    )
    rates = [c["docs"] / c["build_s"] for c in measured]  # the largest measured corpus last
    reason = f"not run: {size} files is over {CAP_FLAGS.get(system, '--max-docs')} {cap}"
    cell: dict[str, Any] = {"system": system, "corpus": corpus, "files": size, "skipped": reason + note}
    if rates and system == "basic-memory":
        rate = rates[-1]
        cell["projected_build_s"] = round(size / rate)
        cell["skipped"] += (
            f"; at the {rate:.1f} files/s of its largest measured build, the build alone "
            f"would take ~{size / rate / 60:.0f} min (a projection, not a measurement)"
        )
    return cell


def _checkpoint(data: dict[str, Any], path: Path | None) -> None:
    """Cells so far, next to the final JSON (``*.partial.json``): a long run that dies keeps them."""
    if path is None:
        return
    partial = path.with_name(path.stem + ".partial.json")
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _cap_of(cell: dict[str, Any]) -> int:
    import re

    match = re.search(r"-max-docs (\d+)", cell.get("skipped", ""))
    return int(match.group(1)) if match else 0


def _corpus_order(name: str) -> int:
    if name.startswith("gen-"):
        return 10 + int(name.split("-")[1])
    return {"obsidian-help": 0, "tldr": 1}.get(name, 5)


def _system_order(name: str) -> int:
    return SYSTEMS.index(name) if name in SYSTEMS else len(SYSTEMS)


if __name__ == "__main__":
    sys.exit(main())
