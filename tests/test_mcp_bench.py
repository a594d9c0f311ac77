"""The MCP latency benchmark's small mode runs end to end (real daemon, stdio and HTTP clients)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import shared_data

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_mcp.py"


@pytest.mark.slow
def test_bench_mcp_small(tmp_path):
    shared_data("tldr")
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--small", "--memories", "60", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    rows = {r["transport"]: r for r in data["results"]}
    assert set(rows) == {"socket-rpc", "stdio", "http"}, proc.stdout
    for row in rows.values():
        assert row["calls"] == 20 and 0 < row["p50_ms"] <= row["p95_ms"]
        assert row["over_budget"] == [], row["over_budget"]
    assert "| stdio" in proc.stdout and "| http" in proc.stdout
