"""``ctxos mcp`` (MCP over stdio) and ``ctxos connect TOOL`` (client configuration).

``ctxos mcp`` is what AI tools spawn. It serves the *daemon's* engine state
through the Unix socket (starting the daemon when none runs), so an agent
talking stdio and one talking HTTP see the same memories, the same index and
the same write lock. stdout is the MCP wire while it runs: everything else,
logs included, goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from ctxos.client.cli import CliError, require_workspace, resolve_workspace
from ctxos.client.connect import DEFAULT_SERVER_NAME, TOOLS, ConnectError, plan_connect, write_plan


def register(subparsers: argparse._SubParsersAction) -> None:
    mcp = subparsers.add_parser(
        "mcp",
        help="run the MCP server over stdio (what AI tools start)",
        description="MCP over stdio for tools that spawn a subprocess. Serves the daemon's engine "
        "state over its Unix socket and starts the daemon if it is not running. "
        "stdout carries MCP messages; logs go to stderr.",
    )
    mcp.add_argument("--no-start", action="store_true", help="fail instead of starting the daemon when none is running")
    mcp.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="stderr log level (default WARNING)",
    )
    mcp.set_defaults(func=run_mcp)

    connect = subparsers.add_parser(
        "connect",
        help="show or write the MCP config entry for an AI tool",
        description="Print (default) or merge into the tool's config file the entry that makes "
        "TOOL start or reach ctxos. Writing keeps every other server, makes a "
        "timestamped .bak backup first and writes atomically.",
    )
    connect.add_argument("tool", choices=TOOLS, help="the AI tool to configure")
    action = connect.add_mutually_exclusive_group()
    action.add_argument(
        "--print",
        dest="write",
        action="store_false",
        default=False,
        help="print the entry and the target file (default)",
    )
    action.add_argument(
        "--write", dest="write", action="store_true", help="merge the entry into the tool's config file"
    )
    connect.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="stdio: the tool starts `ctxos mcp` (default); http: the daemon's /mcp URL",
    )
    connect.add_argument(
        "--scope",
        choices=["user", "project"],
        default="user",
        help="user config (default) or the current project's file "
        "(claude-code .mcp.json, cursor .cursor/mcp.json, vscode .vscode/mcp.json, "
        "codex .codex/config.toml)",
    )
    connect.add_argument("--name", default=DEFAULT_SERVER_NAME, help=f"server name (default {DEFAULT_SERVER_NAME})")
    connect.add_argument("--config", dest="config_file", help="write this config file instead of the tool's default")
    connect.set_defaults(func=run_connect)


# ---------------------------------------------------------------- connect


def run_connect(args: argparse.Namespace) -> int:
    from ctxos.services.config import load_config

    root = require_workspace(resolve_workspace(args.workspace))
    config = load_config(root)
    host, port, address_note = config.settings.daemon.http_host, None, None
    path = ""
    token, token_hint = None, None
    if args.transport == "http":
        host, port, path, address_note = http_address(root, config)
        # The per-user daemon's HTTP settings (and credential) are its default workspace's.
        token, token_hint = http_credential(serving_config(root, config))
    try:
        plan = plan_connect(
            args.tool,
            transport=args.transport,
            scope=args.scope,
            name=args.name,
            workspace=root,
            http_host=host,
            http_path=path,
            http_port=port if port is not None else config.settings.daemon.http_port,
            token=token,
            token_hint=token_hint,
            config_file=Path(args.config_file).expanduser().absolute() if args.config_file else None,
        )
    except ConnectError as exc:
        raise CliError(str(exc)) from exc
    if address_note:
        plan.notes.insert(0, address_note)

    if not args.write:
        print(f"# {args.tool} ({args.transport}, {args.scope} scope): merge into {plan.path}")
        print(plan.snippet, end="")
        if plan.cli_command:
            print(f"\n# or let the tool write it:\n{shlex.join(plan.cli_command)}")
        for note in plan.notes:
            print(f"# {note}")
        print(
            f"# write it with: ctxos connect {args.tool} --write"
            + (f" --transport {args.transport}" if args.transport != "stdio" else "")
            + (f" --scope {args.scope}" if args.scope != "user" else "")
        )
        return 0
    try:
        result = write_plan(plan)
    except ConnectError as exc:
        raise CliError(str(exc)) from exc
    except OSError as exc:
        raise CliError(f"cannot write {plan.path}: {exc}") from exc
    if not result.changed:
        print(f"{args.tool}: {plan.path} already has this '{plan.name}' entry; nothing changed")
    else:
        how = "created" if result.created else f"updated (backup: {result.backup})"
        print(f"{args.tool}: {plan.path} {how}")
        print(json.dumps({plan.name: plan.entry}, indent=2) if plan.fmt == "json" else plan.snippet.rstrip())
    for note in plan.notes:
        print(f"note: {note}")
    print(f"Restart {args.tool} (or reload its MCP servers) to pick it up.")
    return 0


def http_credential(config: Any) -> tuple[str | None, str | None]:
    """The credential an HTTP entry must carry, and where a person finds it (see services/credentials.py).

    A config that cannot be read is refused: it cannot say whether the daemon
    wants an explicit token, the stored one or none.
    """
    from ctxos.services.credentials import CredentialError, resolve_http_auth

    if not config.usable:
        raise CliError(
            f"{config.error}; fix it first: connect cannot tell which credential the daemon wants (nothing was written)"
        )
    try:
        auth = resolve_http_auth(config)
    except (CredentialError, OSError) as exc:
        raise CliError(f"cannot read or create the HTTP token: {exc}") from exc
    return auth.token, (str(auth.path) if auth.path else None)


def serving_config(root: Path, config: Any) -> Any:
    """The config whose HTTP settings serve ``root``: the per-user daemon's default workspace's,
    when ``root`` is another registered workspace; else its own."""
    from ctxos.services.config import load_config
    from ctxos.services.workspace_registry import RegistryError, load_registry

    try:
        registry = load_registry()
    except RegistryError:
        return config
    default = registry.default_name()
    if default is None or registry.name_for(root) in (None, default):
        return config
    serving = load_config(registry.workspaces[default])
    return serving if serving.usable else config


def http_address(root: Path, config: Any) -> tuple[str, int, str, str | None]:
    """The HTTP address to write for ``root``: ``(host, port, path prefix, note)``.

    Never a guess: a running daemon is asked (``status``) and its address is used
    as is, ``/w/<name>`` included for a workspace of the per-user daemon that is
    not its default; one that serves no HTTP (its port was taken, say by another
    daemon) is refused, since the configured port would reach the wrong daemon.
    With no daemon running, the port the per-user daemon would use (its default
    workspace's ``daemon.http_port``) and this workspace's ``/w/<name>`` prefix,
    and the note says so.
    """
    from urllib.parse import urlsplit

    from ctxos.client.commands.daemon_cmds import query_status
    from ctxos.services.workspace_registry import RegistryError, load_registry

    status = query_status(root)
    if status is not None:
        url = status.get("http")
        if not url:
            state = str((status.get("components") or {}).get("http", "off"))
            raise CliError(
                f"the daemon for {root} serves no HTTP ({state}); nothing was written. Fix that "
                f"(daemon.http_port, or stop what holds the port) and restart it, or use "
                f"--transport stdio"
            )
        parts = urlsplit(url)
        return (
            parts.hostname or "127.0.0.1",
            int(parts.port or 80),
            parts.path.rstrip("/"),
            f"address from the running daemon: {url}",
        )
    serving = serving_config(root, config)
    port = int(serving.get("daemon.http_port", 3847))
    host = str(serving.get("daemon.http_host", "127.0.0.1"))
    path = ""
    if serving is not config:
        try:
            path = f"/w/{load_registry().name_for(root)}"
        except RegistryError:
            path = ""
    return (
        host,
        port,
        path,
        (
            f"no daemon is running for {root}: wrote the configured port {port} "
            f"(daemon.http_port{' of the default workspace' if path else ''}); start it "
            f"with `ctxos start` and check `ctxos status`"
        ),
    )


# ---------------------------------------------------------------- mcp (stdio)


def run_mcp(args: argparse.Namespace) -> int:
    """Serve MCP over stdio: this process becomes ``python -m ctxos.daemon.mcp_stdio`` (same stdin/stdout).

    The MCP surface is the daemon's (``daemon/mcp_server.py``); the CLI only resolves the
    workspace and hands over, so the thin client never imports the daemon.
    """
    root = require_workspace(resolve_workspace(args.workspace))
    command = [sys.executable, "-m", "ctxos.daemon.mcp_stdio", "--workspace", str(root), "--log-level", args.log_level]
    if args.no_start:
        command.append("--no-start")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)
    return 0  # pragma: no cover - execv does not return
