"""The tray icon (pystray): health at a glance, a few actions, notifications for new findings.

Design, and why:

- **Optional and quiet.** ``--tray`` forces it, ``--no-tray`` turns it off, the
  default tries when a display is present. With no display (servers, CI, SSH)
  the component logs one line and the daemon runs as before: no exception, no
  retry loop. Any failure to import pystray or to dock the icon is the same
  single line.
- **Threads on Linux and Windows, a process on macOS.** pystray's macOS backend
  must own the process's main thread, which the daemon's asyncio loop already
  owns. So on macOS (``tray.mode: auto`` -> ``process``) the component starts
  ``python -m ctxos.daemon.tray --workspace ROOT``: that child runs the icon on
  *its* main thread and talks to the daemon over the workspace's Unix socket,
  like any client. Elsewhere (``auto`` -> ``thread``) the icon runs in its own
  thread in the daemon and calls the RPC registry on the daemon's loop. Both
  modes share :class:`TrayApp`; both run on Linux, which is how the process
  mode is tested.
- **The tray only calls the daemon.** Every number and every action goes
  through the same RPC methods the CLI uses (``status``, ``health``,
  ``governance``, ``regenerate_router``, ``pause_watching``/``resume_watching``),
  via :class:`LoopBackend` (in-process) or :class:`SocketBackend`.
- **Refresh on change.** The tray re-reads health and findings after every
  applied batch of file changes (a change listener; coalesced, at most one
  refresh per ``tray.min_refresh_gap_s``, 30 s, because health and governance
  cost seconds on a workspace of a thousand memories) and every ``tray.refresh_seconds`` for what
  changes with time alone (decay).
- **pystray's xorg backend** (the fallback on Linux without PyGObject) has no
  menu and no notifications: a left click runs the default item (Open web view,
  where everything in the menu is also available) and notifications go over
  D-Bus directly (``tray_notify``). Its click, redraw and stop problems are
  worked around in ``tray_xorg``.
"""

from __future__ import annotations

import argparse
import asyncio
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
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .tray_icon import UNKNOWN, Band, draw_icon, health_band
from .tray_notify import NOTIFY_KINDS, SEEN_FILE, DBusNotifier, FindingNotifier, NotificationSink, SeenStore
from .tray_xorg import XorgAssist, is_xorg_icon

if TYPE_CHECKING:  # pragma: no cover
    from .context import DaemonContext

log = logging.getLogger("ctxos.daemon.tray")

METHOD_NOT_FOUND = -32601
CALL_TIMEOUT_S = 60.0
SHOW_TIMEOUT_S = 15.0  # import pystray + dock the icon
STOP_TIMEOUT_S = 5.0
PROBE_INTERVAL_S = 5.0  # process mode: how often the child asks `status` whether files changed
READY_PREFIX = "ctxos-tray:"  # the child's first stdout line: "ctxos-tray: shown" or "ctxos-tray: failed: why"


# ---------------------------------------------------------------------------- settings


@dataclass
class TraySettings:
    good_from: float = 75.0
    fair_from: float = 50.0
    refresh_seconds: float = 300.0
    min_refresh_gap_s: float = 30.0
    notify_min_interval_s: float = 300.0
    notifications: bool = True
    mode: str = "auto"

    @classmethod
    def from_config(cls, config: Any) -> TraySettings:
        base = cls()

        def get(key: str, default: Any) -> Any:
            value = config.get(f"tray.{key}", default) if config is not None else default
            return default if value is None else value

        return cls(
            good_from=float(get("band_good_from", base.good_from)),
            fair_from=float(get("band_fair_from", base.fair_from)),
            refresh_seconds=max(5.0, float(get("refresh_seconds", base.refresh_seconds))),
            min_refresh_gap_s=max(0.0, float(get("min_refresh_gap_s", base.min_refresh_gap_s))),
            notify_min_interval_s=max(0.0, float(get("notify_min_interval_s", base.notify_min_interval_s))),
            notifications=bool(get("notifications", base.notifications)),
            mode=str(get("mode", base.mode)),
        )

    def resolved_mode(self, platform: str | None = None) -> str:
        if self.mode in ("thread", "process"):
            return self.mode
        return "process" if (platform or sys.platform) == "darwin" else "thread"


