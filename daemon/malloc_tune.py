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
turns both off (for comparisons).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

ARENA_MAX = 2
_M_ARENA_MAX = -8  # mallopt parameter number in glibc's malloc.h
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


def limit_arenas() -> bool:
    """Cap glibc's malloc arenas (call before threads start); True when applied."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, ARENA_MAX))


def trim() -> None:
    """Return free heap memory to the system (milliseconds; safe from any thread)."""
    libc = _glibc()
    if libc is not None:
        try:
            libc.malloc_trim(0)
        except OSError as exc:  # pragma: no cover
            log.debug("malloc_trim failed: %s", exc)
