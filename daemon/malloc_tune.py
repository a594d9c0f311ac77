"""Give memory back to the system: glibc arenas and trims (Linux; a no-op elsewhere).

Measured at 10,000 memories (``benchmarks/bench_footprint.py``, docs/engine.md
"Footprint"): a governance run leaves RSS ~170 MiB higher although the Python
objects it keeps are ~16 MiB; the rest is freed memory glibc keeps in its
heaps (``malloc_trim`` hands ~75 MiB of it back at once). Each thread that
allocates also gets its own arena (up to 8 per core), so query threads and
the write thread each keep their own high-water mark. So the daemon, before
starting threads, caps the arenas at ``ARENA_MAX``, and trims after work
that allocates a lot and then lets it go: the initial load, and every job on
the background thread (governance, communities, and the graph refresh that
follows each change batch, so a burst is trimmed too), and once queries stop
(``DaemonContext._trim_after_reads``, at most once a second). ``CTXOS_MALLOC_TUNING=0``
turns all of it off (for comparisons).

The mmap threshold is fixed too (``MMAP_THRESHOLD``). By default glibc raises it to the
size of every large block that is freed (up to 32 MiB), and from then on blocks of that
size come from the heap instead of their own mapping. The daemon frees large blocks all the
time at start (the builders' answers during a cold build, the parse cache's ~5 MB pickle),
so the large temporaries that followed (the parse cache's per-memory dicts, the first link
graph's tables) were placed in the heap between objects that stay, and a trim could not give
their pages back: in one process replaying a cold start at 10,000 memories, 146-150 MiB
after the start-up jobs with the moving threshold, 133-134 with it fixed at 128 KiB (issue 16).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

ARENA_MAX = 2
MMAP_THRESHOLD = 128 * 1024  # glibc's initial value, kept: blocks this large get their own mapping
_M_ARENA_MAX = -8  # mallopt parameter numbers in glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_libc = None


def _glibc():
    global _libc
    if _libc is None:
        _libc = False
        if sys.platform.startswith("linux") and os.environ.get("CTXOS_MALLOC_TUNING", "1") != "0":
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                libc.malloc_trim  # noqa: B018 - musl has no malloc_trim: stay off
                libc.mallopt  # noqa: B018
                _libc = libc
            except (OSError, AttributeError):
                _libc = False
    return _libc or None


def configure_heap() -> bool:
    """Cap glibc's malloc arenas and fix its mmap threshold (call before threads start); True when applied."""
    libc = _glibc()
    if libc is None:
        return False
    capped = bool(libc.mallopt(_M_ARENA_MAX, ARENA_MAX))
    fixed = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))  # setting it stops glibc from moving it
    return capped and fixed


def trim() -> None:
    """Return free heap memory to the system (milliseconds; safe from any thread)."""
    libc = _glibc()
    if libc is not None:
        try:
            libc.malloc_trim(0)
        except OSError as exc:  # pragma: no cover
            log.debug("malloc_trim failed: %s", exc)