def display_problem(env: Mapping[str, str] | None = None, platform: str | None = None) -> str | None:
    """Why there is certainly no display to show a tray on, or None when one may be there."""
    env = os.environ if env is None else env
    platform = platform or sys.platform
    if platform in ("darwin", "win32"):
        return None  # a GUI session is the norm; a failure to show is caught and logged once
    if env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"):
        return None
    return "no display (DISPLAY and WAYLAND_DISPLAY are not set)"


# ---------------------------------------------------------------------------- talking to the daemon


class TrayBackend(Protocol):
    def call(self, method: str, params: dict[str, Any] | None = None) -> Any: ...


class LoopBackend:
    """In-process: run RPC methods on the daemon's loop from the tray's threads."""

    def __init__(self, ctx: DaemonContext, loop: asyncio.AbstractEventLoop) -> None:
        self.ctx = ctx
        self.loop = loop

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        future = asyncio.run_coroutine_threadsafe(self.ctx.rpc.call(self.ctx, method, params or {}), self.loop)
        try:
            return future.result(CALL_TIMEOUT_S)
        except BaseException:
            future.cancel()
            raise


class SocketBackend:
    """Out of process (macOS, or ``tray.mode: process``): the daemon's Unix socket."""

    def __init__(self, root: Path) -> None:
        from ctxos.client import DaemonClient

        self.client = DaemonClient.for_workspace(root, timeout=CALL_TIMEOUT_S)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.client.call(method, params or {})

    def close(self) -> None:
        self.client.close()


def _error_code(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) else None


# ---------------------------------------------------------------------------- state and app


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
            if _error_code(exc) == METHOD_NOT_FOUND:
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


# ---------------------------------------------------------------------------- running the icon


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
            icon.visible = True
            if is_xorg_icon(icon):
                self.app.xorg = XorgAssist(icon, on_click=lambda: icon())  # icon(): the default menu item
                if not self.app.xorg.ensure_embedded():
                    raise RuntimeError("the system tray on this display did not embed the icon")
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


# ---------------------------------------------------------------------------- daemon component


