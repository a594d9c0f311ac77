"""The access log's frequency counts, saved beside it so a restart need not count them again.

Counting the frequency window is a GROUP BY over every logged query's loads:
~1.5 s at 10,000 logged queries and ~5 s at 25,000 (measured 2026-12-07), and
after a warm restart the first ``get_context`` waited for it. So the counts are
saved at a clean close and after each recount, with what they are exact for:
every load of the queries up to id ``newest`` whose time is at least ``since``.
An open then reads this file and brings it up to date with two small queries
(loads written after ``newest``; loads of the window that has moved since),
instead of counting the whole window (``AccessLog._load_saved_counts``).

Like the log, the file is a cache: anything odd about it (missing, torn, another
format or window, an id the log has not reached) means "count the window", and a
memory forgotten while the counts are not loaded deletes it.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .atomic import atomic_write_bytes

log = logging.getLogger(__name__)

COUNTS_FILENAME = "access-counts.json"
FORMAT = 1


@dataclass(frozen=True)
class SavedCounts:
    """Loads (L1/L2) per memory of the queries up to id ``newest`` with a time at least ``since``."""

    newest: int
    since: float
    window_days: float
    counts: Counter[str]


def counts_path(state_dir: Path) -> Path:
    return Path(state_dir) / COUNTS_FILENAME


def save_counts(path: Path, saved: SavedCounts) -> None:
    """Write ``saved`` atomically; a failed write is logged and the old file stays (a cache)."""
    data = {
        "format": FORMAT,
        "newest": saved.newest,
        "since": saved.since,
        "window_days": saved.window_days,
        "counts": dict(saved.counts),
    }
    try:
        atomic_write_bytes(path, json.dumps(data, separators=(",", ":")).encode("utf-8"))
    except OSError as exc:
        log.warning("access counts %s not saved (%s); the next start counts the window", path, exc)


def load_counts(path: Path, window_days: float) -> SavedCounts | None:
    """The saved counts, or None when there are none usable for a window of ``window_days``."""
    try:
        data = json.loads(path.read_bytes())
        if data.get("format") != FORMAT or float(data["window_days"]) != float(window_days):
            return None
        counts = Counter({str(mid): int(n) for mid, n in data["counts"].items() if int(n) > 0})
        return SavedCounts(int(data["newest"]), float(data["since"]), float(window_days), counts)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.info("access counts %s unusable (%s); counting the window instead", path, exc)
        return None


def discard_counts(path: Path) -> None:
    """Remove the saved counts (they may count loads the log no longer has)."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("access counts %s not removed (%s)", path, exc)
