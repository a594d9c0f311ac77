"""``ctxos connect``: each tool's entry shape, merged into real sample configs.

The samples under ``tests/fixtures/connect/`` follow each tool's documented
format and hold other servers and settings, which must survive byte-for-byte
in meaning (parsed equality), with a backup of the original beside them.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from ctxos.client.connect import (
    ConnectError,
    config_path,
    ctxos_command,
    merge_toml,
    plan_connect,
    write_plan,
)
from daemon_helpers import daemon_factory  # noqa: F401,E402  (fixture)
from web_helpers import http  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "connect"
CTXOS = shutil.which("ctxos") or str(Path(sys.executable).with_name("ctxos"))


def _copy(name: str, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIXTURES / name, dest)
    return dest


def _load(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)


def _backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".*.bak"))


CASES = [
    # tool, transport, scope, fixture, container, expected entry (WS / CMD substituted)
    (
        "claude-desktop",
        "stdio",
        "user",
        "claude_desktop_config.json",
        "mcpServers",
        {"command": "CMD", "args": ["--workspace", "WS", "mcp"]},
    ),
    (
        "claude-code",
        "stdio",
        "user",
        "claude.json",
        "mcpServers",
        {"command": "CMD", "args": ["--workspace", "WS", "mcp"]},
    ),
    (
        "claude-code",
        "http",
        "project",
        "project_mcp.json",
        "mcpServers",
        {"type": "http", "url": "http://127.0.0.1:3999/mcp"},
    ),
    (
        "cursor",
        "stdio",
        "user",
        "cursor_mcp.json",
        "mcpServers",
        {"command": "CMD", "args": ["--workspace", "WS", "mcp"]},
    ),
    ("cursor", "http", "project", "cursor_mcp.json", "mcpServers", {"url": "http://127.0.0.1:3999/mcp"}),
    (
        "windsurf",
        "stdio",
        "user",
        "windsurf_mcp_config.json",
        "mcpServers",
        {"command": "CMD", "args": ["--workspace", "WS", "mcp"]},
    ),
    ("windsurf", "http", "user", "windsurf_mcp_config.json", "mcpServers", {"serverUrl": "http://127.0.0.1:3999/mcp"}),
    (
        "vscode",
        "stdio",
        "project",
        "vscode_mcp.json",
        "servers",
        {"type": "stdio", "command": "CMD", "args": ["--workspace", "WS", "mcp"]},
    ),
    ("vscode", "http", "user", "vscode_mcp.json", "servers", {"type": "http", "url": "http://127.0.0.1:3999/mcp"}),
    (
        "codex",
        "stdio",
        "user",
        "codex_config.toml",
        "mcp_servers",
        {"command": "CMD", "args": ["--workspace", "WS", "mcp"]},
    ),
    ("codex", "http", "user", "codex_config.toml", "mcp_servers", {"url": "http://127.0.0.1:3999/mcp"}),
]


def _subst(value, ws: str, cmd: str):
    if isinstance(value, dict):
        return {k: _subst(v, ws, cmd) for k, v in value.items()}
    if isinstance(value, list):
        return [_subst(v, ws, cmd) for v in value]
    return {"WS": ws, "CMD": cmd}.get(value, value)


@pytest.mark.parametrize(
    "tool,transport,scope,fixture,container,expected", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES]
)
def test_merge_into_real_sample_keeps_everything_else(tmp_path, tool, transport, scope, fixture, container, expected):
    home, project, ws = tmp_path / "home", tmp_path / "project", tmp_path / "ws"
    ws.mkdir()
    target = config_path(tool, scope, home=home, project=project, platform="linux", env={})
    _copy(fixture, target)
    original_bytes = target.read_bytes()
    original = _load(target)

    plan = plan_connect(
        tool,
        transport=transport,
        scope=scope,
        workspace=ws,
        http_port=3999,
        home=home,
        project=project,
        platform="linux",
        env={},
    )
    assert plan.path == target
    result = write_plan(plan)
    assert result.changed and not result.created

    after = _load(target)
    cmd = plan.entry.get("command", "")
    assert after[container]["ctxos"] == _subst(expected, str(ws), cmd)
    # every other server and every other top-level setting is untouched
    others = {k: v for k, v in after[container].items() if k != "ctxos"}
    assert others == original[container]
    assert {k: v for k, v in after.items() if k != container} == {k: v for k, v in original.items() if k != container}
    # a timestamped backup holds the original bytes
    assert result.backup is not None and result.backup.read_bytes() == original_bytes
    assert _backups(target) == [result.backup]
    if transport == "stdio":
        assert Path(cmd).is_absolute() and os.access(cmd, os.X_OK)

    # writing the same entry again changes nothing and makes no second backup
    again = write_plan(plan)
    assert not again.changed and _backups(target) == [result.backup]


def test_creates_missing_file_and_folders(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    plan = plan_connect("cursor", scope="project", workspace=ws, project=tmp_path / "proj", home=tmp_path)
    result = write_plan(plan)
    assert result.created and result.backup is None
    assert _load(plan.path) == {"mcpServers": {"ctxos": plan.entry}}


def test_file_with_comments_is_refused_and_left_unchanged(tmp_path):
    target = _copy("vscode_mcp_with_comments.json", tmp_path / ".vscode" / "mcp.json")
    before = target.read_bytes()
    plan = plan_connect("vscode", scope="project", workspace=tmp_path, project=tmp_path)
    with pytest.raises(ConnectError, match="not plain JSON"):
        write_plan(plan)
    assert target.read_bytes() == before
    assert _backups(target) == []


def test_claude_desktop_refuses_http(tmp_path):
    with pytest.raises(ConnectError, match="stdio"):
        plan_connect("claude-desktop", transport="http", workspace=tmp_path)


def test_bad_server_name_and_scope_refused(tmp_path):
    with pytest.raises(ConnectError, match="server name"):
        plan_connect("cursor", name="../evil", workspace=tmp_path)
    with pytest.raises(ConnectError, match="no project scope"):
        plan_connect("windsurf", scope="project", workspace=tmp_path)


def test_token_goes_into_headers_or_env_var(tmp_path):
    cc = plan_connect("claude-code", transport="http", workspace=tmp_path, token="s3cret", home=tmp_path)
    assert cc.entry["headers"] == {"Authorization": "Bearer s3cret"}
    result = write_plan(cc)
    assert result.created and (cc.path.stat().st_mode & 0o777) == 0o600
    codex = plan_connect("codex", transport="http", workspace=tmp_path, token="s3cret", home=tmp_path, env={})
    assert codex.entry == {"url": "http://127.0.0.1:3847/mcp", "bearer_token_env_var": "CTXOS_HTTP_TOKEN"}
    assert "s3cret" not in codex.snippet
    # project-scope files are often committed: the tool's environment reference, never the token
    for tool, reference in (
        ("claude-code", "${CTXOS_HTTP_TOKEN}"),
        ("cursor", "${env:CTXOS_HTTP_TOKEN}"),
        ("vscode", "${env:CTXOS_HTTP_TOKEN}"),
    ):
        plan = plan_connect(
            tool,
            transport="http",
            scope="project",
            workspace=tmp_path,
            token="s3cret",
            project=tmp_path / tool,
            token_hint="/state/ctxos/http-token",
        )
        assert plan.entry["headers"] == {"Authorization": f"Bearer {reference}"} and not plan.secret
        assert "s3cret" not in plan.snippet and 'export CTXOS_HTTP_TOKEN="$(cat /state/ctxos/http-token)"' in " ".join(
            plan.notes
        )


def test_toml_replaces_our_tables_and_keeps_comments(tmp_path):
    text = (FIXTURES / "codex_config_existing_ctxos.toml").read_text()
    entry = {"command": "/new/ctxos", "args": ["mcp"]}
    merged = merge_toml(text, "mcp_servers", "ctxos", entry, path=tmp_path / "c.toml")
    data = tomllib.loads(merged)
    assert data["mcp_servers"]["ctxos"] == entry  # old env subtable gone with it
    assert data["mcp_servers"]["linear"] == {"url": "https://mcp.linear.app/mcp"}
    assert "# Remote tracker: keep this comment with its table" in merged
    assert "/old/path/ctxos" not in merged


def test_toml_inline_definition_stays_inline(tmp_path):
    """tomlkit edits the value where it is: ``ctxos = { ... }`` is replaced in place, the rest kept byte for byte."""
    text = (FIXTURES / "codex_config_inline.toml").read_text()
    merged = merge_toml(text, "mcp_servers", "ctxos", {"command": "x", "env": {"A": "1"}}, path=tmp_path / "c.toml")
    assert tomllib.loads(merged)["mcp_servers"] == {
        "ctxos": {"command": "x", "env": {"A": "1"}},
        "other": {"command": "other-mcp"},
    }
    assert (
        merged.replace('ctxos = {command = "x", env = {A = "1"}}', 'ctxos = { command = "/old/ctxos", args = ["mcp"] }')
        == text
    )


def test_toml_merge_changes_nothing_but_our_table(tmp_path):
    """Everything outside ``[mcp_servers.ctxos]`` is the user's text unchanged, and a second merge replaces only it."""
    text = (FIXTURES / "codex_config.toml").read_text()
    first = merge_toml(text, "mcp_servers", "ctxos", {"command": "a", "args": ["mcp"]}, path=tmp_path / "c.toml")
    ours = '[mcp_servers.ctxos]\ncommand = "a"\nargs = ["mcp"]\n\n'
    assert ours in first and first.replace(ours, "") == text
    second = merge_toml(first, "mcp_servers", "ctxos", {"url": "http://127.0.0.1:3847/mcp"}, path=tmp_path / "c.toml")
    assert second.replace('[mcp_servers.ctxos]\nurl = "http://127.0.0.1:3847/mcp"\n\n', "") == text
    with pytest.raises(ConnectError, match="not valid TOML"):
        merge_toml("model = \n", "mcp_servers", "ctxos", {"command": "a"}, path=tmp_path / "c.toml")


