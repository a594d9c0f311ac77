"""``ctxos mcp`` as a subprocess, driven by the SDK's stdio client.

It serves the daemon's engine state through the Unix socket: with a daemon
already running (a write through stdio is visible to the daemon at once), and
with none running, in which case it starts one (detached) and leaves it up.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from ctxos.client import DaemonClient, DaemonError
from daemon_helpers import daemon_factory, scratch_dir  # noqa: F401  (fixture)
from mcp import Client, StdioServerParameters
from mcp_helpers import TOOLS, build_workspace, refusal_cases, snapshot

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CTXOS = shutil.which("ctxos") or str(Path(sys.executable).with_name("ctxos"))


def _params(root: Path, *extra: str, runtime_dir: str | None = None) -> StdioServerParameters:
    # The SDK passes a minimal environment to the child: add the test's runtime dir.
    env = {
        "CTXOS_RUNTIME_DIR": runtime_dir or os.environ["CTXOS_RUNTIME_DIR"],
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    # ... and its own config and state dirs: a started daemon registers the workspace there.
    env.update({name: os.environ[name] for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME") if name in os.environ})
    return StdioServerParameters(command=CTXOS, args=["--workspace", str(root), "mcp", *extra], env=env)


async def test_stdio_against_running_daemon(make_workspace, tmp_path, daemon_factory):  # noqa: F811
    root = build_workspace(make_workspace, tmp_path)
    daemon = daemon_factory(root)
    async with Client(_params(root)) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS

        ctx = await client.call_tool("get_context", {"query": "apollo billing rust", "budget_tokens": 200})
        assert not ctx.is_error and 0 < ctx.structured_content["tokens_used"] <= 200

        saved = await client.call_tool(
            "save_memory",
            {
                "type": "project",
                "l0": "Pelican is the new search indexer",
                "content": "Pelican indexes the product catalog nightly.",
                "tags": ["search"],
            },
        )
        assert not saved.is_error, saved.content
        new_id = saved.structured_content["id"]
        # same engine state: the daemon sees it at once, and so does the next get_context
        assert daemon.has_memory(new_id)
        found = await client.call_tool("get_context", {"query": "pelican search indexer"})
        assert new_id in [s["id"] for s in found.structured_content["selected"]]

        skill = await client.call_tool("get_skill", {"name": "Deploy Checklist"})
        assert skill.structured_content["id"] == "deploy-checklist"

        logged = await client.call_tool("log_session", {"event": "indexed pelican"})
        assert re.fullmatch(r"02-daily/\d{4}-\d{2}-\d{2}\.md", logged.structured_content["path"])

        daemon.wait_settled()
        before = snapshot(root)
        for args, message in refusal_cases(root):
            result = await client.call_tool("save_memory", args)
            assert result.is_error and message in result.content[0].text, (args, result.content)
        assert snapshot(root) == before


def _set_http_port_zero(root: Path) -> None:
    """A daemon started by `ctxos mcp` reads the config: never let a test take the real 3847."""
    path = root / "_config.yaml"
    text, n = re.subn(r"^(\s+http_port:)\s*\d+", r"\g<1> 0", path.read_text(), count=1, flags=re.M)
    assert n == 1
    path.write_text(text)


async def test_stdio_starts_the_daemon_when_none_runs(make_workspace):
    root = make_workspace(
        {
            "04-skills/tea.md": "---\nid: tea\ntype: skill\nl0: Brew green tea at 80C\n---\n"
            "# Green Tea\nBrew at 80C for two minutes.\n"
        }
    )
    _set_http_port_zero(root)
    client_probe = DaemonClient.for_workspace(root, timeout=5)
    assert not client_probe.is_alive()
    pid = None
    try:
        async with Client(_params(root)) as client:
            skill = await client.call_tool("get_skill", {"name": "tea"})
            assert "two minutes" in skill.structured_content["text"]
        status = client_probe.call("status")  # the daemon outlives the stdio session
        pid = status["pid"]
        assert status["workspace"] == str(root.resolve())
    finally:
        client_probe.close()
        if pid is None:
            try:
                pid = DaemonClient.for_workspace(root, timeout=5).call("status")["pid"]
            except (DaemonError, OSError):
                pid = None
        if pid:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)


def test_no_start_flag_fails_clearly(make_workspace):
    import subprocess

    root = make_workspace({})
    proc = subprocess.run(
        [CTXOS, "--workspace", str(root), "mcp", "--no-start"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert "no ctxos daemon runs" in proc.stderr and proc.stdout == ""


async def test_stdio_finds_a_daemon_started_with_another_runtime_dir(make_workspace, daemon_factory):  # noqa: F811
    """A tool may launch `ctxos mcp` without the service's XDG_RUNTIME_DIR: the recorded socket is used."""
    import tempfile

    root = make_workspace({"04-skills/tea.md": "---\nid: tea\ntype: skill\nl0: Brew tea\n---\nAt 80C.\n"})
    daemon_factory(root)
    other = tempfile.mkdtemp(prefix="ctxrt-other-", dir=scratch_dir())
    try:
        async with Client(_params(root, "--no-start", runtime_dir=other)) as client:
            skill = await client.call_tool("get_skill", {"name": "tea"})
            assert not skill.is_error and "80C" in skill.structured_content["text"]
    finally:
        shutil.rmtree(other, ignore_errors=True)


