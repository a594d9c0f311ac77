"""The daemon's HTTP component: MCP, REST and the web view on one loopback port.

One aiohttp server on the daemon's event loop serves
- ``/mcp``: MCP Streamable HTTP (the SDK's ASGI app through ``asgi_bridge``);
- ``/sse`` + ``/messages/``: the legacy MCP SSE transport, for older clients;
- ``/api/``: the REST API (``rest/``, ``rest.add_routes``);
- ``/``: the static web view (``daemon/web``); ``/login?code=`` turns a
  one-time code from ``ctxos open`` into the view's session cookie.

Every surface but the static page shell and ``/login`` needs the credential
(``services/credentials.py`` decides which; ``http_security.py`` checks it).

The MCP tools call the daemon's RPC registry in-process, so MCP over HTTP,
``ctxos mcp`` over stdio (through the socket), the CLI and the REST API all run
the same methods on the same engine. The socket is bound *before* anything else
is built, so a taken port fails at once with a message that says what to do;
the component is not essential (``components.py``): the daemon keeps indexing
and serving its socket without HTTP.

The MCP endpoints are built on their first request (:class:`LazyMcp`): the SDK
with Starlette and its other dependencies is ~28 MiB of a daemon's resident
memory (issue 16, measured), and most daemons only ever serve their socket (the
CLI, ``ctxos mcp`` over stdio). It is imported on a worker thread, so the socket
keeps answering while the first MCP client waits about a second more.
Each workspace's SDK session manager is a task group that must live as long as
the server and be entered once per process; it runs in a task of its own from
that first request until the server stops.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import importlib
import logging
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from ctxos.services.config import Config

from .asgi_bridge import asgi_handler
from .http_login import WebLogin
from .http_security import SecurityPolicy, policy_from_config, security_middleware

log = logging.getLogger("ctxos.daemon.http")

WEB_DIR = Path(__file__).resolve().parent / "web"
LOOPBACK_HOSTS = {"127.0.0.1": "127.0.0.1", "localhost": "127.0.0.1", "::1": "::1", "[::1]": "::1"}
SHUTDOWN_TIMEOUT_S = 3.0
_LOGIN_TARGET = re.compile(r"/(w/[A-Za-z0-9._-]+/)?")  # where /login may send the browser afterwards


@dataclass(frozen=True)
class HttpLimits:
    """Bounds on long-lived HTTP state (config section ``http_limits``)."""

    mcp_session_idle_s: float = 600.0
    mcp_max_sessions: int = 64
    sse_max_streams: int = 16

    @classmethod
    def from_config(cls, config: Config) -> HttpLimits:
        """The typed section: a value that is not a positive number made the file unusable, and HTTP refuses
        to start on an unusable file (services/settings.py checks it strictly)."""
        limits = config.settings.http_limits
        return cls(float(limits.mcp_session_idle_s), limits.mcp_max_sessions, limits.sse_max_streams)


@web.middleware
async def _workspace_page_slash(request: web.Request, handler: Any) -> web.StreamResponse:
    """``/w/<name>`` -> ``/w/<name>/``: the page's relative asset paths need the slash (a
    middleware, since the workspace's sub-app claims the bare prefix and would answer 404)."""
    path = request.path
    if path.startswith("/w/") and path.count("/") == 2 and len(path) > 3 and request.method == "GET":
        raise web.HTTPFound(path + "/")
    return await handler(request)


MCP_PATHS = ("mcp", "sse", "messages/")


