"""Engine benchmarks: LoCoMo retrieval quality and speed/memory at 1,000 and 10,000 memories.

(a) LoCoMo (``../shared/data/locomo-dev``): for each of the 5 conversations and
each retrieval unit (dialog turns, observations, sessions) a workspace of
memory files is built; every QA question with evidence is asked through the
engine's one query path, once with ``semantic.model: lexical`` and once with
``wordllama``. Reported: evidence recall@5/@10/@25/@50 for BM25-only (the
same candidates ranked by the BM25 signal alone) and for the composite score
(intent-detected weights), the composite's gain over BM25-only with a 95 %
paired-bootstrap interval (resampling questions), and evidence recall within
a 2,000-token budget (``execute_context_query``; a memory counts when it is
rendered, at any tier, or at L1/L2 only), next to the LoCoMo paper's
published DRAGON numbers; then intent accuracy on the labelled queries.

(b) Scale: workspaces of 1,000 and 10,000 memories from the shared corpora
(``corpora.build_workspace``), each in its own subprocess so peak RSS is per
size: index build (first ``Engine.load``), warm reload, warm query latency
p50/p95 (``execute_context_query``, 4,000-token budget, access logged as for
an agent) and a single-file update (``apply_changes``), per semantic model;
then the time and resident memory to load WordLlama and embed the largest
workspace from scratch, and the nearest-neighbour search time.

    python benchmarks/bench_engine.py [--small] [--json PATH] [--part locomo|scale]

A ``--part`` run replaces that part in the one results file and keeps the other.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from common import RESULTS_DIR, add_common_args, peak_rss_mb, percentile, print_table, write_results  # noqa: E402
from corpora import DATA_DIR, build_workspace  # noqa: E402
from ctxos.services.engine import Engine  # noqa: E402

PAPER = {  # LoCoMo paper (ACL 2024), Table 3, DRAGON retriever, overall recall
    "dialog": {"r5": 56.7, "r10": 66.2},
    "observation": {"r5": 56.2, "r10": 61.3},
    "session": {"r5": 72.1, "r10": 84.7},
}
UNITS = ("dialog", "observation", "session")
EVIDENCE_RE = re.compile(r"D(\d+):(\d+)")
BUDGET = 2000
BM25_ONLY = {"bm25": 1.0}
SCALE_QUERIES = [
    "git commit amend message",
    "docker container logs",
    "show network interfaces ip address",
    "compress a folder with tar",
    "search text in files recursively",
    "sync vault between devices",
    "markdown table syntax",
    "embed an image in a note",
    "publish site custom domain",
    "list running processes",
    "change file permissions",
    "kubernetes pod restart",
    "python virtual environment",
    "ssh key generation",
    "convert video to audio",
    "daily notes template",
    "backlinks graph view",
    "hierarchy lookup schema",
    "keyboard shortcuts hotkeys",
    "fix error when plugin fails to load",
    "why does sync crash",
    "ideas for organising notes",
    "when did we change the config",
    "disk usage of a directory",
    "download a file with curl",
    "rename many files",
    "copy files over ssh",
    "find large files",
    "monitor cpu memory usage",
    "format a usb drive",
    "schedule a cron job",
    "http request json api",
    "pdf merge pages",
    "create a new vault",
    "link to a heading",
    "callout block syntax",
    "tags and nested tags",
    "workspace layout panes",
    "attachments folder setting",
    "canvas cards connections",
]


# --- (a) LoCoMo -------------------------------------------------------------------------------


def _session_date(text: str) -> datetime | None:
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    return None


def _yaml_str(text: str) -> str:
    return json.dumps(" ".join(str(text).split()), ensure_ascii=False)


def _write(path: Path, front: dict, body: str) -> None:
    lines = ["---"]
    for key, value in front.items():
        if isinstance(value, list):
            lines.append(f"{key}: [{', '.join(value)}]")
        else:
            lines.append(f"{key}: {value}")
    lines.append("---")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n" + body.strip() + "\n", encoding="utf-8")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def build_locomo_workspace(dest: Path, sample: dict, unit: str) -> dict[str, set[str]]:
    """Write one conversation as memory files; return memory id -> dialog ids it contains."""
    conv = sample["conversation"]
    covers: dict[str, set[str]] = {}
    sessions = sorted(
        (int(k.split("_")[1]), v) for k, v in conv.items() if re.fullmatch(r"session_\d+", k) and isinstance(v, list)
    )
    for number, turns in sessions:
        when = _session_date(str(conv.get(f"session_{number}_date_time", "")))
        stamp = when.isoformat() if when else None
        dated = {"created": when.date().isoformat(), "modified": stamp} if when else {}
        session_tag = f"session-{number}"
        if unit == "dialog":
            for turn in turns:
                dia = str(turn.get("dia_id", ""))
                if not EVIDENCE_RE.fullmatch(dia):
                    continue
                mid = "d" + dia.replace(":", "-")
                text = f"{turn.get('speaker', '')}: {turn.get('text', '')}"
                if turn.get("blip_caption"):
                    text += f" [shares {turn['blip_caption']}]"
                _write(
                    dest / "02-daily" / f"{mid}.md",
                    {
                        "id": mid,
                        "type": "daily",
                        "l0": _yaml_str(text[:200]),
                        "tags": [_slug(turn.get("speaker", "x")), session_tag],
                        **dated,
                    },
                    text,
                )
                covers[mid] = {dia}
        elif unit == "observation":
            obs = sample.get("observation", {}).get(f"session_{number}_observation", {}) or {}
            for speaker, items in obs.items():
                for k, item in enumerate(items):
                    if not isinstance(item, list) or len(item) < 2:
                        continue
                    text, dias = str(item[0]), item[1]
                    dia_ids = set(EVIDENCE_RE.findall(str(dias)))
                    mid = f"obs-{number}-{_slug(speaker)}-{k}"
                    _write(
                        dest / "01-context" / f"{mid}.md",
                        {
                            "id": mid,
                            "type": "context",
                            "l0": _yaml_str(text),
                            "tags": [_slug(speaker), session_tag],
                            **dated,
                        },
                        text,
                    )
                    covers[mid] = {f"D{a}:{b}" for a, b in dia_ids}
        else:  # session
            summary = sample.get("session_summary", {}).get(f"session_{number}_summary", "")
            dialog = "\n".join(f"{t.get('speaker', '')}: {t.get('text', '')}" for t in turns)
            mid = f"session-{number}"
            first = summary.split(". ")[0] if summary else f"Session {number}"
            _write(
                dest / "02-daily" / f"{mid}.md",
                {"id": mid, "type": "daily", "l0": _yaml_str(first[:200]), "tags": [session_tag], **dated},
                f"{summary}\n<!-- L2 -->\n{dialog}",
            )
            covers[mid] = {str(t.get("dia_id")) for t in turns}
    return covers


def _evidence(qa: dict) -> set[str]:
    found: set[str] = set()
    for item in qa.get("evidence", []) or []:
        found |= {f"D{a}:{b}" for a, b in EVIDENCE_RE.findall(str(item))}
    return found


def _recall(ranked: list[str], covers: dict[str, set[str]], evidence: set[str], k: int | None) -> float:
    got: set[str] = set()
    for mid in ranked[:k] if k else ranked:
        got |= covers.get(mid, set())
    return len(evidence & got) / len(evidence)


MODELS = ("lexical", "wordllama")  # semantic.model settings compared
KS = (5, 10, 25, 50)
BOOTSTRAP = 2000


def paired_bootstrap(a: list[float], b: list[float], seed: int = 13) -> tuple[float, float, float]:
    """Mean of a - b over questions and its 95 % paired-bootstrap interval (points of recall)."""
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if not len(diff):
        return 0.0, 0.0, 0.0
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(BOOTSTRAP, len(diff)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return 100 * float(diff.mean()), 100 * float(low), 100 * float(high)


def _locomo_one(model: str, samples: list[dict], small: bool) -> dict:
    per_unit: dict[str, dict[str, list[float]]] = {u: {} for u in UNITS}
    per_category: dict[str, dict[str, list[float]]] = {}
    query_ms: list[float] = []
    for sample in samples:
        qas = [q for q in sample["qa"] if _evidence(q)]
        if small:
            qas = qas[:40]
        for unit in UNITS:
            with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
                root = Path(tmp)
                covers = build_locomo_workspace(root, sample, unit)
                (root / "_config.yaml").write_text(f"semantic:\n  model: {model}\n", encoding="utf-8")
                engine = Engine(root)
                engine.load()
                try:
                    for qa in qas:
                        question = str(qa["question"])
                        evidence = _evidence(qa)
                        # a session unit covers its dialog ids, so evidence maps to sessions by id
                        started = time.perf_counter()
                        composite = engine.score_query(question).ranked_ids(include_pinned=False)
                        query_ms.append((time.perf_counter() - started) * 1000)
                        bm25 = engine.score_query(question, weights=BM25_ONLY).ranked_ids(include_pinned=False)
                        result = engine.execute_context_query(question, BUDGET, record_access=False)
                        any_tier = [s.id for s in result.selected]
                        full_tier = [s.id for s in result.selected if s.tier in ("L1", "L2")]
                        row = {
                            "budget_any_tier": _recall(any_tier, covers, evidence, None),
                            "budget_l1_l2": _recall(full_tier, covers, evidence, None),
                            "budget_tokens_used": result.tokens_used / BUDGET,
                        }
                        for k in KS:
                            row[f"bm25_r{k}"] = _recall(bm25, covers, evidence, k)
                            row[f"composite_r{k}"] = _recall(composite, covers, evidence, k)
                        for key, value in row.items():
                            per_unit[unit].setdefault(key, []).append(value)
                            if key == "composite_r10" or key == "bm25_r10":
                                cat = f"{unit}/cat{qa.get('category')}"
                                per_category.setdefault(cat, {}).setdefault(key, []).append(value)
                finally:
                    engine.close()
    summary = {}
    for unit in UNITS:
        values = per_unit[unit]
        means = {k: 100.0 * sum(v) / len(v) for k, v in values.items() if v}
        n = len(values.get("bm25_r5", []))
        delta = {}
        for k in (5, 10):
            mean, low, high = paired_bootstrap(values[f"composite_r{k}"], values[f"bm25_r{k}"])
            delta[f"r{k}"] = {"mean": round(mean, 2), "ci95": [round(low, 2), round(high, 2)]}
        summary[unit] = {
            "questions": n,
            **{k: round(v, 1) for k, v in means.items()},
            "composite_minus_bm25": delta,
            "paper_dragon_r5": PAPER[unit]["r5"],
            "paper_dragon_r10": PAPER[unit]["r10"],
        }
    categories = {
        cat: {k: round(100.0 * sum(v) / len(v), 1) for k, v in vals.items()}
        for cat, vals in sorted(per_category.items())
    }
    return {
        "units": summary,
        "by_category_r10": categories,
        "score_query_ms_p50": round(percentile(query_ms, 50), 2),
        "score_query_ms_p95": round(percentile(query_ms, 95), 2),
    }


def intent_accuracy() -> dict:
    """Accuracy on the labelled queries (tests/fixtures/intent_queries.tsv), without and with the classifier."""
    from ctxos.services.config import default_config
    from ctxos.services.intent import detect_intent_detail
    from ctxos.services.semantic import PrototypeClassifier, load_model

    path = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "intent_queries.tsv"
    rows = [
        line.split("\t", 1)
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    triggers = default_config()["intent_triggers"]
    classifier = PrototypeClassifier(load_model("wordllama"))
    out = {"queries": len(rows)}
    for name, clf in (("lexical", None), ("wordllama", classifier)):
        correct = sum(detect_intent_detail(q, triggers, clf).intent == label for label, q in rows)
        out[name] = round(100.0 * correct / len(rows), 1)
    return out


def run_locomo(small: bool) -> dict:
    data = json.loads((DATA_DIR / "locomo-dev" / "locomo-dev.json").read_text(encoding="utf-8"))
    samples = data[:1] if small else data
    out: dict = {"budget_tokens": BUDGET, "models": {}}
    for model in MODELS:
        out["models"][model] = _locomo_one(model, samples, small)
    out["intent_accuracy"] = intent_accuracy()
    for model in MODELS:
        rows = []
        for unit in UNITS:
            u = out["models"][model]["units"][unit]
            d = u["composite_minus_bm25"]["r10"]
            rows.append(
                [unit, u["questions"]]
                + [f"{u[f'bm25_r{k}']:.1f}" for k in KS]
                + [f"{u[f'composite_r{k}']:.1f}" for k in KS]
                + [
                    f"{d['mean']:+.1f} [{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]",
                    f"{u['budget_any_tier']:.1f}",
                    f"{u['budget_l1_l2']:.1f}",
                    f"{PAPER[unit]['r5']:.1f}/{PAPER[unit]['r10']:.1f}",
                ]
            )
        print(f"\nLoCoMo evidence recall (%), locomo-dev{' (small)' if small else ''}, semantic.model: {model}:")
        print_table(
            ["unit", "questions"]
            + [f"BM25 R@{k}" for k in KS]
            + [f"composite R@{k}" for k in KS]
            + [
                "R@10 composite-BM25 (95% CI)",
                f"in {BUDGET} tok (any tier)",
                f"in {BUDGET} tok (L1/L2)",
                "paper R@5/R@10",
            ],
            rows,
        )
    acc = out["intent_accuracy"]
    print(
        f"\nIntent accuracy on {acc['queries']} labelled queries: patterns+triggers {acc['lexical']:.1f} %, "
        f"+ nearest-example classifier {acc['wordllama']:.1f} %"
    )
    # the default model's numbers stay at the top level (what the small-mode test and older readers use)
    out["units"] = out["models"]["wordllama"]["units"]
    return out


def embed_one(n: int) -> dict:
    """Runs in a child process: memory and time to embed ``n`` memories from scratch (no cache)."""
    from common import current_rss_mb
    from ctxos.services.config import load_config
    from ctxos.services.semantic import VectorIndex, load_model
    from ctxos.services.workspace import scan_workspace

    with tempfile.TemporaryDirectory(prefix=f"embed-{n}-") as tmp:
        root = Path(tmp)
        build_workspace(root, n)
        memories = [m for m in scan_workspace(root, load_config(root)) if hasattr(m, "checksum")]
        before = current_rss_mb()
        started = time.perf_counter()
        model = load_model("wordllama")
        load_s = time.perf_counter() - started
        after_model = current_rss_mb()
        vectors = VectorIndex(model, None)
        started = time.perf_counter()
        vectors.sync(memories)
        embed_s = time.perf_counter() - started
        after = current_rss_mb()
        query = model.embed(["ssh key generation"])[0]
        times = []
        for _ in range(200):
            started = time.perf_counter()
            vectors.nearest(query, 200)
            times.append((time.perf_counter() - started) * 1000)
    return {
        "memories": len(memories),
        "model_load_s": round(load_s, 2),
        "embed_s": round(embed_s, 2),
        "rss_model_mb": round(after_model - before, 1),
        "rss_model_and_vectors_mb": round(after - before, 1),
        "matrix_mb": round(vectors.memory_bytes() / 2**20, 1),
        "nearest_ms_p50": round(percentile(times, 50), 3),
        "nearest_ms_p95": round(percentile(times, 95), 3),
    }


# --- (b) scale ------------------------------------------------------------------------------


def scale_one(n: int, queries: int, model: str = "wordllama") -> dict:
    """Runs in a child process: build, load, query and update one workspace of ``n`` memories."""
    with tempfile.TemporaryDirectory(prefix=f"scale-{n}-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        build_workspace(root, n)
        (root / "_config.yaml").write_text(f"semantic:\n  model: {model}\n", encoding="utf-8")
        write_s = time.perf_counter() - started
        engine = Engine(root)
        started = time.perf_counter()
        engine.load()
        build_s = time.perf_counter() - started
        engine.close()
        engine = Engine(root)
        started = time.perf_counter()
        engine.load()
        reload_s = time.perf_counter() - started
        for q in SCALE_QUERIES:  # warm-up: graph, caches, searchers
            engine.execute_context_query(q, 4000, record_access=False)
        times: list[float] = []
        cpu: list[float] = []
        used: list[float] = []
        for i in range(queries):
            q = SCALE_QUERIES[i % len(SCALE_QUERIES)]
            started, cpu_started = time.perf_counter(), time.process_time()
            result = engine.execute_context_query(q, 4000)
            cpu.append((time.process_time() - cpu_started) * 1000)
            times.append((time.perf_counter() - started) * 1000)
            used.append(result.tokens_used)
        target = next(iter(sorted(engine.store.by_path)))
        updates: list[float] = []
        for i in range(10):
            path = root / target
            path.write_text(path.read_text(encoding="utf-8") + f"\nEdit number {i}.\n", encoding="utf-8")
            started = time.perf_counter()
            engine.apply_changes([path])
            updates.append((time.perf_counter() - started) * 1000)
        status = engine.status()
        engine.close()
    return {
        "model": model,
        "memories": status["memories"],
        "invalid": status["invalid"],
        "write_files_s": round(write_s, 2),
        "index_build_s": round(build_s, 2),
        "warm_reload_s": round(reload_s, 2),
        "query_ms_p50": round(percentile(times, 50), 2),
        "query_ms_p95": round(percentile(times, 95), 2),
        "query_ms_max": round(max(times), 2),
        "queries": len(times),
        "query_cpu_ms_p50": round(percentile(cpu, 50), 2),
        "query_cpu_ms_p95": round(percentile(cpu, 95), 2),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "tokens_used_mean": round(sum(used) / len(used), 1),
        "single_file_update_ms_p50": round(percentile(updates, 50), 2),
        "index_segments": status["index"]["segments"],
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def _child(*args: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_scale(small: bool) -> dict:
    sizes = (300,) if small else (1000, 10000)
    queries = 40 if small else 200
    out: dict[str, dict] = {}
    rows = []
    for n in sizes:
        for model in MODELS:
            stats = _child("--scale-one", str(n), "--queries", str(queries), "--model", model)
            out[str(n) if model == "wordllama" else f"{n}-{model}"] = stats
            rows.append(
                [
                    n,
                    model,
                    stats["index_build_s"],
                    stats["warm_reload_s"],
                    stats["query_ms_p50"],
                    stats["query_ms_p95"],
                    stats["query_cpu_ms_p50"],
                    stats["query_cpu_ms_p95"],
                    stats["single_file_update_ms_p50"],
                    stats["peak_rss_mb"],
                    stats["load_average_1m"],
                ]
            )
    print("\nScale (execute_context_query, 4,000-token budget, warm; wall and CPU time per query):")
    print_table(
        [
            "memories",
            "semantic.model",
            "load (index+embed) s",
            "reload s",
            "p50 ms",
            "p95 ms",
            "CPU p50 ms",
            "CPU p95 ms",
            "1-file update ms",
            "peak RSS MiB",
            "load avg",
        ],
        rows,
    )
    n = sizes[-1]
    embed = _child("--embed-one", str(n))
    out["embeddings"] = embed
    print(f"\nEmbeddings at {embed['memories']:,} memories (wordllama, from scratch, no cache):")
    print_table(
        [
            "model load s",
            "embed s",
            "RSS model MiB",
            "RSS model+vectors MiB",
            "matrix MiB",
            "nearest p50 ms",
            "nearest p95 ms",
        ],
        [
            [
                embed["model_load_s"],
                embed["embed_s"],
                embed["rss_model_mb"],
                embed["rss_model_and_vectors_mb"],
                embed["matrix_mb"],
                embed["nearest_ms_p50"],
                embed["nearest_ms_p95"],
            ]
        ],
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--part", choices=("locomo", "scale", "all"), default="all")
    parser.add_argument("--scale-one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--queries", type=int, default=200, help=argparse.SUPPRESS)
    parser.add_argument("--model", default="wordllama", help=argparse.SUPPRESS)
    parser.add_argument("--embed-one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.scale_one:
        print(json.dumps(scale_one(args.scale_one, args.queries, args.model)))
        return 0
    if args.embed_one:
        print(json.dumps(embed_one(args.embed_one)))
        return 0
    results: dict = {}
    if args.part in ("locomo", "all"):
        results["locomo"] = run_locomo(args.small)
    if args.part in ("scale", "all"):
        results["scale"] = run_scale(args.small)
    if args.part != "all":
        # One file per benchmark: a partial run keeps the other part of the last full record.
        results = {**_previous_parts(args.json, args.small), **results}
    write_results("engine", results, args.json, small=args.small)
    return 0


def _previous_parts(path: Path | None, small: bool) -> dict:
    """``locomo`` and ``scale`` from the results file a run is about to replace (empty when absent)."""
    path = path or RESULTS_DIR / ("engine-small.json" if small else "engine.json")
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: old[k] for k in ("locomo", "scale") if k in old}


if __name__ == "__main__":
    sys.exit(main())
