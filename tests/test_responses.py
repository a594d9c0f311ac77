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

AGENT_SELECTED_FIELDS = ("id", "type", "tier", "tokens", "score", "workspace")  # the MCP view's order


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


@pytest.mark.parametrize("query", ["how do we deploy", "retry policy for the database", "zzz-nothing-matches"])
def test_agent_context_is_the_mcp_view_of_get_context(backend, query):
    """``agent_context`` (``ContextResult.agent_dict``) is, key for key, what the MCP tool made of ``get_context``
    (``ContextOut`` over ``to_dict``), and it matches its response model."""
    from ctxos.daemon.mcp_server import ContextOut
    from ctxos.services.responses import AgentContextResponse

    result = backend.engine.execute_context_query(query, 3000, None, record_access=False)
    agent = as_json(result.agent_dict())
    assert as_json(ContextOut.model_validate(as_json(result.to_dict())).model_dump(mode="json")) == agent
    assert list(agent) == list(ContextOut.model_fields)
    for entry in agent["selected"]:
        assert list(entry) == [k for k in AGENT_SELECTED_FIELDS if k in entry]
    answer = backend.call("agent_context", {"query": query, "budget_tokens": 3000})
    assert as_json(AgentContextResponse.model_validate(answer).data()) == answer
    assert answer["rendered"] == result.rendered


@pytest.mark.parametrize("query", ["how do we deploy", "retry policy for the database"])
def test_get_context_explains_each_memory_only_with_detail(backend, query):
    """Without ``detail`` each selected memory lacks signals, shares and sources; everything else is the
    answer ``simulate`` and ``detail`` give (compared on one result: each call records an access)."""
    explained = ("signals", "shares", "sources")
    brief = backend.call("get_context", {"query": query, "budget_tokens": 3000})
    full = backend.call("get_context", {"query": query, "budget_tokens": 3000, "detail": True})
    assert brief["selected"] and full["selected"], "the examples answer this query"
    assert all(not set(explained) & set(item) for item in brief["selected"])
    assert all(set(explained) <= set(item) for item in full["selected"])
    result = backend.engine.execute_context_query(query, 3000, None, record_access=False)
    short, long = as_json(result.to_dict(detail=False)), as_json(result.to_dict())
    assert short["selected"] == [{k: v for k, v in item.items() if k not in explained} for item in long["selected"]]
    assert {k: v for k, v in short.items() if k != "selected"} == {k: v for k, v in long.items() if k != "selected"}
    with pytest.raises(Exception, match="detail"):
        backend.call("get_context", {"query": query, "detail": "yes please"})


def test_unchecked_response_gives_back_its_data():
    data = {"query": "q", "whatever": [1, 2]}
    made = ContextResponse.unchecked(data)
    assert made.data() is data and made.query == "q"


def test_encoded_replies_parse_to_what_the_standard_library_wrote(backend):
    """``encode_message`` (orjson, with the standard library for what orjson refuses) gives the same JSON values."""
    import dataclasses
    import datetime
    import json
    from pathlib import Path

    from ctxos.services.jsonrpc import encode_message, json_default

    @dataclasses.dataclass
    class Shaped:
        x: int

        def to_dict(self) -> dict:
            return {"shaped": self.x}

    answer = backend.call("get_context", {"query": "how do we deploy"})
    odd = {
        "surrogate": b"bad-\xff.md".decode("utf-8", "surrogateescape"),
        "huge": 2**70,
        "keys": {1: "one", 2.5: "x"},
        "when": datetime.date(2026, 12, 3),
        "path": Path("/tmp/x"),
        "set": {3},
        "tuple": (1, 2),
        "shaped": Shaped(4),
        "text": "é 中",
        "small": 1e-7,
    }
    for message in (answer, odd, [answer, odd]):
        line = encode_message(message)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        standard = json.dumps(message, default=json_default, ensure_ascii=False, allow_nan=False)
        assert json.loads(line) == json.loads(standard.encode("utf-8", "backslashreplace"))


def test_client_decodes_replies_as_the_standard_library(backend):
    """``client.decode_reply`` (orjson, with the standard library for what orjson refuses) reads what the daemon wrote."""
    import json

    from ctxos.client import decode_reply
    from ctxos.services.jsonrpc import encode_message

    answer = backend.call("get_context", {"query": "how do we deploy"})
    odd = {"huge": 2**70, "surrogate": b"bad-\xff.md".decode("utf-8", "surrogateescape"), "small": 1e-7, "text": "é 中"}
    for message in ({"jsonrpc": "2.0", "id": 1, "result": answer}, odd, [answer, odd]):
        line = encode_message(message)
        assert decode_reply(line[:-1]) == json.loads(line)
    for big in (2**64, -(2**63) - 1, 123456789012345678901234567890):  # orjson would read these as floats
        decoded = decode_reply(f'{{"big":{big},"id":"x"}}'.encode())
        assert decoded == {"big": big, "id": "x"} and type(decoded["big"]) is int
