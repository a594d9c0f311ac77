"""The worker side of the peer protocol: newline-delimited JSON over stdin/stdout.

Every system under test runs in its own process (basic-memory even in its own
virtualenv and Python), so each one's peak RSS is its own and one system's
imports or caches never flatter or burden another. This module is imported by
those worker processes, some of which run in a venv without this project, so it
uses the standard library only.

Request:  ``{"op": "build", ...params}`` one per line.
Response: ``{"ok": true, "result": {...}, "elapsed_s": float, "rss_mb": float,
"peak_rss_mb": float}`` or ``{"ok": false, "error": "...", "traceback": "..."}``.
``elapsed_s`` is measured inside the worker around the handler, so process
start-up and pipe latency are not counted as the system's work.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

Handler = Callable[[dict[str, Any]], dict[str, Any]]


def _status_mb(field: str) -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    if field == "VmHWM":  # not Linux: ru_maxrss is KiB on Linux, bytes on macOS
        import resource

        value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return value / (1024.0 * 1024.0) if sys.platform == "darwin" else value / 1024.0
    return 0.0


def serve(handlers: dict[str, Handler]) -> None:
    """Answer requests until stdin closes or ``{"op": "exit"}`` arrives.

    The real stdout is kept for the protocol and fd 1 is pointed at stderr, so
    anything a library prints (progress bars, banners) cannot corrupt a response.
    """
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    proto.write(json.dumps({"ok": True, "result": {"ready": True, "pid": os.getpid()}}) + "\n")
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        request = json.loads(line)
        op = request.pop("op", None)
        if op == "exit":
            proto.write(json.dumps({"ok": True, "result": {}}) + "\n")
            break
        handler = handlers.get(op or "")
        start = time.perf_counter()
        try:
            if handler is None:
                raise KeyError(f"unknown op {op!r}")
            result = handler(request)
            reply = {"ok": True, "result": result}
        except Exception as exc:  # reported to the parent, which decides what to do
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        reply["elapsed_s"] = time.perf_counter() - start
        reply["rss_mb"] = _status_mb("VmRSS")
        reply["peak_rss_mb"] = _status_mb("VmHWM")
        proto.write(json.dumps(reply) + "\n")
    proto.flush()
