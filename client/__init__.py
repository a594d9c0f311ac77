"""``ctxos.client``: a small synchronous client of the daemon's Unix socket.

    from ctxos.client import DaemonClient
    with DaemonClient.for_workspace(root) as client:
        result = client.call("get_context", {"query": "deploy"})

Newline-delimited JSON-RPC 2.0, one request at a time per client (a lock makes
a client safe to share between threads; use one client per thread for
parallelism). Error replies raise :class:`RpcCallError` with the JSON-RPC code;
no daemon raises :class:`DaemonNotRunning`. Deliberately light: importing it
does not import the engine, asyncio or the daemon.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
from pathlib import Path
from typing import Any

try:  # a declared dependency (pyproject); without it replies are decoded by the standard library
    import orjson
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]

DEFAULT_TIMEOUT_S = 120.0  # a full reindex of a big workspace can take a while


class DaemonError(Exception):
    """Base class of client errors."""


class DaemonNotRunning(DaemonError):
    """No daemon answers on the workspace's socket."""


class RpcCallError(DaemonError):
    """The daemon answered with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message
        self.data = data


class DaemonClient:
    """A connection to one daemon's socket. Connects lazily; reconnects once if the daemon restarted."""

    def __init__(self, socket_path: Path | str, timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    @classmethod
    def for_workspace(cls, root: Path | str, timeout: float | None = DEFAULT_TIMEOUT_S) -> DaemonClient:
        from ctxos.services.runtime_paths import socket_path

        return cls(socket_path(Path(root)), timeout=timeout)

    # ------------------------------------------------------------ connection

    def connect(self) -> DaemonClient:
        if self._sock is not None:
            return self
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.socket_path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise DaemonNotRunning(f"no daemon is listening on {self.socket_path}") from exc
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self._buffer = b""
        return self

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def __enter__(self) -> DaemonClient:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def is_alive(self) -> bool:
        """True when a daemon answers ``status`` on this socket."""
        try:
            self.call("status")
            return True
        except (DaemonError, OSError):
            self.close()
            return False

    # ------------------------------------------------------------ calls

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send one request and return its ``result``; raise :class:`RpcCallError` on an error reply."""
        with self._lock:
            request_id = next(self._ids)
            payload = (
                json.dumps(
                    {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}},
                    separators=(",", ":"),
                ).encode("utf-8")
                + b"\n"
            )
            reply = self._exchange(payload, retry=True)
        if not isinstance(reply, dict):
            raise DaemonError(f"unexpected reply: {reply!r}")
        if "error" in reply:
            error = reply["error"] or {}
            raise RpcCallError(int(error.get("code", 0)), str(error.get("message", "error")), error.get("data"))
        return reply.get("result")

    def send_raw(self, data: bytes) -> Any:
        """Send raw bytes (one or more lines) and return the next reply line parsed (for tests/debugging)."""
        with self._lock:
            return self._exchange(data, retry=False)

    def _exchange(self, payload: bytes, retry: bool) -> Any:
        fresh = self._sock is None
        self.connect()
        assert self._sock is not None
        try:
            self._sock.sendall(payload)
            line = self._read_line()
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self.close()
            if retry and not fresh:
                # The daemon restarted since we connected: one fresh attempt.
                self.connect()
                assert self._sock is not None
                self._sock.sendall(payload)
                line = self._read_line()
            else:
                raise DaemonNotRunning(f"the daemon on {self.socket_path} closed the connection") from None
        except TimeoutError as exc:
            self.close()  # the reply may still arrive later; never read it as another call's answer
            raise DaemonError(f"no reply from the daemon within {self.timeout} s") from exc
        return decode_reply(line)

    def _read_line(self) -> bytes:
        assert self._sock is not None
        while b"\n" not in self._buffer:
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                raise EOFError
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line


# Digits -> "0", anything else -> " ": a run of 19 zeros in the translated line is a number orjson may not keep exact.
_DIGITS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_LONG_NUMBER = b"0" * 19


def decode_reply(line: bytes) -> Any:
    """One reply line as data: orjson, ~6x faster than the standard library on a ``get_context`` answer.

    A ~60 KB answer took ~0.8 ms with ``json.loads`` and ~0.13 ms with orjson, in every socket
    client: ``ctxos mcp`` decodes one per tool call (issue 16, docs/engine.md). orjson reads an
    integer beyond 64 bits as a float, silently; a line with a run of 19 digits anywhere (a
    number that may be one, or just a long digit string, ~0.03 ms to find) is read by the
    standard library, as is anything orjson refuses.
    """
    if orjson is not None and _LONG_NUMBER not in line.translate(_DIGITS):
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass
    return json.loads(line)


def connect_to_daemon(root: Path | str, timeout: float | None = DEFAULT_TIMEOUT_S) -> DaemonClient | None:
    """A connected client when a daemon answers for ``root``, else None."""
    client = DaemonClient.for_workspace(root, timeout=timeout)
    try:
        client.connect()
    except (DaemonError, OSError):
        return None
    return client


__all__ = ["DaemonClient", "DaemonError", "DaemonNotRunning", "RpcCallError", "connect_to_daemon"]
