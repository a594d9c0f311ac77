"""The MCP tools, resources and prompts, driven by the SDK's in-memory client.

The backend is the real thing without the daemon process: the real Engine on
a temporary workspace, the daemon's own RPC registry and context (read pool,
write thread and lock) behind ``RegistryBackend``, exactly what the HTTP
component uses in the daemon. The process-level tests (stdio subprocess,
HTTP against a running daemon) are in ``test_mcp_stdio.py`` and
``test_mcp_http.py``.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from ctxos.daemon.mcp_server import RegistryBackend, build_mcp_server
from mcp import Client
from mcp_helpers import TOOLS, build_workspace, refusal_cases, snapshot

pytestmark = pytest.mark.anyio


@pytest.fixture
def workspace(make_workspace, tmp_path):
    return build_workspace(make_workspace, tmp_path)


@pytest.fixture
async def ctx(workspace):
    """A DaemonContext with the real engine and the real RPC methods, as in the daemon."""
    from ctxos.daemon.components import register_rpc_methods
    from ctxos.daemon.context import DaemonContext
    from ctxos.services.engine import Engine

    engine = Engine(workspace)
    engine.load()
    context = DaemonContext(workspace, engine, mode="in-process")
    context.bind_loop(asyncio.get_running_loop())
    register_rpc_methods(context.rpc)
    context.mark_ready()
    yield context
    context.shutdown_executors()
    engine.close()


@pytest.fixture
async def client(ctx):
    server = build_mcp_server(RegistryBackend(ctx))
    async with Client(server) as c:
        yield c


async def test_lists_four_typed_tools_with_output_schemas(client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    save = tools["save_memory"].input_schema
    assert set(save["required"]) == {"type", "content", "l0"}
    assert "expected_version" in save["properties"]
    assert set(save["properties"]["type"]["enum"]) >= {"skill", "decision", "rule"}
    for name in TOOLS:
        assert tools[name].output_schema and tools[name].output_schema["type"] == "object"
    assert "rendered" in tools["get_context"].output_schema["properties"]


async def test_get_context_within_budget(client, ctx):
    from ctxos.services.tokens import count_tokens

    result = await client.call_tool("get_context", {"query": "how do we deploy apollo", "budget_tokens": 250})
    assert not result.is_error
    data = result.structured_content
    assert data["budget_tokens"] == 250 and 0 < data["tokens_used"] <= 250
    assert count_tokens(data["rendered"]) <= 250
    assert result.content[0].text == data["rendered"]
    ids = [s["id"] for s in data["selected"]]
    assert "no-secrets" in ids  # rules first
    assert {"deploy-checklist", "apollo"} & set(ids + data["catalog_ids"])
    for s in data["selected"]:
        assert s["tier"] in {"L0", "L1", "L2"} and s["tokens"] >= 0 and 0.0 <= s["score"] <= 1.0
        assert s.keys() == {"id", "type", "tier", "tokens", "score"}  # the agent view (SelectedMemoryOut)

    default = await client.call_tool("get_context", {"query": "rust errors"})
    assert default.structured_content["budget_tokens"] == ctx.config.get("query.default_budget")

    debug = await client.call_tool("get_context", {"query": "rust errors", "intent": "debug"})
    assert debug.structured_content["intent"] == "debug"
    bogus = await client.call_tool("get_context", {"query": "rust errors", "intent": "bogus"})
    assert bogus.is_error and "unknown intent 'bogus'" in bogus.content[0].text


async def test_save_then_found_by_next_get_context_then_update(client, workspace):
    saved = await client.call_tool(
        "save_memory",
        {
            "type": "decision",
            "l0": "Use zebra-stripe retries for flaky webhooks",
            "content": "We retry webhook deliveries with zebra-stripe backoff: 1s, 4s, 16s.",
            "tags": ["webhooks", "retries"],
            "importance": 0.7,
        },
    )
    assert not saved.is_error, saved.content
    out = saved.structured_content
    assert out["created"] and out["version"] == 1 and out["path"].startswith("06-decisions/")
    text = (workspace / out["path"]).read_text()
    assert re.search(r"^id: ", text, re.M) and "type: decision" in text and "zebra-stripe backoff" in text

    found = await client.call_tool("get_context", {"query": "zebra-stripe webhook retries"})
    assert out["id"] in [s["id"] for s in found.structured_content["selected"]]

    updated = await client.call_tool(
        "save_memory",
        {
            "type": "decision",
            "id": out["id"],
            "l0": "Use zebra-stripe retries (max 5) for webhooks",
            "content": "Retry with zebra-stripe backoff, at most five times.",
            "expected_version": 1,
        },
    )
    assert not updated.is_error, updated.content
    assert updated.structured_content["version"] == 2 and not updated.structured_content["created"]
    assert "version: 2" in (workspace / out["path"]).read_text()


async def test_each_refusal_is_a_tool_error_and_nothing_changes(client, workspace, tmp_path):
    before, outside_before = snapshot(workspace), snapshot(tmp_path / "outside")
    for args, message in refusal_cases(workspace):
        result = await client.call_tool("save_memory", args)
        assert result.is_error, args
        assert message in result.content[0].text, (args, result.content[0].text)
        assert result.content[0].text.startswith("Error executing tool save_memory: ")
    assert snapshot(workspace) == before
    assert snapshot(tmp_path / "outside") == outside_before


async def test_file_changed_on_disk_since_read_is_not_clobbered(client, workspace):
    skill = await client.call_tool("get_skill", {"name": "rust-errors"})
    version = skill.structured_content["version"]
    path = workspace / "04-skills" / "rust-errors.md"
    path.write_text(path.read_text().replace("anyhow with context", "anyhow, edited by a person"))
    before = snapshot(workspace)
    result = await client.call_tool(
        "save_memory",
        {"type": "skill", "id": "rust-errors", "content": "agent text", "l0": "agent", "expected_version": version},
    )
    assert result.is_error and "edited on disk" in result.content[0].text
    assert snapshot(workspace) == before


async def test_invalid_arguments_are_tool_errors(client, workspace):
    before = snapshot(workspace)
    bad = [
        {"type": "skill", "content": "x", "l0": "x", "importance": 1.5},
        {"type": "bogus", "content": "x", "l0": "x"},
        {"type": "skill", "content": "", "l0": "x"},
    ]
    for args in bad:
        result = await client.call_tool("save_memory", args)
        assert result.is_error, args
    assert snapshot(workspace) == before


async def test_get_skill_by_id_title_and_file_name(client):
    by_id = await client.call_tool("get_skill", {"name": "deploy-checklist"})
    assert by_id.structured_content["id"] == "deploy-checklist"
    assert by_id.structured_content["matched"] is True and by_id.structured_content["matched_by"] == "id"
    assert "Watch the error dashboards" in by_id.structured_content["text"]  # full L2 text
    assert "Watch the error dashboards" in by_id.content[0].text
    by_title = await client.call_tool("get_skill", {"name": "rust ERROR handling"})  # any case
    assert by_title.structured_content["id"] == "rust-errors"
    assert by_title.structured_content["matched_by"] == "title"
    by_file = await client.call_tool("get_skill", {"name": "04-skills/Deploy-Checklist.md"})
    assert by_file.structured_content["id"] == "deploy-checklist"
    assert by_file.structured_content["matched_by"] == "file name"


async def test_get_skill_refuses_an_exact_non_skill_and_names_its_type(client):
    not_a_skill = await client.call_tool("get_skill", {"name": "apollo"})  # a project, not a skill
    assert not_a_skill.is_error
    assert "'apollo' is a project, not a skill" in not_a_skill.content[0].text
    rule = await client.call_tool("get_skill", {"name": "no-secrets"})  # a rule named exactly
    assert rule.is_error and "is a rule, not a skill" in rule.content[0].text
    assert "memory://no-secrets" in rule.content[0].text


async def test_get_skill_near_miss_is_an_error_listing_the_closest_skills(client):
    near = await client.call_tool("get_skill", {"name": "deploy checklists"})
    assert near.is_error, near.content
    text = near.content[0].text
    assert "no skill named 'deploy checklists'" in text and "Closest skills by name: deploy-checklist" in text
    assert near.structured_content is None  # no memory in the answer
    missing = await client.call_tool("get_skill", {"name": "qwxzv-nothing-like-this"})
    assert missing.is_error and "no skill named" in missing.content[0].text


async def test_get_skill_description_states_the_rule(client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    description = tools["get_skill"].description
    assert "exact" in description and "never" in description and "closest skills" in description


async def test_log_session_creates_day_file_and_parallel_appends_keep_every_line(client, workspace):
    first = await client.call_tool("log_session", {"event": "started work on apollo", "details": "line one\nline two"})
    assert not first.is_error
    rel = first.structured_content["path"]
    assert re.fullmatch(r"02-daily/\d{4}-\d{2}-\d{2}\.md", rel)
    text = (workspace / rel).read_text()
    assert text.startswith("---\n") and "type: daily" in text and "started work on apollo" in text

    results = await asyncio.gather(
        *(client.call_tool("log_session", {"event": f"parallel event {i:02d}"}) for i in range(20))
    )
    assert not any(r.is_error for r in results)
    lines = (workspace / rel).read_text().splitlines()
    entries = [line for line in lines if "parallel event" in line]
    assert sorted(re.search(r"parallel event (\d\d)", e).group(1) for e in entries) == [f"{i:02d}" for i in range(20)]
    assert all(re.match(r"^- \d\d:\d\d:\d\dZ \*\*parallel event \d\d\*\*$", e) for e in entries)

    empty = await client.call_tool("log_session", {"event": "  "})
    assert empty.is_error


async def test_resources_and_prompts(client):
    templates = (await client.list_resource_templates()).resource_templates
    assert any(t.uri_template == "memory://{id}" for t in templates)
    resource = await client.read_resource("memory://apollo")
    assert "billing service rewrite" in resource.contents[0].text
    catalog = await client.read_resource("ctxos://catalog")
    text = catalog.contents[0].text
    assert "- apollo (project): Apollo is the billing service rewrite in Rust" in text
    assert "- no-secrets (rule): " in text and "- deploy-checklist (skill): " in text

    prompts = {p.name for p in (await client.list_prompts()).prompts}
    assert prompts == {"context_for_task", "wrap_up_session"}
    prompt = await client.get_prompt("context_for_task", {"task": "deploy apollo"})
    assert "Task: deploy apollo" in prompt.messages[0].content.text


async def test_save_with_stale_checksum_is_a_tool_error(client, workspace):
    """A person's edit without a version bump is caught by the checksum the agent read."""
    resource = await client.read_resource("memory://deploy-checklist")
    text = resource.contents[0].text
    checksum = text.split("checksum: ", 1)[1].split()[0]
    version = int(text.split("version: ", 1)[1].split()[0])
    path = workspace / text.split("path: ", 1)[1].split()[0]
    edited = path.read_text().replace("\n---\n", "\n---\nA person's line.\n", 1)
    path.write_text(edited)
    result = await client.call_tool(
        "save_memory",
        {
            "type": "skill",
            "id": "deploy-checklist",
            "content": "agent text",
            "l0": "agent",
            "expected_version": version,
            "expected_checksum": checksum,
        },
    )
    assert result.is_error and "checksum differs" in result.content[0].text
    assert path.read_text() == edited


