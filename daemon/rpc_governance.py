"""RPC methods for governance, health, router and the graph view.

``governance``, ``health``, ``archive``, ``unarchive``, ``set_importance``,
``dismiss``, ``regenerate_router`` and ``graph``. Like ``rpc_methods.py``,
each handler is a thin synchronous adapter over ``ctxos.services``; the
registry picks the thread. Actions that move or rewrite memory files are
registered ``write=True`` (behind the daemon's write lock) and publish the
engine's change summary, so router files and communities follow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxos.services import schemas

from .rpc import INVALID_PARAMS, NOT_FOUND, WRITE_REFUSED, RpcError, RpcRegistry

if TYPE_CHECKING:  # pragma: no cover
    from .context import DaemonContext


def _refused(exc: Exception) -> RpcError:
    return RpcError(WRITE_REFUSED, str(exc), {"reason": "refused"})


def _publish(ctx: DaemonContext, result: Any) -> dict[str, Any]:
    summary = getattr(result, "summary", None)
    if summary is not None and getattr(summary, "changed", False):
        ctx.publish_change(summary)
    return result.to_dict()


def governance(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Findings that need a person's judgment (decay, conflicts, near-duplicates, god nodes, scratch, invalid)."""
    from ctxos.services.governance import KINDS, governance_report

    kind = params.get("kind")
    if kind is not None and kind not in KINDS:
        raise RpcError(INVALID_PARAMS, f"unknown kind {kind!r}; expected one of: {', '.join(KINDS)}")
    include = params["include_dismissed"]
    data = governance_report(ctx.engine, include_dismissed=include).to_dict()
    if kind is not None:
        data["findings"] = [f for f in data["findings"] if f["kind"] == kind]
    return data


def health(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """The 0-100 health score, each part with what would raise it."""
    from ctxos.services.governance import governance_report, memory_snapshot
    from ctxos.services.health import HealthSettings, compute_health, health_inputs

    engine = ctx.engine
    settings = HealthSettings.from_config(engine.config)
    report = governance_report(engine)
    flagged = report.flagged_ids()
    memory_findings = [f for f in report.findings if f.ids]
    return compute_health(
        memory_snapshot(engine),
        flagged_ids=flagged,
        invalid_count=len(engine.invalid_files()),
        finding_count=len(memory_findings),
        settings=settings,
        **health_inputs(engine.access_log, settings),
    ).to_dict()


def archive(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Move a memory to ``_archive/`` (kept, excluded from context; ``unarchive`` undoes it)."""
    from ctxos.services import governance as gov
    from ctxos.services.writes import WriteRefused

    memory_id = params["id"]
    if ctx.engine.get_memory(memory_id) is None:
        raise RpcError(NOT_FOUND, f"no memory with id {memory_id!r}")
    try:
        return _publish(ctx, gov.archive(ctx.engine, memory_id))
    except WriteRefused as exc:
        raise _refused(exc) from None


def unarchive(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Move an archived memory (by id, file stem or ``_archive/`` path) back where it was."""
    from ctxos.services import governance as gov
    from ctxos.services.writes import WriteRefused

    ref = params["id"]
    try:
        return _publish(ctx, gov.unarchive(ctx.engine, ref))
    except gov.GovernanceError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None
    except WriteRefused as exc:
        raise _refused(exc) from None


def set_importance(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Set a memory's ``importance`` (0.0-1.0) in its frontmatter."""
    from ctxos.services import governance as gov
    from ctxos.services.writes import WriteRefused

    memory_id, value = params["id"], params["value"]
    if ctx.engine.get_memory(memory_id) is None:
        raise RpcError(NOT_FOUND, f"no memory with id {memory_id!r}")
    try:
        return _publish(ctx, gov.set_importance(ctx.engine, memory_id, value))
    except WriteRefused as exc:
        raise _refused(exc) from None


def dismiss(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Hide a finding by fingerprint until one of its files changes."""
    from ctxos.services import governance as gov

    fingerprint = params["fingerprint"]
    try:
        return gov.dismiss_finding(ctx.engine, fingerprint)
    except gov.GovernanceError as exc:
        raise RpcError(NOT_FOUND, str(exc)) from None


def regenerate_router(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Regenerate router files (claude.md, _index.yaml, adapters in registered projects); unchanged ones are left alone."""
    from ctxos.services.router import regenerate_router as regenerate

    try:
        return regenerate(ctx.engine).to_dict()
    except ValueError as exc:  # an unknown adapter name in _config.yaml
        raise RpcError(INVALID_PARAMS, str(exc)) from None


def graph(ctx: DaemonContext, params: dict[str, Any]) -> dict[str, Any]:
    """Nodes (id, title, type, community, authority, degree; x/y with ``layout``), edges, dangling links,
    named communities (``communities``: id, name, terms, size, top_members) and ``community_stats``."""
    from ctxos.services.communities import community_names, refresh_communities
    from ctxos.services.governance import memory_snapshot

    force, want_layout = params["recompute"], params["layout"]
    engine = ctx.engine
    cmap, recomputed = refresh_communities(engine, force=force)  # cheap when the graph is unchanged
    link_graph = engine.graph()
    communities = cmap.communities
    named = community_names(engine, cmap)
    name_of = {c["id"]: c["name"] for c in named}
    nodes = []
    for memory in memory_snapshot(engine):
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
    edges = [{"source": a, "target": b, "kind": "explicit", "weight": 1.0} for a, b in sorted(explicit)]
    edges += [
        {"source": a, "target": b, "kind": "implicit", "weight": 0.5}
        for a, b in link_graph.implicit_edges()
        if (a, b) not in explicit and (b, a) not in explicit
    ]
    if want_layout:
        from ctxos.services.graph_layout import layout_for

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


def register(registry: RpcRegistry) -> None:
    registry.register("governance", governance, schema=schemas.GovernanceRequest)
    registry.register("health", health, schema=schemas.NoParams)
    registry.register("archive", archive, write=True, schema=schemas.MemoryRefRequest)
    registry.register("unarchive", unarchive, write=True, schema=schemas.MemoryRefRequest)
    registry.register("set_importance", set_importance, write=True, schema=schemas.SetImportanceRequest)
    registry.register("dismiss", dismiss, schema=schemas.DismissRequest)
    registry.register("regenerate_router", regenerate_router, schema=schemas.NoParams)
    registry.register("graph", graph, write=True, schema=schemas.GraphRequest)
