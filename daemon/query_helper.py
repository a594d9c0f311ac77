"""A helper thread for the part of a query that runs without the interpreter lock (``Engine.query_helper``).

A distinct query at 10,000 memories spends ~0.7 ms in one numpy product: the query's
embedding against every memory's row (``VectorIndex.nearest``), which numpy computes
without holding the interpreter lock. The engine starts it through this helper before
it searches the index (Python, holding the lock), so on a machine with a second core
idle the two overlap: in one process, old and new engines answering the same 600
distinct queries alternately, the median per-query ratio new / old was 0.94
(docs/engine.md, "Session 20").

When other queries are running too (``busy``), every core already has a query to run,
and a hand-over to another thread would only add switches: the job then runs in the
query's own thread, as without a helper. One thread, started on first use; ``close``
stops it once the read workers that may wait on it have stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class QueryHelper:
    """``Engine.query_helper``: start a job on the helper thread unless ``busy()``; returns what gives its result."""

    def __init__(self, busy: Callable[[], bool] = lambda: False) -> None:
        self._busy = busy
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxos-query-helper")
        self.started = 0  # jobs handed to the thread (status, tests)

    def __call__(self, job: Callable[[], Any]) -> Callable[[], Any]:
        if self._busy():
            return job
        try:
            future = self._pool.submit(job)
        except RuntimeError:  # closed: the daemon is stopping
            return job
        self.started += 1
        return future.result

    def status(self) -> dict[str, Any]:
        """``status``'s ``query_helper`` section: how many jobs the thread has been given."""
        return {"jobs_started": self.started}

    def close(self) -> None:
        self._pool.shutdown(wait=True)
