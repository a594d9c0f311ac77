"""The request contracts (services/schemas.py): one message per bad parameter, whichever way it arrives.

Each case is an operation and one bad parameter (wrong type, out of range,
empty, unknown). It is sent to one real daemon process (module-scoped) over
the Unix socket, over REST (real HTTP on 127.0.0.1, with the credential) where
a REST endpoint takes that parameter, and over MCP (a real Streamable HTTP
client session) where an MCP tool takes it; every transport must refuse it
with exactly the message ``schemas.validate`` gives. The CLI's budget message
is checked too. No mocks.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from ctxos.client import RpcCallError
from ctxos.client.backend import InProcessBackend
from ctxos.client.cli import main as ctxos_main
from ctxos.services import schemas
from ctxos.services.api import OPERATIONS
from ctxos.services.jsonrpc import INVALID_PARAMS
from ctxos.services.workspace import init_workspace
from daemon_helpers import DaemonProcess
from mcp_helpers import mcp_http_client
from web_helpers import http, http_daemon

pytestmark = pytest.mark.slow

MCP_PREFIX = "Error executing tool {}: "
LONG = "x" * (schemas.MAX_QUERY_CHARS + 1)


# (case id, RPC method, params, exact message or None (= whatever the contract says), REST, MCP tool)
# REST: ("POST", path) sends params as the JSON body; ("GET", path) sends them as the query string;
# a ``{name}`` in the path is filled from that param (and taken out of the body or query).
CASES: list[tuple[str, str, dict[str, Any], str | None, tuple[str, str] | None, str | None]] = [
    (
        "budget-negative",
        "get_context",
        {"query": "bread", "budget_tokens": -5},
        "budget_tokens: must be between 1 and 200000 (got -5)",
        None,
        "get_context",
    ),
    (
        "budget-huge",
        "get_context",
        {"query": "bread", "budget_tokens": 10_000_000},
        "budget_tokens: must be between 1 and 200000 (got 10000000)",
        None,
        "get_context",
    ),
    (
        "budget-zero",
        "simulate",
        {"query": "bread", "budget_tokens": 0},
        "budget_tokens: must be between 1 and 200000 (got 0)",
        ("POST", "/api/simulate"),
        None,
    ),
    (
        "budget-word",
        "simulate",
        {"query": "bread", "budget_tokens": "many"},
        'budget_tokens: must be a whole number (got "many")',
        ("POST", "/api/simulate"),
        "get_context",
    ),
    (
        "budget-bool",
        "simulate",
        {"query": "bread", "budget_tokens": True},
        "budget_tokens: must be a whole number (got true)",
        ("POST", "/api/simulate"),
        "get_context",
    ),
    ("query-blank", "simulate", {"query": "   "}, "query: must not be empty", ("POST", "/api/simulate"), "get_context"),
    ("query-empty", "get_context", {"query": ""}, "query: must not be empty", None, "get_context"),
    ("query-missing", "simulate", {}, "query: is required", ("POST", "/api/simulate"), "get_context"),
    (
        "query-number",
        "simulate",
        {"query": 5},
        "query: must be a string (got 5)",
        ("POST", "/api/simulate"),
        "get_context",
    ),
    (
        "query-long",
        "get_context",
        {"query": LONG},
        "query: must be at most 10000 characters (got 10001)",
        ("POST", "/api/simulate"),
        "get_context",
    ),
    (
        "query-unknown",
        "simulate",
        {"query": "bread", "colour": "red"},
        "colour: unknown parameter",
        ("POST", "/api/simulate"),
        "get_context",
    ),
    ("memory-tier", "get_memory", {"id": "sourdough", "tier": "L9"}, None, None, None),
    ("memory-id-empty", "get_memory", {"id": ""}, "id: must not be empty", None, None),
    ("memory-unknown", "get_memory", {"id": "sourdough", "text": True}, "text: unknown parameter", None, None),
    ("list-type", "list", {"type": "poem"}, None, ("GET", "/api/memories"), None),
    ("list-limit", "list", {"limit": -1}, "limit: must be at least 0 (got -1)", ("GET", "/api/memories"), None),
    (
        "list-limit-word",
        "list",
        {"limit": "lots"},
        'limit: must be a whole number (got "lots")',
        ("GET", "/api/memories"),
        None,
    ),
    ("list-offset-word", "list", {"offset": "2"}, 'offset: must be a whole number (got "2")', None, None),
    (
        "save-importance",
        "save_memory",
        {"type": "decision", "content": "c", "l0": "x", "importance": 2},
        "importance: must be between 0.0 and 1.0 (got 2)",
        ("POST", "/api/memories"),
        "save_memory",
    ),
    (
        "save-type",
        "save_memory",
        {"type": "poem", "content": "c", "l0": "x"},
        None,
        ("POST", "/api/memories"),
        "save_memory",
    ),
    (
        "save-tags",
        "save_memory",
        {"type": "decision", "content": "c", "l0": "x", "tags": ["ok", 1]},
        "tags.1: must be a string (got 1)",
        ("POST", "/api/memories"),
        "save_memory",
    ),
    (
        "save-l0-blank",
        "save_memory",
        {"type": "decision", "content": "c", "l0": " "},
        "l0: must not be empty",
        ("POST", "/api/memories"),
        "save_memory",
    ),
    (
        "save-content-missing",
        "save_memory",
        {"type": "decision", "l0": "x"},
        "content: is required",
        ("POST", "/api/memories"),
        "save_memory",
    ),
    (
        "save-version-zero",
        "save_memory",
        {"type": "decision", "content": "c", "l0": "x", "expected_version": 0},
        "expected_version: must be at least 1 (got 0)",
        ("POST", "/api/memories"),
        "save_memory",
    ),
    (
        "save-unknown",
        "save_memory",
        {"type": "decision", "content": "c", "l0": "x", "colour": "red"},
        "colour: unknown parameter",
        ("POST", "/api/memories"),
        "save_memory",
    ),
    ("log-event-empty", "log_session", {"event": ""}, "event: must not be empty", None, "log_session"),
    (
        "log-details-number",
        "log_session",
        {"event": "e", "details": 5},
        "details: must be a string (got 5)",
        None,
        "log_session",
    ),
    ("skill-empty", "get_skill", {"name": ""}, "name: must not be empty", None, "get_skill"),
    ("skill-unknown", "get_skill", {"name": "x", "fuzzy": True}, "fuzzy: unknown parameter", None, "get_skill"),
    ("archive-id-number", "archive", {"id": 5}, "id: must be a string (got 5)", None, None),
    ("unarchive-missing", "unarchive", {}, "id: is required", None, None),
    (
        "importance-range",
        "set_importance",
        {"id": "sourdough", "value": 2},
        "value: must be between 0.0 and 1.0 (got 2)",
        None,
        None,
    ),
    (
        "importance-word",
        "set_importance",
        {"id": "sourdough", "value": "high"},
        'value: must be a number (got "high")',
        None,
        None,
    ),
    ("history-blank", "history", {"id": "  "}, "id: must not be empty", ("GET", "/api/memories/{id}/history"), None),
    (
        "history-version-zero",
        "history_version",
        {"id": "sourdough", "n": 0},
        "n: must be at least 1 (got 0)",
        ("GET", "/api/memories/{id}/history/{n}"),
        None,
    ),
    (
        "revert-to-word",
        "revert",
        {"id": "sourdough", "to": "first"},
        'to: must be a whole number (got "first")',
        ("POST", "/api/memories/{id}/revert"),
        None,
    ),
    ("review-limit", "review", {"limit": 0}, "limit: must be between 1 and 500 (got 0)", None, "review_memories"),
    (
        "review-topic-long",
        "review",
        {"topic": "t" * (schemas.MAX_TOPIC_CHARS + 1)},
        "topic: must be at most 2000 characters (got 2001)",
        None,
        "review_memories",
    ),
    (
        "flag-kind",
        "flag",
        {"id": "sourdough", "reason": "old", "kind": "boring"},
        "kind: must be one of: stale, wrong, duplicate, conflict (got \"boring\")",
        None,
        "flag_memory",
    ),
    ("flag-reason-empty", "flag", {"id": "sourdough", "reason": ""}, "reason: must not be empty", None, "flag_memory"),
    (
        "merge-one-id",
        "propose_merge",
        {"ids": ["sourdough"], "merged_text": "m", "l0": "x"},
        "ids: must have at least 2 items (got 1)",
        None,
        "propose_merge",
    ),
    ("status-unknown", "status", {"verbose": True}, "verbose: unknown parameter", None, None),
    ("reindex-full-word", "reindex", {"full": "yes"}, 'full: must be true or false (got "yes")', None, None),
    ("dismiss-empty", "dismiss", {"fingerprint": ""}, "fingerprint: must not be empty", None, None),
    ("graph-layout-number", "graph", {"layout": 1}, "layout: must be true or false (got 1)", None, None),
    ("proposal-missing", "accept_proposal", {}, "id: is required", None, None),
    (
        "reject-reason-number",
        "reject_proposal",
        {"id": "p1", "reason": 5},
        "reason: must be a string (got 5)",
        ("POST", "/api/proposals/{id}/reject"),
        None,
    ),
    (
        "proposals-all-word",
        "proposals",
        {"all": "maybe"},
        'all: must be true or false (got "maybe")',
        ("GET", "/api/proposals"),
        None,
    ),
    ("promote-type", "promote", {"path": "note.md", "type": "poem"}, None, None, None),
    ("import-path-empty", "import", {"path": ""}, "path: must not be empty", None, None),
    (
        "merge-ids-string",
        "propose_merge",
        {"ids": "sourdough", "merged_text": "m", "l0": "x"},
        'ids: must be a list (got "sourdough")',
        None,
        "propose_merge",
    ),
]
IDS = [case[0] for case in CASES]
SCHEMAS = {
    "get_context": schemas.ContextRequest,
    "simulate": schemas.ContextRequest,
    "get_memory": schemas.GetMemoryRequest,
    "list": schemas.ListRequest,
    "save_memory": schemas.SaveMemoryRequest,
    "log_session": schemas.LogSessionRequest,
    "get_skill": schemas.GetSkillRequest,
    "archive": schemas.MemoryRefRequest,
    "unarchive": schemas.MemoryRefRequest,
    "set_importance": schemas.SetImportanceRequest,
    "history": schemas.MemoryRefRequest,
    "history_version": schemas.HistoryVersionRequest,
    "revert": schemas.RevertRequest,
    "review": schemas.ReviewRequest,
    "flag": schemas.FlagRequest,
    "propose_merge": schemas.ProposeMergeRequest,
    "status": schemas.NoParams,
    "reindex": schemas.ReindexRequest,
    "dismiss": schemas.DismissRequest,
    "graph": schemas.GraphRequest,
    "accept_proposal": schemas.ProposalIdRequest,
    "reject_proposal": schemas.RejectProposalRequest,
    "promote": schemas.PromoteRequest,
    "import": schemas.ImportRequest,
    "proposals": schemas.ProposalsRequest,
}


def fill_path(template: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``/api/memories/{id}/history`` with ``id`` from ``params``; the other params are returned."""
    rest = dict(params)
    path = template
    for name in list(rest):
        if "{" + name + "}" in path:
            path = path.replace("{" + name + "}", urllib.parse.quote(str(rest.pop(name)), safe=""))
    return path, rest


