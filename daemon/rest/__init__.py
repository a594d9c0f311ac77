"""The REST API under ``/api/``, by job: ``http`` (replies, errors, params), ``routes`` (URL -> operation),
``events`` (the server-sent change stream). :func:`add_routes` wires them into the daemon's aiohttp app.

``GET /api/`` lists every endpoint from the router itself, each with the JSON
schema of the request model its params are checked with (under ``body``, ``query`` or
``path_params``), so the list cannot drift from what the daemon enforces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web
from ctxos.services import schemas

from .http import json_errors_middleware, json_response
from .routes import RestApi, Route

if TYPE_CHECKING:  # pragma: no cover
    from ..context import DaemonContext

REST_API_KEY: web.AppKey[RestApi] = web.AppKey("ctxos.rest_api", RestApi)
CONTRACTS_KEY: web.AppKey[dict[tuple[str, str], Route]] = web.AppKey("ctxos.rest_contracts", dict)


async def api_index(request: web.Request) -> web.Response:
    """``GET /api/``: every REST endpoint this daemon serves (method, path, what it does, its params' schema).

    Read from the router, so an endpoint added anywhere is listed without editing this.
    """
    contracts = request.app[CONTRACTS_KEY]
    endpoints = []
    for route in request.app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if not path.startswith("/api/") or route.method == "HEAD" or path == "/api/":
            continue
        doc = (getattr(route.handler, "__doc__", None) or "").strip().splitlines()
        entry: dict[str, Any] = {"method": route.method, "path": path, "about": doc[0] if doc else ""}
        contract = contracts.get((route.method, path))
        if contract is not None and contract.model is not None:
            entry[contract.params_in] = schemas.input_schema(contract.model)
        endpoints.append(entry)
    endpoints.sort(key=lambda e: (e["path"], e["method"]))
    return json_response({"endpoints": endpoints, "docs": "docs/web.md"})


def add_routes(app: web.Application, ctx: DaemonContext) -> RestApi:
    """Add the REST endpoints to ``app`` (called by ``http_server.py`` before the app starts).

    Also installs the JSON-error middleware for ``/api/`` and subscribes the
    event hub to the daemon's change notifications (unsubscribed at cleanup).
    """
    api = RestApi(ctx)
    app.middlewares.append(json_errors_middleware)
    app.router.add_get("/api/", api_index)
    contracts: dict[tuple[str, str], Route] = {}
    for route in api.routes():
        added = app.router.add_route(route.method, route.path, route.handler)
        contracts[(route.method, added.resource.canonical if added.resource is not None else route.path)] = route
    app[CONTRACTS_KEY] = contracts
    ctx.add_change_listener(api.hub.publish)

    async def _on_shutdown(_app: web.Application) -> None:
        api.hub.close()

    async def _on_cleanup(_app: web.Application) -> None:
        ctx.remove_change_listener(api.hub.publish)

    app.on_shutdown.append(_on_shutdown)
    app.on_cleanup.append(_on_cleanup)
    app[REST_API_KEY] = api
    return api


__all__ = ["REST_API_KEY", "RestApi", "add_routes"]
