"""``SizedLru``: a dict bounded by the total size of its values, least recently used out first.

Used for caches that reader threads share: term postings per segment, scored
postings and search results per index generation, nearest-embedding results
per embedding state. Whatever a cached value depends on is in its key or in
the object that owns the cache, so no entry is ever updated in place: a new
index generation or embedding state starts a new, empty cache, and the term
postings of segments no longer in the index are dropped whole (``drop``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class SizedLru(Generic[K, V]):
    """A dict bounded by the total size of its values (``size`` of each), least recently used first out.

    Shared by reader threads: a hit only reorders (an entry evicted meanwhile is
    still returned), and additions and evictions take the lock.
    """

    def __init__(self, limit: int, size: Callable[[V], int]) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()
        self._limit, self._size_of, self._size = limit, size, 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        entry = self._items.get(key)
        if entry is not None:
            try:
                self._items.move_to_end(key)
            except KeyError:  # evicted by another thread meanwhile
                pass
        return entry

    def put(self, key: K, entry: V) -> None:
        with self._lock:
            if key not in self._items:
                self._items[key] = entry
                self._size += self._size_of(entry)
                while self._size > self._limit and len(self._items) > 1:
                    _, old = self._items.popitem(last=False)
                    self._size -= self._size_of(old)

    def drop(self, keep: Callable[[K], bool]) -> None:
        """Remove every entry whose key ``keep`` rejects."""
        with self._lock:
            for key in [k for k in self._items if not keep(k)]:
                self._size -= self._size_of(self._items.pop(key))

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._items))

    def __getitem__(self, key: K) -> V:
        return self._items[key]

    def items(self) -> list[tuple[K, V]]:
        return list(self._items.items())
