"""``ctxos connect``: each tool's entry shape, merged into real sample configs.

The samples under ``tests/fixtures/connect/`` follow each tool's documented
format and hold other servers and settings, which must survive byte-for-byte
in meaning (parsed equality), with a backup of the original beside them.
"""
from __future__ import annotations

import json
import os
import shutil
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
    ("claude-desktop", "stdio", "user", "claude_desktop_config.json", "mcpServers",
     {"command": "CMD", "args": ["--workspace", "WS", "mcp"]}),
    ("claude-code", "stdio", "user", "claude.json", "mcpServers",
     {"command": "CMD", "args": ["--workspace", "WS", "mcp"]}),
    ("claude-code", "http", "project", "project_mcp.json", "mcpServers",
     {"type": "http", "url": "http://127.0.0.1:3999/mcp"}),
    ("cursor", "stdio", "user", "cursor_mcp.json", "mcpServers",
     {"command": "CMD", "args": ["--workspace", "WS", "mcp"]}),
    ("cursor", "http", "project", "cursor_mcp.json", "mcpServers",
     {"url": "http://127.0.0.1:3999/mcp"}),
    ("windsurf", "stdio", "user", "windsurf_mcp_config.json", "mcpServers",
     {"command": "CMD", "args": ["--workspace", "WS", "mcp"]}),
    ("windsurf", "http", "user", "windsurf_mcp_config.json", "mcpServers",
     {"serverUrl": "http://127.0.0.1:3999/mcp"}),
    ("vscode", "stdio", "project", "vscode_mcp.json", "servers",
     {"type": "stdio", "command": "CMD", "args": ["--workspace", "WS", "mcp"]}),
    ("vscode", "http", "user", "vscode_mcp.json", "servers",
     {"type": "http", "url": "http://127.0.0.1:3999/mcp"}),
    ("codex", "stdio", "user", "codex_config.toml", "mcp_servers",
     {"command": "CMD", "args": ["--workspace", "WS", "mcp"]}),
    ("codex", "http", "user", "codex_config.toml", "mcp_servers",
     {"url": "http://127.0.0.1:3999/mcp"}),
]


def _subst(value, ws: str, cmd: str):
    if isinstance(value, dict):
        return {k: _subst(v, ws, cmd) for k, v in value.items()}
    if isinstance(value, list):
        return [_subst(v, ws, cmd) for v in value]
    return {"WS": ws, "CMD": cmd}.get(value, value)


@pytest.mark.parametrize("tool,transport,scope,fixture,container,expected", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_merge_into_real_sample_keeps_everything_else(tmp_path, tool, transport, scope, fixture, container, expected):
    home, project, ws = tmp_path / "home", tmp_path / "project", tmp_path / "ws"
    ws.mkdir()
    target = config_path(tool, scope, home=home, project=project, platform="linux", env={})
    _copy(fixture, target)
    original_bytes = target.read_bytes()
    original = _load(target)

    plan = plan_connect(tool, transport=transport, scope=scope, workspace=ws, http_port=3999,
                        home=home, project=project, platform="linux", env={})
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


def test_toml_replaces_our_tables_and_keeps_comments(tmp_path):
    text = (FIXTURES / "codex_config_existing_ctxos.toml").read_text()
    entry = {"command": "/new/ctxos", "args": ["mcp"]}
    merged = merge_toml(text, "mcp_servers", "ctxos", entry, path=tmp_path / "c.toml")
    data = tomllib.loads(merged)
    assert data["mcp_servers"]["ctxos"] == entry          # old env subtable gone with it
    assert data["mcp_servers"]["linear"] == {"url": "https://mcp.linear.app/mcp"}
    assert "# Remote tracker: keep this comment with its table" in merged
    assert "/old/path/ctxos" not in merged


def test_toml_inline_definition_is_refused(tmp_path):
    text = (FIXTURES / "codex_config_inline.toml").read_text()
    with pytest.raises(ConnectError, match="by hand"):
        merge_toml(text, "mcp_servers", "ctxos", {"command": "x"}, path=tmp_path / "c.toml")


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
    assert target.read_bytes() == before                       # --print writes nothing

    written = _run_cli("--workspace", str(ws), "connect", "claude-desktop", "--write", home=home)
    assert written.returncode == 0, written.stderr
    entry = json.loads(target.read_text())["mcpServers"]["ctxos"]
    assert entry["command"] == os.path.abspath(CTXOS)          # the real ctxos that ran
    assert entry["args"] == ["--workspace", str(ws.resolve()), "mcp"]
    assert len(_backups(target)) == 1

    refused = _run_cli("--workspace", str(ws), "connect", "claude-desktop", "--transport", "http", home=home)
    assert refused.returncode == 2 and "stdio" in refused.stderr
