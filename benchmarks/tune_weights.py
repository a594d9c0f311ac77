"""Tune the intent weight rows on LoCoMo dev (how the shipped rows were chosen; docs/engine.md#tuning).

For every LoCoMo dev question and retrieval unit the engine's own query path
collects the candidates and their raw signals once (``collect``). Any weight
row is then evaluated offline by re-ranking those candidates exactly as
``query.score_query`` does (first pass without graph proximity, the best 3
as graph seeds, second pass). A coordinate search from the shipped row
(``search``: scale one weight at a time by 0, 0.5, 0.75, 1.33 or 2, or change
the embedding share of the semantic signal; keep what improves) maximises
mean recall@5 + recall@10 over the three units, per intent the questions get
(``recall``, ``default``; LoCoMo has almost no debug or brainstorm questions); the score of the chosen
row is also reported under leave-one-conversation-out cross-validation
(tune on 4 conversations, measure on the 5th) so the overfit is visible.

    python benchmarks/tune_weights.py [--recollect] [--config _config.yaml] [--halves]
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import UNITS, _evidence, build_locomo_workspace  # noqa: E402
from corpora import DATA_DIR  # noqa: E402
from ctxos.services.config import default_config  # noqa: E402
from ctxos.services.engine import Engine  # noqa: E402
from ctxos.services.query_dates import QueryDates, date_weights, find_dates  # noqa: E402
from ctxos.services.semantic.scorer import EMBED_SHARE  # noqa: E402

_DATED = QueryDates(months=((1, 1),))  # any named date: only its presence changes the row

SIGNALS = ("semantic", "bm25", "graph", "recency", "importance", "frequency")
CACHE = Path(__file__).resolve().parent / ".cache" / "tune_weights.pkl"


def collect(small: bool = False) -> list[dict]:
    """One record per (conversation, unit, question): candidate signals and the evidence."""
    data = json.loads((DATA_DIR / "locomo-dev" / "locomo-dev.json").read_text(encoding="utf-8"))
    records = []
    for conv, sample in enumerate(data[:1] if small else data):
        qas = [q for q in sample["qa"] if _evidence(q)]
        for unit in UNITS:
            with tempfile.TemporaryDirectory(prefix="tune-") as tmp:
                covers = build_locomo_workspace(Path(tmp), sample, unit)
                engine = Engine(Path(tmp))
                engine.load()
                graph = engine.graph()
                try:
                    for qa in qas:
                        scored = engine.score_query(str(qa["question"]), budget=2000)
                        cands = [c for c in scored.candidates if c.reason not in ("rule", "always_load")]
                        ids = [c.memory.id for c in cands]
                        pos = {mid: i for i, mid in enumerate(ids)}
                        sem = np.array([c.signals["semantic"] for c in cands])
                        cos = np.array([c.cosine for c in cands])
                        keyword = (sem - EMBED_SHARE * cos) / (1 - EMBED_SHARE) if engine.vectors else sem
                        records.append(
                            {
                                "conv": conv,
                                "unit": unit,
                                "intent": scored.intent,
                                "dated": bool(find_dates(str(qa["question"]))),
                                "ids": ids,
                                "cos": cos,
                                "keyword": keyword,
                                "bm25": np.array([c.signals["bm25"] for c in cands]),
                                "authority": np.array([graph.authority.get(m, 0.0) for m in ids]),
                                "recency": np.array([c.signals["recency"] for c in cands]),
                                "importance": np.array([c.signals["importance"] for c in cands]),
                                "frequency": np.array([c.signals["frequency"] for c in cands]),
                                "neigh": [[pos[o] for o in graph.neighbours(m) if o in pos] for m in ids],
                                "covers": [covers.get(m, set()) for m in ids],
                                "evidence": _evidence(qa),
                            }
                        )
                finally:
                    engine.close()
    return records


def rank(rec: dict, w: dict[str, float], share: float) -> np.ndarray:
    """Candidate order for weight row ``w`` (two passes, as score_query; a named date raises recency)."""
    if rec.get("dated"):
        w = date_weights(dict(w), _DATED)
    sem = share * rec["cos"] + (1 - share) * rec["keyword"]
    base = (
        w["semantic"] * sem
        + w["bm25"] * rec["bm25"]
        + w["recency"] * rec["recency"]
        + w["importance"] * rec["importance"]
        + w["frequency"] * rec["frequency"]
    )
    first = base + w["graph"] * 0.5 * rec["authority"]
    seeds = np.argsort(-first, kind="stable")[:3]
    prox = np.zeros_like(first)
    for s in seeds:
        prox[rec["neigh"][s]] = 0.5
    second = base + w["graph"] * np.minimum(1.0, 0.5 * rec["authority"] + prox)
    return np.argsort(-second, kind="stable")


def recall_at(rec: dict, order: np.ndarray, k: int) -> float:
    got: set[str] = set()
    for i in order[:k]:
        got |= rec["covers"][i]
    return len(rec["evidence"] & got) / len(rec["evidence"])


def objective(records: list[dict], w: dict[str, float], share: float) -> float:
    if not records:
        return 0.0
    total = 0.0
    for rec in records:
        order = rank(rec, w, share)
        total += recall_at(rec, order, 5) + recall_at(rec, order, 10)
    return 50.0 * total / len(records)


# Constant on LoCoMo (no access log; every memory has the default importance), so LoCoMo cannot
# say anything about them: they keep the shipped share.
FIXED = ("frequency", "importance")
FACTORS = (0.0, 0.5, 0.75, 1.33, 2.0)
SHARES = (0.0, 0.3, 0.5, 0.7, 1.0)


def _normal(row: dict[str, float], fixed: dict[str, float]) -> dict[str, float]:
    """Rescale the tuned weights to fill what the ``FIXED`` ones (kept as shipped) leave."""
    room = 1.0 - sum(fixed.values())
    total = sum(v for k, v in row.items() if k not in fixed) or 1.0
    return {k: (fixed[k] if k in fixed else round(room * v / total, 3)) for k, v in row.items()}


def search(records: list[dict], start: dict[str, float], share: float, rounds: int = 3) -> tuple[dict, float, float]:
    """Coordinate search from ``start``: scale one weight (or change the embedding share) at a time,
    keep a change when the objective improves; stop after ``rounds`` or when nothing improves."""
    start = {k: float(start.get(k, 0.0)) for k in SIGNALS}
    shipped_total = sum(start.values()) or 1.0
    fixed = {k: start[k] / shipped_total for k in FIXED}
    best_w, best_share = _normal(start, fixed), share
    best = objective(records, best_w, best_share)
    for _ in range(rounds):
        improved = False
        for name in SIGNALS:
            if name in FIXED:
                continue
            for factor in FACTORS:
                trial = dict(best_w)
                trial[name] = trial[name] * factor if trial[name] > 0 else 0.05 * factor
                trial = _normal(trial, fixed)
                value = objective(records, trial, best_share)
                if value > best + 1e-9:
                    best_w, best, improved = trial, value, True
        for candidate in SHARES:
            value = objective(records, best_w, candidate)
            if value > best + 1e-9:
                best_share, best, improved = candidate, value, True
        if not improved:
            break
    return best_w, best_share, best


def halves(records: list[dict], rows: dict[str, dict[str, float]], share: float) -> dict[str, list[float]]:
    """R@5 and R@10 per unit on the even and the odd conversations, each question ranked with its intent's row.

    The split used since the second issue-13 round: a change is chosen on the even conversations
    (0, 2, 4) and kept only when the odd ones (1, 3) move the same way (docs/engine.md#tuning).
    """
    out: dict[str, list[float]] = {}
    for unit in UNITS:
        for parity, name in ((0, "even"), (1, "odd")):
            subset = [r for r in records if r["unit"] == unit and r["conv"] % 2 == parity]
            if not subset:
                continue
            orders = [rank(r, rows.get(r["intent"], rows["default"]), share) for r in subset]
            out[f"{unit}/{name}"] = [
                round(100 * sum(recall_at(r, o, k) for r, o in zip(subset, orders)) / len(subset), 1) for k in (5, 10)
            ]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="_config.yaml whose rows to start from (default: shipped)")
    parser.add_argument("--recollect", action="store_true")
    parser.add_argument("--halves", action="store_true", help="only report R@5/R@10 per unit on even/odd conversations")
    args = parser.parse_args(argv)
    if CACHE.exists() and not args.recollect:
        records = pickle.loads(CACHE.read_bytes())
    else:
        records = collect()
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        CACHE.write_bytes(pickle.dumps(records))
    config = yaml.safe_load(Path(args.config).read_text()) if args.config else default_config()
    if args.halves:
        print(json.dumps(halves(records, config["weights"], EMBED_SHARE)))
        return 0
    out = {}
    for intent in ("recall", "default"):
        subset = [r for r in records if r["intent"] == intent]
        start = config["weights"][intent]
        before = objective(subset, start, EMBED_SHARE)
        w, share, value = search(subset, start, EMBED_SHARE)
        folds = []
        for held in sorted({r["conv"] for r in subset}):
            train = [r for r in subset if r["conv"] != held]
            test = [r for r in subset if r["conv"] == held]
            fw, fshare, _ = search(train, start, EMBED_SHARE)
            folds.append((objective(test, fw, fshare), objective(test, start, EMBED_SHARE), len(test)))
        n = max(1, sum(f[2] for f in folds))
        out[intent] = {
            "questions": len(subset),
            "start_objective": round(before, 2),
            "weights": w,
            "embed_share": share,
            "dev_objective": round(value, 2),
            "cv_tuned": round(sum(f[0] * f[2] for f in folds) / n, 2),
            "cv_start": round(sum(f[1] * f[2] for f in folds) / n, 2),
        }
        print(intent, json.dumps(out[intent]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