def _stdio_lines(root: Path, lines: list[dict], shortcut: bool) -> tuple[list[bytes], str]:
    """Raw JSON-RPC lines through ``ctxos mcp``, one answer read per request; the answers and stderr."""
    import json
    import subprocess

    env = {**os.environ, "CTXOS_MCP_SHORTCUT": "1" if shortcut else "0"}
    log = root.parent / f"mcp-{shortcut}.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxos.daemon.mcp_stdio", "--workspace", str(root), "--no-start"]
            + ["--log-level", "DEBUG"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
        )
    assert proc.stdin is not None and proc.stdout is not None
    answers = []
    try:
        for line in lines:
            proc.stdin.write(json.dumps(line).encode() + b"\n")
            proc.stdin.flush()
            if "id" in line:
                answers.append(proc.stdout.readline())
        proc.stdin.close()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return answers, log.read_text()


def _still_row(match: re.Match[str]) -> str:
    """A weights row with recency and frequency moved into importance (the row still sums to 1)."""
    moved = sum(float(match.group(n)) for n in (2, 3, 4))
    return f"{match.group(1)}recency: 0.0, importance: {moved:.2f}, frequency: 0.0}}"


def _conversation(era: str, version: str) -> list[dict]:
    """A handshake (or a discover probe), then get_context calls: repeated, varied, refused, and other tools."""
    meta = (
        {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientInfo": {"name": "bytes-test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        if era == "modern"
        else None
    )

    def call(n: int, name: str, arguments: dict) -> dict:
        params = {"name": name, "arguments": arguments, **({"_meta": meta} if meta else {})}
        return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}

    if era == "modern":
        opening = [{"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {"_meta": meta}}]
    else:
        opening = [
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
        ]
    return [
        *opening,
        call(1, "get_context", {"query": "apollo billing rust"}),  # the SDK answers: its frame is kept
        call(2, "get_context", {"query": "apollo billing rust"}),
        call(3, "get_context", {"query": "deploy checklist", "budget_tokens": 300, "intent": "recall"}),
        call(4, "get_context", {"query": "x", "budget_tokens": -5}),  # refused by the contract
        call(5, "get_context", {"query": "x", "colour": "red"}),  # an unknown argument
        call(6, "get_context", {"query": "billing", "intent": "no-such-intent"}),  # refused by the daemon
        call(7, "get_skill", {"name": "Deploy Checklist"}),
        call(8, "get_context", {"query": "rust services"}),
    ]


@pytest.mark.parametrize(
    ("era", "version"), [("legacy", "2025-06-18"), ("legacy", "2025-11-25"), ("modern", "2026-07-28")]
)
def test_shortcut_writes_the_bytes_the_sdk_writes(make_workspace, tmp_path, daemon_factory, era, version):  # noqa: F811
    """``get_context`` answered by the shortcut (daemon/mcp_shortcut.py) is byte for byte the SDK's answer.

    The same conversation, raw lines on stdin, through ``ctxos mcp`` with the shortcut off and on;
    only the engine's own ``elapsed_ms`` may differ. Refusals and other tools go to the SDK.
    """
    root = build_workspace(make_workspace, tmp_path)
    # Both runs must get the same answers from the daemon: no signal that the first run's
    # accesses (frequency) or the clock (recency) move between them.
    config = root / "_config.yaml"
    text, rows = re.subn(
        r"(\{semantic: [0-9.]+, bm25: [0-9.]+, graph: [0-9.]+, )"
        r"recency: ([0-9.]+), importance: ([0-9.]+), frequency: ([0-9.]+)\}",
        _still_row,
        config.read_text(),
    )
    assert rows == 4
    config.write_text(text)
    daemon_factory(root)
    lines = _conversation(era, version)
    sdk, sdk_log = _stdio_lines(root, lines, shortcut=False)
    fast, fast_log = _stdio_lines(root, lines, shortcut=True)
    elapsed = re.compile(rb'"elapsed_ms":[0-9.eE+-]+')
    assert len(sdk) == len(fast) == 9
    for ours, theirs in zip(fast, sdk, strict=True):
        assert elapsed.sub(b"", ours) == elapsed.sub(b"", theirs)
    assert b'"isError":false' in fast[2] and b"budget_tokens: must be between" in fast[4]
    assert "answered by the shortcut" not in sdk_log
    answered = re.findall(r"get_context (\d+) answered by the shortcut", fast_log)
    assert sorted(answered) == ["2", "3", "8"], fast_log[-2000:]


async def test_shortcut_survives_a_daemon_restart(make_workspace, tmp_path, daemon_factory):  # noqa: F811
    """The shortcut's own socket connection breaks when the daemon restarts: that call goes to the SDK
    (whose backend reconnects), and the next one reconnects; no call fails."""
    root = build_workspace(make_workspace, tmp_path)
    daemon = daemon_factory(root)
    async with Client(_params(root, "--no-start")) as client:
        for _ in range(2):  # the SDK's answer, then the shortcut's
            result = await client.call_tool("get_context", {"query": "apollo billing rust"})
            assert not result.is_error and "no-secrets" in [s["id"] for s in result.structured_content["selected"]]
        daemon.stop()
        daemon_factory(root)
        for _ in range(2):
            result = await client.call_tool("get_context", {"query": "apollo billing rust"})
            assert not result.is_error, result.content
            assert "no-secrets" in [s["id"] for s in result.structured_content["selected"]]


def test_shortcut_keeps_a_bounded_number_of_frames():
    """A client that sends a new ``_meta`` with every call (a progress token) never grows the shortcut's state.

    Driven through :meth:`Shortcut.around` with in-memory streams standing in for the stdio
    transport (the byte-level behaviour with the real transport is the test above): every
    call goes on to the SDK, the frames kept stop at ``MAX_FRAMES``, and a request the SDK
    answers with an error is not remembered.
    """
    import anyio
    from ctxos.daemon.mcp_shortcut import MAX_FRAMES, Shortcut
    from mcp.shared.message import SessionMessage
    from mcp_types import ErrorData, JSONRPCError, JSONRPCRequest, JSONRPCResponse

    async def never_called(method: str, params: dict) -> dict:  # no frame matches: the SDK answers all
        raise AssertionError("the shortcut answered a call it had no frame for")

    async def conversation() -> Shortcut:
        shortcut = Shortcut(never_called)
        client_out, transport_read = anyio.create_memory_object_stream[SessionMessage | Exception](100)
        transport_write, client_in = anyio.create_memory_object_stream[SessionMessage](100)
        async with shortcut.around(transport_read, transport_write) as (to_sdk, from_sdk):
            for n in range(3 * MAX_FRAMES):
                params = {"name": "get_context", "arguments": {"query": "q"}, "_meta": {"progressToken": n}}
                await client_out.send(
                    SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=n, method="tools/call", params=params))
                )
                forwarded = await to_sdk.receive()
                assert isinstance(forwarded, SessionMessage) and forwarded.message.id == n
                if n % 2:
                    answer = JSONRPCError(jsonrpc="2.0", id=n, error=ErrorData(code=-32603, message="failed"))
                else:
                    result = {"content": [{"type": "text", "text": "x"}], "structuredContent": {}, "isError": False}
                    answer = JSONRPCResponse(jsonrpc="2.0", id=n, result=result)
                await from_sdk.send(SessionMessage(answer))
                assert (await client_in.receive()).message.id == n
            client_out.close()
        return shortcut

    shortcut = anyio.run(conversation)
    assert len(shortcut._frames) == MAX_FRAMES  # noqa: SLF001 - the state this test bounds
    assert shortcut._asked == {}  # noqa: SLF001
    assert shortcut.answered == 0