def contract_message(method: str, params: dict[str, Any]) -> str:
    with pytest.raises(schemas.ContractError) as refused:
        schemas.validate(SCHEMAS[method], params)
    return refused.value.message


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with http_daemon(tmp_path_factory.mktemp("contracts")) as proc:
        yield proc


@pytest.fixture(scope="module")
def mcp_messages(daemon: DaemonProcess) -> dict[str, str]:
    """Every MCP case through one real client session: case id -> the tool error's text."""

    async def run() -> dict[str, str]:
        out: dict[str, str] = {}
        async with mcp_http_client(daemon.http_url + "/mcp") as client:
            for case_id, _method, params, _message, _rest, tool in CASES:
                if tool is None:
                    continue
                result = await client.call_tool(tool, params)
                assert result.is_error, (case_id, result.structured_content)
                out[case_id] = result.content[0].text
        return out

    return anyio.run(run)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_each_transport_refuses_with_the_contract_message(
    case, daemon: DaemonProcess, mcp_messages: dict[str, str]
) -> None:
    case_id, method, params, message, rest, tool = case
    expected = contract_message(method, params)
    if message is not None:
        assert expected == message  # the words people read are pinned, not just consistent
    memories_before = daemon.memory_ids()

    with pytest.raises(RpcCallError) as socket_refusal:
        daemon.call(method, **params)
    assert socket_refusal.value.code == INVALID_PARAMS
    assert socket_refusal.value.message == expected

    if rest is not None:
        verb, template = rest
        path, rest_params = fill_path(template, params)
        if verb == "GET":
            result = http("GET", daemon.http_url + path + "?" + urllib.parse.urlencode(rest_params))
        else:
            result = http(verb, daemon.http_url + path, rest_params)
        assert result.status == 400, (case_id, result.body)
        assert result.json()["error"]["message"] == expected

    if tool is not None:
        assert mcp_messages[case_id] == MCP_PREFIX.format(tool) + expected
    assert daemon.memory_ids() == memories_before  # a refused call changes nothing


