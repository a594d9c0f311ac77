"""The threads that run one tray: the icon's event loop (pystray) and the refresh loop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .app import TrayApp
from .settings import HANDOFF_TIMEOUT_S, PROBE_INTERVAL_S, SHOW_TIMEOUT_S, STOP_TIMEOUT_S
from .xorg import XorgAssist, is_xorg_icon, show_icon, take_over_painting

log = logging.getLogger("ctxos.daemon.tray")  # one logger name for the whole tray (tests and log filters)


class TrayRunner:
    """Owns the icon's event loop and the refresh loop for one :class:`TrayApp`.

    ``run_icon`` blocks (call it on the thread that must own the UI);
    ``wait_shown`` reports whether the icon docked.
    """

    def __init__(self, app: TrayApp, change_probe: Callable[[], Any] | None = None) -> None:
        self.app = app
        # Out of process there is no change listener: poll this cheap value (the watcher's batch
        # counter from `status`) every PROBE_INTERVAL_S and refresh when it moves.
        self.change_probe = change_probe
        self._last_probe: Any = None
        self.outcome: str | None = None  # "shown" or "failed: ..."
        self.backend_name: str | None = None
        self._shown = threading.Event()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._refresher: threading.Thread | None = None
        self._loop_thread: threading.Thread | None = None
        self._loop_done = threading.Event()

    def run_icon(self) -> None:
        self._loop_thread = threading.current_thread()
        try:
            self._run_icon()
        finally:
            self._loop_done.set()

    def _run_icon(self) -> None:
        try:
            import pystray  # noqa: PLC0415 - imported late: it connects to the display on import

            icon = self.app.build_icon(pystray)
            self.backend_name = type(icon).__module__.rsplit("._", 1)[-1]
            self.app.attach_notifier(icon, use_dbus=self.app.settings.notifications)
        except Exception as exc:  # noqa: BLE001 - Xlib DisplayNameError, GLib errors, missing backends...
            self._finish(f"failed: pystray could not start ({type(exc).__name__}: {exc})")
            return
        try:
            icon.run(self._setup)
        except Exception as exc:  # noqa: BLE001
            self._finish(f"failed: tray loop ended with {type(exc).__name__}: {exc}")
        finally:
            self._stopping.set()
            self._wake.set()

    def _setup(self, icon: Any) -> None:
        try:
            if is_xorg_icon(icon):
                take_over_painting(icon)  # before the icon is shown (see take_over_painting)
                show_icon(icon, timeout=HANDOFF_TIMEOUT_S)  # not `icon.visible = True`: see show_icon
                self.app.xorg = XorgAssist(icon, on_click=lambda: icon())  # icon(): the default menu item
                if not self.app.xorg.ensure_embedded():
                    raise RuntimeError("the system tray on this display did not embed the icon")
            else:
                icon.visible = True
        except Exception as exc:  # noqa: BLE001 - e.g. xorg with no system tray on the display
            self._finish(f"failed: could not dock the icon ({type(exc).__name__}: {exc})")
            if self.app.xorg is not None:
                self.app.xorg.destroy()
            else:
                icon.stop()
            return
        self._finish("shown")
        self._refresher = threading.Thread(target=self._refresh_loop, name="ctxos-tray-refresh", daemon=True)
        self._refresher.start()

    def _finish(self, outcome: str) -> None:
        if self.outcome is None:
            self.outcome = outcome
        self._shown.set()

    def wait_shown(self, timeout: float = SHOW_TIMEOUT_S) -> str:
        if not self._shown.wait(timeout):
            self._finish(f"failed: the icon did not appear within {timeout:.0f} s")
        return self.outcome or "failed"

    def trigger_refresh(self) -> None:
        self._wake.set()

    def _probe_changed(self) -> bool:
        if self.change_probe is None:
            return False
        try:
            value = self.change_probe()
        except Exception:  # noqa: BLE001 - the daemon is going away; refresh() reports it
            return False
        changed = self._last_probe is not None and value != self._last_probe
        self._last_probe = value
        return changed

    def _refresh_loop(self) -> None:
        last = 0.0
        timeout = 0.0
        next_refresh = 0.0
        while not self._stopping.is_set():
            woken = self._wake.wait(timeout)
            self._wake.clear()
            if self._stopping.is_set():
                break
            if not woken and self.change_probe is not None and time.monotonic() < next_refresh:
                changed = self._probe_changed()
                due = self.app.notifier is not None and self.app.notifier.due_in() == 0.0
                if not (changed or due):
                    timeout = min(PROBE_INTERVAL_S, max(0.05, next_refresh - time.monotonic()))
                    continue
            gap = self.app.settings.min_refresh_gap_s - (time.monotonic() - last)
            if gap > 0 and self._stopping.wait(gap):
                break
            last = time.monotonic()
            self.app.refresh()
            self.app.flush_notifications()
            self._probe_changed()
            timeout = self.app.next_wakeup()
            next_refresh = time.monotonic() + timeout
            if self.change_probe is not None:
                timeout = min(timeout, PROBE_INTERVAL_S)

    def stop(self) -> None:
        """Stop the refresh loop and the icon; safe from any thread, more than once."""
        self._stopping.set()
        self._wake.set()
        self.app.closing = True
        with self.app._refresh_lock:  # let a refresh in progress finish its icon update first
            pass
        icon = self.app.icon
        if icon is not None and self.outcome == "shown":
            try:
                if self.app.xorg is not None:
                    self.app.xorg.destroy()  # pystray's loop ends on its window's DestroyNotify
                else:
                    icon.stop()
            except Exception as exc:  # noqa: BLE001
                log.debug("tray: stopping the icon: %r", exc)
            if threading.current_thread() is not self._loop_thread:
                self._loop_done.wait(STOP_TIMEOUT_S)
        if self._refresher is not None and self._refresher is not threading.current_thread():
            self._refresher.join(STOP_TIMEOUT_S)

    def status(self) -> dict[str, Any]:
        app = self.app
        return {
            "shown": self.outcome == "shown",
            "outcome": self.outcome,
            "pystray_backend": self.backend_name,
            "notifications": app.sink.channel if app.sink else None,
            "notified": len(app.notifier.sent) if app.notifier else 0,
            "pending_notifications": app.notifier.pending if app.notifier else 0,
            "band": app.state.band.name,
            "score": app.state.score,
            "actions": list(app.actions),
        }
