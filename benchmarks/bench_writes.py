"""Write-gate benchmark: what the gate (render, loader parse, checksum re-check, atomic replace) costs.

In process, on a fresh workspace in a temp dir, through ``Engine`` exactly as the daemon calls it:

* create: ``save_memory`` of a new id (gate + index update);
* update: ``save_memory`` with ``expected_version`` (the stale-base re-check included);
* log: ``log_session`` appends to the day's file (which grows, so it re-parses more each time);
* refused: an oversize update that the gate parses and refuses (nothing written).

Usage::

    python benchmarks/bench_writes.py [--small] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_common_args, machine_info, percentile, print_table, write_results  # noqa: E402
from ctxos.services.engine import Engine  # noqa: E402
from ctxos.services.workspace import init_workspace  # noqa: E402
from ctxos.services.writes import WriteRefused  # noqa: E402


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": max(values) if values else 0.0,
    }


def run(n: int, body_chars: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-writes-") as tmp:
        root = Path(tmp) / "ws"
        init_workspace(root, seed_examples=False)
        engine = Engine(root)
        engine.load()
        body = ("Gate benchmark text with some words. " * (body_chars // 37 + 1))[:body_chars]
        create = [
            _timed(
                lambda i=i: engine.save_memory(
                    type="project", id=f"m{i}", l0=f"Memory {i}", content=f"{body} {i}", tags=["bench", "x]"]
                )
            )
            for i in range(n)
        ]
        update = []
        for i in range(n):
            update.append(
                _timed(
                    lambda i=i: engine.save_memory(
                        type="project", id=f"m{i}", l0=f"Memory {i}", content=f"{body} updated {i}", expected_version=1
                    )
                )
            )
        log = [_timed(lambda i=i: engine.log_session(f"event {i}", "details " * 20)) for i in range(n)]

        def refused(i: int) -> None:
            try:
                engine.save_memory(type="project", id=f"m{i}", l0="x", content="é" * 150_000, expected_version=2)
            except WriteRefused:
                return
            raise AssertionError("oversize update was not refused")

        refusals = [_timed(lambda i=i: refused(i)) for i in range(min(n, 50))]
        engine.close()
    return {
        "n": n,
        "body_chars": body_chars,
        "create_ms": _stats(create),
        "update_ms": _stats(update),
        "log_ms": _stats(log),
        "refused_ms": _stats(refusals),
        "machine": machine_info(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    args = parser.parse_args(argv)
    result = run(20 if args.small else 300, 2000)
    rows = [
        [name, result[key]["n"], f"{result[key]['p50']:.1f}", f"{result[key]['p95']:.1f}", f"{result[key]['max']:.1f}"]
        for name, key in (
            ("create (save_memory, new id)", "create_ms"),
            ("update (expected_version)", "update_ms"),
            ("log_session append", "log_ms"),
            ("refused oversize update", "refused_ms"),
        )
    ]
    print_table(["write", "n", "p50 ms", "p95 ms", "max ms"], rows)
    write_results("writes", result, args.json, small=args.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
