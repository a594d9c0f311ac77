"""Shared helpers for the benchmark scripts: timing, percentiles, peak RSS, output.

Conventions every benchmark follows so tests and other helpers can reuse them:
``--small`` runs a reduced version that finishes in seconds (the tests run it),
``--json PATH`` overrides where results go (default ``benchmarks/results/<name>.json``,
or ``<name>-small.json`` in small mode), and a plain-text table is printed.
Peak RSS is read from ``/proc/self/status`` (``VmHWM``) so no extra package is needed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--small", action="store_true", help="reduced run that finishes in seconds (used by tests)")
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON results")


def chosen_settings(
    args: argparse.Namespace, small: dict[str, Any], full: dict[str, Any], *keys: str
) -> dict[str, Any]:
    """The run's settings: ``small`` or ``full`` (``--small``), with each of ``keys`` given on the command line
    (an ``args`` attribute of that name that is set and not zero) put over it."""
    settings = dict(small if args.small else full)
    for key in keys:
        value = getattr(args, key, None)
        if value:
            settings[key] = value
    return settings


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (``pct`` in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (pct / 100.0) * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


@contextmanager
def timer() -> Iterator[dict[str, float]]:
    """``with timer() as t: ...`` then ``t["s"]`` holds the elapsed seconds."""
    box: dict[str, float] = {}
    start = time.perf_counter()
    try:
        yield box
    finally:
        box["s"] = time.perf_counter() - start


def _proc_status_kb(field: str, pid: int | str = "self") -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def peak_rss_mb(pid: int | str = "self") -> float:
    """Peak resident set size of a process in MiB (Linux ``VmHWM``; 0.0 where unavailable)."""
    return _proc_status_kb("VmHWM", pid) / 1024.0


def current_rss_mb(pid: int | str = "self") -> float:
    return _proc_status_kb("VmRSS", pid) / 1024.0


def rss_split_mb(pid: int | str = "self") -> dict[str, float]:
    """RSS in two parts (MiB): ``anon``, the process's own memory, and ``file``, pages of files it maps.

    The file part is mostly shared-library code (libpython, numpy, tokenizers, ...) and
    depends on the page cache more than on the process: the kernel maps every page
    around a touched one that is already cached, so the same daemon shows several MiB
    more RSS after other processes have read the same libraries (measured: ``import
    numpy`` alone 25.4 MiB after dropping the caches, 30.9 with a warm cache). ``anon`` is
    what the process itself holds.
    """
    return {"anon": _proc_status_kb("RssAnon", pid) / 1024.0, "file": _proc_status_kb("RssFile", pid) / 1024.0}


def reset_peak_rss() -> bool:
    """Reset ``VmHWM`` for this process (Linux >= 4.0: write 5 to clear_refs); True when it worked."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def machine_info() -> dict[str, Any]:
    """CPU model, core count, memory, OS and Python: printed with every table."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(_proc_meminfo_kb("MemTotal") / 1024 / 1024, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "python_build": python_build(),
    }


def python_build() -> str:
    """How the interpreter was built, as far as it matters here: whether it calls a shared libpython.

    The engine is pure Python, so its speed follows the interpreter's build. On one machine
    (2026-12-07) a pyenv CPython 3.11.7 (shared libpython, no PGO or LTO) ran a dict-and-float
    loop in 0.242 s against 0.190 s for Debian's 3.11.2 (libpython linked into the executable,
    built with PGO and LTO); benchmarks/README.md, "Issue 16, session 22". A ratio to a peer
    is measured with both in the same interpreter; absolute times compare only within one build.
    (No path: results files hold no paths of the machine that wrote them.)
    """
    try:
        with open("/proc/self/maps", encoding="utf-8") as handle:
            shared = any("libpython" in line for line in handle)
    except OSError:
        return platform.python_implementation()
    return f"{platform.python_implementation()}, {'shared libpython' if shared else 'libpython in the executable'}"


def _proc_meminfo_kb(field: str) -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table (also valid Markdown)."""
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for row in cells[1:]:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    print(format_table(headers, rows))


def write_results(name: str, data: dict[str, Any], path: Path | None = None, *, small: bool = False) -> Path:
    """Write ``data`` plus machine info and a timestamp as JSON; returns the path written."""
    if path is None:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = RESULTS_DIR / (f"{name}-small.json" if small else f"{name}.json")
    payload = {
        "benchmark": name,
        "small": small,
        "ran_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        **data,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    print(f"results written to {path}")
    return path


# Queries a person asks of the documentation corpora (tldr, vault help): the footprint and daemon
# benchmarks replay them.
DOC_QUERIES = [
    "how to deploy a release",
    "git rebase interactive",
    "search files by name",
    "network ports in use",
    "compress a folder",
    "sync notes between devices",
    "python virtual environment",
    "docker container logs",
    "markdown links and embeds",
    "graph view of notes",
    "change file permissions",
    "publish a vault",
    "ssh keys",
    "plugin settings",
    "disk usage",
    "kill a process",
    "daily notes template",
    "backlinks",
    "list open files",
    "rename many files",
    "what changed in the last release",
    "tags and aliases",
]
