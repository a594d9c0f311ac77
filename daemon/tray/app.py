"""What the tray shows and does, whichever way it runs: state, icon and menu, refresh, actions."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import webbrowser
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .backends import METHOD_NOT_FOUND, TrayBackend, error_code
from .icon import UNKNOWN, Band, draw_icon, health_band
from .notify import NOTIFY_KINDS, SEEN_FILE, DBusNotifier, FindingNotifier, NotificationSink, SeenStore
from .settings import TraySettings
from .xorg import XorgAssist

log = logging.getLogger("ctxos.daemon.tray")  # one logger name for the whole tray (tests and log filters)


@dataclass
class TrayState:
    score: int | None = None
    band: Band = UNKNOWN
    decay: int = 0
    conflict: int = 0
    paused: bool = False
    pause_supported: bool = True
    http_url: str | None = None
    pid: int | None = None
    error: str | None = None
    config_error: str | None = None  # "_config.yaml line 3: ..." while the file is broken
    refreshed_at: float | None = None
    # The per-user daemon's workspaces (status "workspaces.items"): name, state, memories, http.
    workspaces: list[dict[str, Any]] = field(default_factory=list)
    indexing: str | None = None  # "indexing 2,000 of 10,000" while the daemon builds its index

    def title(self) -> str:
        if self.error:
            return f"AI Context OS: {self.error}"
        if self.indexing:
            return f"AI Context OS: {self.indexing}" + (" - watching paused" if self.paused else "")
        score = "..." if self.score is None else str(self.score)
        text = f"AI Context OS: health {score} ({self.band.name}), {self.decay} decay, {self.conflict} conflict"
        text += " - watching paused" if self.paused else ""
        return text + (f" - CONFIG ERROR: {self.config_error}" if self.config_error else "")


def workspace_line(entry: dict[str, Any]) -> str:
    """One workspace in the tray's Workspaces submenu: ``notes (default): ready, 42 memories``."""
    state = entry.get("error") or entry.get("state") or "?"
    memories = f", {entry['memories']} memories" if isinstance(entry.get("memories"), int) else ""
    return f"{entry.get('name')}{' (default)' if entry.get('default') else ''}: {state}{memories}"


def _open_command() -> list[str] | None:
    if sys.platform == "darwin":
        return ["open"]
    if sys.platform == "win32":
        return None  # os.startfile
    return ["xdg-open"]


