"""MCP over HTTP against a running daemon process, with the SDK's real clients.

The daemon is started as ``ctxos start`` starts it (``daemon_helpers``) with
HTTP on a free loopback port; the tests use Streamable HTTP at ``/mcp``, the
legacy SSE endpoint, and raw requests with forged Host/Origin headers.
"""

from __future__ import annotations

import http.client
import json
import re
import socket

import httpx2
import pytest
from daemon_helpers import auth_headers, daemon_factory  # noqa: F401  (fixture)
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp_helpers import TOOLS, build_workspace, mcp_http_client, refusal_cases, snapshot

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def workspace(make_workspace, tmp_path):
    return build_workspace(make_workspace, tmp_path)


@pytest.fixture
def daemon(workspace, daemon_factory):  # noqa: F811
    return daemon_factory(workspace, http=True)


def _mcp_url(daemon) -> str:
    base = daemon.http_url
    assert base, daemon.output()[-3000:]
    return base + "/mcp"


def _statm_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


async def test_mcp_stack_is_built_on_the_first_mcp_request(daemon):
    """Issue 16: the SDK (and Starlette) are imported on the first /mcp request, not at start.

    ``mcp_loaded`` is the daemon's own account; the daemon's resident memory growing by
    more than a few MiB when it happens is the outside view (the stack is ~28 MiB).
    """
    assert daemon.status()["http_server"]["mcp_loaded"] is False
    assert daemon.status()["http_server"]["mcp_sessions"] == 0
    before = _statm_rss_mib(daemon.proc.pid)
    async with mcp_http_client(_mcp_url(daemon)) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
    assert daemon.status()["http_server"]["mcp_loaded"] is True
    assert _statm_rss_mib(daemon.proc.pid) - before > 8


async def test_streamable_http_full_flow(daemon, workspace, tmp_path):
    async with mcp_http_client(_mcp_url(daemon)) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS

        ctx = await client.call_tool("get_context", {"query": "deploy apollo", "budget_tokens": 300})
        assert not ctx.is_error and 0 < ctx.structured_content["tokens_used"] <= 300
        assert "no-secrets" in [s["id"] for s in ctx.structured_content["selected"]]

        saved = await client.call_tool(
            "save_memory",
            {
                "type": "skill",
                "l0": "Rotate the quokka signing keys every quarter",
                "content": "Quokka key rotation: generate, publish, retire the old key after a week.",
            },
        )
        assert not saved.is_error, saved.content
        new_id = saved.structured_content["id"]
        found = await client.call_tool("get_context", {"query": "quokka signing key rotation"})
        assert not found.is_error, found.content
        assert new_id in [s["id"] for s in found.structured_content["selected"]]

        skill = await client.call_tool("get_skill", {"name": new_id})
        assert skill.structured_content["version"] == 1 and "retire the old key" in skill.structured_content["text"]

        logged = await client.call_tool("log_session", {"event": "rotated quokka keys"})
        assert not logged.is_error
        assert "rotated quokka keys" in (workspace / logged.structured_content["path"]).read_text()

        # a second writer updates the skill; the first one's stale version is refused
        update = await client.call_tool(
            "save_memory",
            {
                "type": "skill",
                "id": new_id,
                "l0": "Rotate quokka keys quarterly",
                "content": "v2",
                "expected_version": 1,
            },
        )
        assert not update.is_error and update.structured_content["version"] == 2
        daemon.wait_settled()
        before = snapshot(workspace)
        stale = await client.call_tool(
            "save_memory", {"type": "skill", "id": new_id, "l0": "stale", "content": "stale", "expected_version": 1}
        )
        assert stale.is_error and "changed since you read it" in stale.content[0].text
        for args, message in refusal_cases(workspace):
            result = await client.call_tool("save_memory", args)
            assert result.is_error and message in result.content[0].text, (args, result.content)
        assert snapshot(workspace) == before

        resource = await client.read_resource(f"memory://{new_id}")
        assert "Rotate quokka keys quarterly" in resource.contents[0].text


async def test_legacy_sse_endpoint(daemon):
    async with sse_client(daemon.http_url + "/sse", headers=auth_headers()) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            result = await session.call_tool("get_context", {"query": "rust errors", "budget_tokens": 200})
            assert not result.is_error and result.structured_content["tokens_used"] <= 200


_INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }
)


def _post(port: int, headers: dict[str, str], path: str = "/mcp") -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("POST", path, skip_host=True, skip_accept_encoding=True)
    base = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Content-Length": str(len(_INIT)),
        **auth_headers(),
    }
    for key, value in {**base, **headers}.items():
        conn.putheader(key, value)
    conn.endheaders(_INIT.encode())
    response = conn.getresponse()
    body = response.read(2000).decode(errors="replace")
    conn.close()
    return response.status, body


def test_foreign_host_and_origin_are_rejected(daemon):
    port = int(daemon.http_url.rsplit(":", 1)[1])
    own = f"127.0.0.1:{port}"
    assert _post(port, {"Host": own})[0] == 200
    assert _post(port, {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"})[0] == 200
    assert _post(port, {"Host": f"rebound.attacker.example:{port}"})[0] == 421
    assert _post(port, {"Host": own, "Origin": "http://attacker.example"})[0] == 403
    assert _post(port, {"Host": own, "Origin": "null"})[0] == 403
    assert _post(port, {"Host": own, "Origin": "http://localhost:5173"})[0] == 403
    # the REST API and the web view are served on the same port, behind the same checks
    assert _get(port, "/api/status", {"Host": own})[0] == 200
    assert _get(port, "/api/status", {"Host": own, "Origin": "http://attacker.example"})[0] == 403
    assert _get(port, "/api/status", {"Host": f"attacker.example:{port}"})[0] == 421
    status, body = _get(port, "/", {"Host": own})
    assert status == 200 and "<html" in body.lower()


def _get(port: int, path: str, headers: dict[str, str]) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
    for key, value in {**auth_headers(), **headers}.items():
        conn.putheader(key, value)
    conn.endheaders()
    response = conn.getresponse()
    body = response.read(4000).decode(errors="replace")
    conn.close()
    return response.status, body


def _set_config(root, **daemon_values) -> None:
    path = root / "_config.yaml"
    text = path.read_text()
    for key, value in daemon_values.items():
        text, n = re.subn(rf"^(\s+{key}:)\s*\S+", rf"\g<1> {value}", text, count=1, flags=re.M)
        assert n == 1, key
    path.write_text(text)


async def test_bearer_token_from_config(make_workspace, daemon_factory):  # noqa: F811
    root = make_workspace({})
    _set_config(root, http_token='"t0k3n-for-tests"')
    daemon = daemon_factory(root, http=True)
    url = _mcp_url(daemon)
    port = int(daemon.http_url.rsplit(":", 1)[1])
    status, _ = _post(port, {"Host": f"127.0.0.1:{port}"})
    assert status == 401
    async with httpx2.AsyncClient(headers={"Authorization": "Bearer t0k3n-for-tests"}) as http_client:
        async with streamable_http_client(url, http_client=http_client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                assert {t.name for t in (await session.list_tools()).tools} == TOOLS


def test_taken_port_fails_clearly_and_daemon_keeps_serving(make_workspace, daemon_factory):  # noqa: F811
    root = make_workspace({})
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        daemon = daemon_factory(root, http=True, http_port=port)
        status = daemon.status()
        assert status["http"] is None
        assert "already in use" in status["components"]["http"] and str(port) in status["components"]["http"]
        assert daemon.call("get_context", query="anything", budget_tokens=100)["tokens_used"] <= 100
    finally:
        holder.close()