def test_null_means_absent(daemon: DaemonProcess) -> None:
    """A known parameter sent as null takes its default (the CLI and scripts send None for "not given")."""
    assert daemon.call("review", topic=None, limit=None)["findings"] is not None
    with pytest.raises(RpcCallError) as refused:
        daemon.call("get_context", query=None)
    assert refused.value.message == "query: is required"


def test_client_and_workspace_are_not_contract_parameters(daemon: DaemonProcess) -> None:
    """``_client`` (history attribution) and ``workspace`` (routing) are taken off before the contract."""
    logged = daemon.call("log_session", event="contract check", _client="contract test")
    assert logged["event"] == "contract check"
    versions = daemon.call("history", id=logged["id"])["versions"]
    assert versions and "contract test" in versions[0]["who"], versions[:1]
    assert daemon.call("get_context", query="bread", workspace=None)["query"] == "bread"


def test_mcp_tool_schemas_are_the_contracts(daemon: DaemonProcess) -> None:
    """What an agent is told (inputSchema) is what the daemon enforces."""
    from ctxos.daemon.mcp_server import TOOL_CONTRACTS

    async def run() -> dict[str, Any]:
        async with mcp_http_client(daemon.http_url + "/mcp") as client:
            return {t.name: t.input_schema for t in (await client.list_tools()).tools}

    published = anyio.run(run)
    for tool, request in TOOL_CONTRACTS.items():
        assert published[tool] == schemas.input_schema(request), tool
    budget = published["get_context"]["properties"]["budget_tokens"]["anyOf"][0]
    assert (budget["minimum"], budget["maximum"]) == (1, schemas.MAX_BUDGET_TOKENS)
    assert published["get_context"]["additionalProperties"] is False


