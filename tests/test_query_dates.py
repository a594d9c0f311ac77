"""A query that names a date prefers memories from that day (issue 13): the parser, the closeness
and the whole query path on a real workspace."""

from __future__ import annotations

from datetime import date, datetime

from ctxos.services.engine import Engine
from ctxos.services.model import Memory
from ctxos.services.query_dates import DATE_WEIGHT, QueryDates, date_weights, find_dates


def test_days_and_months_named_in_a_query():
    assert find_dates("What did Nate do for Joanna on 25 May, 2022?").days == (date(2022, 5, 25),)
    assert find_dates("the meeting on March 3rd 2021 and 2021-03-04").days == (date(2021, 3, 3), date(2021, 3, 4))
    assert find_dates("on the 7th of Jul. 2023").days == (date(2023, 7, 7),)
    named = find_dates("what changed in July 2023")
    assert named.months == ((2023, 7),) and not named.days
    assert not find_dates("you may 5 times try")  # no year: not a date
    assert not find_dates("31 February 2020").days  # not a day


def _memory(mid: str, **dates) -> Memory:
    return Memory(id=mid, type="daily", rel_path=f"{mid}.md", path=None, l0="", l1="", l2="", **dates)


def test_closeness_and_the_weight_row():
    dates = QueryDates(days=(date(2022, 5, 25),))
    assert dates.closeness(_memory("a", created=date(2022, 5, 25))) == 1.0
    assert dates.closeness(_memory("b", modified=datetime(2022, 5, 28, 9, 0))) == 0.5
    assert dates.closeness(_memory("c")) == 0.0
    assert QueryDates(months=((2022, 5),)).closeness(_memory("d", created=date(2022, 5, 1))) == 1.0
    row = {"semantic": 0.2, "bm25": 0.5, "graph": 0.2, "recency": 0.1, "importance": 0.0, "frequency": 0.0}
    assert date_weights(row, QueryDates()) == row
    changed = date_weights(row, dates)
    assert abs(sum(changed.values()) - 1) < 1e-9 and changed["recency"] == DATE_WEIGHT / (0.9 + DATE_WEIGHT)
    assert changed["bm25"] / changed["semantic"] == row["bm25"] / row["semantic"]


def _note(day: str) -> str:
    return f"""\
---
id: standup-{day}
created: {day}
l0: Standup notes
---
We talked about the release and the open bugs.
"""


def test_the_memory_from_the_named_day_ranks_first(make_workspace):
    days = ["2024-03-01", "2024-03-08", "2024-03-15", "2024-03-22"]
    root = make_workspace({f"02-daily/standup-{d}.md": _note(d) for d in days})
    engine = Engine(root)
    engine.load()
    for day, words in (("2024-03-08", "8 March 2024"), ("2024-03-22", "March 22, 2024")):
        result = engine.execute_context_query(f"what did we talk about at the standup on {words}", 600)
        assert result.selected[0].id == f"standup-{day}"
        assert f"names {day}" in result.intent_reason
        assert result.weights["recency"] >= DATE_WEIGHT / (1 + DATE_WEIGHT)
    plain = engine.execute_context_query("what did we talk about at the standup", 600)
    assert "names" not in plain.intent_reason
    engine.close()