def test_toml_keeps_user_comments_and_escapes_paths(tmp_path):
    text = (FIXTURES / "codex_config.toml").read_text()
    entry = {"command": 'C:\\Program Files\\ctxos "x".exe', "args": ["--workspace", "/tmp/a b", "mcp"]}
    merged = merge_toml(text, "mcp_servers", "ctxos", entry, path=tmp_path / "c.toml")
    assert tomllib.loads(merged)["mcp_servers"]["ctxos"] == entry
    for comment in ("# Codex configuration", "# Documentation server (stdio)", "# Remote tracker"):
        assert comment in merged


def test_ctxos_command_is_the_real_executable():
    cmd = ctxos_command()
    assert Path(cmd[0]).is_absolute()
    assert os.access(cmd[0], os.X_OK)


def _run_cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    env.pop("CODEX_HOME", None)
    return subprocess.run([CTXOS, *args], capture_output=True, text=True, env=env, timeout=60)


def test_cli_print_and_write(tmp_path):
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    target = _copy("claude_desktop_config.json", home / ".config" / "Claude" / "claude_desktop_config.json")
    before = target.read_bytes()

    shown = _run_cli("--workspace", str(ws), "connect", "claude-desktop", home=home)
    assert shown.returncode == 0, shown.stderr
    assert str(target) in shown.stdout and '"mcpServers"' in shown.stdout
    assert target.read_bytes() == before  # --print writes nothing

    written = _run_cli("--workspace", str(ws), "connect", "claude-desktop", "--write", home=home)
    assert written.returncode == 0, written.stderr
    entry = json.loads(target.read_text())["mcpServers"]["ctxos"]
    assert entry["command"] == os.path.abspath(CTXOS)  # the real ctxos that ran
    assert entry["args"] == ["--workspace", str(ws.resolve()), "mcp"]
    assert len(_backups(target)) == 1

    refused = _run_cli("--workspace", str(ws), "connect", "claude-desktop", "--transport", "http", home=home)
    assert refused.returncode == 2 and "stdio" in refused.stderr