def test_rest_index_publishes_the_body_contracts(daemon: DaemonProcess) -> None:
    endpoints = {(e["method"], e["path"]): e for e in http("GET", daemon.http_url + "/api/").json()["endpoints"]}
    assert endpoints[("POST", "/api/simulate")]["body"] == schemas.input_schema(schemas.ContextRequest)
    assert endpoints[("POST", "/api/memories")]["body"] == schemas.input_schema(schemas.SaveMemoryRequest)


def test_good_calls_still_work_everywhere(daemon: DaemonProcess) -> None:
    """The contracts refuse only what is wrong: the same params succeed on every transport."""
    params = {"query": "sourdough bread", "budget_tokens": 800, "intent": "recall"}
    assert daemon.call("get_context", **params)["budget_tokens"] == 800
    assert http("POST", daemon.http_url + "/api/simulate", params).json()["budget_tokens"] == 800

    async def run() -> Any:
        async with mcp_http_client(daemon.http_url + "/mcp") as client:
            return await client.call_tool("get_context", params)

    result = anyio.run(run)
    assert not result.is_error and result.structured_content["budget_tokens"] == 800


@pytest.mark.parametrize("budget,got", [("-5", "-5"), ("10000000", "10000000")])
def test_cli_prints_the_same_budget_message(
    budget: str, got: str, daemon: DaemonProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    code = ctxos_main(["--workspace", str(daemon.root), "simulate", "bread", "--budget", budget])
    assert code == 2
    assert (
        capsys.readouterr().err.strip()
        == f"ctxos: error: budget_tokens: must be between 1 and {schemas.MAX_BUDGET_TOKENS} (got {got})"
    )


# REST's own bodies (daemon/rest/routes.py): the page names some fields its own way, with the same rules.
REST_ONLY: list[tuple[str, str, str, dict[str, Any], type[schemas.Request]]] = [
    ("update-version-missing", "PUT", "/api/memories/sourdough", {"l0": "x"}, schemas.UpdateMemoryBody),
    ("update-version-word", "PUT", "/api/memories/sourdough", {"version": "1"}, schemas.UpdateMemoryBody),
    ("update-importance", "PUT", "/api/memories/sourdough", {"version": 1, "importance": 3}, schemas.UpdateMemoryBody),
    ("update-unknown", "PUT", "/api/memories/sourdough", {"version": 1, "colour": "red"}, schemas.UpdateMemoryBody),
    ("action-unknown", "POST", "/api/governance/actions", {"action": "explode"}, schemas.GovernanceActionBody),
    ("action-missing", "POST", "/api/governance/actions", {}, schemas.GovernanceActionBody),
    (
        "action-importance-word",
        "POST",
        "/api/governance/actions",
        {"action": "set_importance", "memory_id": "sourdough", "importance": "high"},
        schemas.GovernanceActionBody,
    ),
]


@pytest.mark.parametrize("case", REST_ONLY, ids=[c[0] for c in REST_ONLY])
def test_rest_bodies_refuse_in_the_contract_words(case, daemon: DaemonProcess) -> None:
    _case_id, verb, path, body, model = case
    with pytest.raises(schemas.ContractError) as refused:
        schemas.validate(model, body)
    result = http(verb, daemon.http_url + path, body)
    assert result.status == 400, result.body
    assert result.json()["error"]["message"] == refused.value.message


def test_rest_index_gives_every_operation_route_its_model(daemon: DaemonProcess) -> None:
    """GET /api/ is derived from the models: each endpoint that takes params publishes their schema."""
    endpoints = {(e["method"], e["path"]): e for e in http("GET", daemon.http_url + "/api/").json()["endpoints"]}
    assert endpoints[("GET", "/api/memories")]["query"] == schemas.input_schema(schemas.MemoryListQuery)
    assert endpoints[("PUT", "/api/memories/{id}")]["body"] == schemas.input_schema(schemas.UpdateMemoryBody)
    assert endpoints[("GET", "/api/memories/{id}/history/{n}")]["path_params"] == schemas.input_schema(
        schemas.HistoryVersionRequest
    )
    assert endpoints[("POST", "/api/governance/actions")]["body"] == schemas.input_schema(schemas.GovernanceActionBody)


@pytest.mark.parametrize("method", sorted(OPERATIONS))
def test_every_operation_refuses_an_unknown_parameter_on_the_socket_and_in_process(
    method: str, daemon: DaemonProcess, in_process: InProcessBackend
) -> None:
    """Each use case (services/api.OPERATIONS) is guarded by its model, through the daemon's socket and
    through the CLI's in-process fallback alike, with the same words."""
    with pytest.raises(schemas.ContractError) as contract:
        schemas.validate(OPERATIONS[method].request, {"bogus": 1})
    expected = contract.value.message
    assert "bogus: unknown parameter" in expected
    with pytest.raises(RpcCallError) as socket_refusal:
        daemon.call(method, bogus=1)
    with pytest.raises(RpcCallError) as local_refusal:
        in_process.call(method, {"bogus": 1})
    assert socket_refusal.value.code == local_refusal.value.code == INVALID_PARAMS
    assert socket_refusal.value.message == local_refusal.value.message == expected


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBackend]:
    """The CLI's in-process backend on its own copy of a workspace (no daemon runs for it)."""
    root = tmp_path_factory.mktemp("in-process") / "ws"
    init_workspace(root)
    backend = InProcessBackend(root)
    yield backend
    backend.close()
