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


def test_a_group_made_at_once_has_the_form_adding_one_by_one_leaves() -> None:
    """``of`` (a full build) and ``add`` (a patch) agree: bare string, tuple up to TUPLE_MAX, then a set."""
    for size in (1, 2, groups.TUPLE_MAX, groups.TUPLE_MAX + 1, 40):
        values = [f"memory-{i}" for i in range(size)]
        table: dict[str, groups.Group] = {}
        for value in values:
            groups.add(table, "k", value)
        made = groups.of(values)
        assert type(made) is type(table["k"]) and made == table["k"], size
