"""The benchmarks' small modes run end to end and write their JSON (speed targets are not asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import shared_data

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def run_bench(script: str, out: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--small", "--json", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "|" in proc.stdout  # a table was printed
    return json.loads(out.read_text())


def test_bench_engine_small(tmp_path):
    shared_data("locomo-dev")
    data = run_bench("bench_engine.py", tmp_path / "engine.json")
    assert data["small"] is True and data["machine"]["cores"]
    units = data["locomo"]["units"]
    assert set(units) == {"dialog", "observation", "session"}
    for unit in units.values():
        assert unit["questions"] > 0
        for key in ("bm25_r5", "bm25_r10", "composite_r5", "composite_r10", "budget_any_tier"):
            assert 0.0 <= unit[key] <= 100.0
        assert unit["composite_r10"] >= unit["composite_r5"]
    for model in ("lexical", "wordllama"):  # issue 13: both semantic models
        for unit in data["locomo"]["models"][model]["units"].values():
            assert unit["composite_r50"] >= unit["composite_r25"] >= unit["composite_r10"]
            low, high = unit["composite_minus_bm25"]["r10"]["ci95"]
            assert low <= unit["composite_minus_bm25"]["r10"]["mean"] <= high
    accuracy = data["locomo"]["intent_accuracy"]
    assert accuracy["queries"] >= 80 and 0 < accuracy["lexical"] <= 100
    scale = data["scale"]["300"]
    assert scale["memories"] >= 290 and scale["query_ms_p95"] > 0 and scale["peak_rss_mb"] > 0
    assert data["scale"]["300-lexical"]["model"] == "lexical"
    embeddings = data["scale"]["embeddings"]
    assert embeddings["memories"] >= 290 and embeddings["embed_s"] > 0 and embeddings["rss_model_and_vectors_mb"] > 0


def test_bench_tokens_small(tmp_path):
    pytest.importorskip("bpe_openai")
    shared_data("obsidian-help")
    data = run_bench("bench_tokens.py", tmp_path / "tokens.json", "--encoding", "cl100k_base")
    for corpus, stats in data["encodings"]["cl100k_base"].items():
        assert stats["files"] > 0 and stats["bpe_tokens"] > 0, corpus


def test_build_workspace_is_deterministic_and_loads(tmp_path):
    sys.path.insert(0, str(BENCH))
    from corpora import build_workspace

    shared_data("tldr")
    ids_a = build_workspace(tmp_path / "a", 120, source="tldr")
    ids_b = build_workspace(tmp_path / "b", 120, source="tldr")
    assert ids_a == ids_b and len(set(ids_a)) == 120
    from ctxos.services.engine import Engine

    engine = Engine(tmp_path / "a")
    engine.load()
    assert len(engine.store) == 120 and not engine.invalid_files()
    engine.close()


def test_bench_writes_small(tmp_path):
    data = run_bench("bench_writes.py", tmp_path / "writes.json")
    assert data["small"] is True and data["create_ms"]["n"] == 20
    assert data["refused_ms"]["n"] == 20 and data["update_ms"]["p50"] > 0


def test_bench_history_small(tmp_path):
    data = run_bench("bench_history.py", tmp_path / "history.json")
    modes = data["modes"]
    assert data["small"] is True and modes["off"]["save_ms"]["n"] == 10
    assert modes["journal"]["mode"] == "journal" and modes["journal"]["versions"] == 10
    if "git" in modes:
        assert modes["git"]["mode"] == "git" and modes["git"]["versions"] == 10


def test_bench_footprint_small(tmp_path):
    shared_data("obsidian-help")
    data = run_bench("bench_footprint.py", tmp_path / "footprint.json")
    assert data["memories"] > 100
    steps = {s["step"].split(" (")[0]: s for s in data["steps"]}
    assert "Engine.load" in steps and all(s["seconds"] >= 0 for s in data["steps"])
    traced = data["traced_mb_by_component"]
    assert traced["store (parsed memories)"] > 0 and traced["Whoosh index (checksums, searchers)"] > 0
    assert abs(sum(data["query_time_share_pct"].values()) - 100.0) < 0.5


def test_bench_graph_libs_small(tmp_path):
    """igraph's PageRank (the engine's) runs on a real link graph; against networkx when it is installed."""
    shared_data("tldr")
    data = run_bench("bench_graph_libs.py", tmp_path / "graph_libs.json")
    assert data["memories"] >= 290 and data["explicit_edges"] > 0
    for name in ("authority", "centrality"):
        assert data[name]["igraph_ms"] > 0
        if data["networkx"]:
            assert data[name]["max_abs_diff"] < 1e-6  # the same ranks within tolerance
