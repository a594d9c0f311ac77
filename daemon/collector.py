"""The garbage collector's settings for a process that serves queries all day.

Once the workspace is loaded:

- **Freeze what the load built** (``gc.freeze``). A full (generation 2) collection
  walks every tracked object while holding the interpreter lock: during a governance
  run at 10,000 memories the longest stall of every other thread was such a pass
  (726 ms; 9 passes, 4.8 s in all). The store, index maps and caches a load builds live
  as long as the daemon, so scanning them again and again finds nothing; frozen, the same
  run's passes took 2.0 s in all and at most 487 ms. Frozen objects are still freed by
  reference counting when dropped (only a reference cycle among them would be kept). No
  ``gc.collect()`` first: it would walk the whole heap once more on the way to ready.
- **Collect the young generation every ``YOUNG_THRESHOLD`` allocations, not 700.**
  Almost everything a query allocates is freed by reference counting when it returns;
  what outlives it is cache entries (postings, rendered blocks, query facts: ~240
  tracked objects per new query at 10,000 memories). With CPython's default of 700, a
  collection ran every query or so and promoted those entries, so every ~50 queries a
  full pass walked all of them again: 0.9-1.1 ms of every distinct query's ~10 on
  average, and each full pass (8 per 400 queries, 10-25 ms) landed inside one query's
  latency. At 10,000 the collector costs ~0.4 ms a query and runs no full pass in 400
  distinct queries; in the daemon under 8 clients (~840 repeated queries) 257-370 ms
  of collection became 35-42 ms, RSS unchanged (130 MiB; docs/engine.md, "Session 19").
  A cycle of garbage waits at most 10,000 allocations longer: kilobytes.

``CTXOS_GC_TUNING=0`` keeps CPython's thresholds (for comparisons); the freeze stays.
"""

from __future__ import annotations

import gc
import os

YOUNG_THRESHOLD = 10_000  # allocations between young-generation collections (CPython: 700)


def settle_loaded_heap() -> None:
    """Freeze the loaded heap and space the young collections out (see the module docstring)."""
    gc.freeze()
    if os.environ.get("CTXOS_GC_TUNING", "1") != "0":
        _, middle, old = gc.get_threshold()
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def status() -> dict[str, object]:
    """``status``'s ``collector`` section: the thresholds in force, the frozen objects, passes per generation."""
    return {
        "thresholds": list(gc.get_threshold()),
        "frozen_objects": gc.get_freeze_count(),
        "collections": [generation["collections"] for generation in gc.get_stats()],
    }
