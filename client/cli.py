"""The ``ctxos`` command line: global options, then one subcommand per module.

Each module in ``client/commands`` registers its own subcommands so that the
CLI grows by adding a module to ``COMMAND_MODULES``, not by editing one big file.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

DEFAULT_WORKSPACE = Path("~/AI-Context-OS")

COMMAND_MODULES: list[str] = [
    "ctxos.client.commands.workspace_cmds",
    "ctxos.client.commands.query_cmds",
    "ctxos.client.commands.service_cmds",
    "ctxos.client.commands.mcp_cmds",
    "ctxos.client.commands.daemon_cmds",
    "ctxos.client.commands.governance_cmds",
]


class CliError(Exception):
    """A user-facing error: printed without a traceback, exit code 2 unless given."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def resolve_workspace(value: str | None) -> Path:
    """``--workspace``, else ``CTXOS_WORKSPACE``, else ``~/AI-Context-OS``; absolute, symlinks resolved."""
    raw = value or os.environ.get("CTXOS_WORKSPACE") or str(DEFAULT_WORKSPACE)
    return Path(raw).expanduser().resolve()


def require_workspace(root: Path) -> Path:
    """Fail with a clear message when ``root`` is not an initialised workspace."""
    if not root.is_dir():
        raise CliError(f"workspace {root} does not exist; create it with: ctxos init {root}")
    return root


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxos",
        description="AI Context OS: filesystem-native memory for AI agents.",
    )
    parser.add_argument("--workspace", "-w", help="workspace folder (default: $CTXOS_WORKSPACE or ~/AI-Context-OS)")
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
