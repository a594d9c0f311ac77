"""Daemon benchmark: save-to-searchable latency, socket query latency, idle RSS and CPU.

A real daemon process (``python -m ctxos.daemon.main --no-http --no-tray``) on
a temporary workspace built from the shared real corpora, measured from the
outside exactly as a client sees it:

* **save-to-searchable**: write a memory file with a unique word, then poll
  ``get_context`` for that word over the socket until the memory is among the
  selected ones; for single edits, and for edits made while a 1,000-file burst
  (a ``git checkout``) is being indexed;
* **socket query latency**: ``get_context`` with 8 concurrent clients (one
  connection each) at 10,000 memories;
* **MCP stdio latency**: ``get_context`` through ``ctxos mcp`` (the stdio
  server an agent starts, with the MCP SDK's client), one call at a time;
* **idle**: RSS and CPU time of the daemon over 60 s with nothing happening;
* **first query**: one ``get_context`` sent the moment the daemon says ready, after
  the cold start and after the warm restart (what an agent asking at once waits for
  the start-up work: the link graph, the query lists, the access counts).

Targets (issue 16), printed in the table and written under ``targets`` in the JSON with the
value measured for each (``issue_targets``):

* at 10,000 memories: cold start <= 6 s, warm restart <= 1.5 s, idle RSS <= 120 MiB, RSS
  after the queries <= 160 MiB and after the burst <= 200 MiB, p95 save-to-searchable
  <= 200 ms for a single edit, p95 socket query <= 40 ms with 8 clients, p95 MCP stdio
  <= 15 ms (issue 3 had 500 and 75 ms);
* at 100,000: warm restart <= 5 s, idle RSS <= 400 MiB, p95 socket query <= 60 ms with
  one client;
* below 10,000 (``--small``) the three latency targets only, as a guide.

    python benchmarks/bench_daemon.py            # full: 10,000 memories, 60 s idle
    python benchmarks/bench_daemon.py --small    # seconds; what tests run
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_mcp import bench_stdio  # noqa: E402
from common import (  # noqa: E402
    DOC_QUERIES,
    add_common_args,
    chosen_settings,
    current_rss_mb,
    machine_info,
    peak_rss_mb,
    percentile,
    print_table,
    rss_split_mb,
    write_results,
)
from corpora import DOC_CORPORA, build_workspace  # noqa: E402
from ctxos.client import DaemonClient, DaemonError  # noqa: E402
from ctxos.services.runtime_paths import socket_path  # noqa: E402
from ctxos.services.workspace import init_workspace  # noqa: E402

# Issue 16's table, by the size it names. Below 10,000 only the latency targets are shown (as a
# guide: the issue sets them at 10,000); at 100,000 the issue names its own three.
LATENCY_TARGETS = {
    "save_p95_ms": 200.0,  # a single edit (issue 3 had 500)
    "query_p95_ms": 40.0,  # socket, 8 clients (issue 3 had 75)
    "stdio_p95_ms": 15.0,  # MCP stdio, 1 client
}
TARGETS_10K = {
    **LATENCY_TARGETS,
    "cold_start_s": 6.0,
    "warm_restart_s": 1.5,
    "idle_rss_mb": 120.0,
    "rss_after_queries_mb": 160.0,
    "rss_after_burst_mb": 200.0,
}
TARGETS_100K = {"warm_restart_s": 5.0, "idle_rss_mb": 400.0, "one_client_p95_ms": 60.0}


def issue_targets(memories: int) -> dict[str, float]:
    """The upper bounds issue 16 sets for a workspace of ``memories`` files (the benchmark's ``--memories``)."""
    if memories >= 100_000:
        return dict(TARGETS_100K)
    if memories >= 10_000:
        return dict(TARGETS_10K)
    return dict(LATENCY_TARGETS)


def measured_against_targets(result: dict[str, Any]) -> dict[str, dict[str, float | bool]]:
    """Each target that applies, with the value measured for it and whether it was met (at most the bound)."""
    values = {
        "save_p95_ms": result["save_single"]["p95"],
        "query_p95_ms": result["query"]["p95"],
        "stdio_p95_ms": result["mcp_stdio"]["p95_ms"],
        "cold_start_s": result["cold_start_ready_s"],
        "warm_restart_s": result["warm_restart_ready_s"],
        "idle_rss_mb": result["idle"]["rss_mb"],
        "rss_after_queries_mb": result["rss_after_queries_mb"],
        "rss_after_burst_mb": result["rss_after_burst_mb"],
        "one_client_p95_ms": result["query_one_client"]["p95"],
    }
    return {
        name: {"target": bound, "value": values[name], "met": values[name] <= bound}
        for name, bound in issue_targets(result["settings"]["memories"]).items()
    }


CLK_TCK = os.sysconf("SC_CLK_TCK")
# Probes ask with a generous budget: the generated workspace has a few long rules, which are
# rendered first and could otherwise fill a small budget before the probe is reached.
PROBE_BUDGET = 16_000

FULL = {
    "corpora": "all",
    "memories": 10_000,
    "idle_s": 60.0,
    "clients": 8,
    "queries_per_client": 100,
    "stdio_rounds": 11,  # passes over the 18 queries through ctxos mcp (198 calls)
    "single_edits": 30,
    "burst_files": 1000,
    "burst_probes": 10,
}
SMALL = {
    "corpora": "small",
    "memories": 200,
    "idle_s": 2.0,
    "clients": 8,
    "queries_per_client": 10,
    "stdio_rounds": 1,
    "single_edits": 5,
    "burst_files": 200,
    "burst_probes": 3,
}

QUERIES = DOC_QUERIES[:18]  # the first 18: the set this benchmark has always used


def _token() -> str:
    """A word that appears in no corpus document (letters only, so every analyzer keeps it whole)."""
    return "zq" + "".join(random.choices(string.ascii_lowercase, k=10))


def _memory(memory_id: str, token: str) -> str:
    return (
        f"---\nid: {memory_id}\ntype: project\nl0: Benchmark probe {token}\nimportance: 0.5\n---\n"
        f"The probe {token} checks how fast a saved file becomes searchable.\n"
    )


class Daemon:
    """The daemon subprocess and how to reach it."""

    def __init__(
        self, root: Path, runtime: Path, debounce_ms: int | None, http: bool = False, env: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self.runtime = runtime
        self.socket = socket_path(root, runtime)
        command = [sys.executable, "-m", "ctxos.daemon.main", "--workspace", str(root), "--no-tray"]
        # --http: as `ctxos start` runs it (HTTP on loopback, any free port); the RSS then includes aiohttp and REST.
        command += ["--http-port", "0"] if http else ["--no-http"]
        if debounce_ms is not None:
            command += ["--debounce-ms", str(debounce_ms)]
        self.output = tempfile.NamedTemporaryFile(prefix="bench-daemon-", suffix=".out", delete=False)
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self.output,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {}), "CTXOS_RUNTIME_DIR": str(runtime)},
        )

    def client(self) -> DaemonClient:
        return DaemonClient(self.socket, timeout=120)

    def wait_ready(self, timeout: float = 900.0) -> float:
        """Seconds from spawn until ``status`` says ready (includes building the index from scratch)."""
        deadline = time.monotonic() + timeout
        client = self.client()  # connects on first call: the socket appears a moment after spawn
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"daemon exited: {Path(self.output.name).read_text()[-3000:]}")
                try:
                    if client.call("status").get("state") == "ready":
                        return time.perf_counter() - self.started
                except (DaemonError, OSError):
                    client.close()
                time.sleep(0.05)
        finally:
            client.close()
        raise TimeoutError("daemon did not become ready")

    def wait_settled(self, client: DaemonClient, timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        quiet = 0
        while time.monotonic() < deadline:
            status = client.call("status")
            quiet = quiet + 1 if status.get("pending_events") == 0 else 0
            if quiet >= 3:
                return
            time.sleep(0.1)
        raise TimeoutError("index did not settle")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime

    def stop(self) -> float:
        started = time.perf_counter()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        os.unlink(self.output.name)
        return time.perf_counter() - started


def save_to_searchable(
    daemon: Daemon, client: DaemonClient, rel_dir: str, memory_id: str, timeout: float = 60.0
) -> float:
    """Write one file, poll get_context over the socket until it is selected; milliseconds."""
    token = _token()
    path = daemon.root / rel_dir / f"{memory_id}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    path.write_text(_memory(memory_id, token), encoding="utf-8")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = client.call("get_context", {"query": token, "budget_tokens": PROBE_BUDGET})
        if any(s["id"] == memory_id for s in result["selected"]):
            return (time.perf_counter() - started) * 1000.0
    raise TimeoutError(f"{memory_id} not searchable after {timeout} s")


def measure_single_edits(daemon: Daemon, count: int) -> tuple[list[float], list[float]]:
    """Save-to-searchable per edit, and the watcher's own lag for it (first event -> index committed).

    The difference is the probe's polling: a ``get_context`` that started before the
    commit misses it, and the next one (a whole query later) finds it.
    """
    latencies, lags = [], []
    with daemon.client() as client:
        for i in range(count):
            latencies.append(save_to_searchable(daemon, client, "03-projects/bench-single", f"single-{i}"))
            last = (client.call("status").get("watcher") or {}).get("last_batch") or {}
            if last.get("lag_ms") is not None:
                lags.append(float(last["lag_ms"]))
            time.sleep(0.2)  # independent edits, not a burst
    return latencies, lags


def measure_burst(daemon: Daemon, files: int, probes: int) -> dict[str, Any]:
    """A burst of ``files`` writes; ``probes`` single edits made while it is indexed; time until all searchable."""
    burst_dir = daemon.root / "05-resources" / "bench-burst"
    burst_dir.mkdir(parents=True, exist_ok=True)
    texts = [_memory(f"burst-{i}", _token()) for i in range(files)]
    probe_latencies: list[float] = []
    errors: list[BaseException] = []
    with daemon.client() as client:
        base_total = client.call("list", {"limit": 0})["total"]

    def probe() -> None:
        try:
            with daemon.client() as client:
                for i in range(probes):
                    probe_latencies.append(save_to_searchable(daemon, client, "03-projects/bench-probe", f"probe-{i}"))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    started = time.perf_counter()
    for i, text in enumerate(texts):
        (burst_dir / f"burst-{i}.md").write_text(text, encoding="utf-8")
    written = time.perf_counter() - started
    prober = threading.Thread(target=probe)
    prober.start()  # probes start while the burst is being indexed
    with daemon.client() as client:
        while client.call("list", {"limit": 0})["total"] < base_total + files:
            time.sleep(0.02)
        all_listed = time.perf_counter() - started
        # the last burst file is searchable too
        last_token = texts[-1].split("Benchmark probe ", 1)[1].split("\n", 1)[0]
        while not any(
            s["id"] == f"burst-{files - 1}"
            for s in client.call("get_context", {"query": last_token, "budget_tokens": PROBE_BUDGET})["selected"]
        ):
            time.sleep(0.02)
        searchable = time.perf_counter() - started
    prober.join()
    if errors:
        raise errors[0]
    return {
        "files": files,
        "write_s": written,
        "all_listed_s": all_listed,
        "all_searchable_s": searchable,
        "probe_ms": probe_latencies,
    }


def first_query_ms(daemon: Daemon) -> float:
    """One get_context sent the moment the daemon says ready: what an agent asking at once waits.

    The daemon's start-up work (the link graph, the query lists, the access counts) runs
    after ready; a query that needs it before it is done waits for it.
    """
    with daemon.client() as client:
        started = time.perf_counter()
        client.call("get_context", {"query": QUERIES[0]})
        return (time.perf_counter() - started) * 1000.0


def measure_queries(daemon: Daemon, clients: int, per_client: int) -> dict[str, Any]:
    latencies: list[float] = []
    engine_ms: list[float] = []  # the engine's own time per query (ContextResult.elapsed_ms)
    lock = threading.Lock()
    errors: list[BaseException] = []
    barrier = threading.Barrier(clients)

    def worker(n: int) -> None:
        rng = random.Random(n)
        mine, inside = [], []
        try:
            with daemon.client() as client:
                client.call("status")  # connect before the clock starts
                barrier.wait()
                for _ in range(per_client):
                    query = rng.choice(QUERIES)
                    started = time.perf_counter()
                    result = client.call("get_context", {"query": query})
                    mine.append((time.perf_counter() - started) * 1000.0)
                    inside.append(float(result.get("elapsed_ms", 0.0)))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        with lock:
            latencies.extend(mine)
            engine_ms.extend(inside)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return {
        "clients": clients,
        "queries": len(latencies),
        "latencies_ms": latencies,
        "engine_ms": engine_ms,
        "throughput_qps": len(latencies) / elapsed if elapsed else 0.0,
    }


def wait_quiet(
    daemon: Daemon, window_s: float = 1.0, quiet_windows: int = 6, max_percent: float = 1.0, timeout_s: float = 300.0
) -> dict[str, float]:
    """Wait until the daemon's background work after a load (communities, router files) is done.

    Quiet means ``quiet_windows`` consecutive windows under ``max_percent`` CPU:
    longer than the scheduler's after-change delay (5 s), so a job that is
    about to start is not mistaken for idleness. Returns how long that took and
    the CPU it used, reported separately rather than counted as "idle".
    """
    started, cpu_start = time.perf_counter(), daemon.cpu_seconds()
    quiet = 0
    while time.perf_counter() - started < timeout_s and quiet < quiet_windows:
        before = daemon.cpu_seconds()
        time.sleep(window_s)
        quiet = quiet + 1 if 100.0 * (daemon.cpu_seconds() - before) / window_s <= max_percent else 0
    return {"seconds": time.perf_counter() - started, "cpu_s": daemon.cpu_seconds() - cpu_start}


def measure_idle(daemon: Daemon, seconds: float) -> dict[str, Any]:
    cpu_before, wall_before = daemon.cpu_seconds(), time.perf_counter()
    time.sleep(seconds)
    cpu = daemon.cpu_seconds() - cpu_before
    wall = time.perf_counter() - wall_before
    return {
        "seconds": wall,
        "cpu_s": cpu,
        "cpu_percent": 100.0 * cpu / wall,
        "rss_mb": current_rss_mb(daemon.proc.pid),
        "rss_split_mb": rss_split_mb(daemon.proc.pid),
        "peak_rss_mb": peak_rss_mb(daemon.proc.pid),
    }


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values) if values else 0.0,
    }