def test_output_schemas_inline_local_refs_and_keep_recursive_ones():
    """The published outputSchema has no ``$ref`` to resolve per item (the client validates every result)."""
    from ctxos.daemon.mcp_contracts import inline_local_refs
    from ctxos.daemon.mcp_server import ContextOut, SelectedMemoryOut
    from pydantic import BaseModel

    schema = inline_local_refs(ContextOut.model_json_schema())
    assert schema is not None and "$defs" not in schema and "$ref" not in str(schema)
    assert schema["properties"]["selected"]["items"]["properties"]["tier"]["enum"] == ["L0", "L1", "L2"]
    here = SelectedMemoryOut(id="a", type="decision", tier="L1", tokens=3, score=0.5)
    assert "workspace" not in here.model_dump(mode="json")  # absent for this workspace, as on the socket
    assert SelectedMemoryOut(**{**here.model_dump(), "workspace": "global"}).model_dump()["workspace"] == "global"

    class Node(BaseModel):
        name: str
        kids: list[Node] = []

    class Tree(BaseModel):
        root: Node

    tree = inline_local_refs(Tree.model_json_schema())
    assert tree is not None and tree["properties"]["root"]["properties"]["kids"]["items"] == {"$ref": "#/$defs/Node"}
    assert "Node" in tree["$defs"]


