"""Client setup for MCP: the config entry each AI tool expects, and a safe merge.

``ctxos connect TOOL`` calls into this module. It knows, per tool, where the
config file lives, which key holds the servers and what one server entry looks
like for stdio or HTTP. Writing is careful because these files belong to the
user and usually hold other servers: the file is parsed first (a file we cannot
parse is never overwritten), only our one entry is added or replaced, a
timestamped backup is made, and the new text is written atomically. For
Codex's TOML, tomlkit keeps the user's text (comments, order, layout) and only our
table is replaced; the result is re-parsed and checked before anything is written.

HTTP entries carry the daemon's credential in the form each tool reads
(sources in docs/mcp.md#connect-and-the-credential):
- user scope (a file in the home folder): the literal
  ``Authorization: Bearer <token>`` header (Claude Code, Cursor, VS Code,
  Windsurf), and the file is written owner-only (0600);
- project scope (a file in the project, often committed): never the token,
  but the tool's environment-variable reference to ``CTXOS_HTTP_TOKEN``;
- Codex, either scope: ``bearer_token_env_var`` (Codex refuses an inline
  bearer token in config.toml), so the token stays in the environment.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import tomlkit
from ctxos.services.atomic import atomic_write_text
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Comment, InlineTable, Item, Table, Whitespace

TOOLS: tuple[str, ...] = ("claude-code", "claude-desktop", "cursor", "windsurf", "vscode", "codex")
DEFAULT_SERVER_NAME = "ctxos"
TOKEN_ENV_VAR = "CTXOS_HTTP_TOKEN"
# How each tool's project-scope file refers to an environment variable in a header value.
ENV_REFERENCE: dict[str, str] = {
    "claude-code": "${%s}",  # Claude Code: ${VAR} expansion in .mcp.json
    "cursor": "${env:%s}",  # Cursor: ${env:NAME} config interpolation
    "vscode": "${env:%s}",  # VS Code: ${env:NAME} predefined variable
}
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ConnectError(Exception):
    """A user-facing problem with a connect request or an existing config file."""


@dataclass(frozen=True)
class ToolSpec:
    """What one AI tool needs: supported transports and scopes, and its config format."""

    tool: str
    transports: tuple[str, ...]
    scopes: tuple[str, ...]
    fmt: Literal["json", "toml"]
    container: str  # key that holds the servers: mcpServers | servers | mcp_servers


SPECS: dict[str, ToolSpec] = {
    "claude-code": ToolSpec("claude-code", ("stdio", "http"), ("user", "project"), "json", "mcpServers"),
    # Claude Desktop's JSON file only launches local (stdio) servers.
    "claude-desktop": ToolSpec("claude-desktop", ("stdio",), ("user",), "json", "mcpServers"),
    "cursor": ToolSpec("cursor", ("stdio", "http"), ("user", "project"), "json", "mcpServers"),
    "windsurf": ToolSpec("windsurf", ("stdio", "http"), ("user",), "json", "mcpServers"),
    "vscode": ToolSpec("vscode", ("stdio", "http"), ("user", "project"), "json", "servers"),
    "codex": ToolSpec("codex", ("stdio", "http"), ("user", "project"), "toml", "mcp_servers"),
}


@dataclass
class ConnectPlan:
    """Everything needed to show or write one tool's entry."""

    tool: str
    transport: str
    scope: str
    name: str
    path: Path
    fmt: str
    container: str
    entry: dict[str, Any]
    snippet: str  # the minimal config a person could paste
    notes: list[str] = field(default_factory=list)
    cli_command: list[str] | None = None  # e.g. `claude mcp add ...`, when the tool has one
    secret: bool = False  # the entry carries a token: write the file owner-only


@dataclass
class WriteResult:
    path: Path
    changed: bool
    backup: Path | None
    created: bool


# ---------------------------------------------------------------- executable


def ctxos_command() -> list[str]:
    """The absolute command that starts the *real* ``ctxos`` (argv prefix).

    Prefer the executable that is running now (``sys.argv[0]`` when it is the
    ``ctxos`` script), then ``ctxos`` on PATH, then the script beside this
    interpreter, then this interpreter with ``-m ctxos.client.cli``. The path is made absolute but symlinks are kept:
    a package manager's stable link (``/usr/local/bin/ctxos``, pipx's
    ``~/.local/bin/ctxos``) survives upgrades, its versioned target does not.
    """
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 and Path(argv0).name == "ctxos":
        candidate = Path(argv0)
        if not candidate.is_absolute():
            found = shutil.which(argv0) if os.sep not in argv0 else None
            candidate = Path(found) if found else candidate
        candidate = Path(os.path.abspath(candidate))
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return [str(candidate)]
    found = shutil.which("ctxos")
    if found:
        return [os.path.abspath(found)]
    # The script installed beside this interpreter (a venv's bin/ that is not on PATH).
    sibling = Path(os.path.abspath(sys.executable)).with_name("ctxos.exe" if os.name == "nt" else "ctxos")
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return [str(sibling)]
    return [os.path.abspath(sys.executable), "-m", "ctxos.client.cli"]