class LazyMcp:
    """One workspace's MCP endpoints (``/mcp``, ``/sse``, ``/messages/``), built on the first request to any.

    ``server`` is the SDK's server once built (None before). Concurrent first
    requests build it once; a failed build is raised to that request and tried
    again by the next.
    """

    def __init__(self, owner: HttpServerComponent, ctx: Any, address: str, root_path: str, label: str) -> None:
        self.owner = owner
        self.ctx = ctx
        self.address = address
        self.root_path = root_path
        self.label = label
        self.server: Any = None
        self._handlers: dict[str, Any] | None = None
        self._building: asyncio.Lock | None = None

    def route(self, path: str) -> Any:
        """The aiohttp handler for one of ``MCP_PATHS``."""

        async def handle(request: web.Request) -> web.StreamResponse:
            handlers = self._handlers or await self._build()
            return await handlers[path](request)

        return handle

    async def _build(self) -> dict[str, Any]:
        if self._building is None:
            self._building = asyncio.Lock()
        async with self._building:
            if self._handlers is None:
                # The import is the slow part (~1 s on a busy machine): off the loop, so the socket keeps serving.
                await asyncio.to_thread(importlib.import_module, "ctxos.daemon.mcp_server")
                server, handlers = self.owner.mcp_handlers(self.ctx, self.address, self.root_path)
                await self.owner.run_sessions(server, self.label)
                self.server, self._handlers = server, handlers
                log.info("MCP endpoints of %s built on their first request", self.label)
        assert self._handlers is not None
        return self._handlers

    def sessions(self) -> int:
        """Open MCP sessions (0 before the endpoints are built)."""
        if self.server is None:
            return 0
        try:
            return len(getattr(self.server.session_manager, "_server_instances", ()))
        except (AttributeError, RuntimeError):
            return 0


class HttpPortInUse(OSError):
    """The configured HTTP port is taken (another daemon or another program)."""


def bind_loopback(host: str, port: int) -> socket.socket:
    """Bind and listen on a loopback address; raise a clear error for any other host or a taken port."""
    address = LOOPBACK_HOSTS.get(str(host).strip().lower())
    if address is None:
        raise ValueError(
            f"daemon.http_host is {host!r}: the daemon only listens on loopback (127.0.0.1, ::1 or localhost)"
        )
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # Lets a restarted daemon rebind while old connections sit in TIME_WAIT; on Linux and
        # macOS it does not let two processes listen on one port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, int(port)))
        sock.listen(128)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise HttpPortInUse(
                exc.errno,
                f"HTTP port {address}:{port} is already in use (another ctxos daemon or another "
                f"program). Set daemon.http_port in _config.yaml or start with --http-port; the daemon "
                f"keeps running without HTTP (MCP over stdio still works)",
            ) from exc
        raise
    return sock


