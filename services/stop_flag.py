"""Asking long engine work to stop: the daemon must exit within a couple of seconds of SIGTERM.

A Python thread cannot be interrupted from outside, and at 100,000 memories a
background job (governance's similarity joins, the link graph, a change batch of
thousands of files, a load) runs for tens of seconds to minutes: the daemon's
shutdown waited for it (60 s and a SIGKILL in ``bench_daemon.py``). So the engine
owns a ``StopFlag``; its owner sets it when it shuts down, and the long loops
call ``check()`` at safe points (between files, every few thousand items of a
join), which raises ``Cancelled``. A safe point is one where stopping leaves
nothing half-written: files are only ever written whole by the write gate, and
what the store or index had not caught up with is found again by the next
start's scan (the index is reconciled with the files at every load).

The engine itself has no threads: this is one boolean read by whoever runs it.
Once set, it stays set (an engine is stopped to be closed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

Check = Callable[[], None]  # raises Cancelled when the owner asked to stop

CHECK_EVERY = 1_024  # items between two checks in ``checked``: a check costs ~50 ns, an item microseconds


class Cancelled(Exception):
    """Long engine work stopped because its owner is shutting down (not a failure)."""


class StopFlag:
    """Set once by the owner (``stop``); long loops ``check`` it and raise ``Cancelled`` when set."""

    __slots__ = ("_reason",)

    def __init__(self) -> None:
        self._reason: str | None = None

    def stop(self, reason: str = "shutting down") -> None:
        self._reason = reason

    @property
    def stopped(self) -> bool:
        return self._reason is not None

    def check(self) -> None:
        """Raise ``Cancelled`` if the owner asked to stop."""
        if self._reason is not None:
            raise Cancelled(self._reason)

    def checked(self, items: Iterable[T], every: int = CHECK_EVERY) -> Iterator[T]:
        """``items``, checking the flag before the first and then every ``every`` items."""
        return checked(items, self.check, every)


def checked(items: Iterable[T], check: Check, every: int = CHECK_EVERY) -> Iterator[T]:
    """``items``, calling ``check`` before the first and then every ``every`` items."""
    for n, item in enumerate(items):
        if n % every == 0:
            check()
        yield item


def never() -> None:
    """A ``check`` that never stops (pure functions called outside an engine)."""
