"""services/groups.py: one-to-many maps whose groups of one are bare strings (issue 16)."""

from __future__ import annotations

import random

from ctxos.services import groups


def test_groups_follow_a_plain_dict_of_sets_through_random_adds_and_discards() -> None:
    """Whatever the sequence, ``members`` of every key equals what a dict of sets would hold,
    a group of one is stored as the bare string (or a set that shrank), and an emptied key is gone."""
    rng = random.Random(16)
    table: dict[str, groups.Group] = {}
    reference: dict[str, set[str]] = {}
    keys = [f"k{i}" for i in range(5)]
    values = [f"memory-{i}" for i in range(40)]  # enough to pass TUPLE_MAX and come back
    for _ in range(5_000):
        key, value = rng.choice(keys), rng.choice(values)
        if rng.random() < 0.55:
            groups.add(table, key, value)
            reference.setdefault(key, set()).add(value)
        else:
            groups.discard(table, key, value)
            if key in reference:
                reference[key].discard(value)
                if not reference[key]:
                    del reference[key]
        assert set(table) == set(reference)
        for k, held in table.items():
            assert set(groups.members(held)) == reference[k]
            assert len(list(groups.members(held))) == len(reference[k])  # no duplicates
            if len(reference[k]) == 1:
                assert isinstance(held, (str, set))  # a set that shrank stays a set until emptied
    assert groups.members(None) == () and groups.members("memory-1") == ("memory-1",)


def test_a_group_made_at_once_holds_what_adding_one_by_one_holds_in_a_tuple() -> None:
    """``of`` (a full build) and ``add`` (a patch) hold the same members; ``of`` keeps a long group
    as a tuple (8 bytes a member, where ``add`` past TUPLE_MAX makes a set)."""
    for size in (1, 2, groups.TUPLE_MAX, groups.TUPLE_MAX + 1, 40):
        values = [f"memory-{i}" for i in range(size)]
        table: dict[str, groups.Group] = {}
        for value in values:
            groups.add(table, "k", value)
        made = groups.of(values)
        assert set(groups.members(made)) == set(groups.members(table["k"])), size
        assert made == values[0] if size == 1 else made == tuple(values), size


def test_a_long_tuple_built_whole_follows_adds_and_discards() -> None:
    """A group ``of`` built past TUPLE_MAX changes as a dict of sets would (a patch after a full build)."""
    rng = random.Random(17)
    values = [f"memory-{i}" for i in range(60)]
    table: dict[str, groups.Group] = {"k": groups.of(values[:40])}
    reference = set(values[:40])
    for _ in range(2_000):
        value = rng.choice(values)
        if rng.random() < 0.5:
            groups.add(table, "k", value)
            reference.add(value)
        else:
            groups.discard(table, "k", value)
            reference.discard(value)
        assert set(groups.members(table.get("k"))) == reference
        assert len(list(groups.members(table.get("k")))) == len(reference)