@dataclass
class TrayApp:
    """The tray's behaviour, independent of how it runs (thread or process) and of the backend.

    ``refresh`` reads the daemon and updates icon, tooltip, menu and
    notifications; the ``do_*`` methods are the menu actions.
    """

    root: Path
    backend: TrayBackend
    settings: TraySettings = field(default_factory=TraySettings)
    settings_source: Callable[[], TraySettings] | None = None  # re-read on each refresh (config reloads)
    on_quit: Callable[[], None] | None = None  # extra cleanup after asking the daemon to stop
    state: TrayState = field(default_factory=TrayState)
    icon: Any = None
    notifier: FindingNotifier | None = None
    sink: NotificationSink | None = None
    xorg: XorgAssist | None = None  # set once an xorg icon is docked (see tray_xorg)
    actions: list[str] = field(default_factory=list)  # what the menu did (status, tests)

    def __post_init__(self) -> None:
        self._refresh_lock = threading.Lock()
        self.closing = False  # set before the icon stops: updating a stopped xorg icon would block
        self._shown_look: tuple[Band, bool] = (UNKNOWN, False)  # what build_icon drew
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxos-tray-action")

    # ------------------------------------------------------------ pystray objects

    def build_icon(self, pystray: Any) -> Any:
        """Create the ``pystray.Icon`` with the menu (texts are callables, re-read on update_menu)."""
        item, menu = pystray.MenuItem, pystray.Menu
        s = self.state

        def info(text: Callable[[], str]) -> Any:
            return item(lambda _i: text(), None, enabled=False)

        def act(name: str, fn: Callable[[], Any]) -> Callable[[Any, Any], None]:
            return lambda _icon, _item: self.submit(name, fn)

        entries = (
            info(lambda: f"Health score: {'...' if s.score is None else s.score} ({s.band.name})"),
            info(lambda: f"Decay findings: {s.decay}"),
            info(lambda: f"Conflict findings: {s.conflict}"),
            item(
                lambda _i: f"Config error: {s.config_error}",
                None,
                enabled=False,
                visible=lambda _i: bool(s.config_error),
            ),
            menu.SEPARATOR,
            item(
                "Open web view",
                act("open_web_view", self.do_open_web_view),
                default=True,
                enabled=lambda _i: bool(s.http_url),
            ),
            item("Open workspace folder", act("open_workspace", self.do_open_workspace)),
            # The per-user daemon serves several workspaces: one line each, a click opens its page.
            item(
                "Workspaces", menu(lambda: tuple(self._workspace_items(item))), visible=lambda _i: len(s.workspaces) > 1
            ),
            item("Regenerate router files", act("regenerate_router", self.do_regenerate_router)),
            item(
                lambda _i: "Resume watching" if s.paused else "Pause watching",
                act("toggle_pause", self.do_toggle_pause),
                enabled=lambda _i: s.pause_supported,
            ),
            menu.SEPARATOR,
            item("Quit AI Context OS", act("quit", self.do_quit)),
        )
        # X window names and classes are Latin-1: keep the name ASCII whatever the folder is called.
        name = "ctxos-" + re.sub(r"[^A-Za-z0-9._-]", "_", self.root.name)
        self.icon = pystray.Icon(name, draw_icon(s.band, s.paused), s.title(), menu=menu(*entries))
        return self.icon

    def _workspace_items(self, item: Any) -> Iterator[Any]:
        def opener(name: str) -> Callable[[Any, Any], None]:
            return lambda _icon, _item: self.submit(f"open_web_view:{name}", lambda: self.do_open_web_view(name))

        for entry in list(self.state.workspaces):
            yield item(workspace_line(entry), opener(str(entry.get("name"))), enabled=bool(entry.get("http")))

    def attach_notifier(self, icon: Any, use_dbus: bool = True) -> None:
        from ctxos.services.runtime_paths import state_dir

        dbus = DBusNotifier() if use_dbus and sys.platform.startswith("linux") else None
        self.sink = NotificationSink(icon, dbus)
        store = SeenStore(state_dir(self.root) / SEEN_FILE)
        self.notifier = FindingNotifier(store, self.sink, self.settings.notify_min_interval_s)

    # ------------------------------------------------------------ reading the daemon

    def refresh(self) -> TrayState:
        """Re-read status, health and findings; update the icon, tooltip, menu and notifier."""
        with self._refresh_lock:
            s = self.state
            if self.settings_source is not None:
                try:
                    self.settings = self.settings_source()
                    if self.notifier is not None:
                        self.notifier.min_interval_s = self.settings.notify_min_interval_s
                except Exception as exc:  # noqa: BLE001 - keep the last good settings
                    log.debug("tray: settings not re-read: %s", exc)
            try:
                status = self.backend.call("status") or {}
                s.pid = status.get("pid")
                s.http_url = status.get("http") or None
                s.config_error = status.get("config_error") or None
                served = found if isinstance(found := status.get("workspaces"), dict) else {}
                s.workspaces = [w for w in served.get("items") or [] if isinstance(w, dict)]
                watcher = found if isinstance(found := status.get("watcher"), dict) else {}
                s.paused = bool(watcher.get("paused", False))
                indexing = status.get("indexing") if isinstance(status.get("indexing"), dict) else None
                s.indexing = str(indexing.get("text")) if indexing and indexing.get("text") else None
                if status.get("state") not in (None, "ready"):
                    s.error = None
                    s.score, s.band = None, UNKNOWN
                else:
                    health = self.backend.call("health") or {}
                    score = health.get("score") if isinstance(health, dict) else None
                    s.score = int(round(score)) if isinstance(score, (int, float)) else None
                    s.band = health_band(s.score, self.settings.good_from, self.settings.fair_from)
                    findings = _findings_of(self.backend.call("governance"))
                    s.decay = sum(1 for f in findings if f.get("kind") == "decay")
                    s.conflict = sum(1 for f in findings if f.get("kind") == "conflict")
                    s.error = None
                    if self.notifier is not None and self.settings.notifications:
                        self.notifier.observe(f for f in findings if f.get("kind") in NOTIFY_KINDS)
            except Exception as exc:  # noqa: BLE001 - the tray shows the problem; it never crashes the daemon
                if s.error is None:
                    log.warning("tray: could not read the daemon: %s", exc)
                s.error = "daemon not answering"
                s.score, s.band = None, UNKNOWN
            s.refreshed_at = time.time()
            self._apply_to_icon()
            return s

    def flush_notifications(self) -> None:
        if self.notifier is not None and self.settings.notifications:
            self.notifier.flush_if_due()

    def next_wakeup(self) -> float:
        due = self.notifier.due_in() if self.notifier is not None else None
        return self.settings.refresh_seconds if due is None else min(self.settings.refresh_seconds, max(0.05, due))

    def _apply_to_icon(self) -> None:
        icon = self.icon
        if icon is None or self.closing:
            return
        try:
            look = (self.state.band, self.state.paused)
            title = self.state.title()
            if self.xorg is not None:  # pystray's xorg backend: never its connection from this thread
                if look != self._shown_look:
                    self.xorg.set_image(draw_icon(*look))
                if title != icon.title:
                    self.xorg.set_title(title)
            else:
                if look != self._shown_look:
                    icon.icon = draw_icon(*look)
                if title != icon.title:
                    icon.title = title
                icon.update_menu()
            self._shown_look = look
        except Exception as exc:  # noqa: BLE001 - e.g. the icon is being torn down
            log.debug("tray: icon update failed: %s", exc)

    # ------------------------------------------------------------ menu actions

    def submit(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run an action off the UI thread (pystray's loop must not block on the daemon)."""
        return self._executor.submit(self._run_action, name, fn)

    def _run_action(self, name: str, fn: Callable[[], Any]) -> Any:
        self.actions.append(name)
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001
            log.warning("tray: %s failed: %s", name.replace("_", " "), exc)
            return None
        if name != "quit":
            self.refresh()
        return result

    def do_open_web_view(self, workspace: str | None = None) -> str | None:
        """Open the web view through a one-time log-in link (RPC ``web_login``), as ``ctxos open`` does.

        ``workspace``: another workspace of the per-user daemon (the link then lands on its page).
        """
        url = self.state.http_url or (self.backend.call("status") or {}).get("http")
        if not url:
            log.info("tray: the web view is off (daemon started with --no-http)")
            return None
        link = str(
            (self.backend.call("web_login", {"workspace": workspace} if workspace else {}) or {}).get("url") or ""
        )
        if not link:
            raise RuntimeError("the daemon gave no web view link")
        webbrowser.open(link)
        return link

    def do_open_workspace(self) -> str:
        target = str(self.root)
        command = _open_command()
        if command is None:
            os.startfile(target)  # type: ignore[attr-defined]  # Windows only
            return target
        program = shutil.which(command[0])
        if program is None:
            raise RuntimeError(f"{command[0]} not found; the workspace is {target}")
        subprocess.run(
            [program, *command[1:], target],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )
        return target

    def do_regenerate_router(self) -> Any:
        return self.backend.call("regenerate_router")

    def do_toggle_pause(self) -> Any:
        method = "resume_watching" if self.state.paused else "pause_watching"
        try:
            result = self.backend.call(method)
        except Exception as exc:
            if error_code(exc) == METHOD_NOT_FOUND:
                self.state.pause_supported = False
                log.warning("tray: this daemon has no %s method; pause/resume is disabled", method)
                self._apply_to_icon()
                return None
            raise
        if isinstance(result, dict) and "paused" in result:
            self.state.paused = bool(result["paused"])
        return result

    def do_quit(self) -> int | None:
        """Stop the daemon the way ``ctxos stop`` does (SIGTERM); it exits 0, so a service stays stopped."""
        pid = self.state.pid or (self.backend.call("status") or {}).get("pid")
        if not pid:
            raise RuntimeError("the daemon did not say its pid")
        log.info("tray: quit chosen; stopping the daemon (pid %s)", pid)
        os.kill(int(pid), signal.SIGTERM)
        if self.on_quit is not None:
            self.on_quit()
        return int(pid)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        if self.sink is not None:
            self.sink.close()


def _findings_of(result: Any) -> list[dict[str, Any]]:
    if isinstance(result, dict):
        result = result.get("findings", [])
    return [f for f in result if isinstance(f, dict)] if isinstance(result, list) else []
