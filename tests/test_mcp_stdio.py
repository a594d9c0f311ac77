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
from daemon_helpers import daemon_factory  # noqa: F401  (fixture)
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
    other = tempfile.mkdtemp(prefix="ctxrt-other-", dir="/tmp")
    try:
        async with Client(_params(root, "--no-start", runtime_dir=other)) as client:
            skill = await client.call_tool("get_skill", {"name": "tea"})
            assert not skill.is_error and "80C" in skill.structured_content["text"]
    finally:
        shutil.rmtree(other, ignore_errors=True)
