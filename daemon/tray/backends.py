"""How the tray calls the daemon: the same RPC methods as every client.

In the daemon's process (``LoopBackend``) the calls run on the daemon's loop;
the tray's own process uses the client's ``SocketBackend`` (``client/backend.py``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from .settings import CALL_TIMEOUT_S

if TYPE_CHECKING:  # pragma: no cover
    from ..context import DaemonContext

METHOD_NOT_FOUND = -32601


class TrayBackend(Protocol):
    def call(self, method: str, params: dict[str, Any] | None = None) -> Any: ...


class LoopBackend:
    """In-process: run RPC methods on the daemon's loop from the tray's threads."""

    def __init__(self, ctx: DaemonContext, loop: asyncio.AbstractEventLoop) -> None:
        self.ctx = ctx
        self.loop = loop

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        future = asyncio.run_coroutine_threadsafe(self.ctx.rpc.call(self.ctx, method, params or {}), self.loop)
        try:
            return future.result(CALL_TIMEOUT_S)
        except BaseException:
            future.cancel()
            raise


def error_code(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) else None
