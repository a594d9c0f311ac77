"""MCP sessions and SSE streams over HTTP are bounded, against a real daemon process.

A client that sends ``initialize`` after ``initialize`` and never closes a
session (or opens ``/sse`` streams and holds them) used to grow the daemon
without limit (6,000 initializes: 88 -> 342 MB, never freed). Now sessions
close after ``http_limits.mcp_session_idle_s`` without a request, at most
``mcp_max_sessions`` are open (one more initialize gets 503 with a JSON-RPC
error), and at most ``sse_max_streams`` legacy streams. Memory is read from
``/proc/<pid>/status`` of the real daemon.
"""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path

import pytest
from daemon_helpers import DaemonProcess, auth_headers, daemon_factory, memory_text  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bounds-test", "version": "1"},
        },
    }
).encode()


def _workspace(make_workspace, limits: str) -> Path:
    root = make_workspace(
        {"04-skills/deploy.md": memory_text("deploy", "Deploy with the blue pipeline.", type="skill")}
    )
    (root / "_config.yaml").write_text("http_limits:\n" + limits, encoding="utf-8")
    return root


def _initialize(port: int) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request(
            "POST",
            "/mcp",
            body=INITIALIZE,
            headers={
                "Host": f"127.0.0.1:{port}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                **auth_headers(),
            },
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc status")


def test_session_cap_answers_503_and_idle_sessions_expire(make_workspace, daemon_factory) -> None:  # noqa: F811
    root = _workspace(make_workspace, "  mcp_max_sessions: 5\n  mcp_session_idle_s: 1.5\n  sse_max_streams: 2\n")
    daemon = daemon_factory(root, http=True)
    port = daemon.http_port
    for _ in range(5):
        status, _body = _initialize(port)
        assert status == 200
    status, body = _initialize(port)
    assert status == 503, body
    assert json.loads(body)["error"]["message"] == "Too many open sessions"
    assert daemon.status()["http_server"]["mcp_sessions"] == 5
    daemon.wait_for(
        lambda: daemon.status()["http_server"]["mcp_sessions"] == 0, timeout=10, message="idle sessions to expire"
    )
    assert _initialize(port)[0] == 200  # room again once the idle ones closed


def test_sse_stream_cap(make_workspace, daemon_factory) -> None:  # noqa: F811
    root = _workspace(make_workspace, "  sse_max_streams: 2\n")
    daemon = daemon_factory(root, http=True)
    port = daemon.http_port
    held = []
    try:
        for _ in range(2):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            conn.request(
                "GET", "/sse", headers={"Host": f"127.0.0.1:{port}", "Accept": "text/event-stream", **auth_headers()}
            )
            response = conn.getresponse()
            assert response.status == 200
            held.append(conn)
        daemon.wait_for(lambda: daemon.status()["http_server"]["sse_streams"] == 2, message="two streams")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        conn.request(
            "GET", "/sse", headers={"Host": f"127.0.0.1:{port}", "Accept": "text/event-stream", **auth_headers()}
        )
        refused = conn.getresponse()
        assert refused.status == 503 and b"too many open /sse streams (limit 2)" in refused.read()
        conn.close()
    finally:
        for conn in held:
            conn.close()
    daemon.wait_for(
        lambda: daemon.status()["http_server"]["sse_streams"] == 0, timeout=10, message="closed streams to be noticed"
    )


def test_memory_after_1500_initializes_stays_within_a_few_mb(make_workspace, daemon_factory) -> None:  # noqa: F811
    root = _workspace(make_workspace, "  mcp_session_idle_s: 1\n")
    daemon = daemon_factory(root, http=True)
    port = daemon.http_port
    for _ in range(150):  # warm up: imports, caches, pools
        _initialize(port)
    daemon.wait_for(
        lambda: daemon.status()["http_server"]["mcp_sessions"] == 0, timeout=15, message="warm-up sessions to expire"
    )
    before = _rss_kib(daemon.pid)
    statuses: dict[int, int] = {}
    for _ in range(1500):
        status, _body = _initialize(port)
        statuses[status] = statuses.get(status, 0) + 1
    assert set(statuses) <= {200, 503} and statuses.get(200, 0) >= 64, statuses
    daemon.wait_for(
        lambda: daemon.status()["http_server"]["mcp_sessions"] == 0, timeout=15, message="sessions to expire"
    )
    time.sleep(0.5)
    after = _rss_kib(daemon.pid)
    print(f"RSS before {before} KiB, after 1,500 initializes {after} KiB ({statuses})")
    assert after - before < 8 * 1024, f"RSS grew from {before} KiB to {after} KiB"
