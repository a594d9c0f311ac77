"""Use cases for a person's upkeep: ``governance``, ``health``, ``archive``, ``unarchive``, ``set_importance``,
``dismiss``, ``regenerate_router`` and ``graph``.

Actions that move or rewrite memory files are writes (the host runs them behind
its write lock) and publish the engine's change summary, so router files and
communities follow.
"""

from __future__ import annotations

from typing import Any

from .. import governance as gov
from .. import schemas
from ..communities import community_names, refresh_communities
from ..engine_view import loaded_access_log
from ..graph_layout import layout_for
from ..health import HealthSettings, compute_health, health_inputs
from ..jsonrpc import INVALID_PARAMS, NOT_FOUND, RpcError
from ..responses import ActionResponse, GovernanceResponse, GraphResponse, HealthResponse, answers
from ..router import regenerate_router as regenerate
from ..write_gate import WriteRefused
from .host import Host
from .writes import publish, refused


def _acted(host: Host, result: gov.ActionResult) -> dict[str, Any]:
    if result.summary is not None:
        publish(host, result.summary)
    return result.to_dict()


def _require(host: Host, memory_id: str) -> None:
    if host.engine.get_memory(memory_id) is None:
        raise RpcError(NOT_FOUND, f"no memory with id {memory_id!r}")


@answers(GovernanceResponse)
def governance(host: Host, req: schemas.GovernanceRequest) -> dict[str, Any]:
    """Findings that need a person's judgment (decay, conflicts, near-duplicates, god nodes, scratch, invalid)."""
    if req.kind is not None and req.kind not in gov.KINDS:
        raise RpcError(INVALID_PARAMS, f"unknown kind {req.kind!r}; expected one of: {', '.join(gov.KINDS)}")
    data = gov.governance_report(host.engine, include_dismissed=req.include_dismissed).to_dict()
    if req.kind is not None:
        data["findings"] = [f for f in data["findings"] if f["kind"] == req.kind]
    return data


@answers(HealthResponse)
def health(host: Host, req: schemas.NoParams) -> dict[str, Any]:
    """The 0-100 health score, each part with what would raise it."""
    engine = host.engine
    settings = HealthSettings.from_config(engine.config)
    report = gov.governance_report(engine)
    return compute_health(
        gov.memory_snapshot(engine),
        flagged_ids=report.flagged_ids(),
        invalid_count=len(engine.invalid_files()),
        finding_count=len([f for f in report.findings if f.ids]),
        settings=settings,
        **health_inputs(loaded_access_log(engine), settings),
    ).to_dict()


@answers(ActionResponse)
def archive(host: Host, req: schemas.MemoryRefRequest) -> dict[str, Any]:
    """Move a memory to ``_archive/`` (kept, excluded from context; ``unarchive`` undoes it)."""
    _require(host, req.id)
    try:
        return _acted(host, gov.archive(host.engine, req.id))
    except WriteRefused as exc:
        raise refused(exc) from None


@answers(ActionResponse)
def unarchive(host: Host, req: schemas.MemoryRefRequest) -> dict[str, Any]:
    """Move an archived memory (by id, file stem or ``_archive/`` path) back where it was."""
    try:
        return _acted(host, gov.unarchive(host.engine, req.id))
    except gov.GovernanceError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None
    except WriteRefused as exc:
        raise refused(exc) from None


@answers(ActionResponse)
def set_importance(host: Host, req: schemas.SetImportanceRequest) -> dict[str, Any]:
    """Set a memory's ``importance`` (0.0-1.0) in its frontmatter."""
    _require(host, req.id)
    try:
        return _acted(host, gov.set_importance(host.engine, req.id, req.value))
    except WriteRefused as exc:
        raise refused(exc) from None


@answers(ActionResponse)
def dismiss(host: Host, req: schemas.DismissRequest) -> dict[str, Any]:
    """Hide a finding by fingerprint until one of its files changes."""
    try:
        return gov.dismiss_finding(host.engine, req.fingerprint)
    except gov.GovernanceError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None


@answers(ActionResponse)
def regenerate_router(host: Host, req: schemas.NoParams) -> dict[str, Any]:
    """Regenerate router files (claude.md, _index.yaml, adapters in registered projects); unchanged ones are left alone."""
    try:
        return regenerate(host.engine).to_dict()
    except ValueError as exc:  # an unknown adapter name in _config.yaml
        raise RpcError(INVALID_PARAMS, str(exc)) from None


