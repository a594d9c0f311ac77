"""``GET /api/events``: server-sent events, one ``change`` event per change batch the daemon applies.

:class:`ChangeHub` is a change listener of the daemon context
(``ctx.add_change_listener``): it fans each note out to every open stream, so the
web page refreshes what it shows. A stream whose page went away is noticed at its
next write (an event or the heartbeat); when the cap is reached, streams whose
connection is already closed are pruned first, so closed tabs never lock out a new one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from ctxos.services.engine import ChangeSummary
from ctxos.services.jsonrpc import json_default

from .http import ApiError

log = logging.getLogger("ctxos.daemon.rest")

EVENT_HEARTBEAT_SECONDS = 15.0
MAX_EVENT_CLIENTS = 32
EVENT_QUEUE_SIZE = 256

Event = dict[str, Any]


class ChangeHub:
    """Fans the daemon's change notifications out to every open ``/api/events`` stream."""

    def __init__(self) -> None:
        self._queues: dict[asyncio.Queue[Event | None], Callable[[], bool]] = {}
        self.sequence = 0

    @property
    def clients(self) -> int:
        return len(self._queues)

    def subscribe(self, alive: Callable[[], bool] = lambda: True) -> asyncio.Queue[Event | None]:
        """A queue for one stream; ``alive()`` says whether its connection is still open."""
        if len(self._queues) >= MAX_EVENT_CLIENTS:
            self._prune()
        if len(self._queues) >= MAX_EVENT_CLIENTS:
            raise ApiError(503, f"too many event streams open (limit {MAX_EVENT_CLIENTS})")
        queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize=EVENT_QUEUE_SIZE)
        self._queues[queue] = alive
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Event | None]) -> None:
        self._queues.pop(queue, None)

    def _prune(self) -> None:
        for queue, alive in list(self._queues.items()):
            if not alive():
                self.unsubscribe(queue)
                _put_last(queue, None)  # its handler ends at once

    def publish(self, summary: ChangeSummary | Mapping[str, Any]) -> None:
        """Change listener (runs on the loop): queue one event per stream; a stuck stream drops events."""
        self.sequence += 1
        event = change_event(summary, self.sequence)
        for queue in list(self._queues):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                log.warning("an /api/events client is not reading; dropping an event for it")

    def close(self) -> None:
        """Tell every stream to end (app shutdown)."""
        for queue in list(self._queues):
            _put_last(queue, None)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: one event per applied change batch."""

        def alive() -> bool:
            transport = request.transport
            return transport is not None and not transport.is_closing()

        queue = self.subscribe(alive)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache, no-store",
                "X-Accel-Buffering": "no",
            }
        )
        try:
            await response.prepare(request)
            await response.write(b"retry: 2000\n\n" + _sse("hello", {"seq": self.sequence}))
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), EVENT_HEARTBEAT_SECONDS)
                except TimeoutError:
                    await response.write(b": ping\n\n")  # keeps proxies and dead peers honest
                    continue
                if event is None:  # the server is shutting down
                    break
                await response.write(_sse("change", event))
        except (ConnectionResetError, ConnectionError):
            pass  # the page went away
        finally:
            self.unsubscribe(queue)
        return response


def _put_last(queue: asyncio.Queue[Event | None], item: Event | None) -> None:
    """Queue ``item`` even if the queue is full (dropping the oldest entry)."""
    try:
        queue.put_nowait(item)
    except asyncio.QueueFull:
        queue.get_nowait()
        queue.put_nowait(item)


def change_event(summary: ChangeSummary | Mapping[str, Any], sequence: int) -> Event:
    """A JSON-safe event from a change note: the engine's ``ChangeSummary``, or a mapping with the same
    keys for changes outside memory files (a flag, a proposal), as ``services/api`` publishes them."""
    data = summary.to_dict() if isinstance(summary, ChangeSummary) else dict(summary)
    invalid = data.get("invalid") or []
    return {
        "seq": sequence,
        "updated": [str(x) for x in data.get("updated") or []],
        "removed": [str(x) for x in data.get("removed") or []],
        "paths": [str(x) for x in data.get("paths") or []],
        "invalid": [i if isinstance(i, dict) else {"path": str(i)} for i in invalid],
    }


def _sse(event: str, data: Any) -> bytes:
    payload = json.dumps(data, default=json_default, ensure_ascii=False)
    return f"event: {event}\ndata: {payload}\n\n".encode("utf-8", "backslashreplace")
