"""``ctxos mcp``: ``tools/call get_context`` answered beside the SDK's dispatch, byte for byte as it would.

``ctxos mcp`` is a proxy: every tool call becomes one socket call to the daemon.
For ``get_context`` (what agents call most, a ~35 KB answer) the SDK's request
path in the proxy cost more CPU than the socket call and the answer's decoding
together (issue 16, docs/engine.md): the era router's replay relay, the
dispatcher, the middleware chain, the tool manager, the contract's validation,
the result models. :class:`Shortcut` sits between the stdio transport and the
SDK's server loop and answers such a call itself: the same contract validation,
the same socket call with the same params, the same agent view (``ContextOut``),
and the response goes out through the transport's own writer.

What it answers around the result (``isError``, and in the 2026-07-28 era
``resultType`` and the ``_meta`` server stamp) it copies from the SDK: the first
``get_context`` call with a given ``_meta`` (the per-request envelope, or none)
goes to the SDK, and the frame of its successful answer is kept; later calls
with the same ``_meta`` are answered in that frame. So the protocol stays the
SDK's (``initialize``, ``server/discover``, listings, every other tool and
request, errors), and tests/test_mcp_stdio.py checks the bytes are the SDK's.
Arguments the contract refuses and every failure of the daemon call go to the
SDK unchanged, which answers as before (after a failed daemon call the SDK
makes it once more: ``get_context`` is a read). The shortcut reaches the daemon
on its own connection, on the event loop (:class:`DaemonLine`), not through the
SDK tools' worker thread. ``CTXOS_MCP_SHORTCUT=0`` turns the shortcut off (A/B runs).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream
from ctxos.client import decode_reply
from ctxos.services.jsonrpc import BackendError, request_line
from ctxos.services.schemas import ContextRequest, validate
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCRequest, JSONRPCResponse

from .mcp_server import ContextOut

log = logging.getLogger("ctxos.mcp")

TOOL = "get_context"
MAX_FRAMES = 8  # distinct ``_meta`` envelopes kept; a client varying it per call (a progress token) gets the SDK
METHOD = "agent_context"  # the daemon's RPC method: get_context as agents are told it (no diagnostics)
MAX_REPLY_BYTES = 256 * 1024 * 1024  # one reply line; a get_context answer is ~60 KB

Call = Callable[[str, dict[str, Any]], Awaitable[Any]]


def enabled() -> bool:
    """Off with ``CTXOS_MCP_SHORTCUT=0`` (to measure the SDK's path against it)."""
    return os.environ.get("CTXOS_MCP_SHORTCUT", "1").strip() != "0"


class Shortcut:
    """Sits between the stdio transport and the SDK's server loop; answers ``get_context`` calls it has seen answered."""

    def __init__(self, call: Call) -> None:
        self.call = call
        # What the SDK answered around the result for a get_context call with this ``_meta`` (the
        # 2026-07-28 envelope, or none): the result's other keys, in order, and its content block.
        self._frames: list[tuple[Any, dict[str, Any]]] = []
        self._asked: dict[Any, Any] = {}  # id of a get_context request the SDK answers -> its _meta
        self.answered = 0  # calls answered here

    @asynccontextmanager
    async def around(
        self, read: ReadStream[SessionMessage | Exception], write: WriteStream[SessionMessage]
    ) -> AsyncIterator[tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]]:
        """The streams to give the SDK's server loop in place of the transport's ``read`` and ``write``."""
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._pump, read, send, write, tasks)
            yield receive, SentWatch(write, self)

    async def _pump(
        self,
        read: ReadStream[SessionMessage | Exception],
        to_sdk: MemoryObjectSendStream[SessionMessage | Exception],
        write: WriteStream[SessionMessage],
        tasks: TaskGroup,
    ) -> None:
        """Everything the client sends goes on to the SDK, except what :meth:`_answer` takes."""
        async with to_sdk:
            try:
                async for item in read:
                    request = _get_context_call(item)
                    if request is not None:
                        assert isinstance(item, SessionMessage) and request.params is not None
                        frame = self._frame(request.params.get("_meta"))
                        if frame is not None:
                            tasks.start_soon(self._answer, item, request, frame, to_sdk.clone(), write)
                            continue
                        if len(self._frames) < MAX_FRAMES:
                            self._asked[request.id] = request.params.get("_meta")
                    await to_sdk.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                log.debug("the SDK's loop stopped reading")

    def _frame(self, meta: Any) -> dict[str, Any] | None:
        for known, frame in self._frames:
            if known == meta:
                return frame
        return None

    def saw_sent(self, message: SessionMessage) -> None:
        """Keep the frame of the SDK's successful answer to a get_context call (the shortcut starts then)."""
        sent = message.message
        if isinstance(sent, JSONRPCError):  # refused or failed: nothing to keep, and nothing to wait for
            self._asked.pop(sent.id, None)
            return
        if not isinstance(sent, JSONRPCResponse) or sent.id not in self._asked:
            return
        meta = self._asked.pop(sent.id)
        result = sent.result
        content = result.get("content")
        if (
            result.get("isError") is False
            and isinstance(result.get("structuredContent"), dict)
            and isinstance(content, list)
            and len(content) == 1
            and isinstance(content[0], dict)
            and content[0].get("type") == "text"
            and self._frame(meta) is None
            and len(self._frames) < MAX_FRAMES
        ):
            self._frames.append((meta, {**result, "content": content[0], "structuredContent": None}))

    async def _answer(
        self,
        item: SessionMessage,
        request: JSONRPCRequest,
        frame: dict[str, Any],
        to_sdk: MemoryObjectSendStream[SessionMessage | Exception],
        write: WriteStream[SessionMessage],
    ) -> None:
        assert request.params is not None
        async with to_sdk:
            try:
                params = validate(ContextRequest, request.params["arguments"]).params()
                result = await self.call(METHOD, params)
                structured = ContextOut.model_validate(result).model_dump(mode="json")
            except Exception as exc:  # noqa: BLE001 - whatever it is, the SDK answers as it always has
                # A refusal gets the contract's message there, a daemon failure a tool error naming it; and
                # a bug here never takes the session down (this runs in the transport's task group).
                log.debug("get_context goes to the SDK: %r", exc)
                try:
                    await to_sdk.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    log.debug("the SDK's loop stopped reading")
                return
            response = JSONRPCResponse(jsonrpc="2.0", id=request.id, result=tool_result(frame, structured))
            try:
                await write.send(SessionMessage(response))
                self.answered += 1
                log.debug("get_context %r answered by the shortcut", request.id)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                log.debug("the client left before get_context was answered")


