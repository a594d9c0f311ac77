"""Use cases for agents taking part in governance, and a person deciding on what they propose.

Agents (through MCP): ``review`` (findings about a topic), ``flag`` (put a memory
in the person's queue), ``propose_merge`` (store a merge proposal). None of them
changes a memory. A person: ``proposals`` / ``proposal`` (with a diff per
source), ``accept_proposal`` (the one use case here that writes memory files,
through the write gate) and ``reject_proposal``.
"""

from __future__ import annotations

from typing import Any

from .. import schemas
from ..analysis import analyze
from ..engine import ChangeSummary
from ..engine_view import loaded_index
from ..flags import FlagError, flag_memory
from ..governance import governance_report
from ..jsonrpc import INVALID_PARAMS, NOT_FOUND, RpcError
from ..model import Memory
from ..proposals import (
    Proposal,
    ProposalError,
    accept,
    create_proposal,
    describe,
    list_proposals,
    load_proposal,
    reject,
)
from ..responses import FlagResponse, ProposalResponse, ProposalsResponse, ReviewResponse, answers
from ..write_gate import WriteRefused
from .host import Host
from .writes import refused

TOPIC_HITS = 50
REVIEW_PROPOSAL_FIELDS = ("id", "ids", "l0", "by", "origin", "stale", "created_at", "finding")


def _memories(host: Host) -> dict[str, Memory]:
    return dict(host.engine.store.memories)


def _topic_ids(host: Host, topic: str) -> dict[str, float]:
    """Memories about ``topic`` by BM25 (the index the query path uses), best first."""
    words = [w for w in topic.split() if analyze(w)]
    if not words:
        return {}
    hits = loaded_index(host.engine).search([(w, 1.0) for w in words], TOPIC_HITS)
    return {h.id: h.score for h in hits}


@answers(ReviewResponse)
def review(host: Host, req: schemas.ReviewRequest) -> dict[str, Any]:
    """Governance findings about a topic (memories matching it by BM25), or all; with pending proposals."""
    topic = (req.topic or "").strip()
    findings = [f.to_dict() for f in governance_report(host.engine).findings]
    matched: dict[str, float] = {}
    if topic:
        matched = _topic_ids(host, topic)
        findings = [f for f in findings if any(i in matched for i in f["ids"])]
        findings.sort(key=lambda f: -max(matched.get(i, 0.0) for i in f["ids"]))
    proposals = [
        {k: p[k] for k in REVIEW_PROPOSAL_FIELDS}
        for p in list_proposals(host.engine.root, _memories(host))
        if not topic or any(i in matched for i in p["ids"])
    ]
    return {
        "topic": topic or None,
        "matched_ids": list(matched)[:20],
        "total": len(findings),
        "findings": findings[: req.limit],
        "proposals": proposals,
    }


@answers(FlagResponse)
def flag(host: Host, req: schemas.FlagRequest) -> dict[str, Any]:
    """Put a memory in the person's governance queue (stale, wrong, duplicate, conflict); the memory is not changed."""
    memory = host.engine.get_memory(req.id)
    if memory is None:
        raise RpcError(NOT_FOUND, f"no memory with id {req.id!r}")
    try:
        stored = flag_memory(host.engine.root, memory, req.reason, req.kind, by=req.by)
    except FlagError as exc:
        raise RpcError(INVALID_PARAMS, str(exc)) from None
    host.publish_change({"updated": [], "paths": [], "governance": [stored["fingerprint"]]})
    return stored


@answers(ProposalResponse)
def propose_merge(host: Host, req: schemas.ProposeMergeRequest) -> dict[str, Any]:
    """Store a merge proposal (kept outside the served memory) for a person to accept or reject."""
    memories = _memories(host)
    try:
        proposal = create_proposal(
            host.engine.root,
            memories,
            req.ids,
            req.merged_text,
            req.l0,
            by=req.by,
            origin=req.origin,
            finding=req.finding,
            note=req.note,
        )
    except ProposalError as exc:
        code = NOT_FOUND if str(exc).startswith("no memory") else INVALID_PARAMS
        raise RpcError(code, str(exc)) from None
    host.publish_change({"updated": [], "paths": [], "proposals": [proposal.id]})
    return describe(proposal, memories, diffs=True)


@answers(ProposalsResponse)
def proposals(host: Host, req: schemas.ProposalsRequest) -> dict[str, Any]:
    """Merge proposals waiting for a person (``all``: decided ones too), each marked stale or not."""
    items = list_proposals(host.engine.root, _memories(host), include_decided=req.all, diffs=req.diffs)
    return {"proposals": items, "count": len(items), "pending": sum(1 for p in items if p["status"] == "pending")}


def _load(host: Host, proposal_id: str) -> Proposal:
    try:
        return load_proposal(host.engine.root, proposal_id)
    except ProposalError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None


@answers(ProposalResponse)
def proposal(host: Host, req: schemas.ProposalIdRequest) -> dict[str, Any]:
    """One proposal with a unified diff from each source's current text to the merged text."""
    return describe(_load(host, req.id), _memories(host), diffs=True)


@answers(ProposalResponse)
def accept_proposal(host: Host, req: schemas.ProposalIdRequest) -> dict[str, Any]:
    """A person accepts: the merged memory is written through the write gate, the other sources archived."""
    _load(host, req.id)  # NOT_FOUND before anything else
    try:
        result, touched = accept(host.engine, req.id)
    except ProposalError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None
    except WriteRefused as exc:
        raise refused(exc) from None
    archived = [a["id"] for a in result.get("archived", [])]
    host.publish_change(ChangeSummary(updated=[result["saved"]], removed=archived, paths=touched))
    return result


@answers(ProposalResponse)
def reject_proposal(host: Host, req: schemas.RejectProposalRequest) -> dict[str, Any]:
    """A person rejects a proposal; no memory changes."""
    _load(host, req.id)
    try:
        result = reject(host.engine.root, req.id, req.reason)
    except WriteRefused as exc:
        raise refused(exc) from None
    host.publish_change({"updated": [], "paths": [], "proposals": [req.id]})
    return result
