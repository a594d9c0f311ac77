"""The query path answers its data unchecked (services/responses.py, ``answers(check=False)``): checked here.

``get_context`` and ``simulate`` skip the per-query validation against
``ContextResponse`` (issue 16: ~0.6 ms of every query); these tests hold the
data they build to that model on a real workspace (the examples), so a drift
from the contract still fails loudly, in the suite instead of at a client.
"""

from __future__ import annotations

import pytest
from ctxos.client.backend import InProcessBackend
from ctxos.services.jsonrpc import as_json
from ctxos.services.responses import ContextResponse


@pytest.fixture
def backend(make_workspace):
    root = make_workspace(examples=True)
    made = InProcessBackend(root)
    yield made
    made.close()


@pytest.mark.parametrize("method", ["get_context", "simulate"])
@pytest.mark.parametrize("query", ["how do we deploy", "retry policy for the database", "zzz-nothing-matches"])
def test_query_answers_match_their_contract(backend, method, query):
    answer = backend.call(method, {"query": query, "budget_tokens": 3000})
    checked = ContextResponse.model_validate(answer)
    assert as_json(checked.data()) == answer  # the model keeps every key, each as it came
    assert answer["rendered"] and isinstance(answer["selected"], list)
    if query != "zzz-nothing-matches":
        assert answer["selected"], "the examples answer this query"


def test_unchecked_response_gives_back_its_data():
    data = {"query": "q", "whatever": [1, 2]}
    made = ContextResponse.unchecked(data)
    assert made.data() is data and made.query == "q"
