"""CPython's own settings for a process that serves queries all day: the collector and thread switching.

(``malloc_tune`` does the same for glibc's heap.) Measured at 10,000 memories, docs/engine.md
"Session 19".

**Thread switching** (``configure_switching``, at start). Queries run on two read threads
beside the event-loop thread, and one interpreter lock lets one of them run at a time. A
thread that waits for the lock asks the running one to let go after ``sys.getswitchinterval()``
(CPython: 5 ms). A repeated query needs ~3 ms of CPU, so at 5 ms two queries and the loop
were handed the lock back and forth mid-query. At ``SWITCH_INTERVAL_S`` (10 ms) a query
mostly runs to its end and gives the lock up there; a long one (a first query at 100,000, a
``list``) is still interrupted every 10 ms, so a short one is not held up behind it for longer
than that. Two warm daemons on copies of one workspace, 8-client bursts alternated between them
(12 bursts each): p95 51.6 -> 47.3 and 60.3 -> 57.2 ms, lower in 9 of 12 bursts both times;
1 ms instead was worse (p95 43.6 -> 47.1 ms). One read thread instead of two did as well as
10 ms, but then any slow read would hold every query up for all of its length.

Once the workspace is loaded (``settle_loaded_heap``):

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
  latency. At 10,000 the collector costs 0.4-0.6 ms a query and ran no full pass in 400
  distinct queries; in the daemon under 8 clients (~840 repeated queries) 257-370 ms
  of collection became 35-42 ms, RSS unchanged (130 MiB). 50,000 was worse: each young
  pass then walked ~50,000 survivors at once (~25 ms). A cycle of garbage waits at most
  10,000 allocations longer: kilobytes.

``CTXOS_INTERPRETER_TUNING=0`` keeps CPython's switch interval and thresholds (for
comparisons); the freeze stays.
"""

from __future__ import annotations

import gc
import os
import sys

SWITCH_INTERVAL_S = 0.010  # how long a thread runs before one waiting for the lock may take it (CPython: 5 ms)
YOUNG_THRESHOLD = 10_000  # allocations between young-generation collections (CPython: 700)


def _tuning() -> bool:
    return os.environ.get("CTXOS_INTERPRETER_TUNING", "1") != "0"


def configure_switching() -> None:
    """Let a thread run ``SWITCH_INTERVAL_S`` before another may take the interpreter lock (at start)."""
    if _tuning():
        sys.setswitchinterval(SWITCH_INTERVAL_S)


def settle_loaded_heap() -> None:
    """Freeze the loaded heap and space the young collections out (see the module docstring)."""
    gc.freeze()
    if _tuning():
        _, middle, old = gc.get_threshold()
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def status() -> dict[str, object]:
    """``status``'s ``interpreter`` section: the settings in force, the frozen objects, passes per generation."""
    return {
        "switch_interval_ms": round(sys.getswitchinterval() * 1000, 3),
        "gc_thresholds": list(gc.get_threshold()),
        "gc_frozen_objects": gc.get_freeze_count(),
        "gc_collections": [generation["collections"] for generation in gc.get_stats()],
    }
