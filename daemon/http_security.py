"""Request checks for the daemon's HTTP server: Host, Origin and the credential.

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
- unless ``daemon.http_auth: none``, the protected prefixes also need the
  credential (``services/credentials.py``): ``Authorization: Bearer <token>``,
  or the web view's session cookie from a one-time ``ctxos open`` link
  (``http_login.py``), else 401 with ``WWW-Authenticate``. A request that
  rides on the cookie and changes something (not GET/HEAD) must also carry our
  own ``Origin``: browsers always send it there, so a missing one means the
  request did not come from our page.

The REST API (``rest/``) reuses the same middleware through
``security_middleware``; it is installed once on the whole app.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Middleware

from .http_login import WebLogin

log = logging.getLogger("ctxos.daemon.http")

PROTECTED_PREFIXES: tuple[str, ...] = ("/mcp", "/sse", "/messages/", "/api/")
LOOPBACK_NAMES: tuple[str, ...] = ("127.0.0.1", "localhost", "[::1]")
SAFE_METHODS: frozenset[str] = frozenset({"GET", "HEAD", "OPTIONS"})
NO_CREDENTIAL = "a credential is required: Authorization: Bearer <token>, or run `ctxos open` for the web view"


def session_cookie_name(port: int) -> str:
    """The web view's cookie; named per port because browsers share cookies across ports of one host."""
    return f"ctxos_session_{port}"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class SecurityPolicy:
    """What the middleware allows; built from the bound port and config."""

    port: int
    token: str | None = None
    login: WebLogin | None = None
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

    @property
    def cookie_name(self) -> str:
        return session_cookie_name(self.port)

    def bearer_ok(self, authorization: str | None) -> bool:
        if not self.token:
            return False
        scheme, _, supplied = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(supplied.strip().encode(), self.token.encode())

    def check(
        self,
        path: str,
        host: str | None,
        origin: str | None,
        authorization: str | None,
        session: str | None = None,
        method: str = "GET",
    ) -> tuple[int, str] | None:
        """Return ``(status, reason)`` to refuse a request, or None to let it through."""
        if not host or host.lower() not in self.allowed_hosts:
            return 421, f"Host header {host!r} is not this daemon's loopback address"
        if not self.is_protected(path):
            return None
        if origin is not None and origin.rstrip("/").lower() not in self.allowed_origins:
            return 403, f"Origin {origin!r} may not call this daemon"
        if not self.token or self.bearer_ok(authorization):
            return None
        if self.login is not None and self.login.session_valid(session):
            if method.upper() not in SAFE_METHODS and origin is None:
                return 403, "a change made with the web view's session must come from the web view (no Origin)"
            return None
        return 401, NO_CREDENTIAL


def strip_workspace_prefix(path: str) -> str:
    """``/w/<name>/mcp`` -> ``/mcp``: a workspace of the per-user daemon has the same protected paths."""
    if path.startswith("/w/"):
        _, _, rest = path[3:].partition("/")
        return "/" + rest
    return path


def policy_from_config(
    port: int, token: object, extra_origins: Iterable[str] | None = None, login: WebLogin | None = None
) -> SecurityPolicy:
    """Build a policy; an empty or non-string token means no credential (``daemon.http_auth: none``)."""
    clean = token.strip() if isinstance(token, str) and token.strip() else None
    return SecurityPolicy(
        port=port, token=clean, login=login if clean else None, extra_origins=tuple(extra_origins or ())
    )


def security_middleware(policy: SecurityPolicy) -> Middleware:
    """aiohttp middleware enforcing ``policy`` before any handler runs."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        refusal = policy.check(
            request.path,
            request.headers.get("Host"),
            request.headers.get("Origin"),
            request.headers.get("Authorization"),
            request.cookies.get(policy.cookie_name),
            request.method,
        )
        if refusal is None:
            return await handler(request)
        status, reason = refusal
        log.warning("refused %s %s: %s", request.method, request.path, reason)
        headers = {"WWW-Authenticate": 'Bearer realm="ctxos"'} if status == 401 else None
        return web.Response(status=status, text=reason + "\n", headers=headers)

    return middleware
