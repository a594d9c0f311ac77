"""Progress of long jobs (reindex, cold builds) for a person at the shell.

On a terminal: a ``tqdm`` bar per phase ("reading files", "indexing", then
"writing the index", which has no count). Not a terminal (a log, a pipe, CI):
one plain line per phase and every 10 %, so a log shows the job moving
without a wall of carriage returns. Everything goes to stderr, so stdout
stays the command's answer (``--json`` included).

Two feeds, one display: an in-process engine calls :meth:`ProgressDisplay.update`
from ``Engine.on_progress``; for a daemon, :func:`follow_daemon` polls the
daemon's ``status`` (its ``indexing`` section) on a second connection while
the long call runs.
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from ctxos.services.progress import UNCOUNTED

POLL_S = 0.25
PLAIN_STEP = 0.10  # plain lines at every 10 % of a phase


class ProgressDisplay:
    """Shows ``{"phase", "done", "total", "text"}`` snapshots (``Progress.to_dict()``)."""

    def __init__(self, stream: TextIO | None = None, bar: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.bar = bool(isatty and isatty()) if bar is None else bar
        self._tqdm: Any = None
        self._phase: str | None = None
        self._next_plain = 0.0
        self._lock = threading.Lock()
        self.shown = 0  # snapshots that changed what is on screen (tests)

    def update(self, snapshot: Any) -> None:
        data = snapshot.to_dict() if hasattr(snapshot, "to_dict") else dict(snapshot or {})
        phase, done, total = data.get("phase"), int(data.get("done") or 0), int(data.get("total") or 0)
        if not phase:
            return
        with self._lock:
            if phase != self._phase:
                self._close_bar()
                self._phase, self._next_plain = phase, 0.0
                if self.bar:
                    from tqdm import tqdm

                    size = shutil.get_terminal_size()  # 80x24 on a pty without a size (tqdm would hide the bar)
                    self._tqdm = tqdm(
                        total=None if phase in UNCOUNTED else total or None,
                        desc=phase,
                        unit=" files" if phase != "indexing" else " memories",
                        file=self.stream,
                        leave=True,
                        ncols=min(100, size.columns),
                        nrows=size.lines,
                    )
                else:
                    self._line(data)
                    self._next_plain = min(1.0, (done / total if total else 0.0) + PLAIN_STEP)
                self.shown += 1
                return
            if self.bar and self._tqdm is not None and phase not in UNCOUNTED:
                if total and self._tqdm.total != total:
                    self._tqdm.total = total
                if done > self._tqdm.n:
                    self._tqdm.update(done - self._tqdm.n)
                    self.shown += 1
            elif not self.bar and total and done >= total * self._next_plain and done:
                self._line(data)
                self._next_plain = min(1.0, done / total + PLAIN_STEP)
                self.shown += 1

    def _line(self, data: dict[str, Any]) -> None:
        text = data.get("text") or f"{data.get('phase')} {data.get('done')} of {data.get('total')}"
        self.stream.write(f"ctxos: {text}\n")
        self.stream.flush()

    def _close_bar(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
            self._tqdm = None

    def close(self) -> None:
        with self._lock:
            self._close_bar()
            self._phase = None


@contextmanager
def follow_daemon(status: Callable[[], dict[str, Any] | None], display: ProgressDisplay) -> Iterator[None]:
    """While the block runs, poll ``status()`` and show its ``indexing`` section."""
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_S):
            try:
                indexing = (status() or {}).get("indexing")
            except Exception:  # noqa: BLE001 - the main call reports a dead daemon; the display just stops
                return
            if indexing:
                display.update(indexing)

    thread = threading.Thread(target=poll, name="ctxos-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=2)
        display.close()
