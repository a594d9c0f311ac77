"""The HTTP component in-process: the ASGI bridge under the real MCP Streamable HTTP app.

The component is started exactly as the daemon starts it (real engine, real
RPC registry, a free loopback port) and probed with raw HTTP, to check what
the SDK's clients take for granted: headers of an SSE stream arrive before
any event, a dropped stream is noticed (else the session's one GET stream
stays "in use" and every reconnect gets 409), oversize bodies are refused,
and stopping the component does not wait on open streams.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import aiohttp
import pytest
from ctxos.daemon.http_server import HttpServerComponent
from daemon_helpers import auth_headers

pytestmark = pytest.mark.anyio

PROTOCOL = "2025-06-18"


@pytest.fixture
async def component(make_workspace):
    from ctxos.daemon.components import register_rpc_methods
    from ctxos.daemon.context import DaemonContext, DaemonOptions
    from ctxos.services.engine import Engine

    root = make_workspace({"04-skills/tea.md": "---\nid: tea\ntype: skill\nl0: Brew tea\n---\nBrew at 80C.\n"})
    engine = Engine(root)
    engine.load()
    ctx = DaemonContext(root, engine, options=DaemonOptions(http_port=0))
    ctx.bind_loop(asyncio.get_running_loop())
    register_rpc_methods(ctx.rpc)
    ctx.mark_ready()
    comp = HttpServerComponent()
    await comp.start(ctx)
    assert ctx.http_url == comp.url and comp.port
    yield comp
    await comp.stop()
    ctx.shutdown_executors()
    engine.close()


def _rpc(method: str, params: dict | None = None, request_id: int | None = 1) -> bytes:
    message: dict = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if request_id is not None:
        message["id"] = request_id
    return json.dumps(message).encode()


HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


async def _open_session(http: aiohttp.ClientSession, url: str) -> str:
    async with http.post(
        url,
        data=_rpc(
            "initialize",
            {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}},
        ),
        headers=HEADERS,
    ) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        body = await resp.text()
        assert '"result"' in body and "serverInfo" in body
        session = resp.headers["mcp-session-id"]
    async with http.post(
        url,
        data=_rpc("notifications/initialized", request_id=None),
        headers={**HEADERS, "mcp-session-id": session, "mcp-protocol-version": PROTOCOL},
    ) as resp:
        assert resp.status == 202
    return session


async def test_post_streams_result_and_tool_call_works(component):
    url = f"{component.url}/mcp"
    async with aiohttp.ClientSession(headers=auth_headers()) as http:
        session = await _open_session(http, url)
        async with http.post(
            url,
            data=_rpc("tools/call", {"name": "get_skill", "arguments": {"name": "tea"}}, 2),
            headers={**HEADERS, "mcp-session-id": session, "mcp-protocol-version": PROTOCOL},
        ) as resp:
            assert resp.status == 200
            body = await resp.text()
        event = json.loads(next(line[5:] for line in body.splitlines() if line.startswith("data:")))
        assert event["result"]["structuredContent"]["id"] == "tea"


async def test_dropped_get_stream_is_noticed_so_reconnect_works(component):
    url = f"{component.url}/mcp"
    headers = {"Accept": "text/event-stream", "mcp-protocol-version": PROTOCOL}
    async with aiohttp.ClientSession(headers=auth_headers()) as http:
        session = await _open_session(http, url)
        headers["mcp-session-id"] = session
        first = await asyncio.wait_for(http.get(url, headers=headers), 5)  # headers arrive before any event
        assert first.status == 200 and first.headers["Content-Type"].startswith("text/event-stream")
        first.close()  # the client goes away
        deadline = time.monotonic() + 5
        while True:
            again = await asyncio.wait_for(http.get(url, headers=headers), 5)
            status = again.status
            again.close()
            if status == 200:
                break
            assert status == 409 and time.monotonic() < deadline, "the dropped stream was never noticed"
            await asyncio.sleep(0.1)


async def test_oversize_body_is_refused(component):
    big = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * (5 * 1024 * 1024) + b'"}}'
    async with aiohttp.ClientSession(headers=auth_headers()) as http:
        async with http.post(f"{component.url}/mcp", data=big, headers=HEADERS) as resp:
            assert resp.status == 413
            assert resp.headers.get("Connection", "").lower() == "close"
    # aiohttp drains the refused body before closing ("lingering"); let it finish so the
    # fixture's stop() does not wait for it.
    deadline = time.monotonic() + 5
    while component._runner.server.connections and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


async def test_stop_does_not_wait_on_open_streams(component):
    url = f"{component.url}/mcp"
    async with aiohttp.ClientSession(headers=auth_headers()) as http:
        session = await _open_session(http, url)
        stream = await http.get(
            url, headers={"Accept": "text/event-stream", "mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
        )
        assert stream.status == 200
        started = time.monotonic()
        await component.stop()
        assert time.monotonic() - started < 3.0
        stream.close()


async def test_client_disconnects_are_not_logged_as_errors(component, caplog):
    """Tools and browsers leave mid-response all the time: debug lines, never ERROR tracebacks
    (the bridge drops sends after a disconnect, as uvicorn does, instead of raising into the SDK)."""
    caplog.set_level(logging.DEBUG)
    url = f"{component.url}/mcp"
    host, port = component.url.removeprefix("http://").split(":")
    async with aiohttp.ClientSession(headers=auth_headers()) as http:
        session = await _open_session(http, url)
        headers = {**HEADERS, **auth_headers(), "mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
        call = _rpc("tools/call", {"name": "get_context", "arguments": {"query": "tea"}}, request_id=7)
        for _ in range(3):  # a client that sends a call and hangs up at once
            reader, writer = await asyncio.open_connection(host, int(port))
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            writer.write(
                f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\n{head}Content-Length: {len(call)}\r\n\r\n".encode()
                + call
            )
            await writer.drain()
            writer.close()
            (await http.post(url, data=call, headers=headers)).close()  # one that stops reading
        stream = await http.get(url, headers={**headers, "Accept": "text/event-stream"})
        stream.close()  # a dropped GET stream
    await asyncio.sleep(1.0)
    errors = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
