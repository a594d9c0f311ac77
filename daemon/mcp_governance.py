"""MCP tools for agents taking part in governance. None of them changes a memory by itself.

``review_memories``, ``flag_memory``, ``propose_merge`` and ``draft_merge`` are
added to the server built by ``mcp_server.build_mcp_server`` and, like the other
tools, call the daemon's RPC methods (``rpc_agent_governance.py``) through the
backend. Flags land in the person's governance queue; proposals wait in the
daemon's state folder until a person accepts (written through the write gate)
or rejects them.

``draft_merge`` uses MCP *sampling*: when the connected client declared the
sampling capability, the tool asks the client's own model (``create_message``
on the tool's session) to draft the merged text for a conflict or
consolidation finding, and stores the answer as a proposal, never as a memory.
The request is made with the SDK's ``Resolve``/``Sample`` resolver, which speaks
both protocol generations (an input-required round trip on 2026-07-28, a
mid-call ``sampling/createMessage`` before).
A client without sampling gets a clear error saying to write the text itself
and call ``propose_merge``.
"""
# No `from __future__ import annotations`: draft_merge's Resolve(...) names a local resolver, which the
# SDK can only see in an annotation evaluated when the function is defined.

import logging
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer, Resolve, Sample
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, CreateMessageResult, SamplingMessage, TextContent
from pydantic import BaseModel, Field

from .mcp_server import client_label  # "<client name> via MCP", as history names the author

log = logging.getLogger("ctxos.mcp")

NOTHING_CHANGES = (
    "Nothing in the memory changes until a person accepts it (`ctxos proposals`, `ctxos accept ID`, or the web page)."
)
DRAFT_MAX_TOKENS = 2_000


class FindingOut(BaseModel):
    fingerprint: str = Field(description="the finding's id (stable while its files are unchanged)")
    kind: str = Field(description="flag, conflict, consolidation, decay, god_node, scratch_expired or invalid_file")
    severity: str
    ids: list[str]
    paths: list[str]
    reason: str
    evidence: dict[str, Any]
    suggestion: str = ""


class ProposalRef(BaseModel):
    id: str
    ids: list[str]
    l0: str
    by: str
    origin: str
    stale: bool


class ReviewOut(BaseModel):
    topic: str | None
    total: int = Field(description="findings matching the topic (all findings when no topic)")
    findings: list[FindingOut]
    proposals: list[ProposalRef] = Field(description="merge proposals waiting for a person about these memories")


class FlagOut(BaseModel):
    id: str
    kind: str
    reason: str
    fingerprint: str = Field(description="the governance finding this flag is part of")
    repeated: bool = Field(description="true: the same flag was already in the queue")


class ProposalOut(BaseModel):
    proposal_id: str
    ids: list[str]
    into: str = Field(description="the memory that would hold the merged text; the others would be archived")
    l0: str
    status: str
    origin: str
    diffs: list[dict[str, str]] = Field(description="unified diff from each source's text to the merged text")


def _finding_out(f: dict[str, Any]) -> FindingOut:
    action = found if isinstance(found := f.get("action"), dict) else {}
    return FindingOut(
        fingerprint=f["fingerprint"],
        kind=f["kind"],
        severity=f.get("severity", "info"),
        ids=list(f.get("ids") or []),
        paths=list(f.get("paths") or []),
        reason=f.get("reason", ""),
        evidence=dict(f.get("evidence") or {}),
        suggestion=str(action.get("suggestion", "")),
    )


def _proposal_out(p: dict[str, Any]) -> ProposalOut:
    return ProposalOut(
        proposal_id=p["id"],
        ids=list(p["ids"]),
        into=p.get("into") or p["ids"][0],
        l0=p["l0"],
        status=p["status"],
        origin=p.get("origin", "agent"),
        diffs=[{"id": d["id"], "path": d["path"], "diff": d["diff"]} for d in p.get("diffs") or []],
    )


