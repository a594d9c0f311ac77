"""Host/Origin/token checks of the daemon's HTTP server, and loopback-only binding.

The middleware runs in a real aiohttp server on a free loopback port and is
probed with raw HTTP requests (so the Host header can be forged the way a
DNS-rebinding page would). The end-to-end version against a running daemon
is in ``test_mcp_http.py``.
"""

from __future__ import annotations

import asyncio
import http.client
import socket

import pytest
from aiohttp import web
from ctxos.daemon.http_security import SecurityPolicy, policy_from_config, security_middleware
from ctxos.daemon.http_server import HttpPortInUse, bind_loopback


def test_policy_allows_only_own_loopback_host_and_origin():
    policy = SecurityPolicy(port=4100)
    assert policy.check("/mcp", "127.0.0.1:4100", None, None) is None
    assert policy.check("/mcp", "localhost:4100", "http://localhost:4100", None) is None
    assert policy.check("/mcp", "[::1]:4100", "http://127.0.0.1:4100", None) is None
    assert policy.check("/mcp", "evil.example:4100", None, None)[0] == 421
    assert policy.check("/mcp", "localhost", None, None)[0] == 421  # no port
    assert policy.check("/mcp", "127.0.0.1:4101", None, None)[0] == 421  # another port
    assert policy.check("/mcp", None, None, None)[0] == 421
    assert policy.check("/mcp", "127.0.0.1:4100", "http://evil.example", None)[0] == 403
    assert policy.check("/mcp", "127.0.0.1:4100", "null", None)[0] == 403
    assert policy.check("/mcp", "127.0.0.1:4100", "http://localhost:5173", None)[0] == 403
    assert policy.check("/api/status", "127.0.0.1:4100", "http://evil.example", None)[0] == 403
    # the static web view is not an API: a foreign Origin may load it, a foreign Host may not
    assert policy.check("/", "127.0.0.1:4100", "http://evil.example", None) is None
    assert policy.check("/", "evil.example:4100", None, None)[0] == 421


def test_policy_token():
    policy = policy_from_config(4100, "s3cret")
    assert policy.check("/mcp", "127.0.0.1:4100", None, None)[0] == 401
    assert policy.check("/mcp", "127.0.0.1:4100", None, "Bearer wrong")[0] == 401
    assert policy.check("/mcp", "127.0.0.1:4100", None, "Basic s3cret")[0] == 401
    assert policy.check("/mcp", "127.0.0.1:4100", None, "Bearer s3cret") is None
    assert policy.check("/api/x", "127.0.0.1:4100", None, "bearer s3cret") is None
    assert policy.check("/app.js", "127.0.0.1:4100", None, None) is None  # static needs no token
    assert policy_from_config(4100, "").token is None
    assert policy_from_config(4100, None).token is None


def _raw(port: int, path: str, headers: dict[str, str], method: str = "GET") -> tuple[int, dict[str, str], str]:
    """One HTTP/1.1 request with exactly these headers (http.client adds Host unless we give one)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for key, value in headers.items():
        conn.putheader(key, value)
    conn.endheaders()
    response = conn.getresponse()
    body = response.read().decode()
    conn.close()
    return response.status, dict(response.getheaders()), body


@pytest.fixture
def guarded_server():
    """A real aiohttp server with the middleware, on a free loopback port, in a background loop."""
    import threading

    loop = asyncio.new_event_loop()
    state: dict = {}

    async def ok(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def start(token: str | None) -> int:
        sock = bind_loopback("127.0.0.1", 0)
        port = sock.getsockname()[1]
        app = web.Application(middlewares=[security_middleware(policy_from_config(port, token))])
        app.router.add_route("*", "/mcp", ok)
        app.router.add_get("/api/status", ok)
        app.router.add_get("/", ok)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        state["runner"] = runner
        return port

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def factory(token: str | None = None) -> int:
        return asyncio.run_coroutine_threadsafe(start(token), loop).result(10)

    yield factory
    if "runner" in state:
        asyncio.run_coroutine_threadsafe(state["runner"].cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_middleware_over_real_http(guarded_server):
    port = guarded_server()
    own = f"127.0.0.1:{port}"
    assert _raw(port, "/mcp", {"Host": own})[0] == 200
    assert _raw(port, "/mcp", {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"})[0] == 200
    status, _, body = _raw(port, "/mcp", {"Host": f"attacker.example:{port}"})
    assert status == 421 and "Host" in body
    assert _raw(port, "/mcp", {"Host": "localhost"})[0] == 421
    status, _, body = _raw(port, "/mcp", {"Host": own, "Origin": "http://attacker.example"})
    assert status == 403 and "Origin" in body
    assert _raw(port, "/api/status", {"Host": own, "Origin": "null"})[0] == 403
    assert _raw(port, "/", {"Host": own, "Origin": "http://attacker.example"})[0] == 200


def test_middleware_token_over_real_http(guarded_server):
    port = guarded_server("tok-123")
    own = f"127.0.0.1:{port}"
    status, headers, _ = _raw(port, "/mcp", {"Host": own})
    assert status == 401 and headers.get("WWW-Authenticate", "").startswith("Bearer")
    assert _raw(port, "/api/status", {"Host": own, "Authorization": "Bearer nope"})[0] == 401
    assert _raw(port, "/api/status", {"Host": own, "Authorization": "Bearer tok-123"})[0] == 200
    assert _raw(port, "/", {"Host": own})[0] == 200


def test_bind_refuses_non_loopback_and_reports_taken_port():
    with pytest.raises(ValueError, match="loopback"):
        bind_loopback("0.0.0.0", 0)
    first = bind_loopback("127.0.0.1", 0)
    try:
        port = first.getsockname()[1]
        with pytest.raises(HttpPortInUse, match=f"127.0.0.1:{port} is already in use"):
            bind_loopback("127.0.0.1", port)
    finally:
        first.close()
    sock = bind_loopback("localhost", 0)
    assert sock.family == socket.AF_INET and sock.getsockname()[0] == "127.0.0.1"
    sock.close()