def run(settings: dict[str, Any], debounce_ms: int | None, http: bool = False) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-daemon-"))
    runtime = Path(tempfile.mkdtemp(prefix="ctxrt-", dir="/tmp"))
    try:
        root = work / "ws"
        init_workspace(root, seed_examples=False)
        t0 = time.perf_counter()
        # Small mode reads only the two small vaults (reading all of tldr alone takes seconds).
        source = DOC_CORPORA if settings["corpora"] == "all" else ("obsidian-help", "foam-docs")
        build_workspace(root, settings["memories"], source=source)
        build_s = time.perf_counter() - t0
        daemon = Daemon(root, runtime, debounce_ms, http)
        try:
            ready_s = daemon.wait_ready(settings.get("ready_timeout_s", 900.0))
            cold_first_ms = first_query_ms(daemon)
            with daemon.client() as client:
                daemon.wait_settled(client)
                memories = client.call("status")["memories"]
            background = wait_quiet(daemon, *((0.5, 3) if settings["corpora"] == "small" else (1.0, 6)))
            idle = measure_idle(daemon, settings["idle_s"])
            sequential = measure_queries(daemon, 1, settings["queries_per_client"] * 2)
            queries = measure_queries(daemon, settings["clients"], settings["queries_per_client"])
            stdio = bench_stdio(root, settings["stdio_rounds"], QUERIES, None, runtime)  # the default budget
            after_queries_rss = current_rss_mb(daemon.proc.pid)
            single, single_lag = measure_single_edits(daemon, settings["single_edits"])
            burst = measure_burst(daemon, settings["burst_files"], settings["burst_probes"])
            with daemon.client() as client:
                daemon.wait_settled(client)
                after_rss = current_rss_mb(daemon.proc.pid)
        finally:
            stop_s = daemon.stop()
        # Warm restart: the index and the parse cache are on disk (issue 16: ready <= 1.5 s at 10,000).
        daemon = Daemon(root, runtime, debounce_ms, http)
        try:
            warm_ready_s = daemon.wait_ready(settings.get("ready_timeout_s", 900.0))
            warm_rss = current_rss_mb(daemon.proc.pid)
            warm_first_ms = first_query_ms(daemon)
        finally:
            daemon.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)
    return {
        "settings": settings,
        "debounce_ms": debounce_ms,
        "http": http,
        "memories": memories,
        "build_workspace_s": build_s,
        "cold_start_ready_s": ready_s,
        "stop_s": stop_s,
        "background_after_load": background,
        "idle": idle,
        "rss_after_burst_mb": after_rss,
        "rss_after_queries_mb": after_queries_rss,
        "warm_restart_ready_s": warm_ready_s,
        "first_query_after_cold_start_ms": cold_first_ms,
        "first_query_after_warm_restart_ms": warm_first_ms,
        "rss_after_warm_restart_mb": warm_rss,
        "query": {
            **_stats(queries["latencies_ms"]),
            "clients": queries["clients"],
            "throughput_qps": queries["throughput_qps"],
            "engine_ms": _stats(queries["engine_ms"]),
        },
        "query_one_client": {**_stats(sequential["latencies_ms"]), "engine_ms": _stats(sequential["engine_ms"])},
        "mcp_stdio": stdio,
        "save_single": _stats(single),
        "save_single_index_lag": _stats(single_lag),
        "save_during_burst": _stats(burst["probe_ms"]),
        "burst": {k: v for k, v in burst.items() if k != "probe_ms"},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser)
    parser.add_argument("--memories", type=int, help="workspace size (default 10,000; small 200)")
    parser.add_argument("--idle-seconds", type=float, help="idle measurement window (default 60; small 2)")
    parser.add_argument("--debounce-ms", type=int, default=None, help="daemon debounce (default: config, 150)")
    parser.add_argument(
        "--queries-per-client", type=int, help="queries each of the 8 clients sends (default 100; small 10)"
    )
    parser.add_argument("--burst-files", type=int, help="files written in the burst (default 1,000; small 200)")
    parser.add_argument(
        "--http", action="store_true", help="run the daemon with HTTP on (as `ctxos start` does; default: --no-http)"
    )
    parser.add_argument("--ready-timeout", type=float, default=900.0, help="seconds to wait for ready (default 900)")
    args = parser.parse_args(argv)
    settings = chosen_settings(args, SMALL, FULL, "memories", "queries_per_client", "burst_files")
    settings["ready_timeout_s"] = args.ready_timeout
    if args.idle_seconds is not None:
        settings["idle_s"] = args.idle_seconds
    started, load_before = time.perf_counter(), os.getloadavg()
    result = run(settings, args.debounce_ms, args.http)
    result["total_s"] = time.perf_counter() - started
    # The machine may be shared: the 1-minute load average before and after, for context.
    result["loadavg_1m"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    q, s, b, idle = result["query"], result["save_single"], result["save_during_burst"], result["idle"]
    q1, bg, mcp = result["query_one_client"], result["background_after_load"], result["mcp_stdio"]
    burst = result["burst"]
    checked = result["targets"] = measured_against_targets(result)

    def bound(name: str, unit: str) -> list[str]:
        """The target and met columns of a row: blank when issue 16 sets no target at this size."""
        if name not in checked:
            return ["", ""]
        return [f"<= {checked[name]['target']:g} {unit}".rstrip(), "yes" if checked[name]["met"] else "NO"]

    rows = [
        ["memories indexed", result["memories"], "", ""],
        [
            "cold start to ready (s), index built from scratch",
            result["cold_start_ready_s"],
            *bound("cold_start_s", "s"),
        ],
        [
            "warm restart to ready (s), index and parse cache on disk",
            result["warm_restart_ready_s"],
            *bound("warm_restart_s", "s"),
        ],
        [
            "first get_context right after ready (ms): cold start / warm restart",
            f"{result['first_query_after_cold_start_ms']:.0f} / {result['first_query_after_warm_restart_ms']:.0f}",
            "",
            "",
        ],
        [
            f"socket get_context p50 / p95 (ms), {q['clients']} clients",
            f"{q['p50']:.1f} / {q['p95']:.1f}",
            *bound("query_p95_ms", "ms"),
        ],
        [
            "  of which inside the engine, p50 / p95 (ms)",
            f"{q['engine_ms']['p50']:.1f} / {q['engine_ms']['p95']:.1f}",
            "",
            "",
        ],
        ["socket get_context throughput (queries/s)", q["throughput_qps"], "", ""],
        [
            "socket get_context p50 / p95 (ms), 1 client",
            f"{q1['p50']:.1f} / {q1['p95']:.1f}",
            *bound("one_client_p95_ms", "ms"),
        ],
        [
            "  of which inside the engine, p50 / p95 (ms)",
            f"{q1['engine_ms']['p50']:.1f} / {q1['engine_ms']['p95']:.1f}",
            "",
            "",
        ],
        [
            "MCP stdio get_context p50 / p95 (ms), 1 client",
            f"{mcp['p50_ms']:.1f} / {mcp['p95_ms']:.1f}",
            *bound("stdio_p95_ms", "ms"),
        ],
        ["  of which inside the engine, p50 (ms)", f"{mcp['engine_p50_ms']:.1f}", "", ""],
        [
            "save-to-searchable, single edit p50 / p95 (ms)",
            f"{s['p50']:.0f} / {s['p95']:.0f}",
            *bound("save_p95_ms", "ms"),
        ],
        [
            "  of which the watcher: first event -> index committed, p50 / p95 (ms)",
            f"{result['save_single_index_lag']['p50']:.0f} / {result['save_single_index_lag']['p95']:.0f}",
            "",
            "",
        ],
        [
            f"save-to-searchable during a {burst['files']}-file burst p50 / p95 (ms)",
            f"{b['p50']:.0f} / {b['p95']:.0f}",
            "",
            "",
        ],
        [
            f"{burst['files']}-file burst: all listed / all searchable (s)",
            f"{burst['all_listed_s']:.2f} / {burst['all_searchable_s']:.2f}",
            "",
            "",
        ],
        ["background work after the load (s wall / s CPU)", f"{bg['seconds']:.1f} / {bg['cpu_s']:.1f}", "", ""],
        [f"idle CPU over {idle['seconds']:.0f} s (% of one core)", idle["cpu_percent"], "~0", ""],
        ["idle RSS (MiB)", idle["rss_mb"], *bound("idle_rss_mb", "MiB")],
        [
            "  of which the daemon's own (anonymous) / mapped files (shared libraries), MiB",
            f"{idle['rss_split_mb']['anon']:.1f} / {idle['rss_split_mb']['file']:.1f}",
            "",
            "",
        ],
        [
            f"RSS after {q['n'] + q1['n'] + mcp['calls']} queries (MiB)",
            result["rss_after_queries_mb"],
            *bound("rss_after_queries_mb", "MiB"),
        ],
        ["RSS after the burst (MiB)", result["rss_after_burst_mb"], *bound("rss_after_burst_mb", "MiB")],
        ["RSS right after a warm restart (MiB)", result["rss_after_warm_restart_mb"], "", ""],
        ["SIGTERM to exit (s)", result["stop_s"], "", ""],
        [
            "(build workspace / whole benchmark, s)",
            f"{result['build_workspace_s']:.1f} / {result['total_s']:.1f}",
            "",
            "",
        ],
    ]
    info = machine_info()
    print(
        f"bench_daemon ({'small' if args.small else 'full'}) on {info['cpu']} x{info['cores']}, "
        f"{info['memory_gib']} GiB, {info['os']}, Python {info['python']}"
    )
    print(f"load average (1 min) before / after: {result['loadavg_1m'][0]} / {result['loadavg_1m'][1]}")
    print(f"daemon HTTP: {'on (--http)' if args.http else 'off (--no-http)'}")
    print_table(["metric", "value", "target", "met"], rows)
    write_results("bench_daemon", result, args.json, small=args.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