# ---------------------------------------------------------------- locations


def config_path(
    tool: str,
    scope: str,
    *,
    home: Path | None = None,
    project: Path | None = None,
    platform: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Path:
    """Where ``tool`` keeps its MCP servers for ``scope`` on this platform."""
    home = Path(home) if home else Path.home()
    project = Path(project) if project else Path.cwd()
    platform = platform or sys.platform
    env = os.environ if env is None else env
    if tool == "claude-code":
        # user scope: top-level "mcpServers" of ~/.claude.json; project scope: .mcp.json
        return project / ".mcp.json" if scope == "project" else home / ".claude.json"
    # Other applications' files, by each one's own rule (Electron apps read XDG_CONFIG_HOME on Linux only),
    # so not services/user_dirs.py, which names ctxos's own folders and honours XDG on macOS too.
    if tool == "claude-desktop":
        if platform == "darwin":
            return home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
        if platform.startswith("win"):
            return Path(env.get("APPDATA", home / "AppData" / "Roaming")) / "Claude" / "claude_desktop_config.json"
        return Path(env.get("XDG_CONFIG_HOME", home / ".config")) / "Claude" / "claude_desktop_config.json"
    if tool == "cursor":
        return (project if scope == "project" else home) / ".cursor" / "mcp.json"
    if tool == "windsurf":
        return home / ".codeium" / "windsurf" / "mcp_config.json"
    if tool == "vscode":
        if scope == "project":
            return project / ".vscode" / "mcp.json"
        if platform == "darwin":
            return home / "Library" / "Application Support" / "Code" / "User" / "mcp.json"
        if platform.startswith("win"):
            return Path(env.get("APPDATA", home / "AppData" / "Roaming")) / "Code" / "User" / "mcp.json"
        return Path(env.get("XDG_CONFIG_HOME", home / ".config")) / "Code" / "User" / "mcp.json"
    if tool == "codex":
        if scope == "project":
            return project / ".codex" / "config.toml"
        codex_home = env.get("CODEX_HOME")
        return Path(codex_home) / "config.toml" if codex_home else home / ".codex" / "config.toml"
    raise ConnectError(f"unknown tool {tool!r}; choose one of: {', '.join(TOOLS)}")


# ---------------------------------------------------------------- entries


def inline_token(tool: str, scope: str) -> bool:
    """True when the entry holds the token itself (user-scope JSON), not a reference to the environment."""
    return tool != "codex" and scope == "user"


def server_entry(
    tool: str, transport: str, *, command: list[str], workspace: Path, url: str, token: str | None, scope: str = "user"
) -> dict[str, Any]:
    """One server entry in the exact shape ``tool`` reads."""
    if transport == "stdio":
        args = [*command[1:], "--workspace", str(workspace), "mcp"]
        if tool == "vscode":
            return {"type": "stdio", "command": command[0], "args": args}
        return {"command": command[0], "args": args}
    headers = None
    if token and inline_token(tool, scope):
        headers = {"Authorization": f"Bearer {token}"}
    elif token and tool in ENV_REFERENCE:
        headers = {"Authorization": "Bearer " + ENV_REFERENCE[tool] % TOKEN_ENV_VAR}
    if tool == "claude-code":
        entry: dict[str, Any] = {"type": "http", "url": url}
    elif tool == "vscode":
        entry = {"type": "http", "url": url}
    elif tool == "windsurf":
        entry = {"serverUrl": url}
    elif tool == "cursor":
        entry = {"url": url}
    elif tool == "codex":
        # Codex refuses inline tokens: it reads the bearer token from an env variable.
        entry = {"url": url}
        if token:
            entry["bearer_token_env_var"] = TOKEN_ENV_VAR
        return entry
    else:
        raise ConnectError(f"{tool} does not take HTTP servers in its config file; use --transport stdio")
    if headers:
        entry["headers"] = headers
    return entry


def plan_connect(
    tool: str,
    *,
    transport: str = "stdio",
    scope: str = "user",
    name: str = DEFAULT_SERVER_NAME,
    workspace: Path,
    http_host: str = "127.0.0.1",
    http_port: int = 3847,
    http_path: str = "",
    token: str | None = None,
    token_hint: str | None = None,
    config_file: Path | None = None,
    command: list[str] | None = None,
    home: Path | None = None,
    project: Path | None = None,
    platform: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ConnectPlan:
    """Validate a connect request and build the entry, snippet and target path.

    ``token`` is the daemon's credential (None: ``daemon.http_auth: none``);
    ``token_hint`` says where a person finds it, for the export line of
    entries that read it from the environment.
    """
    spec = SPECS.get(tool)
    if spec is None:
        raise ConnectError(f"unknown tool {tool!r}; choose one of: {', '.join(TOOLS)}")
    if transport not in spec.transports:
        raise ConnectError(
            f"{tool} only runs local (stdio) servers from its config file; use --transport stdio"
            if transport == "http"
            else f"{tool} does not support transport {transport!r}"
        )
    if scope not in spec.scopes:
        raise ConnectError(f"{tool} has no {scope} scope; choose one of: {', '.join(spec.scopes)}")
    if not _NAME_RE.match(name):
        raise ConnectError(f"server name {name!r} must be 1-64 letters, digits, '-' or '_'")
    command = command or ctxos_command()
    host = f"[{http_host}]" if ":" in http_host else http_host
    url = f"http://{host}:{int(http_port)}{http_path}/mcp"  # http_path: /w/<name> (per-user daemon)
    entry = server_entry(tool, transport, command=command, workspace=Path(workspace), url=url, token=token, scope=scope)
    path = (
        Path(config_file)
        if config_file
        else config_path(tool, scope, home=home, project=project, platform=platform, env=env)
    )
    plan = ConnectPlan(
        tool=tool,
        transport=transport,
        scope=scope,
        name=name,
        path=path,
        fmt=spec.fmt,
        container=spec.container,
        entry=entry,
        snippet="",
        secret=bool(token) and transport == "http" and inline_token(tool, scope),
    )
    plan.snippet = (
        render_toml_table(spec.container, name, entry)
        if spec.fmt == "toml"
        else json.dumps({spec.container: {name: entry}}, indent=2) + "\n"
    )
    if tool == "claude-code":
        cli_scope = ["--scope", "project"] if scope == "project" else ["--scope", "user"]
        if transport == "stdio":
            plan.cli_command = ["claude", "mcp", "add", *cli_scope, name, "--", entry["command"], *entry["args"]]
        else:
            extra = ["--header", f"Authorization: {entry['headers']['Authorization']}"] if token else []
            plan.cli_command = ["claude", "mcp", "add", "--transport", "http", *cli_scope, *extra, name, url]
    if tool == "claude-code" and scope == "user" and not config_file:
        plan.notes.append(
            "Claude Code rewrites ~/.claude.json while it runs: quit it before --write, "
            "or run the `claude mcp add` line instead."
        )
    if transport == "http":
        plan.notes.append(f"HTTP needs the daemon running (ctxos daemon, or the installed service) on {url}.")
        if token and not inline_token(tool, scope):
            value = f'"$(cat {token_hint})"' if token_hint else "<daemon.http_token>"
            plan.notes.append(
                f"The token stays out of this file: set it in the environment {tool} starts in, "
                f"e.g. export {TOKEN_ENV_VAR}={value}"
            )
        elif token:
            plan.notes.append("The entry holds the daemon's bearer token; the file is written owner-only (0600).")
        else:
            plan.notes.append("No credential: the daemon runs with daemon.http_auth: none.")
    else:
        plan.notes.append("stdio: the tool starts `ctxos mcp`, which starts the daemon when it is not running.")
    return plan


# ---------------------------------------------------------------- JSON


def merge_json(text: str | None, container: str, name: str, entry: dict[str, Any], *, path: Path) -> str:
    """Return ``text`` with ``container[name] = entry``; every other key kept as it was."""
    if text is None or not text.strip():
        data: dict[str, Any] = {}
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConnectError(
                f"{path} is not plain JSON ({exc.msg} at line {exc.lineno}); it may contain comments. "
                f"Nothing was changed: add the entry by hand (ctxos connect ... --print shows it)"
            ) from exc
        if not isinstance(data, dict):
            raise ConnectError(f"{path}: the top level is not a JSON object; nothing was changed")
    servers = data.get(container)
    if servers is None:
        servers = {}
    if not isinstance(servers, dict):
        raise ConnectError(f"{path}: {container!r} is not an object; nothing was changed")
    servers[name] = entry
    data[container] = servers
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------- TOML


def _toml_value(value: Any) -> Any:
    """Mappings inside an entry (env, headers) become inline tables: one flat table per server."""
    if isinstance(value, Mapping):
        inline = tomlkit.inline_table()
        inline.update({k: _toml_value(v) for k, v in value.items()})
        return inline
    return value


def _take_trailing_trivia(table: Table) -> list[Comment | Whitespace]:
    """Remove and return the comments and blank lines that end ``table`` (or its last sub-table).

    In TOML text a comment above a header belongs to the next table, but tomlkit keeps it at the
    end of the table before: taken off before our table is replaced, put back after it.
    """
    body = table.value.body
    while True:
        last = next((item for key, item in reversed(body) if not _is_trivia(key, item)), None)
        if not isinstance(last, Table):
            break
        body = last.value.body
    taken: list[Comment | Whitespace] = []
    while body:
        key, item = body[-1]
        if key is not None or not isinstance(item, (Comment, Whitespace)):
            break
        taken.append(item)
        body.pop()
    return taken[::-1]


def _is_trivia(key: object, item: Item) -> bool:
    return key is None and isinstance(item, (Comment, Whitespace))


def merge_toml(text: str | None, container: str, name: str, entry: dict[str, Any], *, path: Path) -> str:
    """Set ``[container.name]`` in a TOML document (tomlkit), keeping every other line as it was.

    Comments, order and layout elsewhere stay; the old table and its sub-tables are replaced
    by one table (an inline definition ``name = { ... }`` stays inline). The result is parsed
    again and must hold exactly the old document plus the new entry.
    """
    text = text or ""
    try:
        doc = tomlkit.parse(text)
        before = tomllib.loads(text)
    except (TOMLKitError, tomllib.TOMLDecodeError) as exc:
        raise ConnectError(f"{path} is not valid TOML ({exc}); nothing was changed") from exc
    servers = doc.get(container)
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        doc[container] = servers
    elif not isinstance(servers, (Table, InlineTable)):
        raise ConnectError(f"{path}: {container!r} is not a table; nothing was changed")
    old = servers.get(name)
    if isinstance(old, InlineTable):
        servers[name] = _toml_value(entry)
    else:
        trivia = _take_trailing_trivia(old) if isinstance(old, Table) else []
        table = tomlkit.table()
        for key, value in entry.items():
            table[key] = _toml_value(value)
        for item in trivia or [tomlkit.nl()]:
            table.add(item)
        servers[name] = table
    new_text = tomlkit.dumps(doc).rstrip("\n") + "\n"

    after = tomllib.loads(new_text)
    expected = dict(before)
    expected[container] = {**before.get(container, {}), name: entry}
    if after != expected:
        raise ConnectError(
            f"{path}: could not merge the entry safely (the file layout is unusual); "
            f"nothing was changed: add it by hand (--print shows it)"
        )
    return new_text


def render_toml_table(container: str, name: str, entry: dict[str, Any]) -> str:
    """The ``[container.name]`` table alone, as ``--print`` shows it."""
    return merge_toml("", container, name, entry, path=Path("config.toml"))


# ---------------------------------------------------------------- write


def backup_path(path: Path, now: datetime | None = None) -> Path:
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.{stamp}.bak")
    counter = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.{stamp}-{counter}.bak")
        counter += 1
    return candidate


def merged_text(plan: ConnectPlan, existing: str | None) -> str:
    if plan.fmt == "toml":
        return merge_toml(existing, plan.container, plan.name, plan.entry, path=plan.path)
    return merge_json(existing, plan.container, plan.name, plan.entry, path=plan.path)


def write_plan(plan: ConnectPlan) -> WriteResult:
    """Merge the plan's entry into its config file: parse, back up, write atomically.

    An identical entry already in place is left alone (no backup, no write).
    """
    path = plan.path
    existing: str | None = None
    if path.exists():
        if not path.is_file():
            raise ConnectError(f"{path} exists and is not a file; nothing was changed")
        try:
            existing = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConnectError(f"cannot read {path}: {exc}; nothing was changed") from exc
    new_text = merged_text(plan, existing)
    if existing is not None and _same_entry(plan, existing):
        return WriteResult(path=path, changed=False, backup=None, created=False)
    backup = None
    if existing is not None:
        backup = backup_path(path)
        shutil.copy2(path, backup)
    mode = 0o600 if plan.secret else None
    if existing is None and mode is None:
        mode = 0o644
    atomic_write_text(path, new_text, mode=mode)
    return WriteResult(path=path, changed=True, backup=backup, created=existing is None)


def _same_entry(plan: ConnectPlan, existing: str) -> bool:
    try:
        data = tomllib.loads(existing) if plan.fmt == "toml" else json.loads(existing)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError):
        return False
    servers = data.get(plan.container) if isinstance(data, dict) else None
    return isinstance(servers, dict) and servers.get(plan.name) == plan.entry
