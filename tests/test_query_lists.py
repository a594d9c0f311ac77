"""The pinned / important / recent lists patched after a change batch equal the lists computed in full.

Real files applied through the engine (as the daemon's watcher applies them):
importance raised and lowered, memories turned into rules or ``always_load``,
``modified`` dates, new and deleted files, and touches (same bytes, new
mtime). More than ``LIST_SIZE`` candidates, so the ranked lists are cut and
the patch must know where they stay exact.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from ctxos.services.engine import Engine, lists
from daemon_helpers import lexical_workspace


def _text(rng: random.Random, i: int) -> str:
    front: dict[str, object] = {"id": f"m-{i}", "l0": f"memory {i}"}
    roll = rng.random()
    if roll < 0.05:
        front["type"] = "rule"
    elif roll < 0.1:
        front["always_load"] = True
    if rng.random() < 0.8:
        front["importance"] = rng.choice([0, 0.2, 0.5, 0.5, 0.7, 0.9, 1.0])
    if rng.random() < 0.3:
        front["modified"] = f"2026-{rng.randrange(1, 12):02d}-{rng.randrange(1, 28):02d}T10:00:00"
    lines = ["---", *(f"{k}: {json.dumps(v)}" for k, v in front.items()), "---", f"Body {rng.random()}", ""]
    return "\n".join(lines)


@pytest.mark.parametrize("seed", [1, 2])
def test_patched_lists_equal_the_full_computation(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    root = lexical_workspace(tmp_path / "ws")
    folder = root / "03-projects"
    names = list(range(200))
    for i in names:
        (folder / f"m-{i}.md").write_text(_text(rng, i), encoding="utf-8")
    engine = Engine(root)
    engine.load()
    try:
        engine.warm_query_caches()
        patched_steps = 0
        mtime = 1_800_000_000.0
        for step in range(80):
            before = engine._lists
            op = rng.choice(["edit", "edit", "add", "delete", "touch", "batch"])
            changed: list[Path] = []
            if op in ("edit", "touch", "batch"):
                for i in rng.sample(names, 4 if op == "batch" else 1):
                    path = folder / f"m-{i}.md"
                    if op != "touch":
                        path.write_text(_text(rng, i), encoding="utf-8")
                    mtime += 10
                    os.utime(path, (mtime, mtime))  # newer than every file: moves in the recent list
                    changed.append(path)
            elif op == "add":
                i = 1000 + step
                names.append(i)
                (folder / f"m-{i}.md").write_text(_text(rng, i), encoding="utf-8")
                changed.append(folder / f"m-{i}.md")
            elif op == "delete":
                i = rng.choice(names)
                names.remove(i)
                (folder / f"m-{i}.md").unlink()
                changed.append(folder / f"m-{i}.md")
            engine.apply_changes(changed)
            full = lists.compute(engine.store.memories, engine.generation)
            assert before is not None
            patched = lists.patch(before, engine.store.memories, engine.generation, lists.LIST_SIZE)
            if patched is not None:
                patched_steps += 1
                assert patched.pinned == full.pinned
                assert patched.important == full.important[: len(patched.important)]
                assert patched.recent == full.recent[: len(patched.recent)]
            if engine.generation == before.generation:
                continue  # a touch alone: the store keeps its generation and the lists (as before this change)
            engine.warm_query_caches()
            assert engine.pinned_ids() == full.pinned
            assert engine.important_ids(64) == full.important[:64]
            assert engine.recent_ids(64) == full.recent[:64]
        assert patched_steps > 40  # the patch path ran, not a full pass every time
    finally:
        engine.close()
