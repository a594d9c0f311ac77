"""Request checks for the daemon's HTTP server: Host, Origin and an optional token.

The daemon listens on loopback, but a web page in the user's browser can still
reach loopback. Two attacks matter: DNS rebinding (a foreign name resolving to
127.0.0.1, visible in the ``Host`` header) and cross-site requests from a page
on another origin (visible in the ``Origin`` header). So:

- every request must carry a loopback ``Host`` with the daemon's own port
  (``127.0.0.1:PORT``, ``localhost:PORT``, ``[::1]:PORT``), else 421;
- on the protected prefixes (``/mcp``, ``/sse``, ``/messages/``, ``/api/``) an
  ``Origin`` header, when present, must be the daemon's own origin (the web
  view it serves), else 403; ``Origin: null`` is refused. Tools (no browser)
  send no Origin;
- when ``daemon.http_token`` is set, the protected prefixes also need
  ``Authorization: Bearer <token>``, else 401 with ``WWW-Authenticate``.

The REST API (``rest_api.py``) reuses the same middleware through
``security_middleware``; it is installed once on the whole app.
"""
from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from aiohttp import web

log = logging.getLogger("ctxos.daemon.http")

PROTECTED_PREFIXES: tuple[str, ...] = ("/mcp", "/sse", "/messages/", "/api/")
LOOPBACK_NAMES: tuple[str, ...] = ("127.0.0.1", "localhost", "[::1]")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class SecurityPolicy:
    """What the middleware allows; built from the bound port and config."""

    port: int
    token: str | None = None
    extra_origins: tuple[str, ...] = ()
    protected_prefixes: tuple[str, ...] = PROTECTED_PREFIXES
    allowed_hosts: frozenset[str] = field(init=False)
    allowed_origins: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        hosts = {f"{name}:{self.port}" for name in LOOPBACK_NAMES}
        origins = {f"http://{name}:{self.port}" for name in LOOPBACK_NAMES}
        origins.update(o.rstrip("/") for o in self.extra_origins)
        object.__setattr__(self, "allowed_hosts", frozenset(hosts))
        object.__setattr__(self, "allowed_origins", frozenset(origins))

    def is_protected(self, path: str) -> bool:
        path = strip_workspace_prefix(path)
        return any(path == p.rstrip("/") or path.startswith(p) for p in self.protected_prefixes)

    def check(self, path: str, host: str | None, origin: str | None,
              authorization: str | None) -> tuple[int, str] | None:
        """Return ``(status, reason)`` to refuse a request, or None to let it through."""
        if not host or host.lower() not in self.allowed_hosts:
            return 421, f"Host header {host!r} is not this daemon's loopback address"
        if not self.is_protected(path):
            return None
        if origin is not None and origin.rstrip("/").lower() not in self.allowed_origins:
            return 403, f"Origin {origin!r} may not call this daemon"
        if self.token:
            scheme, _, supplied = (authorization or "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(supplied.strip().encode(), self.token.encode()):
                return 401, "a bearer token is required (daemon.http_token)"
        return None


def strip_workspace_prefix(path: str) -> str:
    """``/w/<name>/mcp`` -> ``/mcp``: a workspace of the per-user daemon has the same protected paths."""
    if path.startswith("/w/"):
        _, _, rest = path[3:].partition("/")
        return "/" + rest
    return path


def policy_from_config(port: int, token: object, extra_origins: Iterable[str] | None = None) -> SecurityPolicy:
    """Build a policy; an empty or non-string token means no token."""
    clean = token.strip() if isinstance(token, str) and token.strip() else None
    return SecurityPolicy(port=port, token=clean, extra_origins=tuple(extra_origins or ()))


def security_middleware(policy: SecurityPolicy) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """aiohttp middleware enforcing ``policy`` before any handler runs."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        refusal = policy.check(request.path, request.headers.get("Host"), request.headers.get("Origin"),
                               request.headers.get("Authorization"))
        if refusal is None:
            return await handler(request)
        status, reason = refusal
        log.warning("refused %s %s: %s", request.method, request.path, reason)
        headers = {"WWW-Authenticate": 'Bearer realm="ctxos"'} if status == 401 else None
        return web.Response(status=status, text=reason + "\n", headers=headers)

    return middleware
