"""MCP ``get_context`` latency over each transport, against one running daemon.

A workspace is built from the shared real corpora (``corpora.build_workspace``),
one daemon is started on it (HTTP on a free loopback port), and the same
queries are sent, one at a time, over:

- ``socket-rpc``: the daemon's JSON-RPC over its Unix socket (the baseline the
  stdio server forwards to);
- ``stdio``: ``ctxos mcp`` as a subprocess, with the SDK's stdio client;
- ``http``: Streamable HTTP at ``/mcp`` with the SDK's client.

For each transport the table shows the round-trip p50/p95/mean in ms and the
engine's own query time (``elapsed_ms``) so the transport overhead is visible.
Session set-up (process start, initialize) is timed separately.

    python benchmarks/bench_mcp.py [--small] [--memories N] [--rounds R] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_common_args, percentile, print_table, write_results  # noqa: E402
from corpora import build_workspace  # noqa: E402

QUERIES = [
    "how do I undo the last git commit",
    "docker container networking",
    "sync notes between devices",
    "markdown links between notes",
    "search files by name in the shell",
    "publish a vault as a website",
    "configure plugins",
    "debug a failing network request",
    "compress a folder into an archive",
    "daily notes template",
]
BUDGET = 2000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ctxos() -> str:
    return shutil.which("ctxos") or str(Path(sys.executable).with_name("ctxos"))


def start_daemon(root: Path, runtime_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    from ctxos.client import DaemonClient, DaemonError

    env = {**os.environ, "CTXOS_RUNTIME_DIR": str(runtime_dir)}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ctxos.daemon.main",
                "--workspace",
                str(root),
                "--http-port",
                str(port),
                "--no-tray",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    os.environ["CTXOS_RUNTIME_DIR"] = str(runtime_dir)
    client = DaemonClient.for_workspace(root, timeout=5)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if client.call("status").get("state") == "ready":
                client.close()
                return proc
        except (DaemonError, OSError):
            pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("daemon did not become ready")


def _summary(name: str, rtts: list[float], engine_ms: list[float], setup_ms: float | None) -> dict[str, Any]:
    return {
        "transport": name,
        "calls": len(rtts),
        "p50_ms": percentile(rtts, 50),
        "p95_ms": percentile(rtts, 95),
        "mean_ms": statistics.fmean(rtts) if rtts else 0.0,
        "engine_p50_ms": percentile(engine_ms, 50),
        "overhead_p50_ms": percentile(rtts, 50) - percentile(engine_ms, 50),
        "setup_ms": setup_ms,
    }


def bench_socket(root: Path, rounds: int) -> dict[str, Any]:
    from ctxos.client import DaemonClient

    client = DaemonClient.for_workspace(root)
    rtts, engine = [], []
    client.call("get_context", {"query": QUERIES[0], "budget_tokens": BUDGET})  # warm-up
    over: list[dict[str, Any]] = []
    for _ in range(rounds):
        for query in QUERIES:
            t0 = time.perf_counter()
            result = client.call("get_context", {"query": query, "budget_tokens": BUDGET})
            rtts.append((time.perf_counter() - t0) * 1000)
            engine.append(result["elapsed_ms"])
            if result["tokens_used"] > BUDGET:
                over.append({"query": query, "tokens_used": result["tokens_used"]})
    client.close()
    return {**_summary("socket-rpc", rtts, engine, None), "over_budget": over}


async def _bench_mcp_client(
    name: str, target: Any, rounds: int, queries: list[str] = QUERIES, budget: int | None = BUDGET
) -> dict[str, Any]:
    """``rounds`` passes over ``queries``, one call at a time; ``budget`` None: the workspace's default."""
    from mcp import Client

    def arguments(query: str) -> dict[str, Any]:
        return {"query": query} if budget is None else {"query": query, "budget_tokens": budget}

    t0 = time.perf_counter()
    async with Client(target) as client:
        await client.call_tool("get_context", arguments(queries[0]))  # warm-up
        setup_ms = (time.perf_counter() - t0) * 1000
        rtts, engine = [], []
        over: list[dict[str, Any]] = []
        for _ in range(rounds):
            for query in queries:
                t1 = time.perf_counter()
                result = await client.call_tool("get_context", arguments(query))
                rtts.append((time.perf_counter() - t1) * 1000)
                if result.is_error:
                    raise RuntimeError(f"{name}: get_context failed: {result.content}")
                data = result.structured_content
                if data["tokens_used"] > data["budget_tokens"]:
                    over.append({"query": query, "tokens_used": data["tokens_used"]})
                engine.append(float(data["elapsed_ms"]))
    return {**_summary(name, rtts, engine, setup_ms), "over_budget": over}