async def test_get_context_from_a_daemon_without_agent_context(ctx):
    """A ``ctxos mcp`` of a newer install may reach a daemon still running the old one: ``agent_context``
    is then unknown (METHOD_NOT_FOUND) and the tool asks ``get_context`` instead, with the same answer.
    The old daemon is the real registry with that one method refused (it cannot run here otherwise)."""
    from ctxos.services.jsonrpc import METHOD_NOT_FOUND, BackendError

    real = RegistryBackend(ctx)
    asked: list[str] = []

    class OldDaemon:
        async def call(self, method, params):
            asked.append(method)
            if method == "agent_context":
                raise BackendError("method not found: agent_context", METHOD_NOT_FOUND)
            return await real.call(method, params)

    async with Client(build_mcp_server(OldDaemon())) as old, Client(build_mcp_server(real)) as new:
        before = await old.call_tool("get_context", {"query": "deploy", "budget_tokens": 300})
        after = await new.call_tool("get_context", {"query": "deploy", "budget_tokens": 300})
    assert asked == ["agent_context", "get_context"]
    assert not before.is_error and not after.is_error
    assert before.structured_content.keys() == after.structured_content.keys()
    for answer in (before, after):  # the same agent view either way (the first call's access may reorder)
        entries = answer.structured_content["selected"]
        assert entries and all(e.keys() == {"id", "type", "tier", "tokens", "score"} for e in entries)
        assert answer.content[0].text == answer.structured_content["rendered"]
