"""Flags: an agent's "a person should look at this memory", kept in the governance queue.

An agent that notices a memory is stale, wrong, a duplicate or in conflict with
another calls ``flag_memory`` (MCP). The flag changes nothing in the memory: it
is stored in the workspace's derived-state folder (``state_dir(root)/flags.json``,
never in the memory file, so an agent cannot change what is served) and shows up
as a governance finding of kind ``flag`` (``ctxos governance``, the web page's
queue, a tray notification).

A flag stands while the memory is unchanged since it was flagged: once someone
edits the memory (its checksum changes) the flag is taken as acted on and leaves
the queue; a person can also dismiss it (``ctxos dismiss FINGERPRINT``). Several
flags of one kind on one memory are one finding listing every reason.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .atomic import atomic_write_text
from .model import Memory
from .workspace import state_dir

log = logging.getLogger(__name__)

FLAGS_FILENAME = "flags.json"
FLAG_KINDS: tuple[str, ...] = ("stale", "wrong", "duplicate", "conflict")
MAX_REASON_CHARS = 1_000
MAX_BY_CHARS = 200
MAX_STORED_FLAGS = 2_000  # oldest flags are forgotten past this (they are long resolved or dismissed)
MAX_FLAGS_PER_DAY = 200  # a runaway agent cannot flood the person's queue
_LOCK = threading.Lock()  # flag is a read-modify-write of flags.json


class FlagError(ValueError):
    """A flag that cannot be stored (bad kind, empty reason, queue full); the message says why."""


def flags_path(root: Path) -> Path:
    return state_dir(Path(root)) / FLAGS_FILENAME


def load_flags(root: Path) -> list[dict[str, Any]]:
    """Every stored flag, oldest first; an unreadable file is an empty queue (and a log line)."""
    path = flags_path(root)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable %s (%s)", path, exc)
        return []
    flags = data.get("flags") if isinstance(data, dict) else None
    return [f for f in flags if isinstance(f, dict)] if isinstance(flags, list) else []


def _save(root: Path, flags: list[dict[str, Any]]) -> None:
    atomic_write_text(
        flags_path(root),
        json.dumps({"version": 1, "flags": flags[-MAX_STORED_FLAGS:]}, indent=1, ensure_ascii=False) + "\n",
    )


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def open_flags(flags: Iterable[Mapping[str, Any]], memories: Mapping[str, Memory]) -> list[Mapping[str, Any]]:
    """Flags whose memory still exists unchanged since it was flagged."""
    out = []
    for flag in flags:
        memory = memories.get(str(flag.get("memory_id")))
        if memory is not None and memory.checksum == flag.get("checksum"):
            out.append(flag)
    return out


def flag_memory(root: Path, memory: Memory, reason: str, kind: str, by: str = "agent") -> dict[str, Any]:
    """Store a flag on ``memory`` (as it is now); returns the stored flag with its finding's fingerprint."""
    if kind not in FLAG_KINDS:
        raise FlagError(f"unknown flag kind {kind!r}; expected one of: {', '.join(FLAG_KINDS)}")
    reason = " ".join(str(reason or "").split())
    if not reason:
        raise FlagError("a flag needs a reason: say what is stale, wrong, duplicated or conflicting")
    if len(reason) > MAX_REASON_CHARS:
        raise FlagError(f"the reason is {len(reason)} characters; at most {MAX_REASON_CHARS}")
    by = " ".join(str(by or "agent").split())[:MAX_BY_CHARS] or "agent"
    at = _now()
    flag = {
        "memory_id": memory.id,
        "path": memory.rel_path,
        "kind": kind,
        "reason": reason,
        "by": by,
        "at": at,
        "checksum": memory.checksum,
        "version": memory.version,
    }
    flag["flag_id"] = hashlib.sha1(json.dumps(flag, sort_keys=True).encode()).hexdigest()[:10]
    with _LOCK:
        flags = load_flags(root)
        same = [
            f
            for f in flags
            if f.get("memory_id") == memory.id
            and f.get("kind") == kind
            and f.get("checksum") == memory.checksum
            and f.get("reason") == reason
        ]
        if same:  # the same flag again: one entry, not a pile
            return {**same[-1], "fingerprint": flag_fingerprint(memory.id, kind), "repeated": True}
        today = at[:10]
        if sum(1 for f in flags if str(f.get("at", ""))[:10] == today) >= MAX_FLAGS_PER_DAY:
            raise FlagError(
                f"{MAX_FLAGS_PER_DAY} flags were raised today already; the governance queue "
                "takes no more until tomorrow (a person has to work through it first)"
            )
        flags.append(flag)
        _save(root, flags)
    return {**flag, "fingerprint": flag_fingerprint(memory.id, kind), "repeated": False}


def flag_fingerprint(memory_id: str, kind: str) -> str:
    from .governance import finding_fingerprint

    return finding_fingerprint(f"flag:{kind}", [memory_id])


def flag_findings(root: Path, memories: Iterable[Memory]) -> list[Any]:
    """One ``flag`` finding per (memory, flag kind) with open flags, listing every reason and who gave it."""
    from .governance import Finding

    by_id = {m.id: m for m in memories}
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for flag in open_flags(load_flags(root), by_id):
        groups.setdefault((str(flag["memory_id"]), str(flag.get("kind"))), []).append(flag)
    found = []
    for (memory_id, kind), flags in sorted(groups.items()):
        memory = by_id[memory_id]
        reasons = [{"reason": f.get("reason", ""), "by": f.get("by", "agent"), "at": f.get("at", "")} for f in flags]
        who = sorted({r["by"] for r in reasons})
        first = reasons[0]["reason"]
        more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
        action = (
            {
                "action": "archive",
                "ids": [memory_id],
                "suggestion": "read it; edit it if it is still useful, archive it if it is not",
            }
            if kind in ("stale", "duplicate")
            else {
                "action": "review",
                "ids": [memory_id],
                "suggestion": "read it and correct it (the flag clears when the memory changes), or dismiss the flag",
            }
        )
        found.append(
            Finding(
                "flag",
                [memory_id],
                [memory.rel_path],
                f"{', '.join(who)} flagged {memory_id} as {kind}: {first}{more}",
                {"flag_kind": kind, "flags": reasons, "version": memory.version},
                action,
                command=f"ctxos archive {memory_id}" if action["action"] == "archive" else "",
                severity="warning" if kind in ("wrong", "conflict") else "info",
                fingerprint=flag_fingerprint(memory_id, kind),
            )
        )
    return found


def flags_mtime(root: Path) -> int:
    """For report caches: changes whenever a flag is stored."""
    try:
        return flags_path(root).stat().st_mtime_ns
    except OSError:
        return 0
