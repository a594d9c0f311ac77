"""Who is writing: the client and tool behind a write, carried to the history hook.

The write gate's ``after_write`` hooks get only ``(root, rel_path)``: the gate must
not know about clients. The front end that accepted a request (an RPC method run
for an MCP tool, the CLI, the web page, a scheduled job) sets an ``Actor`` for the
duration of the call with :func:`acting`; the history hook reads it with
:func:`current_actor`. A ``ContextVar`` is per thread (and per asyncio task), so
two requests handled on two worker threads never see each other's actor.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

DAEMON_NAME = "ctxos"
MAX_CLIENT_CHARS = 120
_UNSAFE = re.compile(r"[\x00-\x1f\x7f<>]")


@dataclass(frozen=True)
class Actor:
    """``client``: who asked, e.g. ``"claude-code via MCP"``; ``tool``: the operation (``save_memory``)."""

    client: str = "unknown client"
    tool: str = "write"

    @property
    def author_name(self) -> str:
        """The git author: the daemon, acting for the client (``ctxos (claude-code via MCP)``)."""
        return f"{DAEMON_NAME} ({self.client})"

    def with_tool(self, tool: str) -> Actor:
        return replace(self, tool=tool)


_current: ContextVar[Actor | None] = ContextVar("ctxos_history_actor", default=None)


def clean_client(value: object) -> str | None:
    """A client description safe for a commit author: one line, no ``<>``, bounded; None if empty."""
    if not isinstance(value, str):
        return None
    text = " ".join(_UNSAFE.sub(" ", value).split())[:MAX_CLIENT_CHARS].strip()
    return text or None


def current_actor() -> Actor:
    """The actor of the running call; a write nobody announced is the daemon's own."""
    return _current.get() or Actor(client="daemon", tool="write")


@contextmanager
def acting(actor: Actor) -> Iterator[Actor]:
    """Attribute every write inside the block to ``actor``."""
    token = _current.set(actor)
    try:
        yield actor
    finally:
        _current.reset(token)