def _proposal_text(p: ProposalOut, lead: str) -> str:
    diffs = "\n\n".join(d["diff"] for d in p.diffs if d["diff"])
    return (
        f"{lead} {p.proposal_id}: merge {', '.join(p.ids)} into {p.into} (the others would be archived). "
        f"{NOTHING_CHANGES}\n\n{diffs}"
    )


def supports_sampling(ctx: Context) -> bool:
    """Whether the connected client declared the sampling capability."""
    try:
        capabilities = ctx.client_capabilities
    except (AttributeError, ValueError):
        return False
    return capabilities is not None and capabilities.sampling is not None


def _sampled_text(result: Any) -> str:
    content = getattr(result, "content", None)
    items = content if isinstance(content, list) else [content]
    return "\n".join(getattr(c, "text", "") for c in items if getattr(c, "type", None) == "text").strip()


def register_governance_tools(mcp: MCPServer, backend: Any, call: Any, tool_result: Any) -> None:
    """Add the governance tools to ``mcp``; ``call`` and ``tool_result`` are mcp_server's helpers."""

    @mcp.tool(
        title="Review memories",
        description="Governance findings about a topic (or all, when no topic): memories flagged by agents, "
        "conflicts (with the contradicting sentences), near-duplicates (with their overlap), "
        "decaying and expired memories, each with its fingerprint, kind, ids and evidence; and "
        "merge proposals already waiting. Read-only.",
    )
    async def review_memories(topic: str | None = None, limit: int = 50) -> Annotated[CallToolResult, ReviewOut]:
        """Input: ``schemas.ReviewRequest`` (bound in ``build_mcp_server``)."""
        result = await call(backend, "review", {"topic": topic, "limit": limit})
        out = ReviewOut(
            topic=result.get("topic"),
            total=int(result.get("total", 0)),
            findings=[_finding_out(f) for f in result.get("findings", [])],
            proposals=[ProposalRef(**{k: p[k] for k in ProposalRef.model_fields}) for p in result.get("proposals", [])],
        )
        lines = [
            f"{out.total} finding(s)"
            + (f" about {topic!r}" if topic else "")
            + (f", {len(out.findings)} shown" if len(out.findings) < out.total else "")
        ]
        lines += [f"- [{f.fingerprint}] {f.kind}: {f.reason}" for f in out.findings]
        if out.proposals:
            lines.append(
                f"{len(out.proposals)} merge proposal(s) waiting for a person: "
                + ", ".join(f"{p.id} ({', '.join(p.ids)})" for p in out.proposals)
            )
        return tool_result("\n".join(lines), out)

    @mcp.tool(
        title="Flag memory",
        description="Ask a person to look at a memory you found stale, wrong, duplicated or in conflict: the flag "
        "goes to their governance queue (and a desktop notification). The memory itself does not "
        "change; the flag clears when someone edits the memory or the person dismisses it.",
    )
    async def flag_memory(
        id: str,
        reason: str,
        kind: str = "stale",
        ctx: Context | None = None,
    ) -> Annotated[CallToolResult, FlagOut]:
        """Input: ``schemas.FlagToolRequest``."""
        result = await call(backend, "flag", {"id": id, "reason": reason, "kind": kind, "by": client_label(ctx)})
        out = FlagOut(
            id=result["memory_id"],
            kind=result["kind"],
            reason=result["reason"],
            fingerprint=result["fingerprint"],
            repeated=bool(result.get("repeated")),
        )
        note = "was already in" if out.repeated else "is now in"
        return tool_result(
            f"Flag on {out.id} ({out.kind}) {note} the person's governance queue "
            f"(finding {out.fingerprint}). The memory was not changed.",
            out,
        )

    @mcp.tool(
        title="Propose merge",
        description="Propose merging memories into one: give the ids (the first one keeps its id and receives the "
        "merged text; the others would be archived), the full merged text and its one-line l0. The "
        "proposal is stored for a person, who sees a diff against each source. " + NOTHING_CHANGES,
    )
    async def propose_merge(
        ids: list[str],
        merged_text: str,
        l0: str,
        ctx: Context | None = None,
    ) -> Annotated[CallToolResult, ProposalOut]:
        """Input: ``schemas.ProposeMergeToolRequest``."""
        result = await call(
            backend,
            "propose_merge",
            {"ids": ids, "merged_text": merged_text, "l0": l0, "by": client_label(ctx), "origin": "agent"},
        )
        out = _proposal_out(result)
        return tool_result(_proposal_text(out, "Stored proposal"), out)

    async def _draft_inputs(finding: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The finding and its memories (kept one first), or a ToolError an agent can act on."""
        report = await call(backend, "review", {"limit": 500})
        match = next((f for f in report.get("findings", []) if f["fingerprint"] == finding), None)
        if match is None:
            raise ToolError(f"no current finding {finding!r} (call review_memories for the fingerprints)")
        if match["kind"] not in ("conflict", "consolidation"):
            raise ToolError(
                f"finding {finding} is a {match['kind']}; only conflict and consolidation findings "
                "can be drafted as a merge"
            )
        ids = list(match["ids"])
        into = (match.get("action") or {}).get("into")
        if into in ids:  # consolidation: keep the one governance chose
            ids.remove(into)
            ids.insert(0, into)
        return match, [await call(backend, "get_memory", {"id": i}) for i in ids]

    async def _draft_request(finding: str, ctx: Context) -> Sample:
        """Resolver: the sampling request for ``draft_merge`` (the SDK sends it and injects the answer).

        On the 2026-07-28 protocol the request rides an input-required round trip,
        on older ones a sampling request mid-call; either way it must render the
        same on each round, which it does while the memories are unchanged.
        """
        from ctxos.services.proposals import DRAFT_SYSTEM, draft_prompt

        if not supports_sampling(ctx):
            raise ToolError(
                "this MCP client does not support sampling, so no model can draft the merge here: "
                "write the merged text yourself and call propose_merge"
            )
        match, memories = await _draft_inputs(finding)
        return Sample(
            [SamplingMessage(role="user", content=TextContent(type="text", text=draft_prompt(match, memories)))],
            max_tokens=DRAFT_MAX_TOKENS,
            system_prompt=DRAFT_SYSTEM,
            temperature=0.2,
            include_context="none",
        )

    @mcp.tool(
        title="Draft merge",
        description="For a conflict or near-duplicate finding (fingerprint from review_memories), ask your client's "
        "model (MCP sampling) to draft the merged memory, and store the draft as a merge proposal for "
        "a person. Needs a client that supports sampling; otherwise write the text yourself and call "
        "propose_merge. " + NOTHING_CHANGES,
    )
    async def draft_merge(
        finding: Annotated[str, Field(min_length=1, description="the finding's fingerprint (review_memories)")],
        draft: Annotated[CreateMessageResult, Resolve(_draft_request)],
        ctx: Context,
    ) -> Annotated[CallToolResult, ProposalOut]:
        from ctxos.services.proposals import ProposalError, parse_draft

        match, memories = await _draft_inputs(finding)
        try:
            l0, text = parse_draft(_sampled_text(draft))
        except ProposalError as exc:
            raise ToolError(f"{exc}; nothing was stored") from None
        model = str(getattr(draft, "model", "") or "unknown model")
        result = await call(
            backend,
            "propose_merge",
            {
                "ids": [m["id"] for m in memories],
                "merged_text": text,
                "l0": l0,
                "by": client_label(ctx),
                "origin": "sampling",
                "finding": match["fingerprint"],
                "note": f"drafted by {model}",
            },
        )
        out = _proposal_out(result)
        return tool_result(_proposal_text(out, f"Stored the draft by {model} as proposal"), out)
