"""Desktop notifications for new decay, conflict and flag findings: once each, batched, never a storm.

(``flag`` findings are agents' flags, ``services/flags.py``: an agent asking a person to look.)

Rules, and why:

- *Once per finding*: a finding is known by its governance ``fingerprint``
  (kind + the sorted things it is about, not the wording). Fingerprints that
  were notified are kept in ``.ctxos/tray-notified.json`` so a daemon restart
  does not repeat them. The file is derived state like the rest of ``.ctxos``:
  deleting it means the open findings are announced once more.
- *Batched*: everything new since the last notification goes into one message
  ("3 findings need your judgment: 2 conflicts, 1 decaying memory").
- *Never a storm*: at most one notification per ``min_interval_s``; findings
  that appear sooner wait and go out together when the interval has passed.

Delivery (:class:`NotificationSink`) is separate: pystray's ``Icon.notify``
where the backend has it (``HAS_NOTIFICATION``: appindicator, gtk, win32,
darwin), else on Linux the freedesktop D-Bus ``Notify`` call itself (what
pystray's gtk backend sends) over the session bus, which gives the ``xorg``
backend notifications too; with neither, the message goes to the log.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ctxos.services.atomic import atomic_write_text

log = logging.getLogger("ctxos.daemon.tray")

NOTIFY_KINDS = ("flag", "conflict", "decay")
SEEN_FILE = "tray-notified.json"
SEEN_CAP = 10_000  # oldest fingerprints are forgotten past this (a finding older than that is long handled)
BODY_MAX_LINES = 5
APP_NAME = "AI Context OS"


@dataclass(frozen=True)
class FindingRef:
    fingerprint: str
    kind: str
    label: str  # short text for the notification body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FindingRef | None:
        fingerprint, kind = data.get("fingerprint"), data.get("kind")
        if not fingerprint or kind not in NOTIFY_KINDS:
            return None
        subjects = data.get("ids") or data.get("paths") or []
        if kind == "conflict":
            label = " vs ".join(str(s) for s in subjects[:2])
        elif kind == "flag":
            evidence = found if isinstance(found := data.get("evidence"), dict) else {}
            label = f"{subjects[0] if subjects else ''} ({evidence.get('flag_kind', 'flagged')})"
        else:
            label = ", ".join(str(s) for s in subjects[:1])
        return cls(str(fingerprint), str(kind), label or str(data.get("message") or fingerprint))


@dataclass
class Notification:
    title: str
    message: str
    fingerprints: list[str] = field(default_factory=list)


def compose(findings: list[FindingRef]) -> Notification:
    """One message for a batch of new findings."""
    flags = [f for f in findings if f.kind == "flag"]
    conflicts = [f for f in findings if f.kind == "conflict"]
    decays = [f for f in findings if f.kind == "decay"]
    parts = []
    if flags:
        parts.append(f"{len(flags)} flagged by agents")
    if conflicts:
        parts.append(f"{len(conflicts)} conflict{'s' if len(conflicts) != 1 else ''}")
    if decays:
        parts.append(f"{len(decays)} decaying memor{'ies' if len(decays) != 1 else 'y'}")
    n = len(findings)
    title = f"{APP_NAME}: {n} finding{'s' if n != 1 else ''} need{'s' if n == 1 else ''} your judgment"
    lines = [f"{f.kind}: {f.label}" for f in (flags + conflicts + decays)[:BODY_MAX_LINES]]
    if n > BODY_MAX_LINES:
        lines.append(f"... and {n - BODY_MAX_LINES} more (open the web view)")
    return Notification(title, f"{', '.join(parts)}\n" + "\n".join(lines), [f.fingerprint for f in findings])


class SeenStore:
    """The persisted set of notified fingerprints (insertion-ordered, capped)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: dict[str, float] = {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            notified = data.get("notified", {}) if isinstance(data, dict) else {}
            if isinstance(notified, dict):
                self._seen = {str(k): float(v) for k, v in notified.items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning("tray: ignoring unreadable %s (%s); open findings will be announced again", path, exc)

    def __contains__(self, fingerprint: object) -> bool:
        return fingerprint in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, fingerprints: Iterable[str], when: float) -> None:
        for fp in fingerprints:
            self._seen.pop(fp, None)
            self._seen[fp] = when
        while len(self._seen) > SEEN_CAP:
            self._seen.pop(next(iter(self._seen)))

    def save(self) -> None:
        try:
            atomic_write_text(self.path, json.dumps({"version": 1, "notified": self._seen}, indent=0) + "\n")
        except OSError as exc:
            log.warning("tray: could not save %s: %s", self.path, exc)


class FindingNotifier:
    """Decides *when* to notify and *about what*; the sink decides how.

    ``observe`` is fed the current findings after every refresh; ``due`` says
    when a held-back batch should go out (the refresh loop sleeps until then).
    Thread-safe: the refresh thread and the tray's action thread may both call it.
    """

    def __init__(
        self,
        store: SeenStore,
        send: Callable[[Notification], bool],
        min_interval_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.send = send
        self.min_interval_s = max(0.0, float(min_interval_s))
        self._clock = clock
        self._wall = wall
        self._pending: dict[str, FindingRef] = {}
        self._last_sent: float | None = None
        self._lock = threading.Lock()
        self.sent: list[Notification] = []  # history of this run (status and tests)

    def observe(self, findings: Iterable[dict[str, Any]]) -> Notification | None:
        """Queue findings not notified before; send the batch now if the interval allows."""
        with self._lock:
            for data in findings:
                ref = FindingRef.from_dict(data) if isinstance(data, dict) else None
                if ref and ref.fingerprint not in self.store and ref.fingerprint not in self._pending:
                    self._pending[ref.fingerprint] = ref
            return self._maybe_send()

    def flush_if_due(self) -> Notification | None:
        with self._lock:
            return self._maybe_send()

    def due_in(self) -> float | None:
        """Seconds until a held-back batch may go out; None when nothing is pending."""
        with self._lock:
            if not self._pending:
                return None
            if self._last_sent is None:
                return 0.0
            return max(0.0, self._last_sent + self.min_interval_s - self._clock())

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _maybe_send(self) -> Notification | None:
        if not self._pending:
            return None
        now = self._clock()
        if self._last_sent is not None and now - self._last_sent < self.min_interval_s:
            return None
        batch = list(self._pending.values())
        note = compose(batch)
        self._last_sent = now  # even a failed delivery counts: a broken notifier must not retry in a loop
        self._pending.clear()
        # Recorded before delivery: at most once, even if the process dies while notifying.
        self.store.add(note.fingerprints, self._wall())
        self.store.save()
        delivered = self.send(note)
        if delivered:
            self.sent.append(note)
        return note


# ---------------------------------------------------------------------------- delivery


class NotifyingIcon(Protocol):
    HAS_NOTIFICATION: bool

    def notify(self, message: str, title: str | None = None) -> None: ...


class DBusNotifier:
    """``org.freedesktop.Notifications.Notify`` on the session bus (pure Python, via jeepney).

    pystray's gtk/appindicator backends send this same call; the xorg backend
    has no notifications, so the tray sends it itself. Each new batch replaces
    the previous bubble (``replaces_id``) instead of stacking another.
    """

    def __init__(self, app_name: str = APP_NAME, timeout_ms: int = 10_000) -> None:
        self.app_name = app_name
        self.timeout_ms = timeout_ms
        self._last_id = 0
        self._conn: Any = None

    def notify(self, title: str, message: str) -> int:
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection

        if self._conn is None:
            self._conn = open_dbus_connection(bus="SESSION")
        address = DBusAddress(
            "/org/freedesktop/Notifications",
            bus_name="org.freedesktop.Notifications",
            interface="org.freedesktop.Notifications",
        )
        call = new_method_call(
            address,
            "Notify",
            "susssasa{sv}i",
            (self.app_name, self._last_id, "", title, message, [], {}, self.timeout_ms),
        )
        reply = self._conn.send_and_get_reply(call, timeout=5)
        if reply.header.message_type.name == "error":
            raise RuntimeError(f"Notify failed: {reply.body}")
        self._last_id = int(reply.body[0])
        return self._last_id

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


class NotificationSink:
    """Delivers a :class:`Notification` through the best channel available; reports which."""

    def __init__(self, icon: NotifyingIcon | None, dbus: DBusNotifier | None = None) -> None:
        self.icon = icon
        self.dbus = dbus
        self.channel = "log"
        if icon is not None and getattr(icon, "HAS_NOTIFICATION", False):
            self.channel = "pystray"
        elif dbus is not None:
            self.channel = "dbus"
        self._warned = False

    def __call__(self, note: Notification) -> bool:
        log.info("tray notification: %s | %s", note.title, note.message.replace("\n", " | "))
        try:
            if self.channel == "pystray" and self.icon is not None:
                self.icon.notify(note.message, note.title)
                return True
            if self.channel == "dbus" and self.dbus is not None:
                self.dbus.notify(note.title, note.message)
                return True
        except Exception as exc:  # noqa: BLE001 - no notification daemon, bus gone, ...
            if not self._warned:
                log.warning(
                    "tray: desktop notification via %s failed (%s); findings are still in the log and the web view",
                    self.channel,
                    exc,
                )
                self._warned = True
        return False

    def close(self) -> None:
        if self.dbus is not None:
            self.dbus.close()
