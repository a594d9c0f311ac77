"""One-to-many maps kept small: a key's group is a bare string, then a tuple, then a set.

Nearly every key of the engine's lookup maps (a file stem, a loose link name, a
catalog entry a link reads) names one memory. At 100,000 memories the
one-element tuples and sets those maps held were tens of MiB (a set is 216
bytes, a one-element tuple 48, a bare string already exists as the id or path
it names; issue 16). Readers only iterate a group (``members``), never rely on
its order unless they sort it.
"""

from __future__ import annotations

from collections.abc import Sequence

TUPLE_MAX = 16  # a group past this becomes a set (adding to a tuple copies it)

Group = str | tuple[str, ...] | set[str]


def members(group: Group | None) -> tuple[str, ...] | set[str]:
    """A group's members (a bare string is a group of one; iterating it would give its characters)."""
    if group is None:
        return ()
    return (group,) if isinstance(group, str) else group


def of(values: Sequence[str]) -> Group:
    """The group holding ``values`` (distinct, at least one), in the form ``add`` would have left it."""
    if len(values) == 1:
        return values[0]
    return tuple(values) if len(values) <= TUPLE_MAX else set(values)


def add(table: dict[str, Group], key: str, value: str) -> None:
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


def discard(table: dict[str, Group], key: str, value: str) -> None:
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
