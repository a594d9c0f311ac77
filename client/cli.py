"""The ``ctxos`` command line: global options, then one subcommand per module.

Each module in ``client/commands`` registers its own subcommands so that the
CLI grows by adding a module to ``COMMAND_MODULES``, not by editing one big file.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
from pathlib import Path
from typing import Any

DEFAULT_WORKSPACE = Path("~/AI-Context-OS")
INVALID_PARAMS_CODE = -32602  # JSON-RPC "invalid params": the caller's arguments were wrong

COMMAND_MODULES: list[str] = [
    "ctxos.client.commands.workspace_cmds",
    "ctxos.client.commands.query_cmds",
    "ctxos.client.commands.service_cmds",
    "ctxos.client.commands.mcp_cmds",
    "ctxos.client.commands.daemon_cmds",
    "ctxos.client.commands.governance_cmds",
    "ctxos.client.commands.inbox_cmds",
    "ctxos.client.commands.history_cmds",
    "ctxos.client.commands.import_cmds",
    "ctxos.client.commands.web_cmds",
]


class CliError(Exception):
    """A user-facing error: printed without a traceback, exit code 2 unless given."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def resolve_workspace(value: str | None) -> Path:
    """``--workspace``, else ``CTXOS_WORKSPACE``, else the registry's default, else ``~/AI-Context-OS``.

    A value without a ``/`` that names a registered workspace (``ctxos workspace
    list``) is that workspace's folder; anything else is a path. The result is
    absolute, symlinks resolved.
    """
    from ctxos.services.workspace_registry import RegistryError, load_registry, lookup

    raw = value or os.environ.get("CTXOS_WORKSPACE")
    if raw and "/" not in raw and not raw.startswith("~"):
        registered = lookup(raw)
        if registered is not None:
            return registered
    if not raw:
        try:
            registry = load_registry()
        except RegistryError:
            registry = None
        default = registry.default_name() if registry else None
        if registry is not None and default is not None:
            return registry.workspaces[default]
        raw = str(DEFAULT_WORKSPACE)
    return Path(raw).expanduser().resolve()


def require_workspace(root: Path) -> Path:
    """Fail with a clear message when ``root`` is not an initialised workspace."""
    if not root.is_dir():
        raise CliError(f"workspace {root} does not exist; create it with: ctxos init {root}")
    return root


def call_backend(
    args: argparse.Namespace,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    writes: bool = False,
    follow_progress: bool = False,
) -> Any:
    """Run one RPC method on the workspace's daemon, or in-process when none runs.

    Reads fall back to an in-process engine (noted on stderr unless ``--json``);
    writes without a daemon run in-process holding the workspace lock, so no
    daemon can start underneath them. Bad parameters exit with code 2 (like bad
    arguments), any other refusal with code 1.

    Long work shows progress on stderr (not with ``--json``): an in-process
    cold build always; with a daemon, ``follow_progress`` polls its status
    while the call runs (``reindex``).
    """
    from ctxos.client import DaemonClient, DaemonError, RpcCallError
    from ctxos.client.backend import open_backend
    from ctxos.client.progress import ProgressDisplay, follow_daemon

    root = require_workspace(resolve_workspace(args.workspace))
    quiet = bool(getattr(args, "json", False))
    display = None if quiet else ProgressDisplay()
    try:
        backend = open_backend(
            root,
            read_only=not writes,
            in_process_writes=writes,
            quiet=quiet,
            on_progress=display.update if display is not None else None,
        )
    except DaemonError as exc:
        raise CliError(str(exc)) from None
    finally:
        if display is not None:
            display.close()
    try:
        full = {**(params or {}), "_client": cli_client()}
        if follow_progress and display is not None and backend.kind == "daemon":
            with DaemonClient.for_workspace(root) as watcher, follow_daemon(lambda: watcher.call("status"), display):
                return backend.call(method, full)
        return backend.call(method, full)
    except RpcCallError as exc:
        raise CliError(exc.message, exit_code=2 if exc.code == INVALID_PARAMS_CODE else 1) from None
    finally:
        if display is not None:
            display.close()
        backend.close()


WORKSPACE_HELP = (
    "workspace folder or registered name (default: $CTXOS_WORKSPACE, else the registry's default, else ~/AI-Context-OS)"
)


def _workspace_option() -> argparse.ArgumentParser:
    """``--workspace`` for every subcommand, so it works before or after the command's name.

    Its default is SUPPRESS, so a subcommand without the flag keeps the value given before it.
    """
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--workspace", "-w", default=argparse.SUPPRESS, help=WORKSPACE_HELP)
    return common


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose subcommands (at any depth) all take ``--workspace``."""

    def add_subparsers(self, **kwargs: Any) -> Any:
        action = super().add_subparsers(**kwargs)
        add_parser = action.add_parser

        def add_parser_with_workspace(name: str, **parser_kwargs: Any) -> argparse.ArgumentParser:
            parser_kwargs["parents"] = [*parser_kwargs.get("parents", []), _workspace_option()]
            return add_parser(name, **parser_kwargs)

        # argparse has no hook that adds a parent to every subparser; wrapping add_parser is the usual way.
        action.add_parser = add_parser_with_workspace  # type: ignore[method-assign]
        return action


def _version() -> str:
    try:
        return importlib.metadata.version("ai-context-os")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def cli_client() -> str:
    """Who the CLI is, for history (writes are committed as ``ctxos (CLI as <user>)``)."""
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown user"
    return f"CLI as {user}"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ctxos",
        description="AI Context OS: filesystem-native memory for AI agents.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("--workspace", "-w", help=WORKSPACE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"ctxos: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head/less that exited early
        sys.stderr.close()
        return 0
