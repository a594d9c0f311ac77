"""REST endpoints for history (the web page's history panel), over the ``history`` RPC methods.

- ``GET  /api/memories/{id}/history``: versions, newest first;
- ``GET  /api/memories/{id}/history/{n}``: version ``n``'s text and its diffs;
- ``POST /api/memories/{id}/revert`` with ``{"to": N, "expected_version"?: V, "expected_checksum"?: C}``: restore version ``n``
  through the write gate (403 protected, 409 a newer edit on disk or another version than expected).

Errors map like every other ``/api/`` route (``rest_api.json_errors_middleware``).
"""

from __future__ import annotations

from aiohttp import web

from .rest_api import ApiError, RestApi, _pick, json_response, read_json_object


def _n(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"version number must be an integer, got {raw!r}") from None
    if value < 1:
        raise ApiError(400, "version numbers start at 1")
    return value


def add_history_routes(app: web.Application, api: RestApi) -> None:
    async def history(request: web.Request) -> web.Response:
        """A memory's versions, newest first (git commits or the journal): who, when, tool, summary."""
        return json_response(await api.call("history", {"id": request.match_info["id"]}))

    async def version(request: web.Request) -> web.Response:
        """Version n's full text, its diff against the version before it and against the file now."""
        return json_response(
            await api.call("history_version", {"id": request.match_info["id"], "n": _n(request.match_info["n"])})
        )

    async def revert(request: web.Request) -> web.Response:
        """Restore version {"to": n} as a new version through the write gate (403 protected, 409 conflict)."""
        body = _pick(await read_json_object(request), ("to", "expected_version", "expected_checksum"))
        # checked by the revert RPC's contract (schemas.RevertRequest): the same message as the socket's
        return json_response(await api.call("revert", {**body, "id": request.match_info["id"]}))

    app.router.add_get("/api/memories/{id}/history", history)
    app.router.add_get(r"/api/memories/{id}/history/{n}", version)
    app.router.add_post("/api/memories/{id}/revert", revert)