class TrayComponent:
    """Daemon component: the tray in a thread (Linux, Windows) or a child process (macOS)."""

    name = "tray"

    def __init__(self) -> None:
        self.ctx: DaemonContext | None = None
        self.runner: TrayRunner | None = None
        self.thread: threading.Thread | None = None
        self.child: asyncio.subprocess.Process | None = None
        self._child_watch: asyncio.Task[None] | None = None
        self._stopping = False
        self._info: dict[str, Any] = {"shown": False}

    async def start(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        ctx.add_status_provider("tray", self.status)
        wanted = getattr(ctx.options, "tray", None)
        if wanted is False:
            self._info = {"shown": False, "reason": "turned off (--no-tray)"}
            return
        problem = display_problem()
        if problem:
            # The one line for a headless start; nothing retries.
            (log.warning if wanted else log.info)("tray: %s; running without a tray icon", problem)
            self._info = {"shown": False, "reason": problem}
            return
        settings = TraySettings.from_config(ctx.config)
        mode = settings.resolved_mode()
        if mode == "process":
            await self._start_process(ctx)
        else:
            await self._start_thread(ctx, settings)

    async def _start_thread(self, ctx: DaemonContext, settings: TraySettings) -> None:
        loop = asyncio.get_running_loop()
        app = TrayApp(
            ctx.root, LoopBackend(ctx, loop), settings, settings_source=lambda: TraySettings.from_config(ctx.config)
        )
        self.runner = runner = TrayRunner(app)
        self.thread = threading.Thread(target=runner.run_icon, name="ctxos-tray", daemon=True)
        self.thread.start()
        outcome = await loop.run_in_executor(None, runner.wait_shown)
        if outcome != "shown":
            log.warning("tray: %s; running without a tray icon", outcome.removeprefix("failed: "))
            self._info = {"shown": False, "mode": "thread", "reason": outcome}
            await loop.run_in_executor(None, self._join_thread)
            self.runner = None
            return
        ctx.add_change_listener(self._on_change)
        log.info(
            "tray: icon shown (pystray backend %s, notifications via %s)",
            runner.backend_name,
            app.sink.channel if app.sink else "none",
        )

    async def _start_process(self, ctx: DaemonContext) -> None:
        argv = [sys.executable, "-m", "ctxos.daemon.tray", "--workspace", str(ctx.root)]
        self.child = child = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None
        )
        try:
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), SHOW_TIMEOUT_S + 5)
        except TimeoutError:
            line = b""
        outcome = line.decode("utf-8", "replace").strip().removeprefix(READY_PREFIX).strip() or "failed: no answer"
        if outcome != "shown":
            log.warning("tray: %s; running without a tray icon", outcome.removeprefix("failed: "))
            self._info = {"shown": False, "mode": "process", "reason": outcome}
            await self._end_child()
            return
        self._info = {"shown": True, "mode": "process", "pid": child.pid}
        self._child_watch = asyncio.create_task(self._watch_child())
        log.info("tray: icon shown by child process %d", child.pid)

    async def _watch_child(self) -> None:
        child = self.child
        if child is None:
            return
        code = await child.wait()
        if not self._stopping:
            log.warning("tray: the tray process exited (code %s); continuing without a tray icon", code)
            self._info = {"shown": False, "mode": "process", "reason": f"tray process exited with {code}"}

    async def _end_child(self) -> None:
        child = self.child
        if child is None or child.returncode is not None:
            return
        if child.stdin is not None:
            child.stdin.close()  # EOF on stdin tells the child to stop
        try:
            await asyncio.wait_for(child.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            child.terminate()
            try:
                await asyncio.wait_for(child.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                child.kill()
                await child.wait()

    def _on_change(self, _summary: Any) -> None:
        if self.runner is not None:
            self.runner.trigger_refresh()

    def _join_thread(self) -> None:
        if self.thread is not None:
            self.thread.join(STOP_TIMEOUT_S)

    async def stop(self) -> None:
        self._stopping = True
        loop = asyncio.get_running_loop()
        if self.runner is not None:
            runner = self.runner
            # Off the loop: stopping waits for the refresh thread, whose RPC calls need the loop running.
            await loop.run_in_executor(None, runner.stop)
            await loop.run_in_executor(None, self._join_thread)
            await loop.run_in_executor(None, runner.app.close)
        if self.child is not None:
            await self._end_child()
            if self._child_watch is not None:
                await self._child_watch

    def status(self) -> dict[str, Any]:
        if self.runner is not None:
            return {"mode": "thread", **self.runner.status()}
        return dict(self._info)


# ---------------------------------------------------------------------------- process mode entry point


def process_main(argv: list[str] | None = None) -> int:
    """``python -m ctxos.daemon.tray --workspace ROOT``: the tray in its own process (macOS's main thread).

    Prints one ``ctxos-tray: shown`` / ``ctxos-tray: failed: ...`` line for the
    parent, then runs until stdin reaches EOF (the daemon stopping or dying) or Quit.
    """
    parser = argparse.ArgumentParser(
        prog="ctxos-tray", description="AI Context OS tray icon (talks to the daemon's socket)"
    )
    parser.add_argument("--workspace", "-w", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = Path(args.workspace).expanduser().resolve()
    from ctxos.services.config import load_config

    backend = SocketBackend(root)
    app = TrayApp(
        root,
        backend,
        TraySettings.from_config(load_config(root)),
        settings_source=lambda: TraySettings.from_config(load_config(root)),
    )
    runner = TrayRunner(app, change_probe=lambda: ((backend.call("status") or {}).get("watcher") or {}).get("batches"))
    app.on_quit = runner.stop

    def announce() -> None:
        outcome = runner.wait_shown()
        print(f"{READY_PREFIX} {outcome}", flush=True)
        if outcome == "shown":
            sys.stdin.read()  # blocks until the daemon closes our stdin (or dies)
            runner.stop()

    announcer = threading.Thread(target=announce, name="ctxos-tray-parent", daemon=True)
    announcer.start()
    runner.run_icon()  # this thread owns the UI: what pystray requires on macOS
    if runner.outcome != "shown":
        announcer.join(STOP_TIMEOUT_S)  # make sure the parent hears why before we exit
    app.close()
    backend.close()
    return 0 if runner.outcome == "shown" else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(process_main())
