"""One per-user daemon serving several registered workspaces (real processes throughout).

``ctxos start`` starts the per-user daemon; ``ctxos mcp --workspace NAME`` (the
SDK's stdio client) and ``/w/<name>/mcp`` (the SDK's Streamable HTTP client)
each answer from that workspace's memories only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from daemon_helpers import daemon_factory, memory_text  # noqa: F401  (fixture)
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

pytestmark = [pytest.mark.slow]

CTXOS = shutil.which("ctxos") or str(Path(sys.executable).with_name("ctxos"))
TOKEN = "multi-workspace-test-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def ctxos(*args: str, check: bool = True, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [CTXOS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdin=subprocess.DEVNULL,
    )
    if check and out.returncode != 0:
        raise AssertionError(f"ctxos {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


def _status(name: str) -> dict:
    return json.loads(ctxos("-w", name, "status", "--json").stdout)


def _stop_all(pid: int | None) -> None:
    if not pid:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def two_workspaces(make_workspace):
    """alpha (the default: HTTP on a free port, with a token) and beta, each with its own skill."""
    alpha = make_workspace(
        {
            "_config.yaml": f"daemon:\n  http_port: 0\n  http_token: {TOKEN}\n",
            "04-skills/alpaca-shearing.md": memory_text(
                "alpaca-shearing",
                "Shear the alpacas in May with the quiet clippers.",
                type="skill",
                l0="Alpaca shearing in May",
            ),
        }
    )
    beta = make_workspace(
        {
            "04-skills/bee-smoking.md": memory_text(
                "bee-smoking",
                "Smoke the hive gently before opening the bee boxes.",
                type="skill",
                l0="Bee smoking before opening",
            ),
        }
    )
    ctxos("workspace", "add", str(alpha), "--name", "alpha")
    ctxos("workspace", "add", str(beta), "--name", "beta")
    return alpha, beta


def _stdio(name: str) -> StdioServerParameters:
    env = {
        key: os.environ[key]
        for key in ("CTXOS_RUNTIME_DIR", "PATH", "HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")
        if key in os.environ
    }
    return StdioServerParameters(command=CTXOS, args=["mcp", "--workspace", name, "--no-start"], env=env)


def _context_ids(structured: dict) -> set[str]:
    return {item["id"] for item in structured["selected"]}


@pytest.mark.anyio
async def test_one_start_serves_two_workspaces_over_stdio_and_http(two_workspaces) -> None:
    alpha, beta = two_workspaces
    started = ctxos("-w", "alpha", "start", "--no-tray")
    pid = None
    try:
        first = _status("alpha")
        pid = first["pid"]
        assert first["state"] == "ready" and first["name"] == "alpha" and first["workspace"] == str(alpha)
        base = first["http"]
        assert base and base in started.stdout
        second = _status("beta")
        assert second["pid"] == pid and second["state"] == "idle"  # loaded on first use
        assert second["http"] == f"{base}/w/beta"
        assert {item["name"]: item["loaded"] for item in second["workspaces"]["items"]} == {
            "alpha": True,
            "beta": False,
        }

        for name, own, other in (
            ("alpha", "alpaca-shearing", "bee-smoking"),
            ("beta", "bee-smoking", "alpaca-shearing"),
        ):
            async with Client(_stdio(name)) as client:
                result = await client.call_tool("get_context", {"query": "alpaca shearing bee smoking hive"})
                ids = _context_ids(result.structured_content)
                assert own in ids and other not in ids, (name, ids)
                refused = await client.call_tool("get_skill", {"name": other})
                assert refused.is_error
        assert _status("beta")["state"] == "ready"

        async with httpx2.AsyncClient(headers=BEARER) as http_client:
            for path, own, other in (
                ("/w/alpha/mcp", "alpaca-shearing", "bee-smoking"),
                ("/w/beta/mcp", "bee-smoking", "alpaca-shearing"),
                ("/mcp", "alpaca-shearing", "bee-smoking"),
            ):
                async with streamable_http_client(base + path, http_client=http_client) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        result = await session.call_tool("get_context", {"query": "alpaca shearing bee smoking hive"})
                        ids = _context_ids(result.structured_content)
                        assert own in ids and other not in ids, (path, ids)
        async with httpx2.AsyncClient() as anonymous:  # the token guards /w/<name>/ too
            for path in ("/w/beta/mcp", "/w/beta/api/status"):
                response = (
                    await anonymous.post(base + path, json={})
                    if path.endswith("mcp")
                    else await anonymous.get(base + path)
                )
                assert response.status_code == 401, path
        async with httpx2.AsyncClient(headers=BEARER) as api:
            moved = await api.get(base + "/w/beta")
            assert moved.status_code == 302 and moved.headers["location"] == "/w/beta/"
            memories = (await api.get(base + "/w/beta/api/memories")).json()
            assert "bee-smoking" in json.dumps(memories) and "alpaca-shearing" not in json.dumps(memories)

        # connect writes beta's own address and the credential, and that entry works.
        target = beta / "cursor-mcp.json"
        ctxos("-w", "beta", "connect", "cursor", "--transport", "http", "--write", "--config", str(target))
        entry = json.loads(target.read_text())["mcpServers"]["ctxos"]
        assert entry["url"] == f"{base}/w/beta/mcp" and entry["headers"] == BEARER
        async with httpx2.AsyncClient(headers=entry["headers"]) as http_client:
            async with streamable_http_client(entry["url"], http_client=http_client) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    result = await session.call_tool("get_context", {"query": "bee smoking hive"})
                    assert "bee-smoking" in _context_ids(result.structured_content)

        human = ctxos("-w", "beta", "status").stdout
        assert "alpha" in human and "beta" in human and "2 loaded" in human
    finally:
        stopped = ctxos("-w", "beta", "stop", check=False)
        if stopped.returncode != 0:
            _stop_all(pid)
    assert ctxos("-w", "alpha", "status", check=False).returncode == 3
    assert ctxos("-w", "beta", "status", check=False).returncode == 3


@pytest.mark.anyio
async def test_start_for_a_second_workspace_joins_the_running_daemon(make_workspace) -> None:
    alpha = make_workspace({"_config.yaml": f"daemon:\n  http_port: 0\n  http_token: {TOKEN}\n"})
    beta = make_workspace({"04-skills/bee-smoking.md": memory_text("bee-smoking", "Smoke the hive.", type="skill")})
    ctxos("-w", str(alpha), "start", "--no-tray")
    pid = None
    try:
        pid = _status(str(alpha))["pid"]
        joined = ctxos("-w", str(beta), "start")  # registers beta, SIGHUP to the daemon
        assert "serves 2 workspace(s)" in joined.stdout
        status = _status(str(beta))
        assert status["pid"] == pid and status["state"] == "ready" and status["memories"] == 1
        names = [row["name"] for row in json.loads(ctxos("workspace", "list", "--json").stdout)["workspaces"]]
        assert names == [alpha.name, beta.name]
        # Its MCP endpoint is served at once over HTTP too (REST and the page after a restart).
        base = _status(str(alpha))["http"]
        assert status["http"] == f"{base}/w/{beta.name}"
        async with httpx2.AsyncClient(headers=BEARER) as http_client:
            async with streamable_http_client(status["http"] + "/mcp", http_client=http_client) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    result = await session.call_tool("get_context", {"query": "smoke the hive"})
                    assert "bee-smoking" in _context_ids(result.structured_content)
            later = await http_client.get(status["http"] + "/api/status")
            assert later.status_code == 404 and "after a restart" in later.text
        # `workspace remove` tells the daemon: it closes that workspace (its socket and lock are freed).
        removed = ctxos("workspace", "remove", beta.name)
        assert f"(pid {pid}) was told" in removed.stdout
        deadline = time.monotonic() + 30
        while ctxos("-w", str(beta), "status", check=False).returncode != 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ctxos("-w", str(beta), "status", check=False).returncode == 3
        assert _status(str(alpha))["pid"] == pid
    finally:
        _stop_all(pid)


@pytest.mark.anyio
async def test_a_federated_global_skill_shows_up_in_a_project_get_context(make_workspace) -> None:
    global_ws = make_workspace(
        {
            "04-skills/commit-messages.md": memory_text(
                "commit-messages",
                "Write commit messages in the imperative mood, with a short subject line.",
                type="skill",
                l0="Commit messages: imperative mood, short subject",
            ),
            "08-rules/never-commit-secrets.md": memory_text(
                "never-commit-secrets",
                "Never commit secrets, tokens or passwords to any repository.",
                type="rule",
                l0="Never commit secrets",
            ),
        }
    )
    project = make_workspace(
        {
            "_config.yaml": "federate: [global]\n",
            "03-projects/zebra-shop.md": memory_text(
                "zebra-shop", "The zebra shop sells striped umbrellas.", type="project"
            ),
        }
    )
    ctxos("workspace", "add", str(global_ws), "--name", "global")
    ctxos("workspace", "add", str(project), "--name", "project")
    ctxos("-w", "project", "start", "--no-tray", "--no-http")
    pid = None
    try:
        status = _status("project")
        pid = status["pid"]
        assert status["extra"]["federated"] == ["global"] and _status("global")["state"] == "ready"
        async with Client(_stdio("project")) as client:
            result = await client.call_tool("get_context", {"query": "how do I write commit messages"})
            selected = {item["id"]: item for item in result.structured_content["selected"]}
            assert selected["commit-messages"]["workspace"] == "global"
            # federated rules come first (the MCP view has no ``reason``: the type and the order say it)
            assert selected["never-commit-secrets"]["type"] == "rule"
            order = [item["id"] for item in result.structured_content["selected"]]
            assert order.index("never-commit-secrets") < order.index("commit-messages")
            assert selected["never-commit-secrets"]["workspace"] == "global"
            skill = await client.call_tool("get_skill", {"name": "commit-messages"})  # not here: from global
            assert not skill.is_error and skill.structured_content["workspace"] == "global"
            refused = await client.call_tool("get_skill", {"name": "never-commit-secrets"})  # a rule, said so
            assert refused.is_error
            rendered = result.structured_content["rendered"]
            assert rendered.index("Never commit secrets") < rendered.index("imperative mood")
            # Writes go to the asking workspace, unless the call names another.
            here = await client.call_tool(
                "save_memory",
                {"type": "decision", "l0": "Zebra shop ships on Fridays", "content": "Orders ship every Friday."},
            )
            assert not here.is_error and (project / here.structured_content["path"]).is_file()
            there = await client.call_tool(
                "save_memory",
                {
                    "type": "skill",
                    "l0": "Review pull requests daily",
                    "content": "Review open pull requests each morning.",
                    "workspace": "global",
                },
            )
            assert not there.is_error, there.content
            assert (global_ws / there.structured_content["path"]).is_file()
            assert not (project / there.structured_content["path"]).exists()
            wrong = await client.call_tool(
                "save_memory", {"type": "skill", "l0": "x", "content": "y", "workspace": "nowhere"}
            )
            assert wrong.is_error and "no workspace named 'nowhere'" in wrong.content[0].text
        simulated = json.loads(ctxos("-w", "project", "simulate", "commit messages", "--json").stdout)
        assert {item["id"]: item.get("workspace") for item in simulated["selected"]}["commit-messages"] == "global"
        assert "global:commit-messages" in ctxos("-w", "project", "simulate", "commit messages").stdout
        # The global workspace itself does not see the project's memories.
        alone = json.loads(ctxos("-w", "global", "simulate", "zebra shop umbrellas", "--json").stdout)
        assert "zebra-shop" not in {item["id"] for item in alone["selected"]}
    finally:
        _stop_all(pid)


@pytest.fixture
def dummy_pystray(monkeypatch: pytest.MonkeyPatch):
    """pystray imported with its dummy backend, and forgotten afterwards.

    pystray picks its backend once, at import: left in ``sys.modules``, the dummy
    backend would be what every later test in this process gets (tests/test_tray.py's
    real X server tests then fail with NotImplementedError).
    """
    before = {name: module for name, module in sys.modules.items() if name.split(".")[0] == "pystray"}
    for name in before:
        del sys.modules[name]
    monkeypatch.setenv("PYSTRAY_BACKEND", "dummy")  # no display here
    import pystray

    yield pystray
    for name in [name for name in sys.modules if name.split(".")[0] == "pystray"]:
        del sys.modules[name]
    sys.modules.update(before)


def test_tray_lists_every_workspace_and_opens_each_page(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, dummy_pystray
) -> None:
    """The tray's Workspaces submenu, built with pystray's real Menu/MenuItem classes.

    The icon itself needs an X server (tests/test_tray.py covers it there); this
    checks only what the per-user daemon adds: one line per workspace from
    ``status``, each opening that workspace's page.
    """
    import types

    pystray = dummy_pystray

    from ctxos.daemon import tray as tray_mod

    class Backend:
        def call(self, method: str, params: dict | None = None):
            if method == "web_login":
                name = (params or {}).get("workspace")
                return {"url": f"http://127.0.0.1:9/{'w/' + name + '/' if name else ''}login?once=x"}
            if method == "status":
                return {
                    "pid": 1,
                    "state": "loading",
                    "http": "http://127.0.0.1:9/",
                    "workspaces": {
                        "items": [
                            {
                                "name": "notes",
                                "default": True,
                                "state": "ready",
                                "memories": 12,
                                "http": "http://127.0.0.1:9",
                            },
                            {
                                "name": "global",
                                "default": False,
                                "state": "idle",
                                "http": "http://127.0.0.1:9/w/global",
                            },
                            {
                                "name": "gone",
                                "default": False,
                                "state": "not served",
                                "error": "served by another daemon",
                            },
                        ]
                    },
                }
            return {}

    class Icon:  # stands in for pystray.Icon, which needs a display
        def __init__(self, name, image, title, menu):
            self.menu, self.title = menu, title

        def update_menu(self):
            pass

    opened: list[str] = []
    import webbrowser

    monkeypatch.setattr(webbrowser, "open", opened.append)
    app = tray_mod.TrayApp(tmp_path, Backend())
    app.build_icon(types.SimpleNamespace(MenuItem=pystray.MenuItem, Menu=pystray.Menu, Icon=Icon))
    app.refresh()
    submenu = next(item for item in app.icon.menu.items if item.text == "Workspaces")
    assert submenu.visible
    lines = list(submenu.submenu.items)
    assert [line.text for line in lines] == [
        "notes (default): ready, 12 memories",
        "global: idle",
        "gone: served by another daemon",
    ]
    assert [line.enabled for line in lines] == [True, True, False]
    lines[1](app.icon)
    app._executor.shutdown(wait=True)
    assert opened == ["http://127.0.0.1:9/w/global/login?once=x"]


def test_web_view_switches_between_workspaces(make_workspace) -> None:
    """The page at /w/<name>/ in headless Chromium (Debian's, through Playwright): its switcher."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.skip(f"Chromium not found at {chromium} (Debian: apt-get install -y chromium)")
    alpha = make_workspace({"_config.yaml": "daemon:\n  http_port: 0\n  http_auth: none\n"})
    beta = make_workspace({"04-skills/bee-smoking.md": memory_text("bee-smoking", "Smoke the hive.", type="skill")})
    ctxos("workspace", "add", str(alpha), "--name", "alpha")
    ctxos("workspace", "add", str(beta), "--name", "beta")
    ctxos("-w", "alpha", "start", "--no-tray")
    pid = None
    try:
        status = _status("alpha")
        pid, base = status["pid"], status["http"]
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
            try:
                page = browser.new_page()
                page.set_default_timeout(15_000)
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.goto(f"{base}/w/beta/")
                page.wait_for_function("document.querySelector('#workspace-path').textContent.length > 0")
                assert page.text_content("#workspace-path") == str(beta)
                switch = page.locator("#workspace-switch")
                assert switch.is_visible() and switch.input_value() == "beta"
                assert page.locator("#workspace-switch option").all_text_contents() == ["alpha (default)", "beta"]
                switch.select_option("alpha")
                page.wait_for_url(f"{base}/w/alpha/**")
                page.wait_for_function(
                    f"document.querySelector('#workspace-path').textContent === {json.dumps(str(alpha))}"
                )
                assert not errors, errors
            finally:
                browser.close()
    finally:
        _stop_all(pid)


def test_connect_without_a_daemon_writes_the_per_user_address(make_workspace) -> None:
    alpha = make_workspace({"_config.yaml": "daemon:\n  http_port: 4999\n"})
    beta = make_workspace({"_config.yaml": "daemon:\n  http_port: 5111\n"})
    ctxos("workspace", "add", str(alpha), "--name", "alpha")
    ctxos("workspace", "add", str(beta), "--name", "beta")
    printed = ctxos("-w", "beta", "connect", "cursor", "--transport", "http", "--print").stdout
    assert "http://127.0.0.1:4999/w/beta/mcp" in printed and "of the default workspace" in printed
    printed = ctxos("-w", "alpha", "connect", "cursor", "--transport", "http", "--print").stdout
    assert "http://127.0.0.1:4999/mcp" in printed


def test_a_single_workspace_daemon_says_it_cannot_federate(make_workspace, daemon_factory) -> None:  # noqa: F811
    root = make_workspace({"_config.yaml": "federate: [global]\n"})
    daemon = daemon_factory(root)
    problems = daemon.status()["extra"]["federate_problems"]
    assert problems and "only the per-user daemon" in problems[0] and "global" in problems[0]
