"""One-to-many maps kept small: a key's group is a bare string, then a tuple, then a set.

Nearly every key of the engine's lookup maps (a file stem, a loose link name, a
catalog entry a link reads) names one memory. At 100,000 memories the
one-element tuples and sets those maps held were tens of MiB (a set is 216
bytes, a one-element tuple 48, a bare string already exists as the id or path
it names; issue 16). Readers only iterate a group (``members``), never rely on
its order unless they sort it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

TUPLE_MAX = 16  # a group past this becomes a set (adding to a tuple copies it)

Group = str | tuple[str, ...] | set[str]


def members(group: Group | None) -> tuple[str, ...] | set[str]:
    """A group's members (a bare string is a group of one; iterating it would give its characters)."""
    if group is None:
        return ()
    return (group,) if isinstance(group, str) else group


def of(values: Sequence[str]) -> Group:
    """The group holding ``values`` (distinct, at least one), built whole: the bare string, else a tuple.

    A tuple of any size here, where ``add`` would have made a set past ``TUPLE_MAX``: a
    group built whole is read far more often than changed, and a set holds each member in
    a hash table (~32-64 bytes a member against a tuple's 8). The graph tracker's patch
    maps, built this way at every full build, were 27 MiB as sets at 100,000 memories
    (issue 16). The first ``add`` to a long tuple turns it into a set; ``discard`` copies it.
    """
    if len(values) == 1:
        return values[0]
    return tuple(values)


def add(table: dict[Any, Group], key: Hashable, value: str) -> None:
    """Add ``value`` to the group at ``key``: the bare string, a tuple while small, then a set."""
    held = table.get(key)
    if held is None:
        table[key] = value
    elif isinstance(held, set):
        held.add(value)
    elif isinstance(held, str):
        if held != value:
            table[key] = (held, value)
    elif value not in held:
        table[key] = (*held, value) if len(held) < TUPLE_MAX else {*held, value}


def discard(table: dict[Any, Group], key: Hashable, value: str) -> None:
    """Remove ``value`` from the group at ``key``; the key goes with its last member."""
    held = table.get(key)
    if held is None:
        return
    if isinstance(held, str):
        if held == value:
            del table[key]
        return
    if value not in held:
        return
    if isinstance(held, set):
        held.discard(value)
        rest: Group = held
    else:
        left = tuple(item for item in held if item != value)
        rest = left[0] if len(left) == 1 else left
    if rest:
        table[key] = rest
    else:
        del table[key]
