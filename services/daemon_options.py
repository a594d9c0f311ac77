"""The daemon's command-line options, shared by the CLI that starts it and the daemon that reads them.

``ctxos daemon`` / ``ctxos start`` take the same options as ``python -m
ctxos.daemon.main`` (what they run): :func:`add_daemon_arguments` defines them
once, :func:`daemon_flags` turns parsed ones back into arguments for the child.
Here, not in ``daemon/``, because the thin client must not import the daemon.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

DEFAULT_WORKSPACE = "~/AI-Context-OS"


def daemon_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m ctxos.daemon.main`` (its ``main`` and its first line read the same arguments)."""
    parser = argparse.ArgumentParser(prog="ctxos-daemon", description="Run the AI Context OS daemon in the foreground.")
    parser.add_argument("--workspace", "-w", help="workspace folder (default: $CTXOS_WORKSPACE or ~/AI-Context-OS)")
    add_daemon_arguments(parser)
    return parser


def workspace_path(args: argparse.Namespace) -> Path:
    """The single workspace ``args`` name: ``--workspace``, else ``$CTXOS_WORKSPACE``, else the default."""
    return Path(args.workspace or os.environ.get("CTXOS_WORKSPACE") or DEFAULT_WORKSPACE)


def add_daemon_arguments(parser: argparse.ArgumentParser) -> None:
    """The options shared by ``ctxos daemon``, ``ctxos start`` and ``python -m ctxos.daemon.main``."""
    parser.add_argument(
        "--no-http",
        dest="http",
        action="store_false",
        help="do not serve HTTP (MCP, REST, web view); the Unix socket still runs",
    )
    parser.add_argument(
        "--http-port",
        type=int,
        default=None,
        metavar="PORT",
        help="HTTP port on 127.0.0.1 (default: config daemon.http_port, 3847; 0 = any free port)",
    )
    parser.add_argument(
        "--tray",
        dest="tray",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the tray icon (default: when a display is available)",
    )
    parser.add_argument(
        "--debounce-ms",
        type=int,
        default=None,
        metavar="MS",
        help="coalesce file events for this long (default: config daemon.debounce_ms)",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    parser.add_argument(
        "--all",
        action="store_true",
        help="serve every registered workspace (`ctxos workspace list`) from this one daemon",
    )
    parser.add_argument(
        "--load",
        action="append",
        default=[],
        metavar="NAME",
        help="with --all: load this workspace at once (the others load on first use)",
    )


def daemon_flags(args: argparse.Namespace) -> list[str]:
    """The options in ``args`` as arguments again (what ``ctxos start`` passes to the daemon it spawns)."""
    flags: list[str] = []
    if not args.http:
        flags.append("--no-http")
    if args.http_port is not None:
        flags += ["--http-port", str(args.http_port)]
    if args.tray is not None:
        flags.append("--tray" if args.tray else "--no-tray")
    if args.debounce_ms is not None:
        flags += ["--debounce-ms", str(args.debounce_ms)]
    if args.verbose:
        flags.append("--verbose")
    return flags
