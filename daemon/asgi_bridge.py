"""Serve an ASGI application (the MCP SDK's Starlette apps) from an aiohttp handler.

aiohttp cannot host ASGI apps, and the daemon wants one HTTP server on one
loop (MCP, REST and the web view on one port). The bridge is small: an aiohttp
request becomes an ASGI ``http`` scope; ``receive`` streams the request body
and then waits for the client to go away; ``send`` turns ``http.response.*``
events into a streamed aiohttp response, flushed as it comes, so the SDK's
Server-Sent-Event streams reach the client event by event.

Why not the ``aiohttp-asgi`` package: it is another dependency with a small
user base for ~150 lines we can test directly against the real MCP app, and
the one subtle part (telling the app that a long-lived SSE client has gone,
since aiohttp does not cancel handlers by default) needs control we would
otherwise patch in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web

log = logging.getLogger("ctxos.daemon.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

DISCONNECT_POLL_SECONDS = 0.2
BODY_CHUNK = 64 * 1024


def build_scope(request: web.Request, root_path: str = "") -> dict[str, Any]:
    """The ASGI 3 ``http`` scope for an aiohttp request.

    ``root_path`` is the prefix the app is mounted under (``/w/<name>`` for a
    workspace of the per-user daemon): the app routes on the path after it.
    """
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport else None
    sock = transport.get_extra_info("sockname") if transport else None
    raw_path = request.raw_path.split("?", 1)[0]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": raw_path.encode("latin-1", "replace"),
        "query_string": request.query_string.encode("latin-1", "replace"),
        "root_path": root_path,
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": (peer[0], peer[1]) if isinstance(peer, tuple) and len(peer) >= 2 else None,
        "server": (sock[0], sock[1]) if isinstance(sock, tuple) and len(sock) >= 2 else None,
        "state": {},
    }


class _Exchange:
    """One request/response pair: the ``receive`` and ``send`` callables the app gets."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response: web.StreamResponse | None = None
        self.body_done = False
        self.finished = False

    def client_gone(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    async def receive(self) -> Message:
        if not self.body_done:
            try:
                chunk = await self.request.content.read(BODY_CHUNK)
            except (ConnectionError, asyncio.IncompleteReadError):
                self.body_done = True
                return {"type": "http.disconnect"}
            more = not self.request.content.at_eof()
            self.body_done = not more
            return {"type": "http.request", "body": chunk, "more_body": more}
        # Body consumed: the next event is the client going away (or the response ending).
        while not (self.finished or self.client_gone()):
            await asyncio.sleep(DISCONNECT_POLL_SECONDS)
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.response is not None:
                raise RuntimeError("ASGI app sent http.response.start twice")
            response = web.StreamResponse(status=int(message["status"]))
            for name, value in message.get("headers", []):
                key = name.decode("latin-1") if isinstance(name, bytes) else str(name)
                val = value.decode("latin-1") if isinstance(value, bytes) else str(value)
                response.headers.add(key, val)
            if self.request.can_read_body:
                # Answered before the body was read (e.g. 413): do not keep a connection with
                # unread bytes in it; close it after this response.
                response.force_close()
            self.response = response
            # Send the headers now: an SSE client waits for them before any event arrives.
            try:
                await response.prepare(self.request)
            except ConnectionError:  # the client left before the headers: nothing more to send
                self.finished = True
        elif kind == "http.response.body":
            if self.response is None:
                raise RuntimeError("ASGI app sent a body before http.response.start")
            if self.finished:
                return
            body = message.get("body", b"")
            if self.client_gone():
                # Like uvicorn: a send after the client left is dropped, not raised into the app
                # (the SDK would log each one as an ERROR); receive() reports the disconnect.
                self.finished = True
                return
            try:
                if body:
                    await self.response.write(body)
                if not message.get("more_body", False):
                    self.finished = True
                    await self.response.write_eof()
            except ConnectionError:
                self.finished = True
        # Other event types (e.g. http.response.trailers) are not used by the MCP apps.


def asgi_handler(app: ASGIApp, root_path: str = "") -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An aiohttp handler that runs ``app`` (mounted under ``root_path``) for each request it receives."""

    async def handle(request: web.Request) -> web.StreamResponse:
        exchange = _Exchange(request)
        try:
            await app(build_scope(request, root_path), exchange.receive, exchange.send)
        except Exception as exc:
            if exchange.client_gone() or isinstance(exc, ConnectionError):
                # An ordinary disconnect (a tool closed its stream, a browser left): not an error.
                log.debug(
                    "client left %s %s before the response finished (%s)",
                    request.method,
                    request.path,
                    type(exc).__name__,
                )
                exchange.finished = True
                return exchange.response if exchange.response is not None else web.Response(status=499)
            if exchange.response is None:
                log.exception("ASGI app failed on %s %s", request.method, request.path)
                return web.Response(status=500, text="internal error\n")
            log.exception("ASGI app failed mid-response on %s %s", request.method, request.path)
            # Break the connection so the client sees a failed stream, not a complete one (the
            # client is still there: a disconnect returned above).
            if request.transport is not None:
                request.transport.close()
            exchange.finished = True
            return exchange.response
        if exchange.response is None:
            log.error("ASGI app sent no response for %s %s", request.method, request.path)
            return web.Response(status=500, text="no response\n")
        if not exchange.finished:
            exchange.finished = True
            if not exchange.client_gone():
                await exchange.response.write_eof()
        return exchange.response

    return handle
