"""The peers benchmark in small mode, end to end, plus the pieces its numbers rest on.

``bench_peers.py --small`` runs AI Context OS (real Engine in a worker process, and
the real daemon over its Unix socket) and the BM25 baseline (Tantivy, installed from
PyPI into ``benchmarks/.cache/venvs`` on first use) on tiny corpora and one LoCoMo
conversation. basic-memory is left out of
the small mode because its install alone takes about a minute; the full run and
``--small --with-basic-memory`` include it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

from bench_peers import pack_within_budget, ratios, scale_curve  # noqa: E402
from peers.locomo import parse_evidence, summarise_recall, write_workspace  # noqa: E402


def test_parse_evidence_repairs_malformed_ids() -> None:
    assert parse_evidence(["D1:3"]) == ["D1:3"]
    assert parse_evidence(["D8:6; D9:17"]) == ["D8:6", "D9:17"]
    assert parse_evidence(["D:11:26"]) == ["D11:26"]
    assert parse_evidence(["D", ""]) == []
    assert parse_evidence(None) == []


def test_locomo_workspace_maps_files_to_evidence(tmp_path: Path) -> None:
    sample = {
        "sample_id": "s1",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat named Miso."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "Nice!", "blip_caption": "a photo of a cat"},
            ],
            "session_2_date_time": "2:00 pm on 9 May, 2023",
            "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "Miso broke a vase."}],
        },
        "observation": {"session_1_observation": {"Ann": [["Ann adopted a cat.", "D1:1"]]}},
        "session_summary": {"session_1_summary": "Ann told Bo about her cat.", "session_2_summary": "The vase."},
        "qa": [
            {"question": "What is the cat's name?", "category": 4, "evidence": ["D1:1"]},
            {"question": "What broke?", "category": 1, "evidence": ["D2:1", "D1:1"]},
            {"question": "Unanswerable", "category": 5, "evidence": ["D"]},
        ],
    }
    turns = write_workspace(sample, "turns", tmp_path / "t")
    assert turns.files == {"02-daily/d1-1.md": ["D1:1"], "02-daily/d1-2.md": ["D1:2"], "02-daily/d2-1.md": ["D2:1"]}
    text = (tmp_path / "t" / "02-daily" / "d1-2.md").read_text()
    assert "created: 2023-05-08" in text and "a photo of a cat" in text
    assert len(turns.questions) == 2 and turns.skipped_questions == 1
    q_multi = turns.questions[1]
    assert turns.recall(q_multi, ["02-daily/d2-1.md"]) == 0.5
    assert turns.recall(q_multi, ["02-daily/d2-1.md", "02-daily/d1-1.md"]) == 1.0
    summaries = write_workspace(sample, "summaries", tmp_path / "s")
    assert summaries.recall(q_multi, ["02-daily/summary-s2.md"]) == 0.5
    obs = write_workspace(sample, "observations", tmp_path / "o")
    assert obs.recall(turns.questions[0], list(obs.files)) == 1.0
    summary = summarise_recall([(turns.questions[0], 1.0), (q_multi, 0.5)])
    assert summary["cat1_4"] == 75.0 and summary["questions"] == 2


def test_pack_within_budget_skips_what_does_not_fit() -> None:
    tokens = {"a": 60, "b": 50, "c": 30}
    assert pack_within_budget(["a", "b", "c"], tokens, 100) == ["a", "c"]
    assert pack_within_budget(["a", "b", "c"], tokens, 10) == []


def test_ratios_and_scale_curve() -> None:
    cells = [
        {
            "corpus": "gen-1000",
            "system": "ctxos",
            "build_s": 2.0,
            "query_p50_ms": 10.0,
            "query_p95_ms": 20.0,
            "peak_rss_mb": 100.0,
            "index_mb": 5.0,
            "update_ms_median": 4.0,
        },
        {
            "corpus": "gen-1000",
            "system": "bm25",
            "build_s": 1.0,
            "query_p50_ms": 1.0,
            "query_p95_ms": 2.0,
            "peak_rss_mb": 50.0,
            "index_mb": 2.5,
            "update_ms_median": 8.0,
        },
        {"corpus": "gen-5000", "system": "ctxos", "query_p50_ms": 90.0, "query_p95_ms": 150.0, "peak_rss_mb": 300.0},
    ]
    (row,) = ratios(cells)
    assert row == {
        "corpus": "gen-1000",
        "peer": "bm25",
        "build": 0.5,
        "update": 2.0,
        "p50": 0.1,
        "p95": 0.1,
        "peak RSS": 0.5,
        "index size": 0.5,
    }
    curve = scale_curve(cells)
    assert [p["n"] for p in curve["points"]["ctxos"]] == [1000, 5000]
    assert curve["ctxos_first_n_not_interactive"] == 5000


@pytest.mark.slow
def test_bench_peers_small_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "peers-small.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_peers.py"), "--small", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Ratios peer / AI Context OS" in proc.stdout
    data = json.loads(out.read_text())
    assert data["small"] is True and data["machine"]["cores"] >= 1
    systems = ("ctxos", "ctxos-daemon", "bm25")
    assert set(data["systems"]) == set(systems)
    cells = {(c["corpus"], c["system"]): c for c in data["corpus_cells"]}
    assert set(cells) == {(c, s) for c in ("obsidian-help", "gen-300") for s in systems}
    for cell in cells.values():
        assert "error" not in cell, cell
        assert cell["docs"] > 100 and cell["build_s"] > 0, cell
        assert cell["query_p50_ms"] > 0 and cell["query_p95_ms"] >= cell["query_p50_ms"]
        # the three systems were measured taking turns on the same batches of queries
        assert cell["queries"] == 20 and cell["latency_turns"] == "batches of 10, 3 systems in turn"
        assert cell["peak_rss_mb"] > 10 and cell["index_mb"] > 0
        # every edited file was re-indexed and is found by its new word (for the daemon: by its
        # file watcher, and the update time is the edit-to-searchable time)
        assert cell["updates"] == 3 and cell["updates_visible"] == 3
    # both systems find most known items on the real corpus (a query taken from a note finds that note)
    assert cells[("obsidian-help", "ctxos")]["known_item_at10"] >= 60
    assert cells[("obsidian-help", "bm25")]["known_item_at10"] >= 60
    assert {(r["corpus"], r["peer"]) for r in data["ratios"]} == {
        (c, s) for c in ("obsidian-help", "gen-300") for s in ("bm25", "ctxos-daemon")
    }
    # the daemon is a separate process: its memory is its own, and its update includes the watcher
    assert cells[("gen-300", "ctxos-daemon")]["settle_s"] >= 0
    locomo = {c["system"]: c for c in data["locomo_cells"]}
    assert set(locomo) == {"ctxos", "bm25"}  # the daemon ranks with the same engine: not repeated
    for system in ("ctxos", "bm25"):
        rk = locomo[system]["recall_at_k"]
        assert rk["5"]["questions"] == 40
        values = [rk[str(k)]["cat1_4"] for k in (5, 10, 25, 50)]
        assert values == sorted(values) and 0 < values[0] and values[-1] <= 100
        assert locomo[system]["recall_in_budget"]["4000"]["cat1_4"] > 0
