"""``SelectedMemory.deferred``: signals, shares and sources made on first read, equal to an item built whole."""

from __future__ import annotations

import copy
import pickle

import pytest
from ctxos.services.model import SelectedMemory, selected_dicts

PLAIN = dict(id="a", type="fact", path="a.md", tier="L1", tokens=12, score=0.5, reason="scored", workspace=None)
SIGNALS = {"semantic": 0.25, "bm25": 1.0}
SHARES = {"semantic": 0.125, "bm25": 0.375}


def _deferred(calls: list[int]) -> SelectedMemory:
    def explain():
        calls.append(1)
        return dict(SIGNALS), dict(SHARES), ["bm25", "vector"]

    return SelectedMemory.deferred(explain, dict(PLAIN))  # the dict becomes the item's own


def test_deferred_item_is_explained_once_on_first_read_and_equals_a_whole_one():
    whole = SelectedMemory(**PLAIN, signals=dict(SIGNALS), shares=dict(SHARES), sources=["bm25", "vector"])
    calls: list[int] = []
    item = _deferred(calls)
    assert selected_dicts([item], detail=False) == selected_dicts([whole], detail=False) and calls == []
    assert item.agent_dict() == whole.agent_dict() and calls == []
    assert item.to_dict() == whole.to_dict() and calls == [1]
    assert item == whole and repr(item) == repr(whole) and item.shares == SHARES
    assert calls == [1]  # made once


def test_deferred_item_copies_and_pickles_with_its_explanation():
    whole = SelectedMemory(**PLAIN, signals=dict(SIGNALS), shares=dict(SHARES), sources=["bm25", "vector"])
    for make in (pickle.loads, copy.deepcopy):
        calls: list[int] = []
        item = _deferred(calls)
        clone = make(pickle.dumps(item)) if make is pickle.loads else make(item)
        assert clone == whole and calls == [1]
    with pytest.raises(AttributeError, match="missing"):
        _deferred([]).missing  # noqa: B018 - an attribute no item has