def bench_stdio(
    root: Path,
    rounds: int,
    queries: list[str] = QUERIES,
    budget: int | None = BUDGET,
    runtime_dir: Path | None = None,
) -> dict[str, Any]:
    """``ctxos mcp`` as a stdio subprocess (the agent's view), against the daemon already running."""
    from mcp import StdioServerParameters

    env = {
        "CTXOS_RUNTIME_DIR": str(runtime_dir) if runtime_dir else os.environ["CTXOS_RUNTIME_DIR"],
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    if "PYTHONPATH" in os.environ:  # an A/B run of another checkout (docs/engine.md, "Start and latency")
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    params = StdioServerParameters(command=_ctxos(), args=["--workspace", str(root), "mcp", "--no-start"], env=env)
    return asyncio.run(_bench_mcp_client("stdio", params, rounds, queries, budget))


def bench_http(url: str, rounds: int) -> dict[str, Any]:
    """Streamable HTTP with the daemon's stored credential (the per-user token it made on start)."""
    from ctxos.services.credentials import read_token
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def run() -> dict[str, Any]:
        token = read_token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with create_mcp_http_client(headers=headers) as http_client:
            return await _bench_mcp_client("http", streamable_http_client(url, http_client=http_client), rounds)

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--memories", type=int, default=None, help="workspace size (default 2000; small 150)")
    parser.add_argument("--rounds", type=int, default=None, help="passes over the 10 queries (default 20; small 2)")
    args = parser.parse_args(argv)
    n = args.memories or (150 if args.small else 2000)
    rounds = args.rounds or (2 if args.small else 20)

    from ctxos.client import DaemonClient
    from ctxos.services.workspace import init_workspace

    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp:
        tmp_path = Path(tmp)
        root = tmp_path / "ws"
        root.mkdir()
        init_workspace(root, seed_examples=False)
        build_workspace(root, n)
        runtime_dir = Path(tempfile.mkdtemp(prefix="ctxrt-", dir="/tmp"))
        port = _free_port()
        proc = start_daemon(root, runtime_dir, port, tmp_path / "daemon.out")
        try:
            status = DaemonClient.for_workspace(root).call("status")
            rows = [bench_socket(root, rounds), bench_stdio(root, rounds)]
            if status.get("http"):
                rows.append(bench_http(status["http"] + "/mcp", rounds))
            else:
                print(f"http: not available ({status.get('components', {}).get('http', 'not registered')})")
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
            shutil.rmtree(runtime_dir, ignore_errors=True)

    print(f"get_context latency, {n} memories, budget {BUDGET} tokens, {rounds} x {len(QUERIES)} queries")
    print_table(
        [
            "transport",
            "calls",
            "p50 ms",
            "p95 ms",
            "mean ms",
            "engine p50 ms",
            "overhead p50 ms",
            "setup ms",
            "over budget",
        ],
        [
            [
                r["transport"],
                r["calls"],
                r["p50_ms"],
                r["p95_ms"],
                r["mean_ms"],
                r["engine_p50_ms"],
                r["overhead_p50_ms"],
                r["setup_ms"] if r["setup_ms"] is not None else "-",
                len(r["over_budget"]),
            ]
            for r in rows
        ],
    )
    violations = [(r["transport"], v) for r in rows for v in r["over_budget"]]
    for transport, v in violations[:10]:
        print(f"OVER BUDGET ({transport}): {v['query']!r} used {v['tokens_used']} > {BUDGET} tokens")
    write_results(
        "bench_mcp",
        {"memories": n, "budget_tokens": BUDGET, "rounds": rounds, "queries": QUERIES, "results": rows},
        args.json,
        small=args.small,
    )
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
