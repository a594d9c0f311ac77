"""Two daemon settings compared in one run: 8-client bursts alternated between two warm daemons.

On a shared machine the speed drifts by tens of percent within minutes (issue 16's sessions
measured 8.9 and 13.5 ms for the same query loop an hour apart). A daemon setting measured
in one ``bench_daemon.py`` run and its alternative in the next differ by the machine as
much as by the setting. This benchmark builds one workspace, copies it, starts a daemon on
each copy with its own environment (``--a`` and ``--b``: ``NAME=VALUE`` pairs), warms both
(each query once, then until neither uses CPU: the start-up jobs done), and sends the same
8-client burst (``bench_daemon.measure_queries``: each client's queries drawn from the same
seed) to A and B in turn, A first in even rounds and B first in odd ones. Both see the same
minutes of the machine. It prints the p50/p95 of all queries and the number of bursts in
which B's p95 was lower than A's.

    python benchmarks/bench_daemon_pair.py --a CTXOS_INTERPRETER_TUNING=0 --b CTXOS_INTERPRETER_TUNING=1
    python benchmarks/bench_daemon_pair.py --small    # seconds; what tests run

Default: 10,000 memories of the documentation corpora (``bench_daemon.py``'s workspace),
14 bursts of 25 queries per client. Each daemon's ``status`` ``interpreter`` section is kept in
the JSON, so a run shows what each side actually ran with.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_daemon import QUERIES, Daemon, measure_queries, wait_quiet  # noqa: E402
from common import add_common_args, chosen_settings, machine_info, percentile, print_table, write_results  # noqa: E402
from corpora import DOC_CORPORA, build_workspace  # noqa: E402
from ctxos.services.workspace import init_workspace  # noqa: E402

FULL = {"memories": 10_000, "corpora": DOC_CORPORA, "bursts": 14, "clients": 8, "per_client": 25}
SMALL = {"memories": 200, "corpora": ("obsidian-help", "foam-docs"), "bursts": 2, "clients": 8, "per_client": 3}


def parse_env(pairs: list[str]) -> dict[str, str]:
    """``["NAME=VALUE", ...]`` as a dict; a pair without ``=`` is refused with its text."""
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"not NAME=VALUE: {pair!r}")
        env[name] = value
    return env


def _summary(latencies_ms: list[float], burst_p95s: list[float]) -> dict[str, Any]:
    return {
        "queries": len(latencies_ms),
        "p50_ms": percentile(latencies_ms, 50),
        "p95_ms": percentile(latencies_ms, 95),
        "burst_p95_median_ms": statistics.median(burst_p95s) if burst_p95s else 0.0,
        "burst_p95_ms": burst_p95s,
    }


def run(settings: dict[str, Any], env_a: dict[str, str], env_b: dict[str, str]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-pair-"))
    runtime = Path(tempfile.mkdtemp(prefix="ctxrt-", dir="/tmp"))
    daemons: list[Daemon] = []
    try:
        first = work / "a"
        init_workspace(first, seed_examples=False)
        build_workspace(first, settings["memories"], source=tuple(settings["corpora"]))
        second = work / "b"
        shutil.copytree(first, second)
        for root, env in ((first, env_a), (second, env_b)):
            daemons.append(Daemon(root, runtime, None, env=env))
        statuses = []
        for daemon in daemons:
            daemon.wait_ready()
            with daemon.client() as client:
                daemon.wait_settled(client)
                for query in QUERIES:  # each query once: the bursts measure repeated queries
                    client.call("get_context", {"query": query})
                statuses.append(client.call("status"))
        for daemon in daemons:  # the start-up jobs (link graph, communities, router files) done on both
            wait_quiet(daemon, *((0.5, 2) if settings["memories"] < 10_000 else (1.0, 6)))
        latencies: list[list[float]] = [[], []]
        burst_p95s: list[list[float]] = [[], []]
        for burst in range(settings["bursts"]):
            for side in (0, 1) if burst % 2 == 0 else (1, 0):
                measured = measure_queries(daemons[side], settings["clients"], settings["per_client"])
                latencies[side].extend(measured["latencies_ms"])
                burst_p95s[side].append(percentile(measured["latencies_ms"], 95))
        lower = sum(1 for a, b in zip(burst_p95s[0], burst_p95s[1]) if b < a)
        return {
            "settings": settings,
            "env_a": env_a,
            "env_b": env_b,
            "interpreter_a": statuses[0].get("interpreter"),
            "interpreter_b": statuses[1].get("interpreter"),
            "memories": statuses[0].get("memories"),
            "a": _summary(latencies[0], burst_p95s[0]),
            "b": _summary(latencies[1], burst_p95s[1]),
            "bursts_b_lower": lower,
        }
    finally:
        for daemon in daemons:
            daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--a", nargs="*", default=[], metavar="NAME=VALUE", help="environment of daemon A")
    parser.add_argument("--b", nargs="*", default=[], metavar="NAME=VALUE", help="environment of daemon B")
    parser.add_argument("--memories", type=int, help="workspace size (default 10,000; small 200)")
    parser.add_argument("--bursts", type=int, help="bursts per daemon (default 14; small 2)")
    args = parser.parse_args(argv)
    settings = chosen_settings(args, SMALL, FULL, "memories", "bursts")
    env_a, env_b = parse_env(args.a), parse_env(args.b)
    result = run(settings, env_a, env_b)
    a, b = result["a"], result["b"]
    info = machine_info()
    print(f"bench_daemon_pair on {info['cpu']} x{info['cores']}, Python {info['python']}")
    print(
        f"{result['memories']} memories, {settings['bursts']} bursts each of {settings['clients']} clients x {settings['per_client']} queries"
    )
    print_table(
        ["daemon", "environment", "p50 ms", "p95 ms", "median burst p95 ms"],
        [
            [
                "A",
                " ".join(f"{k}={v}" for k, v in env_a.items()) or "(as is)",
                a["p50_ms"],
                a["p95_ms"],
                a["burst_p95_median_ms"],
            ],
            [
                "B",
                " ".join(f"{k}={v}" for k, v in env_b.items()) or "(as is)",
                b["p50_ms"],
                b["p95_ms"],
                b["burst_p95_median_ms"],
            ],
        ],
    )
    print(f"bursts where B's p95 is lower: {result['bursts_b_lower']} of {settings['bursts']}")
    write_results("bench_daemon_pair", result, args.json, small=args.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
