"""``Memo``: one result an engine keeps with the key it was computed for.

For results that are costly and asked for in turn by several callers (the
governance report: the health badge, the tray and the web view), so each
engine owns its own instead of a module-level cache shared by every engine.
A key says what the result depends on; ``max_age_s`` bounds how long it is
reused when it also depends on the clock.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Memo(Generic[V]):
    """The last value and its key; replaced whole, so a reader on another thread sees one or the other."""

    def __init__(self, max_age_s: float | None = None) -> None:
        self.max_age_s = max_age_s
        self._slot: tuple[Hashable, float, V] | None = None

    def get(self, key: Hashable) -> V | None:
        """The value computed for ``key``, unless another key came since or it is older than ``max_age_s``."""
        slot = self._slot
        if slot is None or slot[0] != key:
            return None
        if self.max_age_s is not None and time.monotonic() - slot[1] > self.max_age_s:
            if self._slot is slot:
                self._slot = None  # expired: free it now, not at the next put (a report is ~16 MiB at 10,000)
            return None
        return slot[2]

    def put(self, key: Hashable, value: V) -> None:
        self._slot = (key, time.monotonic(), value)

    def clear(self) -> None:
        """Forget the value (frees it)."""
        self._slot = None