def base_url(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


class HttpServerComponent:
    """Daemon component (``start(ctx)`` / ``stop()``) for the HTTP server."""

    name = "http"

    def __init__(self) -> None:
        self.ctx: Any = None
        self.mcp: LazyMcp | None = None
        self.url: str | None = None
        self.port: int | None = None
        self.policy: SecurityPolicy | None = None
        self.limits = HttpLimits()
        self.auth: Any = None  # services.credentials.HttpAuth, once started
        self.login = WebLogin()
        self.sse_streams = 0
        self._runner: web.AppRunner | None = None
        self._sessions_stop = asyncio.Event()
        self._session_tasks: list[asyncio.Task[None]] = []  # one per workspace whose MCP endpoints were built
        self.workspace_mcps: dict[str, LazyMcp] = {}  # per-user daemon: name -> that workspace's MCP endpoints
        self._late: dict[str, LazyMcp] = {}  # workspaces registered while running
        self._address = "127.0.0.1"

    async def start(self, ctx: Any) -> None:
        from ctxos.services.config import load_config
        from ctxos.services.credentials import CredentialError, resolve_http_auth

        self.ctx = ctx
        # Read _config.yaml directly: components start while the engine is still loading.
        config = load_config(ctx.root)
        if not config.usable:
            # Fail closed: never serve HTTP with defaults standing in for settings we could not read.
            raise ValueError(
                f"HTTP is off: {config.error}; fix the file and restart the daemon "
                f"(the socket and `ctxos mcp` over stdio keep working)"
            )
        try:
            self.auth = resolve_http_auth(config)
        except (CredentialError, OSError) as exc:
            # Fail closed: without a credential we can trust, serve no HTTP at all.
            raise ValueError(f"HTTP is off: {exc}") from exc
        host = config.settings.daemon.http_host
        option_port = getattr(getattr(ctx, "options", None), "http_port", None)
        port = int(option_port if option_port is not None else config.settings.daemon.http_port)
        sock = bind_loopback(host, port)
        try:
            address, bound_port = sock.getsockname()[:2]
            self.port = int(bound_port)
            self.url = base_url(address, self.port)
            self.policy = policy_from_config(self.port, self.auth.token, login=self.login)
            self.limits = HttpLimits.from_config(config)
            app = self._build_app(ctx, address)
            self._runner = web.AppRunner(
                app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S
            )
            await self._runner.setup()
            await web.SockSite(self._runner, sock).start()
        except BaseException:
            sock.close()
            await self.stop()
            raise
        ctx.http_url = self.url
        ctx.web_login_link = self.login_link
        for name, workspace_ctx in self._named_workspaces(ctx):
            if workspace_ctx is not ctx:
                workspace_ctx.http_url = f"{self.url}/w/{name}"
                workspace_ctx.web_login_link = functools.partial(self.login_link, f"/w/{name}/")
        if hasattr(ctx, "add_status_provider"):
            ctx.add_status_provider("http_server", self.status)
        log.info("HTTP on %s (MCP %s/mcp, web view: ctxos open)", self.url, self.url)
        if self.auth.required:
            log.info("HTTP needs the credential from %s (Authorization: Bearer, or `ctxos open`)", self.auth.source)
        else:
            log.warning(
                "HTTP has NO credential (daemon.http_auth: none): any local user or program can read "
                "and write this workspace's memories over %s",
                self.url,
            )

    def login_link(self, page: str = "/") -> dict[str, Any]:
        """For RPC ``web_login``: a one-time link to the web view ``page`` (the plain page when auth is off).

        ``page`` is ``/`` or, in the per-user daemon, ``/w/<name>/``; ``/login`` goes there afterwards.
        """
        if self.url is None:
            raise RuntimeError("HTTP is stopping")
        if not (self.policy and self.policy.token):
            return {"url": f"{self.url}{page}", "auth": "none", "expires_in_s": None}
        code = self.login.issue_code()
        to = "" if page == "/" else f"&to={page}"
        return {"url": f"{self.url}/login?code={code}{to}", "auth": "token", "expires_in_s": self.login.code_ttl_s}

    def status(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "mcp": f"{self.url}/mcp",
            "sse": f"{self.url}/sse",
            "auth": self.auth.mode if self.auth else None,
            "token_required": bool(self.policy and self.policy.token),
            "token_source": self.auth.source if self.auth else None,
            **self.login.counts(),
            "mcp_sessions": self.mcp.sessions() if self.mcp is not None else None,
            "mcp_loaded": self.mcp is not None and self.mcp.server is not None,
            "sse_streams": self.sse_streams,
            "limits": dataclasses.asdict(self.limits),
        }

    def _build_app(self, ctx: Any, address: str) -> web.Application:
        assert self.policy is not None
        self._address = address
        middlewares: list[Middleware] = [security_middleware(self.policy)]
        if getattr(ctx, "workspaces", None) is not None:
            middlewares.append(_workspace_page_slash)
        app = web.Application(middlewares=middlewares)
        self.mcp = self._add_workspace(app, ctx, "the workspace")
        # The per-user daemon: every workspace also at /w/<name>/ (MCP, REST, web view), each
        # answered by its own context; the default one is at / as well. Before the root's web
        # view, whose catch-all route would otherwise take /w/... first.
        for name, workspace_ctx in self._named_workspaces(ctx):
            sub = web.Application()
            mcp = self._add_workspace(sub, workspace_ctx, f"workspace {name!r}", root_path=f"/w/{name}")
            self._add_web_view(sub)
            app.add_subapp(f"/w/{name}/", sub)
            self.workspace_mcps[name] = mcp
        if getattr(ctx, "workspaces", None) is not None:
            app.router.add_route("*", "/w/{name}/{rest:.*}", self._late_workspace)
        app.router.add_get("/login", self._login)
        self._add_web_view(app)
        return app

    async def _late_workspace(self, request: web.Request) -> web.StreamResponse:
        """``/w/<name>/...`` of a workspace registered while the daemon runs (``ctxos start``, SIGHUP).

        Its MCP endpoints are served at once (an MCP server of its own, built on first
        request); the REST API and the page need a restart, since routes cannot be added
        to a running aiohttp app.
        """
        name, rest = request.match_info["name"], request.match_info["rest"]
        workspace_ctx = self.ctx.workspaces.get(name) if self.ctx is not None else None
        if workspace_ctx is None:
            return web.Response(status=404, text=f"no workspace named {name!r} is served here (ctxos workspace list)\n")
        if rest in MCP_PATHS:
            lazy = self._late.get(name)
            if lazy is None:
                lazy = self._late[name] = LazyMcp(
                    self, workspace_ctx, self._address, f"/w/{name}", f"workspace {name!r}"
                )
                self.workspace_mcps[name] = lazy
            return await lazy.route(rest)(request)
        return web.Response(
            status=404,
            text=f"workspace {name!r} joined this daemon while it ran: its MCP "
            f"endpoint is /w/{name}/mcp; its REST API and page are served "
            f"after a restart (ctxos stop; ctxos start)\n",
        )

    async def run_sessions(self, server: Any, label: str) -> None:
        """Enter ``server``'s SDK session manager in a task of its own, until the HTTP server stops."""
        ready = asyncio.Event()

        async def run() -> None:
            async with server.session_manager.run():
                ready.set()
                await self._sessions_stop.wait()

        task = asyncio.create_task(run(), name=f"ctxos-mcp-sessions ({label})")
        self._session_tasks.append(task)
        waiting = asyncio.create_task(ready.wait())
        done, _ = await asyncio.wait({waiting, task}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiting.cancel()
            task.result()  # raises what went wrong
            raise RuntimeError("MCP session manager stopped during start-up")

    @staticmethod
    def _named_workspaces(ctx: Any) -> list[tuple[str, Any]]:
        """``(name, ctx)`` of every workspace the daemon serves (none for a single-workspace daemon)."""
        workspaces = getattr(ctx, "workspaces", None)
        if workspaces is None:
            return []
        return [(c.name, c) for c in workspaces.contexts() if c.name]

    def _add_workspace(self, app: web.Application, ctx: Any, label: str, root_path: str = "") -> LazyMcp:
        """MCP (Streamable HTTP and legacy SSE, built on first use) and REST for one workspace's context."""
        lazy = LazyMcp(self, ctx, self._address, root_path, label)
        app.router.add_route("*", "/mcp", lazy.route("mcp"))
        app.router.add_route("GET", "/sse", self._bounded_sse(lazy.route("sse"), self.limits.sse_max_streams))
        app.router.add_route("POST", "/messages/", lazy.route("messages/"))
        self._add_rest(app, ctx)
        return lazy

    def mcp_handlers(self, ctx: Any, address: str, root_path: str) -> tuple[Any, dict[str, Any]]:
        """One workspace's MCP server and its aiohttp handlers by path: ``mcp``, ``sse``, ``messages/``."""
        from mcp.server.transport_security import TransportSecuritySettings

        from .mcp_server import RegistryBackend, build_mcp_server

        assert self.policy is not None
        # The SDK checks Host/Origin too; give it the same exact allow-list as our middleware.
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=sorted(self.policy.allowed_hosts),
            allowed_origins=sorted(self.policy.allowed_origins),
        )
        mcp = build_mcp_server(RegistryBackend(ctx))
        limits = self.limits
        streamable = mcp.streamable_http_app(
            transport_security=security,
            host=address,
            session_idle_timeout=limits.mcp_session_idle_s,
            max_sessions=limits.mcp_max_sessions,
        )
        sse_handler = asgi_handler(mcp.sse_app(transport_security=security, host=address), root_path)
        return mcp, {"mcp": asgi_handler(streamable, root_path), "sse": sse_handler, "messages/": sse_handler}

    async def _login(self, request: web.Request) -> web.StreamResponse:
        """``/login?code=``: spend a one-time code, set the session cookie, go to the page.

        The cookie is HttpOnly (page scripts cannot read it), SameSite=Strict (no
        other site's page makes the browser send it) and lives as long as the
        session. Nothing here is cached or sent on as a Referer.
        """
        assert self.policy is not None
        headers = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
        # Only this daemon's own pages: never an open redirect to another site.
        to = request.query.get("to", "/")
        page = to if _LOGIN_TARGET.fullmatch(to) else "/"
        if not self.policy.token:
            return web.Response(status=303, headers={**headers, "Location": page})
        session = self.login.redeem(request.query.get("code"))
        if session is None:
            log.warning("refused a web log-in: the code is unknown, used or expired")
            return web.Response(
                status=401,
                headers=headers,
                content_type="text/html",
                text=(
                    "<!doctype html><meta charset=utf-8><title>AI Context OS: log-in link used or expired</title>"
                    "<p>This log-in link was already used or has expired. Run <code>ctxos open</code> "
                    "for a new one.</p>"
                ),
            )
        response = web.Response(status=303, headers={**headers, "Location": page})
        response.set_cookie(
            self.policy.cookie_name,
            session,
            max_age=int(self.login.session_ttl_s),
            path="/",
            httponly=True,
            samesite="Strict",
        )
        return response

    def _bounded_sse(self, handler: Any, cap: int) -> Any:
        """Legacy ``/sse``: each GET is a long-lived stream (and a session); at most ``cap`` at once."""

        async def bounded(request: web.Request) -> web.StreamResponse:
            if self.sse_streams >= cap:
                log.warning("refused an /sse stream: %d are open (http_limits.sse_max_streams)", cap)
                return web.Response(
                    status=503,
                    text=f"too many open /sse streams (limit {cap}); close one or use Streamable HTTP at /mcp\n",
                    headers={"Retry-After": "5"},
                )
            self.sse_streams += 1
            try:
                return await handler(request)
            finally:
                self.sse_streams -= 1

        return bounded

    @staticmethod
    def _add_rest(app: web.Application, ctx: Any) -> None:
        from . import rest

        rest.add_routes(app, ctx)

    @staticmethod
    def _add_web_view(app: web.Application) -> None:
        root = WEB_DIR.resolve()

        async def index(_request: web.Request) -> web.StreamResponse:
            page = root / "index.html"
            if not page.is_file():
                raise web.HTTPNotFound(text="web view not installed\n")
            return web.FileResponse(page, headers={"Cache-Control": "no-cache"})

        async def asset(request: web.Request) -> web.StreamResponse:
            target = (root / request.match_info["path"]).resolve()
            if not target.is_relative_to(root) or not target.is_file():
                raise web.HTTPNotFound()
            return web.FileResponse(target, headers={"Cache-Control": "no-cache"})

        app.router.add_get("/", index)
        app.router.add_get("/{path:.+}", asset)

    async def stop(self) -> None:
        """Stop accepting, end MCP sessions (which closes their streams), then close the server."""
        self._sessions_stop.set()
        if self._session_tasks:
            done, pending = await asyncio.wait(self._session_tasks, timeout=SHUTDOWN_TIMEOUT_S)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    log.warning("MCP sessions did not close cleanly", exc_info=task.exception())
            if pending:
                log.warning("MCP sessions did not close within %.0f s", SHUTDOWN_TIMEOUT_S)
            self._session_tasks.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.ctx is not None and getattr(self.ctx, "http_url", None) == self.url:
            self.ctx.http_url = None
            self.ctx.web_login_link = None
        for _name, workspace_ctx in self._named_workspaces(self.ctx) if self.ctx is not None else []:
            if str(getattr(workspace_ctx, "http_url", None) or "").startswith(f"{self.url}/w/"):
                workspace_ctx.http_url = None
                workspace_ctx.web_login_link = None
