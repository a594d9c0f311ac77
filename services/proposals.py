"""Merge proposals: an agent's (or its model's) suggested consolidation, waiting for a person.

``propose_merge`` never touches a memory. The proposal (source ids with the
version and checksum each had, the merged text and its l0) is stored in the
workspace's derived-state folder (``state_dir(root)/proposals/<id>.json``), not
where memories are served from. A person reads it with a unified diff against
each source and accepts or rejects it (``ctxos proposals``, ``ctxos accept ID``,
``ctxos reject ID``, or the web page).

Accepting writes through the one write gate (``writes.save_memory``): the merged
text replaces the *first* source (it keeps that memory's id, path, type and
inbound links; tags and related links of all sources are joined, the highest
importance kept) and every other source is archived (``archive_memory``,
reversible with ``ctxos unarchive``). A proposal is *stale* when any source
changed or disappeared since it was made (checksum): it is shown as stale and
accepting it is refused as a conflict, so nothing a person or agent wrote after
the proposal is ever overwritten. Protected sources are refused.

The prompt for a model-drafted proposal (MCP sampling, done by the daemon's MCP
tool) and the parsing of its answer live here too, as pure functions.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .atomic import atomic_write_text
from .model import Memory
from .workspace import state_dir
from .write_gate import WriteConflict, WriteRefused

log = logging.getLogger(__name__)

PROPOSALS_DIR = "proposals"
STATUSES = ("pending", "accepted", "rejected")
MIN_SOURCES, MAX_SOURCES = 2, 20
MAX_PENDING = 200
MAX_L0_CHARS = 300
MAX_TEXT_CHARS = 200_000
MAX_DIFF_LINES = 400
_ID_RE = re.compile(r"^p-[0-9a-f]{8,16}$")
_LOCK = threading.Lock()


class ProposalError(ValueError):
    """A proposal that cannot be made or found (bad ids, too many pending, unknown id); the message says why."""


def proposals_dir(root: Path) -> Path:
    return state_dir(Path(root)) / PROPOSALS_DIR


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def source_text(memory: Memory) -> str:
    """What a source says (L1 then L2): the text a merge replaces, and what its diff shows."""
    return memory.tier_text("L2")


@dataclass
class Proposal:
    """One stored proposal. ``sources`` keep each source as it was when proposed (id, path, version, checksum)."""

    id: str
    ids: list[str]
    l0: str
    merged_text: str
    sources: list[dict[str, Any]]
    by: str = "agent"
    origin: str = "agent"  # "agent" (propose_merge) or "sampling" (drafted by the client's model)
    finding: str | None = None  # the governance finding it answers, if any
    note: str = ""  # e.g. the model that drafted it
    status: str = "pending"
    created_at: str = ""
    decided_at: str | None = None
    result: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "ids": list(self.ids),
            "into": self.ids[0],
            "l0": self.l0,
            "merged_text": self.merged_text,
            "sources": [dict(s) for s in self.sources],
            "by": self.by,
            "origin": self.origin,
            "finding": self.finding,
            "note": self.note,
            "status": self.status,
            "created_at": self.created_at,
            "decided_at": self.decided_at,
            "result": dict(self.result),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Proposal:
        return cls(
            id=str(data["id"]),
            ids=[str(i) for i in data["ids"]],
            l0=str(data["l0"]),
            merged_text=str(data["merged_text"]),
            sources=[dict(s) for s in data.get("sources") or []],
            by=str(data.get("by", "agent")),
            origin=str(data.get("origin", "agent")),
            finding=data.get("finding"),
            note=str(data.get("note", "")),
            status=str(data.get("status", "pending")),
            created_at=str(data.get("created_at", "")),
            decided_at=data.get("decided_at"),
            result=dict(data.get("result") or {}),
        )


# --- storage --------------------------------------------------------------------


def _path(root: Path, proposal_id: str) -> Path:
    if not _ID_RE.match(proposal_id or ""):
        raise ProposalError(f"{proposal_id!r} is not a proposal id (they look like p-1a2b3c4d; see: ctxos proposals)")
    return proposals_dir(root) / f"{proposal_id}.json"


def _save(root: Path, proposal: Proposal) -> None:
    atomic_write_text(_path(root, proposal.id), json.dumps(proposal.to_dict(), indent=1, ensure_ascii=False) + "\n")


def load_proposal(root: Path, proposal_id: str) -> Proposal:
    path = _path(root, proposal_id)
    try:
        return Proposal.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise ProposalError(f"no proposal {proposal_id!r} (see: ctxos proposals --all)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ProposalError(f"proposal {proposal_id!r} is unreadable ({path}: {exc})") from None


def load_proposals(root: Path) -> list[Proposal]:
    """Every stored proposal, newest first; unreadable files are skipped with a log line."""
    folder = proposals_dir(root)
    out = []
    for path in sorted(folder.glob("p-*.json")) if folder.is_dir() else []:
        try:
            out.append(Proposal.from_dict(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("skipping unreadable proposal %s (%s)", path, exc)
    out.sort(key=lambda p: (p.created_at, p.id), reverse=True)
    return out


# --- making one -------------------------------------------------------------------


def create_proposal(
    root: Path,
    memories: Mapping[str, Memory],
    ids: Sequence[str],
    merged_text: str,
    l0: str,
    *,
    by: str = "agent",
    origin: str = "agent",
    finding: str | None = None,
    note: str = "",
) -> Proposal:
    """Store a merge proposal for ``ids`` (the first one is kept); nothing in the workspace changes."""
    clean_ids = [str(i).strip() for i in ids]
    if len(clean_ids) < MIN_SOURCES or len(clean_ids) > MAX_SOURCES:
        raise ProposalError(f"a merge needs {MIN_SOURCES} to {MAX_SOURCES} memory ids; got {len(clean_ids)}")
    if len(set(clean_ids)) != len(clean_ids):
        raise ProposalError("the ids must be distinct")
    missing = [i for i in clean_ids if i not in memories]
    if missing:
        raise ProposalError(f"no memory with id {', '.join(repr(m) for m in missing)}")
    protected = [i for i in clean_ids if memories[i].protected]
    if protected:
        raise ProposalError(
            f"{', '.join(protected)} {'is' if len(protected) == 1 else 'are'} protected: "
            "a merge would change it, and only a person may (ctxos unlock)"
        )
    merged_text = str(merged_text or "").strip()
    if not merged_text:
        raise ProposalError("merged_text is empty: give the full text of the merged memory")
    if len(merged_text) > MAX_TEXT_CHARS:
        raise ProposalError(f"merged_text is {len(merged_text)} characters; at most {MAX_TEXT_CHARS}")
    l0 = " ".join(str(l0 or "").split())
    if not l0:
        raise ProposalError("l0 is empty: give the merged memory's one-line summary")
    if len(l0) > MAX_L0_CHARS:
        raise ProposalError(f"l0 is {len(l0)} characters; at most {MAX_L0_CHARS}")
    sources = [
        {
            "id": m.id,
            "path": m.rel_path,
            "version": m.version,
            "checksum": m.checksum,
            "type": m.type,
            "title": m.title or m.id,
        }
        for m in (memories[i] for i in clean_ids)
    ]
    created = _now()
    digest = hashlib.sha1(json.dumps([clean_ids, merged_text, l0, created, by], ensure_ascii=False).encode())
    proposal = Proposal(
        id="p-" + digest.hexdigest()[:8],
        ids=clean_ids,
        l0=l0,
        merged_text=merged_text,
        sources=sources,
        by=" ".join(str(by or "agent").split())[:200] or "agent",
        origin=origin,
        finding=finding,
        note=note[:300],
        created_at=created,
    )
    with _LOCK:
        pending = sum(1 for p in load_proposals(root) if p.status == "pending")
        if pending >= MAX_PENDING:
            raise ProposalError(
                f"{pending} proposals are already waiting for a person; no more until some "
                "are accepted or rejected (ctxos proposals)"
            )
        for same in load_proposals(root):
            if (
                same.status == "pending"
                and same.ids == proposal.ids
                and same.merged_text == merged_text
                and same.l0 == l0
            ):
                return same  # the same proposal again: one entry
        _save(root, proposal)
    return proposal


# --- looking at one -----------------------------------------------------------------


def staleness(proposal: Proposal, memories: Mapping[str, Memory]) -> list[str]:
    """Why the proposal no longer matches the workspace: one sentence per changed or missing source."""
    reasons = []
    for source in proposal.sources:
        current = memories.get(source["id"])
        if current is None:
            reasons.append(f"{source['id']} is gone (archived, renamed or deleted) since the proposal")
        elif current.checksum != source.get("checksum"):
            how = (
                f"version {source.get('version')} then, {current.version} now"
                if current.version != source.get("version")
                else "its file was edited; same version number"
            )
            reasons.append(f"{source['id']} changed since the proposal ({how})")
    return reasons


def source_diff(memory: Memory | None, source: Mapping[str, Any], merged_text: str) -> str:
    """Unified diff from a source's current text to the merged text (capped at MAX_DIFF_LINES lines)."""
    before = source_text(memory) if memory is not None else ""
    label = f"{source['path']} (version {memory.version if memory else source.get('version')})"
    lines = list(
        difflib.unified_diff(
            before.splitlines(), merged_text.splitlines(), fromfile=label, tofile="merged", lineterm="", n=2
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        lines = lines[:MAX_DIFF_LINES] + [f"... {len(lines) - MAX_DIFF_LINES} more diff lines"]
    return "\n".join(lines)


def describe(proposal: Proposal, memories: Mapping[str, Memory], *, diffs: bool = False) -> dict[str, Any]:
    """A proposal as the CLI, REST and MCP show it: status, staleness and, on request, a diff per source."""
    data = proposal.to_dict()
    stale = staleness(proposal, memories) if proposal.status == "pending" else []
    data["stale"] = bool(stale)
    data["stale_reasons"] = stale
    if diffs:
        data["diffs"] = [
            {"id": s["id"], "path": s["path"], "diff": source_diff(memories.get(s["id"]), s, proposal.merged_text)}
            for s in proposal.sources
        ]
    return data


def list_proposals(
    root: Path, memories: Mapping[str, Memory], *, include_decided: bool = False, diffs: bool = False
) -> list[dict[str, Any]]:
    return [
        describe(p, memories, diffs=diffs) for p in load_proposals(root) if include_decided or p.status == "pending"
    ]


# --- deciding ------------------------------------------------------------------------


def merged_fields(proposal: Proposal, memories: Mapping[str, Memory]) -> dict[str, Any]:
    """``save_memory`` fields for the merged memory: the first source updated in place."""
    sources = [memories[i] for i in proposal.ids]
    into = sources[0]
    tags: dict[str, None] = {}
    related: dict[str, None] = {}
    for memory in sources:
        tags.update(dict.fromkeys(memory.tags))
        related.update(dict.fromkeys(r for r in memory.related if r not in proposal.ids))
    return {
        "type": into.type,
        "id": into.id,
        "content": proposal.merged_text,
        "l0": proposal.l0,
        "tags": list(tags),
        "related": list(related),
        "importance": max(m.importance for m in sources),
        "expected_version": into.version,
        "expected_checksum": into.checksum,
    }


def check_acceptable(proposal: Proposal, memories: Mapping[str, Memory]) -> None:
    """Raise WriteConflict (stale) or WriteRefused (decided, protected) unless accepting is safe now."""
    if proposal.status != "pending":
        raise WriteRefused(f"proposal {proposal.id} was already {proposal.status}")
    stale = staleness(proposal, memories)
    if stale:
        raise WriteConflict(
            f"proposal {proposal.id} is stale: "
            + "; ".join(stale)
            + ". Nothing was written; reject it and ask for a fresh proposal"
        )
    protected = [i for i in proposal.ids if memories[i].protected]
    if protected:
        raise WriteRefused(
            f"{', '.join(protected)} {'is' if len(protected) == 1 else 'are'} protected; "
            "a person can unlock with `ctxos unlock ID` and accept again"
        )


def accept(engine: Any, proposal_id: str) -> tuple[dict[str, Any], list[str]]:
    """Write the merged memory through the write gate and archive the other sources.

    Returns (result, workspace-relative paths touched). The engine indexes each
    write at once. A source archive that fails after the merged memory was saved is
    reported in ``result["problems"]`` (the proposal is still marked accepted: the
    merged memory exists; ``ctxos archive`` finishes the rest).
    """
    from .writes import archive_memory

    root = Path(engine.root)
    with _LOCK:
        proposal = load_proposal(root, proposal_id)
        memories = dict(engine.store.memories)
        check_acceptable(proposal, memories)
        saved = engine.save_memory(**merged_fields(proposal, memories))
        touched = [saved.rel_path]
        archived, problems = [], []
        for other in proposal.ids[1:]:
            try:
                src, dst = archive_memory(root, engine.store, other)
            except WriteRefused as exc:
                problems.append(f"{other}: {exc}")
                continue
            archived.append({"id": other, "from": src, "to": dst})
            touched += [src, dst]
        if archived:
            engine.apply_changes([a["from"] for a in archived])
        proposal.status = "accepted"
        proposal.decided_at = _now()
        proposal.result = {
            "saved": saved.id,
            "path": saved.rel_path,
            "version": saved.version,
            "archived": archived,
            "problems": problems,
        }
        _save(root, proposal)
    return {"id": proposal.id, "status": proposal.status, **proposal.result}, touched


def reject(root: Path, proposal_id: str, reason: str = "") -> dict[str, Any]:
    """Mark a proposal rejected; nothing else changes."""
    with _LOCK:
        proposal = load_proposal(root, proposal_id)
        if proposal.status != "pending":
            raise WriteRefused(f"proposal {proposal.id} was already {proposal.status}")
        proposal.status = "rejected"
        proposal.decided_at = _now()
        proposal.result = {"reason": " ".join(str(reason or "").split())[:500]}
        _save(root, proposal)
    return {"id": proposal.id, "status": proposal.status, **proposal.result}


# --- drafting with the client's model (MCP sampling) --------------------------------------

DRAFT_SYSTEM = (
    "You merge notes from a person's long-term memory. Keep every fact that is still true, drop "
    "repetition, and where the notes contradict each other keep the statement that looks current "
    "and say in one sentence what was dropped. Answer in markdown, nothing else."
)


def draft_prompt(finding: Mapping[str, Any], memories: Sequence[Mapping[str, Any]]) -> str:
    """The sampling request's user message for a conflict or consolidation finding."""
    parts = [f"Governance finding ({finding.get('kind')}): {finding.get('reason', '')}", ""]
    for memory in memories:
        text = "\n\n".join(p for p in (memory.get("l1") or "", memory.get("l2") or "") if p.strip())
        parts += [
            f"## Note {memory['id']} (version {memory.get('version')})",
            f"Summary: {memory.get('l0', '')}",
            "",
            text[:20_000],
            "",
        ]
    parts += [
        "Write ONE merged note that replaces all of them.",
        "First line: `L0: ` followed by a one-line summary (under 150 characters).",
        "Then a blank line, then the merged note's full text.",
    ]
    return "\n".join(parts)


def parse_draft(text: str) -> tuple[str, str]:
    """(l0, merged text) from a model's answer; the l0 falls back to the first line of text."""
    text = (text or "").strip()
    text = re.sub(r"^```(?:markdown|md)?\s*\n(.*?)\n```\s*$", r"\1", text, flags=re.S).strip()
    match = re.match(r"^\s*(?:\*\*)?L0(?:\*\*)?\s*:\s*(.+?)\s*(?:\n|$)", text)
    if match:
        l0, body = match.group(1).strip(" *"), text[match.end() :].strip()
    else:
        first = text.split("\n", 1)[0]
        l0, body = first.lstrip("# ").strip(), text
    if not body:
        raise ProposalError("the model's draft has no text besides its summary line")
    return l0[:MAX_L0_CHARS], body
