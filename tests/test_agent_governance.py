"""Agents in governance: flags in the person's queue, merge proposals a person accepts or rejects,
and a proposal drafted by the client's model through MCP sampling.

The first tests run the real engine in-process (fast); the MCP ones use the SDK's
client against the real server and RPC registry. The ``slow`` ones run a real
daemon process, the real ``ctxos`` CLI in subprocesses, ``ctxos mcp`` as a stdio
subprocess and the daemon's streamable HTTP endpoint, each with a client whose
``sampling_callback`` answers (a scripted stand-in for the client's model: no
model runs here, and the test checks that what it answered is what was stored).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp_types as t
import pytest
from ctxos.services import flags as flags_mod
from ctxos.services import proposals as props
from ctxos.services.engine import Engine
from ctxos.services.governance import dismiss_finding, governance_report
from ctxos.services.write_gate import WriteConflict, WriteRefused
from daemon_helpers import daemon_factory, memory_text  # noqa: F401  (daemon_factory is a fixture)
from mcp import Client, StdioServerParameters
from mcp_helpers import APOLLO_BODY, apollo_files, mcp_http_client

CTXOS = shutil.which("ctxos") or str(Path(sys.executable).with_name("ctxos"))
BODY = APOLLO_BODY
FILES = {
    **apollo_files(),
    "04-skills/deploy.md": memory_text("deploy", "Deploy with the release checklist.", type="skill", tags=["deploy"]),
    "01-context/owner.md": memory_text("owner", "The billing team owns Apollo.", type="context", protected=True),
}
DRAFT = "L0: Apollo billing keeps invoices in Postgres 14, backed up nightly\n\nMerged: " + BODY


@pytest.fixture
def engine(make_workspace):
    eng = Engine(make_workspace(FILES))
    eng.load()
    yield eng
    eng.close()


def _memories(engine: Engine) -> dict[str, Any]:
    return dict(engine.store.memories)


def _kinds(engine: Engine) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for finding in governance_report(engine).findings:
        out.setdefault(finding.kind, []).append(finding)
    return out


# ---------------------------------------------------------------- flags (engine)


def test_flag_joins_the_queue_outside_the_memory_and_clears_when_the_memory_changes(engine):
    before = (engine.root / "04-skills/deploy.md").read_bytes()
    stored = flags_mod.flag_memory(
        engine.root, engine.get_memory("deploy"), "the checklist moved to the wiki", "stale", by="test-agent via MCP"
    )
    assert (engine.root / "04-skills/deploy.md").read_bytes() == before  # the memory is untouched
    assert flags_mod.flags_path(engine.root).is_file()
    assert not str(flags_mod.flags_path(engine.root)).startswith(str(engine.root / "04-skills"))
    again = flags_mod.flag_memory(
        engine.root, engine.get_memory("deploy"), "the checklist moved to the wiki", "stale", by="test-agent via MCP"
    )
    assert again["repeated"] and again["fingerprint"] == stored["fingerprint"]
    flags_mod.flag_memory(engine.root, engine.get_memory("deploy"), "step 3 is missing", "stale", by="other via MCP")
    [finding] = _kinds(engine)["flag"]
    assert finding.fingerprint == stored["fingerprint"] and finding.ids == ["deploy"]
    assert [f["reason"] for f in finding.evidence["flags"]] == ["the checklist moved to the wiki", "step 3 is missing"]
    assert "other via MCP, test-agent via MCP flagged deploy as stale" in finding.reason

    # Someone edits the memory: the flag is taken as acted on.
    path = engine.root / "04-skills/deploy.md"
    path.write_text(path.read_text().replace("release checklist", "wiki checklist"))
    engine.apply_changes(["04-skills/deploy.md"])
    assert "flag" not in _kinds(engine)


def test_flag_can_be_dismissed_and_bad_flags_are_refused(engine):
    stored = flags_mod.flag_memory(engine.root, engine.get_memory("deploy"), "contradicts apollo-db", "conflict")
    assert [f.fingerprint for f in _kinds(engine)["flag"]] == [stored["fingerprint"]]
    dismiss_finding(engine, stored["fingerprint"])
    assert "flag" not in _kinds(engine)
    with pytest.raises(flags_mod.FlagError, match="unknown flag kind"):
        flags_mod.flag_memory(engine.root, engine.get_memory("deploy"), "x", "bogus")
    with pytest.raises(flags_mod.FlagError, match="needs a reason"):
        flags_mod.flag_memory(engine.root, engine.get_memory("deploy"), "   ", "stale")


# ---------------------------------------------------------------- proposals (engine)


def test_proposal_accept_writes_through_the_gate_and_archives_the_other_sources(engine):
    proposal = props.create_proposal(
        engine.root,
        _memories(engine),
        ["apollo-db", "apollo-storage"],
        "Merged text about Apollo billing backups.",
        "Apollo billing backups",
        by="agent via MCP",
    )
    assert props.proposals_dir(engine.root).joinpath(f"{proposal.id}.json").is_file()
    assert engine.get_memory("apollo-db").version == 1  # nothing changed yet
    shown = props.describe(proposal, _memories(engine), diffs=True)
    assert not shown["stale"] and [d["id"] for d in shown["diffs"]] == ["apollo-db", "apollo-storage"]
    assert "+Merged text about Apollo billing backups." in shown["diffs"][0]["diff"]
    assert shown["diffs"][1]["diff"].startswith("--- 03-projects/apollo-storage.md (version 1)\n+++ merged")

    result, touched = props.accept(engine, proposal.id)
    merged = engine.get_memory("apollo-db")
    assert merged.version == 2 and merged.l0 == "Apollo billing backups"
    assert merged.tier_text("L2") == "Merged text about Apollo billing backups."
    assert engine.get_memory("apollo-storage") is None
    assert (engine.root / "_archive/03-projects/apollo-storage.md").is_file()
    assert result["archived"] == [
        {
            "id": "apollo-storage",
            "from": "03-projects/apollo-storage.md",
            "to": "_archive/03-projects/apollo-storage.md",
        }
    ]
    assert set(touched) >= {"03-projects/apollo-db.md", "03-projects/apollo-storage.md"}
    assert props.load_proposal(engine.root, proposal.id).status == "accepted"
    with pytest.raises(WriteRefused, match="already accepted"):
        props.accept(engine, proposal.id)


def test_stale_proposal_is_shown_stale_and_accept_is_a_conflict(engine):
    proposal = props.create_proposal(
        engine.root, _memories(engine), ["apollo-db", "apollo-storage"], "Merged.", "merged"
    )
    path = engine.root / "03-projects/apollo-storage.md"
    original = path.read_text()
    path.write_text(original.replace("monthly", "weekly"))  # a person edits a source meanwhile
    engine.apply_changes(["03-projects/apollo-storage.md"])
    shown = props.list_proposals(engine.root, _memories(engine))[0]
    assert shown["stale"] and "apollo-storage changed since the proposal" in shown["stale_reasons"][0]
    with pytest.raises(WriteConflict, match="stale"):
        props.accept(engine, proposal.id)
    assert path.read_text() == original.replace("monthly", "weekly")  # nothing overwritten
    assert engine.get_memory("apollo-db").version == 1
    rejected = props.reject(engine.root, proposal.id, "outdated")
    assert rejected["status"] == "rejected" and props.list_proposals(engine.root, _memories(engine)) == []
    assert [p["status"] for p in props.list_proposals(engine.root, _memories(engine), include_decided=True)] == [
        "rejected"
    ]


def test_proposals_refuse_protected_unknown_and_duplicate_ids(engine):
    with pytest.raises(props.ProposalError, match="protected"):
        props.create_proposal(engine.root, _memories(engine), ["apollo-db", "owner"], "x", "y")
    with pytest.raises(props.ProposalError, match="no memory"):
        props.create_proposal(engine.root, _memories(engine), ["apollo-db", "nope"], "x", "y")
    with pytest.raises(props.ProposalError, match="distinct"):
        props.create_proposal(engine.root, _memories(engine), ["apollo-db", "apollo-db"], "x", "y")
    with pytest.raises(props.ProposalError, match="not a proposal id"):
        props.load_proposal(engine.root, "../../etc/passwd")


def test_parse_draft_reads_the_l0_line_and_strips_a_code_fence():
    assert props.parse_draft(DRAFT) == (
        "Apollo billing keeps invoices in Postgres 14, backed up nightly",
        "Merged: " + BODY,
    )
    assert props.parse_draft("```markdown\n**L0:** Short line\n\nBody text\n```") == ("Short line", "Body text")
    assert props.parse_draft("# Title line\nBody") == ("Title line", "# Title line\nBody")
    with pytest.raises(props.ProposalError):
        props.parse_draft("L0: only a summary")


# ---------------------------------------------------------------- MCP tools (SDK client, in-process server)


async def _sampling_answer(requests: list[Any], text: str = DRAFT):
    async def callback(context: Any, params: t.CreateMessageRequestParams) -> t.CreateMessageResult:
        requests.append(params)
        return t.CreateMessageResult(
            role="assistant", content=t.TextContent(type="text", text=text), model="scripted-test-model"
        )

    return callback


@pytest.fixture
async def rpc_ctx(engine):
    from ctxos.daemon.components import register_rpc_methods
    from ctxos.daemon.context import DaemonContext

    context = DaemonContext(engine.root, engine, mode="in-process")
    context.bind_loop(asyncio.get_running_loop())
    register_rpc_methods(context.rpc)
    context.mark_ready()
    yield context
    context.shutdown_executors()


@pytest.mark.anyio
async def test_tools_say_nothing_changes_and_draft_needs_sampling(rpc_ctx):
    from ctxos.daemon.mcp_server import RegistryBackend, build_mcp_server

    server = build_mcp_server(RegistryBackend(rpc_ctx))
    async with Client(server) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        for name in ("propose_merge", "draft_merge"):
            assert "Nothing in the memory changes until a person accepts it" in tools[name].description
        assert "does not change" in tools["flag_memory"].description
        assert set(tools["draft_merge"].input_schema["properties"]) == {"finding"}
        assert tools["flag_memory"].input_schema["properties"]["kind"]["enum"] == [
            "stale",
            "wrong",
            "duplicate",
            "conflict",
        ]
        review = await client.call_tool("review_memories", {"topic": "postgres backups"})
        [finding] = review.structured_content["findings"]
        assert finding["kind"] == "consolidation" and finding["evidence"]["similarity"][0]["overlap"] > 0.7
        refused = await client.call_tool("draft_merge", {"finding": finding["fingerprint"]})
        assert refused.is_error and "does not support sampling" in refused.content[0].text
        assert props.load_proposals(rpc_ctx.engine.root) == []
        unknown = await client.call_tool("flag_memory", {"id": "nope", "reason": "x"})
        assert unknown.is_error and "no memory with id 'nope'" in unknown.content[0].text


# ---------------------------------------------------------------- real processes


def _cli(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [CTXOS, "--workspace", str(root), *args], capture_output=True, text=True, timeout=120, env={**os.environ}
    )
    if check:
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc


def _stdio(root: Path) -> StdioServerParameters:
    env = {
        "CTXOS_RUNTIME_DIR": os.environ["CTXOS_RUNTIME_DIR"],
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", ""),
    }
    return StdioServerParameters(command=CTXOS, args=["--workspace", str(root), "mcp"], env=env)


@pytest.mark.slow
@pytest.mark.anyio
async def test_stdio_agent_flags_and_drafts_a_merge_a_person_accepts_and_rejects(make_workspace, daemon_factory):  # noqa: F811
    root = make_workspace(FILES)
    daemon = daemon_factory(root)
    requests: list[Any] = []
    info = t.Implementation(name="test-agent", version="1.0")
    async with Client(_stdio(root), sampling_callback=await _sampling_answer(requests), client_info=info) as client:
        flagged = await client.call_tool(
            "flag_memory", {"id": "deploy", "kind": "wrong", "reason": "the checklist skips the database migration"}
        )
        assert not flagged.is_error, flagged.content
        review = await client.call_tool("review_memories", {"topic": "apollo postgres"})
        [consolidation] = [f for f in review.structured_content["findings"] if f["kind"] == "consolidation"]
        drafted = await client.call_tool("draft_merge", {"finding": consolidation["fingerprint"]})
        assert not drafted.is_error, drafted.content
    # The client's model was asked once, about exactly these memories, and its answer is what was stored.
    [request] = requests
    assert "apollo-db" in request.messages[0].content.text and "apollo-storage" in request.messages[0].content.text
    out = drafted.structured_content
    assert out["origin"] == "sampling" and out["status"] == "pending"
    proposal_id = out["proposal_id"]

    # The person's queue (real CLI process against the real daemon).
    queue = json.loads(_cli(root, "governance", "--json").stdout)
    [flag] = [f for f in queue["findings"] if f["kind"] == "flag"]
    assert flag["ids"] == ["deploy"] and flag["evidence"]["flags"][0]["by"] == "test-agent via MCP"
    text = _cli(root, "governance").stdout
    assert "the checklist skips the database migration" in text
    assert "1 merge proposal from agents waiting: ctxos proposals" in text

    listed = json.loads(_cli(root, "proposals", "--json").stdout)["proposals"]
    assert [p["id"] for p in listed] == [proposal_id]
    assert listed[0]["merged_text"] == "Merged: " + BODY and listed[0]["note"] == "drafted by scripted-test-model"
    shown = _cli(root, "proposals", proposal_id).stdout
    assert "+Merged: Apollo billing" in shown and "--- 03-projects/apollo-db.md (version 1)" in shown
    assert daemon.call("get_memory", id="apollo-db")["version"] == 1  # nothing written before accept

    # A second proposal, made stale by a person's edit: accept refuses as a conflict, reject works.
    second = daemon.call(
        "propose_merge",
        ids=["apollo-storage", "apollo-db"],
        merged_text="Other merge.",
        l0="other",
        by="test-agent via MCP",
    )
    storage = root / "03-projects/apollo-storage.md"
    storage.write_text(storage.read_text().replace("monthly", "every week"))
    daemon.wait_for(
        lambda: (
            "every week"
            in daemon.call("get_memory", id="apollo-storage")["l2"]
            + daemon.call("get_memory", id="apollo-storage")["l1"]
        )
    )
    refused = _cli(root, "accept", second["id"], check=False)
    assert refused.returncode == 1 and "stale" in refused.stderr, refused
    assert "every week" in storage.read_text()
    assert "STALE" in _cli(root, "proposals").stdout
    assert "rejected" in _cli(root, "reject", second["id"], "--reason", "superseded").stdout

    # The drafted one is stale too now (apollo-storage changed): a person re-drafts and accepts.
    assert _cli(root, "accept", proposal_id, check=False).returncode == 1
    _cli(root, "reject", proposal_id)
    fresh = daemon.call(
        "propose_merge",
        ids=["apollo-db", "apollo-storage"],
        merged_text="Final merged text.",
        l0="Apollo billing database and backups",
        by="test-agent via MCP",
    )
    accepted = _cli(root, "accept", fresh["id"])
    assert "apollo-db is now version 2" in accepted.stdout and "archived apollo-storage" in accepted.stdout
    daemon.wait_for(lambda: not daemon.has_memory("apollo-storage"))
    assert daemon.call("get_memory", id="apollo-db")["l0"] == "Apollo billing database and backups"
    assert (root / "_archive/03-projects/apollo-storage.md").is_file()
    decided = {p["id"]: p["status"] for p in json.loads(_cli(root, "proposals", "--all", "--json").stdout)["proposals"]}
    assert decided == {proposal_id: "rejected", second["id"]: "rejected", fresh["id"]: "accepted"}


@pytest.mark.slow
@pytest.mark.anyio
async def test_http_client_with_sampling_drafts_a_proposal(make_workspace, daemon_factory):  # noqa: F811
    root = make_workspace(FILES)
    daemon = daemon_factory(root, http=True)
    requests: list[Any] = []
    async with mcp_http_client(daemon.http_url + "/mcp", sampling_callback=await _sampling_answer(requests)) as client:
        review = await client.call_tool("review_memories", {})
        [consolidation] = [f for f in review.structured_content["findings"] if f["kind"] == "consolidation"]
        drafted = await client.call_tool("draft_merge", {"finding": consolidation["fingerprint"]})
        assert not drafted.is_error, drafted.content
    assert len(requests) == 1 and requests[0].system_prompt == props.DRAFT_SYSTEM
    proposal = daemon.call("proposal", id=drafted.structured_content["proposal_id"])
    assert proposal["origin"] == "sampling" and proposal["finding"] == consolidation["fingerprint"]
    assert proposal["l0"] == "Apollo billing keeps invoices in Postgres 14, backed up nightly"
    assert daemon.call("get_memory", id="apollo-db")["version"] == 1

    # The page's REST endpoints: the same proposal with its diffs; a person rejects, then accepts another.
    from web_helpers import http

    listed = http("GET", daemon.http_url + "/api/proposals").json()
    assert listed["pending"] == 1 and listed["proposals"][0]["diffs"][0]["diff"].startswith("--- ")
    pid = listed["proposals"][0]["id"]
    assert (
        http("POST", f"{daemon.http_url}/api/proposals/{pid}/reject", {"reason": "no"}).json()["status"] == "rejected"
    )
    assert http("POST", f"{daemon.http_url}/api/proposals/{pid}/accept", {}).status == 403  # already decided
    assert http("POST", f"{daemon.http_url}/api/proposals/p-00000000/accept", {}).status == 404
    other = daemon.call("propose_merge", ids=["apollo-db", "apollo-storage"], merged_text="Both, merged.", l0="m")
    accepted = http("POST", f"{daemon.http_url}/api/proposals/{other['id']}/accept", {})
    assert accepted.status == 200 and accepted.json()["archived"][0]["id"] == "apollo-storage", accepted.json()
    assert daemon.call("get_memory", id="apollo-db")["version"] == 2
