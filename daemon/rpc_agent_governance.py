"""RPC methods for agents taking part in governance, and a person deciding on what they propose.

Agents (through MCP): ``review`` (findings about a topic), ``flag`` (put a
memory in the person's queue), ``propose_merge`` (store a merge proposal).
None of them changes a memory. A person: ``proposals`` / ``proposal`` (with a
diff per source), ``accept_proposal`` (the one method here that writes memory
files, through the write gate, behind the daemon's write lock) and
``reject_proposal``. Thin adapters over ``services/flags.py`` and
``services/proposals.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxos.services import schemas

from .rpc import INVALID_PARAMS, NOT_FOUND, WRITE_REFUSED, RpcError, RpcRegistry

if TYPE_CHECKING:  # pragma: no cover
    from .context import DaemonContext

TOPIC_HITS = 50


def _memories(ctx: DaemonContext) -> dict[str, Any]:
    return dict(ctx.engine.store.memories)


def _topic_ids(ctx: DaemonContext, topic: str) -> dict[str, float]:
    """Memories about ``topic`` by BM25 (the index the query path uses), best first."""
    from ctxos.services.index import analyze

    words = [w for w in topic.split() if analyze(w)]
    if not words:
        return {}
    hits = ctx.engine.index.search([(w, 1.0) for w in words], TOPIC_HITS)
    return {h.id: h.score for h in hits}


def review(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Governance findings about a topic (memories matching it by BM25), or all; with pending proposals."""
    from ctxos.services.governance import governance_report
    from ctxos.services.proposals import list_proposals

    topic, limit = (params.get("topic") or "").strip(), params["limit"]
    findings = [f.to_dict() for f in governance_report(ctx.engine).findings]
    matched: dict[str, float] = {}
    if topic:
        matched = _topic_ids(ctx, topic)
        findings = [f for f in findings if any(i in matched for i in f["ids"])]
        findings.sort(key=lambda f: -max(matched.get(i, 0.0) for i in f["ids"]))
    memories = _memories(ctx)
    proposals = [
        {k: p[k] for k in ("id", "ids", "l0", "by", "origin", "stale", "created_at", "finding")}
        for p in list_proposals(ctx.engine.root, memories)
        if not topic or any(i in matched for i in p["ids"])
    ]
    return {
        "topic": topic or None,
        "matched_ids": list(matched)[:20],
        "total": len(findings),
        "findings": findings[:limit],
        "proposals": proposals,
    }


def flag(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Put a memory in the person's governance queue (stale, wrong, duplicate, conflict); the memory is not changed."""
    from ctxos.services.flags import FlagError, flag_memory

    memory_id = params["id"]
    memory = ctx.engine.get_memory(memory_id)
    if memory is None:
        raise RpcError(NOT_FOUND, f"no memory with id {memory_id!r}")
    try:
        stored = flag_memory(ctx.engine.root, memory, params["reason"], params["kind"], by=params["by"])
    except FlagError as exc:
        raise RpcError(INVALID_PARAMS, str(exc)) from None
    ctx.publish_change({"updated": [], "paths": [], "governance": [stored["fingerprint"]]})
    return stored


def propose_merge(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Store a merge proposal (kept outside the served memory) for a person to accept or reject."""
    from ctxos.services.proposals import ProposalError, create_proposal, describe

    memories = _memories(ctx)
    try:
        proposal = create_proposal(
            ctx.engine.root,
            memories,
            params["ids"],
            params["merged_text"],
            params["l0"],
            by=params["by"],
            origin=params["origin"],
            finding=params.get("finding"),
            note=params["note"],
        )
    except ProposalError as exc:
        code = NOT_FOUND if str(exc).startswith("no memory") else INVALID_PARAMS
        raise RpcError(code, str(exc)) from None
    ctx.publish_change({"updated": [], "paths": [], "proposals": [proposal.id]})
    return describe(proposal, memories, diffs=True)


def proposals(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Merge proposals waiting for a person (``all``: decided ones too), each marked stale or not."""
    from ctxos.services.proposals import list_proposals

    items = list_proposals(ctx.engine.root, _memories(ctx), include_decided=params["all"], diffs=params["diffs"])
    return {"proposals": items, "count": len(items), "pending": sum(1 for p in items if p["status"] == "pending")}


def _load(ctx: DaemonContext, proposal_id: str) -> Any:
    from ctxos.services.proposals import ProposalError, load_proposal

    try:
        return load_proposal(ctx.engine.root, proposal_id)
    except ProposalError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None


def proposal(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """One proposal with a unified diff from each source's current text to the merged text."""
    from ctxos.services.proposals import describe

    return describe(_load(ctx, params["id"]), _memories(ctx), diffs=True)


def accept_proposal(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """A person accepts: the merged memory is written through the write gate, the other sources archived."""
    from ctxos.services.engine import ChangeSummary
    from ctxos.services.proposals import ProposalError, accept
    from ctxos.services.writes import WriteConflict, WriteRefused

    proposal_id = params["id"]
    _load(ctx, proposal_id)  # NOT_FOUND before anything else
    try:
        result, touched = accept(ctx.engine, proposal_id)
    except ProposalError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None
    except WriteRefused as exc:
        reason = "conflict" if isinstance(exc, WriteConflict) else "refused"
        raise RpcError(WRITE_REFUSED, str(exc), {"reason": reason}) from None
    archived = [a["id"] for a in result.get("archived", [])]
    ctx.publish_change(ChangeSummary(updated=[result["saved"]], removed=archived, paths=touched))
    return result


def reject_proposal(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """A person rejects a proposal; no memory changes."""
    from ctxos.services.proposals import reject
    from ctxos.services.writes import WriteRefused

    proposal_id = params["id"]
    _load(ctx, proposal_id)
    try:
        result = reject(ctx.engine.root, proposal_id, params["reason"])
    except WriteRefused as exc:
        raise RpcError(WRITE_REFUSED, str(exc), {"reason": "refused"}) from None
    ctx.publish_change({"updated": [], "paths": [], "proposals": [proposal_id]})
    return result


def register(registry: RpcRegistry) -> None:
    registry.register("review", review, schema=schemas.ReviewRequest)
    registry.register("flag", flag, schema=schemas.FlagRequest)
    registry.register("propose_merge", propose_merge, schema=schemas.ProposeMergeRequest)
    registry.register("proposals", proposals, schema=schemas.ProposalsRequest)
    registry.register("proposal", proposal, schema=schemas.ProposalIdRequest)
    registry.register("accept_proposal", accept_proposal, write=True, schema=schemas.ProposalIdRequest)
    registry.register("reject_proposal", reject_proposal, schema=schemas.RejectProposalRequest)