# ---------------------------------------------------------------- against a live daemon

LIVE_TARGETS = [  # tool, scope, file name, where the servers are
    ("claude-code", "user", "claude.json", "mcpServers"),
    ("claude-code", "project", ".mcp.json", "mcpServers"),
    ("cursor", "user", "mcp.json", "mcpServers"),
    ("cursor", "project", "mcp.json", "mcpServers"),
    ("vscode", "user", "mcp.json", "servers"),
    ("vscode", "project", "mcp.json", "servers"),
    ("windsurf", "user", "mcp_config.json", "mcpServers"),
    ("codex", "user", "config.toml", "mcp_servers"),
    ("codex", "project", "config.toml", "mcp_servers"),
]


def _expand(value: str, env: dict[str, str]) -> str:
    """What the tool does to an environment reference: ``${VAR}`` (Claude Code), ``${env:VAR}`` (Cursor, VS Code)."""
    import re

    return re.sub(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env[m.group(1)], value)


def _client_settings(entry: dict, env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The URL and headers a tool sends, read from the entry it was given (as that tool reads it)."""
    url = entry.get("url") or entry.get("serverUrl")
    headers = {key: _expand(value, env) for key, value in (entry.get("headers") or {}).items()}
    if "bearer_token_env_var" in entry:  # Codex
        headers["Authorization"] = f"Bearer {env[entry['bearer_token_env_var']]}"
    return url, headers


@pytest.mark.slow
@pytest.mark.anyio
async def test_each_http_target_works_against_a_live_daemon(make_workspace, daemon_factory, tmp_path):  # noqa: F811
    """`ctxos connect TOOL --transport http --write` against a running default daemon: the written entry
    (headers, or the environment reference the tool expands) opens an MCP session with the SDK client."""
    from ctxos.services.credentials import read_token
    from mcp_helpers import TOOLS, mcp_http_client

    root = make_workspace({})
    daemon = daemon_factory(root, http=True)
    token = read_token()
    env = {"CTXOS_HTTP_TOKEN": token}
    home = tmp_path / "home"
    for tool, scope, name, container in LIVE_TARGETS:
        target = tmp_path / "configs" / f"{tool}-{scope}" / name
        written = _run_cli(
            "--workspace",
            str(root),
            "connect",
            tool,
            "--transport",
            "http",
            "--scope",
            scope,
            "--write",
            "--config",
            str(target),
            home=home,
        )
        assert written.returncode == 0, (tool, scope, written.stderr)
        entry = _load(target)[container]["ctxos"]
        url, headers = _client_settings(entry, env)
        assert url == daemon.http_url + "/mcp", (tool, entry)
        mode = stat.S_IMODE(target.stat().st_mode)
        if scope == "user" and tool != "codex":  # the token itself: owner-only
            assert headers == {"Authorization": f"Bearer {token}"} and mode == 0o600, (tool, mode)
        else:  # committed or shared files: no token
            assert token not in target.read_text() and "CTXOS_HTTP_TOKEN" in target.read_text()
            assert "CTXOS_HTTP_TOKEN" in written.stdout  # the note says what to export
        async with mcp_http_client(url, headers=headers) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS, tool
            result = await client.call_tool("get_context", {"query": "anything", "budget_tokens": 100})
            assert not result.is_error, (tool, result.content)
    # Without what the entries hold, the daemon refuses: the credential is what made them work.
    assert http("POST", daemon.http_url + "/mcp", raw=b"{}", auth=False).status == 401
