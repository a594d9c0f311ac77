"""``ctxos mcp``: the MCP server over stdio, backed by the daemon over its Unix socket.

AI tools spawn ``ctxos mcp``; the CLI resolves the workspace and replaces
itself with this module (``python -m ctxos.daemon.mcp_stdio``, same process,
same stdin/stdout), so the thin client never imports the daemon. It serves the
*daemon's* engine state (one index, one write lock, one access log): every tool
call is forwarded to the daemon through the client's :class:`SocketBackend`,
which starts the daemon when none runs. stdout is the MCP wire; logs go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import anyio
from ctxos.client import DaemonError, DaemonNotRunning, RpcCallError
from ctxos.client.backend import SocketBackend
from ctxos.client.launch import DaemonStartError, find_socket
from ctxos.services.jsonrpc import BackendError

from .mcp_server import build_mcp_server
from .mcp_shortcut import serve_stdio


class SocketToolBackend:
    """The MCP tools' async backend over a :class:`SocketBackend`: calls run on worker threads."""

    def __init__(self, socket: SocketBackend) -> None:
        self.socket = socket

    def call_sync(self, method: str, params: dict[str, Any]) -> Any:
        try:
            return self.socket.call(method, params)
        except RpcCallError as exc:
            raise BackendError(exc.message, exc.code, exc.data) from exc
        except (DaemonError, DaemonStartError) as exc:
            raise BackendError(f"the ctxos daemon did not answer: {exc}") from exc

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        return await anyio.to_thread.run_sync(self.call_sync, method, params)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ctxos mcp", description="MCP over stdio, backed by the ctxos daemon.")
    parser.add_argument("--workspace", required=True, help="the workspace folder (resolved by the CLI)")
    parser.add_argument("--no-start", action="store_true", help="fail instead of starting the daemon")
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, args.log_level),
        format="ctxos mcp: %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    socket = SocketBackend(Path(args.workspace), start=not args.no_start)
    try:
        socket.ensure_daemon()
    except DaemonNotRunning as exc:
        print(f"ctxos: error: {exc}", file=sys.stderr)
        return 2
    except DaemonStartError as exc:
        print(f"ctxos: error: could not start the daemon: {exc}", file=sys.stderr)
        return 2
    server = build_mcp_server(SocketToolBackend(socket))
    try:
        anyio.run(serve_stdio, server, lambda: find_socket(socket.root))
    finally:
        socket.close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