@answers(GraphResponse)
def graph(host: Host, req: schemas.GraphRequest) -> dict[str, Any]:
    """Nodes (id, title, type, community, authority, degree; x/y with ``layout``), edges, dangling links,
    named communities (``communities``: id, name, terms, size, top_members) and ``community_stats``."""
    engine = host.engine
    cmap, recomputed = refresh_communities(engine, force=req.recompute)  # cheap when the graph is unchanged
    link_graph = engine.graph()
    communities = cmap.communities
    named = community_names(engine, cmap)
    name_of = {c["id"]: c["name"] for c in named}
    nodes: list[dict[str, Any]] = []
    for memory in gov.memory_snapshot(engine):
        number = communities.get(memory.id)
        nodes.append(
            {
                "id": memory.id,
                "title": memory.display_title,
                "type": memory.type,
                "l0": memory.l0,
                "importance": memory.importance,
                "community": number,
                "community_name": name_of.get(number) if number is not None else None,
                "authority": round(link_graph.authority.get(memory.id, 0.0), 6),
                "degree": len(link_graph.neighbours(memory.id)),
            }
        )
    explicit = set(link_graph.explicit_edges())
    edges: list[dict[str, Any]] = [
        {"source": a, "target": b, "kind": "explicit", "weight": 1.0} for a, b in sorted(explicit)
    ]
    edges += [
        {"source": a, "target": b, "kind": "implicit", "weight": 0.5}
        for a, b in link_graph.implicit_edges()
        if (a, b) not in explicit and (b, a) not in explicit
    ]
    if req.layout:
        positions = layout_for(
            cmap.fingerprint, [n["id"] for n in nodes], [(e["source"], e["target"]) for e in edges], communities
        )
        for node in nodes:
            node["x"], node["y"] = positions.get(node["id"], (0.0, 0.0))
    return {
        "nodes": nodes,
        "edges": edges,
        "dangling": [{"source": s, "target": t} for s, t in link_graph.dangling],
        "communities": named,
        "community_stats": {
            "count": len(cmap.sizes),
            "sizes": cmap.sizes,
            "modularity": round(cmap.modularity, 6),
            "seed": cmap.seed,
            "computed_at": cmap.computed_at,
            "recomputed": recomputed,
            "fingerprint": cmap.fingerprint,
        },
    }


def finding_card(finding: dict[str, Any]) -> dict[str, Any]:
    """A finding (``Finding.to_dict()``) with what a person can do about it, as the web page offers it.

    Adds ``id`` (the fingerprint), ``memory_ids``, ``actions`` (what ``POST /api/governance/actions``
    can do: archive, set_importance, dismiss), ``archive_ids``, a ``suggestion`` in words and, for
    god nodes, ``suggested_importance``. The suggested action (``finding["action"]``, see
    ``services/governance/analysis.py``) decides which.
    """
    suggested: dict[str, Any] = finding["action"] or {}
    kind = suggested.get("action")
    ids: list[str] = list(finding["ids"])
    card = {**finding, "id": finding["fingerprint"], "memory_ids": ids}
    actions: list[str] = []
    archive_ids: list[str] = []
    if kind == "archive":
        archive_ids = list(suggested.get("ids") or ids)
        card["suggestion"] = "archive " + ", ".join(archive_ids)
    elif kind == "merge":
        archive_ids = list(suggested.get("ids") or [])
        card["suggestion"] = f"merge {', '.join(archive_ids)} into {suggested.get('into')}, then archive the rest"
    elif kind == "set_importance":
        card["suggested_importance"] = suggested.get("value")
        card["suggestion"] = f"set the importance of {suggested.get('id')} to {suggested.get('value')}"
        actions.append("set_importance")
    elif kind == "review":
        card["suggestion"] = "read both and decide which one holds; edit or archive the other"
    elif kind == "fix":
        card["suggestion"] = (
            suggested.get("suggestion") or f"fix {suggested.get('path') or ', '.join(finding['paths'])} by hand"
        )
    if archive_ids:
        actions.insert(0, "archive")
    actions.append("dismiss")
    card["archive_ids"] = archive_ids
    card["actions"] = actions
    if finding["command"]:
        card["suggestion"] = (card.get("suggestion") or "") + f"  (CLI: {finding['command']})"
    return card