def _get_context_call(item: SessionMessage | Exception) -> JSONRPCRequest | None:
    """``item`` if it is a ``tools/call`` of ``get_context`` asking nothing but arguments (and an envelope)."""
    if not isinstance(item, SessionMessage) or not isinstance(item.message, JSONRPCRequest):
        return None
    request = item.message
    params = request.params
    if (
        request.method != "tools/call"
        or params is None
        or params.get("name") != TOOL
        or not isinstance(params.get("arguments"), dict)
        or not params.keys() <= {"name", "arguments", "_meta"}
    ):
        return None
    return request


def tool_result(frame: dict[str, Any], structured: dict[str, Any]) -> dict[str, Any]:
    """The result the SDK writes for ``structured``: its frame (keys in its order) around the answer."""
    result = dict(frame)
    result["content"] = [{**frame["content"], "text": structured["rendered"]}]
    result["structuredContent"] = structured
    return result


class DaemonLine:
    """The shortcut's own connection to the daemon's socket, on the event loop: no worker thread per call.

    The SDK's tools reach the daemon through the client's synchronous ``SocketBackend`` on a
    worker thread (two thread switches per call, which a loaded machine makes slow); this is one
    JSON-RPC line out and one in, one call at a time, with asyncio's streams (``ctxos mcp`` runs
    on asyncio; anyio's socket streams cost more per call). Any failure closes the connection and
    is a :class:`BackendError`, so the call goes to the SDK, whose backend knows how to start or
    find the daemon again; the next call reconnects.
    """

    def __init__(self, socket_path: Callable[[], Path], timeout: float = 120.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)

    async def __call__(self, method: str, params: dict[str, Any]) -> Any:
        async with self._lock:
            try:
                async with asyncio.timeout(self.timeout):
                    if self._streams is None:
                        self._streams = await asyncio.open_unix_connection(self.socket_path(), limit=MAX_REPLY_BYTES)
                    reader, writer = self._streams
                    writer.write(request_line(next(self._ids), method, params))
                    line = await reader.readuntil(b"\n")
            except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                self.close()
                raise BackendError(f"the ctxos daemon did not answer: {exc!r}") from exc
        reply = decode_reply(line)
        if not isinstance(reply, dict) or "result" not in reply:
            raise BackendError(f"the ctxos daemon refused {method}: {reply!r}"[:500])
        return reply["result"]

    def close(self) -> None:
        streams, self._streams = self._streams, None
        if streams is not None:
            streams[1].close()


class SentWatch:
    """The write stream given to the SDK: every message goes through, the handshake's answer is noted."""

    def __init__(self, inner: WriteStream[SessionMessage], shortcut: Shortcut) -> None:
        self.inner = inner
        self.shortcut = shortcut

    async def send(self, item: SessionMessage, /) -> None:
        self.shortcut.saw_sent(item)
        await self.inner.send(item)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> SentWatch:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def serve_stdio(server: MCPServer, socket_path: Callable[[], Path]) -> None:
    """``server.run_stdio_async()``, with :class:`Shortcut` between the transport and the server loop.

    ``MCPServer.run_stdio_async`` is ``stdio_server()`` plus its low-level server's ``run``; the
    low-level server is reached the way that method does (``_lowlevel_server``, no public
    accessor in mcp 2.3): a changed SDK fails here at start, loudly, not on a call.
    """
    lowlevel = server._lowlevel_server  # noqa: SLF001 - see the docstring
    if not enabled():
        await server.run_stdio_async()
        return
    line = DaemonLine(socket_path)
    shortcut = Shortcut(line)
    try:
        async with stdio_server() as (read, write), shortcut.around(read, write) as (to_sdk, from_sdk):
            await lowlevel.run(to_sdk, from_sdk, lowlevel.create_initialization_options())
    finally:
        line.close()
