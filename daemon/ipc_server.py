"""The Unix socket: newline-delimited JSON-RPC 2.0 for the CLI, ``ctxos mcp`` and tools.

Owner-only by construction: the socket sits in a 0700 runtime directory and is
chmod'ed 0600. One line in, one line out; requests on one connection are
answered in order, connections are served concurrently (each engine call runs
on a worker thread, so a long index write never blocks the loop). A request
larger than ``MAX_REQUEST_BYTES`` is drained up to its newline and answered
with an error; malformed JSON gets a parse error; either way the connection
stays open.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from ctxos.services import runtime_paths

from .rpc import INVALID_REQUEST, MAX_REQUEST_BYTES, RpcError, encode_reply, error_response, handle_payload

if TYPE_CHECKING:  # pragma: no cover
    from .context import DaemonContext

log = logging.getLogger(__name__)

_TOO_LARGE = object()


class IpcServerComponent:
    """Daemon component serving the RPC registry on the workspace's Unix socket."""

    name = "ipc"

    def __init__(self, max_request_bytes: int = MAX_REQUEST_BYTES) -> None:
        self.max_request_bytes = max_request_bytes
        self.ctx: DaemonContext | None = None
        self.path: Path | None = None
        self._server: asyncio.AbstractServer | None = None
        self._inode: int | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self.requests = 0
        self.connections_total = 0

    async def start(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        path = runtime_paths.socket_path(ctx.root)
        runtime_paths.ensure_private_dir(path.parent)
        # We hold the workspace lock, so a socket file here is left over from a
        # daemon that died: remove it. Anything else at that path is not ours to delete.
        try:
            info = path.lstat()
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(info.st_mode):
                raise RuntimeError(f"{path} exists and is not a socket; remove it and start again")
            path.unlink()
        self._server = await asyncio.start_unix_server(self._serve, path=str(path), limit=self.max_request_bytes)
        os.chmod(path, 0o600)  # inside a 0700 dir, so nobody else could reach it meanwhile
        self._inode = path.stat().st_ino
        self.path = path
        ctx.socket_path = path
        ctx.add_status_provider(
            "ipc",
            lambda: {
                "socket": str(path),
                "connections": len(self._connections),
                "connections_total": self.connections_total,
                "requests": self.requests,
            },
        )
        log.info("listening on %s", path)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._connections):
            writer.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if server is not None:
            try:
                await asyncio.wait_for(server.wait_closed(), timeout=5)
            except TimeoutError:  # pragma: no cover
                pass
        self._unlink_own_socket()

    def _unlink_own_socket(self) -> None:
        """Remove the socket file only if it is still the one we created."""
        if self.path is None:
            return
        try:
            if self.path.stat().st_ino == self._inode:
                self.path.unlink()
        except FileNotFoundError:
            pass

    # ------------------------------------------------------------ connections

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        self._connections.add(writer)
        self.connections_total += 1
        try:
            while True:
                message = await self._read_message(reader)
                if message is None:
                    break
                if message is _TOO_LARGE:
                    reply = error_response(
                        None, RpcError(INVALID_REQUEST, f"request too large (limit {self.max_request_bytes} bytes)")
                    )
                else:
                    assert isinstance(message, bytes)
                    if not message.strip():
                        continue
                    self.requests += 1
                    assert self.ctx is not None
                    reply = await handle_payload(self.ctx, self.ctx.rpc, message)
                if reply is not None:
                    writer.write(encode_reply(reply))
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - one bad connection must not affect the others
            log.exception("socket connection failed")
        finally:
            self._connections.discard(writer)
            if task is not None:
                self._handlers.discard(task)
            writer.close()

    async def _read_message(self, reader: asyncio.StreamReader) -> bytes | object | None:
        """One line (without the newline), ``_TOO_LARGE`` after draining an oversize line, None at EOF."""
        try:
            return (await reader.readuntil(b"\n"))[:-1]
        except asyncio.IncompleteReadError as exc:
            return exc.partial or None  # a last request without a newline still counts
        except asyncio.LimitOverrunError as exc:
            consumed = exc.consumed
        # Drain the oversize line in chunks so memory stays bounded by the limit.
        while True:
            await reader.readexactly(consumed)
            try:
                await reader.readuntil(b"\n")
                return _TOO_LARGE
            except asyncio.IncompleteReadError:
                return None
            except asyncio.LimitOverrunError as exc:
                consumed = exc.consumed
