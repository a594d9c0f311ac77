"""History benchmark: what recording each write costs (git commit, journal entry, or nothing), and
what reading a memory's history costs.

In process, on fresh workspaces in a temp dir, through ``Engine.save_memory`` inside a history
scope exactly as an RPC call runs it (one scope per save, so one commit per save in git mode):

* ``off``: ``history.mode: off`` (the write gate and index only: the baseline);
* ``journal``: not a git repository, the journal in ``.ctxos/history/``;
* ``git``: a git repository (a person's first commit holds the workspace), ``git commit --only``.

Then ``history`` (list versions) and ``history_version`` (one version's text and diffs) for a
memory with N versions, in both modes.

Usage::

    python benchmarks/bench_history.py [--small] [--json PATH]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_common_args, machine_info, percentile, print_table, write_results  # noqa: E402
from ctxos.services.engine import Engine  # noqa: E402
from ctxos.services.history import Actor, memory_history, memory_version, scope  # noqa: E402
from ctxos.services.workspace import init_workspace  # noqa: E402


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": max(values) if values else 0.0,
    }


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def _workspace(tmp: Path, mode: str, files: int) -> Path:
    root = tmp / mode
    init_workspace(root, seed_examples=False)
    if mode == "off":
        config = root / "_config.yaml"
        config.write_text(
            config.read_text().replace("  mode: auto                  # auto (git", "  mode: off  # (git")
        )
    for i in range(files):  # a workspace that is not empty
        path = root / "03-projects" / f"p{i}.md"
        path.write_text(
            f"---\nid: p{i}\ntype: project\nl0: Project {i} in the benchmark workspace\n---\n"
            f"Project {i} has some words.\n"
        )
    if mode == "git":
        for args in (
            ["init", "-q"],
            ["config", "user.name", "Bench"],
            ["config", "user.email", "b@x"],
            ["add", "-A"],
            ["commit", "-q", "-m", "workspace"],
        ):
            subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    return root


def run_mode(tmp: Path, mode: str, n: int, files: int) -> dict:
    root = _workspace(tmp, mode, files)
    engine = Engine(root)
    engine.load()
    body = "History benchmark text with a few words in it. " * 40
    actor = Actor("bench via MCP", "save_memory")
    saves: list[float] = []

    def save(i: int) -> None:
        with scope(actor):
            memory = engine.get_memory("hot")
            engine.save_memory(
                type="project",
                id="hot",
                l0="The memory this benchmark rewrites",
                content=f"{body} revision {i}",
                expected_version=memory.version if memory else None,
            )

    for i in range(n):
        saves.append(_timed(lambda i=i: save(i)))
    result: dict = {"mode": engine.history.mode(), "save_ms": _stats(saves)}
    if mode != "off":
        listing = [_timed(lambda: memory_history(engine, "hot")) for _ in range(5)]
        versions = memory_history(engine, "hot")["versions"]
        newest = versions[0]["n"]
        one = [_timed(lambda: memory_version(engine, "hot", newest)) for _ in range(5)]
        result.update({"versions": len(versions), "history_ms": _stats(listing), "version_ms": _stats(one)})
    engine.close()
    return result


def run(n: int, files: int) -> dict:
    modes = ["off", "journal"] + (["git"] if shutil.which("git") else [])
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        results = {mode: run_mode(Path(tmp), mode, n, files) for mode in modes}
    return {"n": n, "files": files, "modes": results, "machine": machine_info()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    args = parser.parse_args(argv)
    result = run(10 if args.small else 100, 20 if args.small else 500)
    rows = []
    for mode, data in result["modes"].items():
        save = data["save_ms"]
        listing = data.get("history_ms")
        one = data.get("version_ms")
        rows.append(
            [
                mode,
                save["n"],
                f"{save['p50']:.1f}",
                f"{save['p95']:.1f}",
                data.get("versions", "-"),
                f"{listing['p50']:.1f}" if listing else "-",
                f"{one['p50']:.1f}" if one else "-",
            ]
        )
    print_table(
        ["history mode", "saves", "save p50 ms", "save p95 ms", "versions", "history p50 ms", "one version p50 ms"],
        rows,
    )
    write_results("history", result, args.json, small=args.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
