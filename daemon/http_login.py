"""Browser log-in for the web view: one-time codes in, bounded cookie sessions out.

A browser cannot be given an ``Authorization`` header, and a token in a URL
ends up in history, logs and ``Referer`` headers. So ``ctxos open`` asks the
daemon over its owner-only Unix socket (RPC ``web_login``, which HTTP cannot
reach) for a *code*: random, single-use, valid for ``CODE_TTL_S``. Visiting
``/login?code=...`` trades it for a session id in an ``HttpOnly``,
``SameSite=Strict`` cookie and redirects to ``/``, so the code is spent before
the address bar shows anything worth copying.

Everything is in memory and bounded: at most ``MAX_CODES`` pending codes and
``MAX_SESSIONS`` sessions (the oldest go first), each session lives
``SESSION_TTL_S`` at most. A daemon restart logs every browser out. The clock
is injectable for tests of expiry. RPC handlers run on worker threads, so a
lock guards the tables.

``register`` adds the socket-only RPC method ``web_login``; the HTTP component
provides the link (``ctx.web_login_link``) while it serves.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .rpc import RpcError, RpcRegistry

HTTP_OFF = -32020  # RPC error: the daemon serves no HTTP, so there is no web view to log in to

CODE_TTL_S = 60.0
SESSION_TTL_S = 12 * 3600.0
MAX_CODES = 16
MAX_SESSIONS = 32


class WebLogin:
    """Pending one-time codes and live cookie sessions of one HTTP server."""

    def __init__(
        self,
        *,
        code_ttl_s: float = CODE_TTL_S,
        session_ttl_s: float = SESSION_TTL_S,
        max_codes: int = MAX_CODES,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.code_ttl_s = code_ttl_s
        self.session_ttl_s = session_ttl_s
        self.max_codes = max_codes
        self.max_sessions = max_sessions
        self._clock = clock
        self._codes: OrderedDict[str, float] = OrderedDict()  # code -> expiry
        self._sessions: OrderedDict[str, float] = OrderedDict()  # session id -> expiry
        self._lock = threading.Lock()

    def issue_code(self) -> str:
        """A new single-use code (the oldest pending one is dropped past ``max_codes``)."""
        with self._lock:
            return self._issue_code()

    def _issue_code(self) -> str:
        self._prune(self._codes)
        code = secrets.token_urlsafe(24)
        self._codes[code] = self._clock() + self.code_ttl_s
        while len(self._codes) > self.max_codes:
            self._codes.popitem(last=False)
        return code

    def redeem(self, code: str | None) -> str | None:
        """Spend ``code``: a new session id, or None when it is unknown, used or expired."""
        with self._lock:
            return self._redeem(code)

    def _redeem(self, code: str | None) -> str | None:
        expiry = self._codes.pop(code, None) if code else None
        if expiry is None or expiry <= self._clock():
            return None
        self._prune(self._sessions)
        session = secrets.token_urlsafe(32)
        self._sessions[session] = self._clock() + self.session_ttl_s
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return session

    def session_valid(self, session: str | None) -> bool:
        """True for a live session id; an expired one is forgotten."""
        if not session:
            return False
        with self._lock:
            return self._session_valid(session)

    def _session_valid(self, session: str) -> bool:
        expiry = self._sessions.get(session)
        if expiry is None:
            return False
        if expiry <= self._clock():
            del self._sessions[session]
            return False
        return True

    def end_session(self, session: str | None) -> None:
        if session:
            with self._lock:
                self._sessions.pop(session, None)

    def counts(self) -> dict[str, int]:
        """Pending codes and live sessions (for status)."""
        with self._lock:
            self._prune(self._codes)
            self._prune(self._sessions)
            return {"login_codes": len(self._codes), "web_sessions": len(self._sessions)}

    def _prune(self, table: OrderedDict[str, float]) -> None:
        now = self._clock()
        for key in [k for k, expiry in table.items() if expiry <= now]:
            del table[key]


def web_login(ctx: Any, _params: dict[str, Any]) -> dict[str, Any]:
    """A one-time link that logs a browser in to the web view (socket only: HTTP cannot call it)."""
    link = getattr(ctx, "web_login_link", None)
    if link is None:
        state = (getattr(ctx, "components", None) or {}).get("http", "off")
        raise RpcError(HTTP_OFF, f"this daemon serves no HTTP ({state}), so there is no web view to open")
    return link()


def register(registry: RpcRegistry) -> None:
    registry.register("web_login", web_login, wait_ready=False)
