"""Tray icon tests against a real X server.

What is real: an Xvfb display, Debian's ``trayer`` as the system tray that
docks the icon (pystray's ``xorg`` backend, ``PYSTRAY_BACKEND=xorg``), a D-Bus
session bus (``dbus-daemon``) with ``dunst`` as the notification server, the
daemon's real engine and RPC methods, real XTest mouse clicks, and pixels read
back from the docked icon window. ``dunst`` runs a recording script for each
notification it shows: that file is how the tests see notifications.

Stand-ins, because the real thing cannot run here: ``BROWSER`` and
``xdg-open`` are small scripts that record what they were asked to open (there
is no browser or file manager on this machine); everything up to launching
them is the tray's real code path.

Debian packages: ``apt-get install -y xvfb trayer dunst dbus`` (``.ci/run``
installs them when missing); without them these tests skip and say so.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ctxos.daemon import tray as tray_mod
from ctxos.daemon.tray.icon import FAIR, GOOD, POOR, UNKNOWN, draw_icon, health_band
from ctxos.daemon.tray.notify import FindingNotifier, FindingRef, Notification, SeenStore, compose
from daemon_helpers import daemon_factory, memory_text  # noqa: F401  (daemon_factory is a fixture)

X_TOOLS = ("Xvfb", "trayer", "dbus-daemon", "dunst")
MISSING_X_TOOLS = [t for t in X_TOOLS if shutil.which(t) is None]
needs_x = pytest.mark.skipif(
    bool(MISSING_X_TOOLS),
    reason=f"missing {', '.join(MISSING_X_TOOLS)}: apt-get install -y xvfb trayer dunst dbus (see .ci/run)",
)


# ============================================================================ no display needed


def test_health_bands_and_icon_colours() -> None:
    assert health_band(None) is UNKNOWN
    assert health_band(100) is GOOD and health_band(75) is GOOD
    assert health_band(74.9) is FAIR and health_band(50) is FAIR
    assert health_band(49) is POOR and health_band(0) is POOR
    assert health_band(60, good_from=60, fair_from=10) is GOOD
    for band in (GOOD, FAIR, POOR, UNKNOWN):
        image = draw_icon(band)
        assert image.size == (64, 64)
        assert image.getpixel((32, 32))[:3] == band.rgb
        assert image.getpixel((0, 0))[3] == 0  # transparent corners
    paused = draw_icon(GOOD, paused=True)
    assert (255, 255, 255) in {paused.getpixel((x, 32))[:3] for x in range(64)}


def test_display_problem() -> None:
    assert tray_mod.display_problem({}, "linux") == "no display (DISPLAY and WAYLAND_DISPLAY are not set)"
    assert tray_mod.display_problem({"DISPLAY": ":0"}, "linux") is None
    assert tray_mod.display_problem({"WAYLAND_DISPLAY": "wayland-0"}, "linux") is None
    assert tray_mod.display_problem({}, "darwin") is None


def test_mode_by_platform() -> None:
    settings = tray_mod.TraySettings()
    assert settings.resolved_mode("darwin") == "process"  # pystray must own the main thread there
    assert settings.resolved_mode("linux") == "thread"
    assert tray_mod.TraySettings(mode="process").resolved_mode("linux") == "process"


def _finding(kind: str, *ids: str) -> dict[str, Any]:
    return {"fingerprint": f"{kind}:{'+'.join(ids)}", "kind": kind, "ids": list(ids), "paths": []}


def test_notifier_once_per_finding_batched_and_never_a_storm(tmp_path: Path) -> None:
    """The batching rules, with the clock under the test's control (the delivery is a list here)."""
    now = [1000.0]
    sent: list[Notification] = []
    store = SeenStore(tmp_path / "seen.json")
    notifier = FindingNotifier(store, lambda n: sent.append(n) or True, min_interval_s=60, clock=lambda: now[0])

    first = [_finding("conflict", "a", "b"), _finding("decay", "old"), _finding("god_node", "hub")]
    note = notifier.observe(first)
    assert note is not None and len(sent) == 1
    assert sorted(note.fingerprints) == ["conflict:a+b", "decay:old"]  # other kinds are not announced
    assert "2 findings need your judgment" in note.title
    assert "1 conflict, 1 decaying memory" in note.message and "conflict: a vs b" in note.message

    assert notifier.observe(first) is None and len(sent) == 1  # once per finding

    now[0] += 10
    notifier.observe(first + [_finding("decay", "x")])
    notifier.observe(first + [_finding("decay", "x"), _finding("conflict", "c", "d")])
    assert len(sent) == 1 and notifier.pending == 2  # held back: interval not over
    assert notifier.due_in() == pytest.approx(50)
    assert notifier.flush_if_due() is None
    now[0] += 50
    batch = notifier.flush_if_due()
    assert batch is not None and len(sent) == 2
    assert sorted(batch.fingerprints) == ["conflict:c+d", "decay:x"]  # one batch for both
    assert notifier.due_in() is None

    # A burst of 500 new findings is still one notification, with a short body.
    now[0] += 60
    notifier.observe([_finding("decay", f"m{i}") for i in range(500)])
    assert len(sent) == 3 and sent[-1].message.count("\n") <= 6 and "495 more" in sent[-1].message

    # Persisted: a new notifier on the same file (a daemon restart) announces nothing old.
    again: list[Notification] = []
    restarted = FindingNotifier(SeenStore(tmp_path / "seen.json"), lambda n: again.append(n) or True, 0)
    assert restarted.observe(first + [_finding("decay", "m7")]) is None and again == []


def test_seen_store_tolerates_a_corrupt_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "seen.json"
    path.write_text("{not json")
    with caplog.at_level(logging.WARNING, "ctxos.daemon.tray"):
        store = SeenStore(path)
    assert len(store) == 0 and "unreadable" in caplog.text
    store.add(["a", "b"], 1.0)
    store.save()
    assert set(json.loads(path.read_text())["notified"]) == {"a", "b"}


def test_compose_grammar() -> None:
    one = compose([FindingRef("f", "decay", "old-note")])
    assert one.title.endswith("1 finding needs your judgment") and "1 decaying memory" in one.message


# ---------------------------------------------------------------------------- headless start


def _context(root: Path, tray: bool | None) -> Any:
    from ctxos.daemon.components import register_rpc_methods
    from ctxos.daemon.context import DaemonContext, DaemonOptions
    from ctxos.services.engine import Engine

    ctx = DaemonContext(root, Engine(root), options=DaemonOptions(http=False, tray=tray))
    register_rpc_methods(ctx.rpc)
    return ctx


@pytest.mark.parametrize("wanted", [None, True])
def test_headless_start_logs_one_line_and_runs_without_tray(
    wanted: bool | None,
    make_workspace: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    root = make_workspace()
    ctx = _context(root, wanted)

    async def scenario() -> dict[str, Any]:
        ctx.bind_loop(asyncio.get_running_loop())
        component = tray_mod.TrayComponent()
        await component.start(ctx)
        status = component.status()
        await component.stop()
        return status

    with caplog.at_level(logging.DEBUG, "ctxos.daemon.tray"):
        status = asyncio.run(scenario())
    lines = [r for r in caplog.records if r.name == "ctxos.daemon.tray"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert "no display" in lines[0].getMessage() and "running without a tray icon" in lines[0].getMessage()
    assert lines[0].levelno == (logging.WARNING if wanted else logging.INFO)
    assert status == {"shown": False, "reason": "no display (DISPLAY and WAYLAND_DISPLAY are not set)"}
    assert threading.active_count() < 20
    ctx.shutdown_executors()


def test_unreachable_display_logs_one_line(
    make_workspace: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """DISPLAY names a server that is not there: pystray fails; one warning, no exception, no retry."""
    monkeypatch.setenv("DISPLAY", ":187")
    monkeypatch.setenv("PYSTRAY_BACKEND", "xorg")
    root = make_workspace()
    ctx = _context(root, None)

    async def scenario() -> dict[str, Any]:
        ctx.bind_loop(asyncio.get_running_loop())
        component = tray_mod.TrayComponent()
        await component.start(ctx)
        await asyncio.sleep(0.3)  # a retry loop would log again in this time
        status = component.status()
        await component.stop()
        return status

    with caplog.at_level(logging.DEBUG, "ctxos.daemon.tray"):
        status = asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if r.name == "ctxos.daemon.tray"]
    assert len(lines) == 1 and "pystray could not start" in lines[0], lines
    assert status["shown"] is False and status["mode"] == "thread"
    ctx.shutdown_executors()


def test_headless_daemon_process_with_tray_flag(
    make_workspace: Callable[..., Path], daemon_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real daemon started with --tray and no display: it runs, answers, logs one tray line, exits 0."""
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    root = make_workspace({"04-skills/deploy.md": memory_text("deploy", "How we deploy")})
    daemon = daemon_factory(root, tray=True)
    status = daemon.status()
    assert status["tray"] == {"shown": False, "reason": "no display (DISPLAY and WAYLAND_DISPLAY are not set)"}
    assert daemon.call("get_memory", id="deploy")["id"] == "deploy"
    from ctxos.client.commands.daemon_cmds import format_status

    text = format_status({"running": True, **status})  # the text agrees with the JSON
    assert "tray running without an icon (no display" in text and "tray running," not in text
    assert daemon.stop() == 0
    tray_lines = [line for line in daemon.output().splitlines() if "tray" in line.lower()]
    assert len(tray_lines) == 1 and "running without a tray icon" in tray_lines[0], daemon.output()


# ============================================================================ real X server


class XSession:
    """Xvfb + trayer + a D-Bus session bus + dunst; the environment to run a tray in."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.procs: list[subprocess.Popen[bytes]] = []
        self.recorded = base / "notifications.tsv"
        self.env: dict[str, str] = {}

    def start(self) -> XSession:
        read_fd, write_fd = os.pipe()
        xvfb = subprocess.Popen(
            ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "640x480x24", "-nolisten", "tcp"],
            pass_fds=(write_fd,),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(xvfb)
        os.close(write_fd)
        number = b""
        while not number.endswith(b"\n"):
            chunk = os.read(read_fd, 16)
            if not chunk:
                raise RuntimeError("Xvfb exited before it named its display")
            number += chunk
        os.close(read_fd)
        display = f":{number.decode().strip()}"
        self.env = {"DISPLAY": display, "PYSTRAY_BACKEND": "xorg"}
        env = {**os.environ, **self.env}
        self.procs.append(
            subprocess.Popen(
                ["trayer", "--SetDockType", "true", "--expand", "false", "--width", "10"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        bus = subprocess.Popen(
            ["dbus-daemon", "--session", "--nofork", "--print-address=1"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(bus)
        assert bus.stdout is not None
        self.env["DBUS_SESSION_BUS_ADDRESS"] = bus.stdout.readline().decode().strip()
        script = self.base / "record.sh"
        script.write_text(
            "#!/bin/sh\nprintf '%s\\t%s\\t%s\\n' \"$DUNST_APP_NAME\" \"$DUNST_SUMMARY\" "
            f"\"$(printf '%s' \"$DUNST_BODY\" | tr '\\n' '|')\" >> '{self.recorded}'\n"
        )
        script.chmod(0o755)
        dunstrc = self.base / "dunstrc"
        dunstrc.write_text(
            f'[global]\n    font = Monospace 8\n[ctxos_record]\n    appname = "AI Context OS"\n    script = {script}\n'
        )
        self.procs.append(
            subprocess.Popen(
                ["dunst", "-config", str(dunstrc)],
                env={**env, **self.env},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        self._wait(self._tray_ready, "trayer to own the system tray selection")
        self._wait(self._notifications_ready, "dunst on the session bus")
        return self

    def _wait(self, predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise RuntimeError(f"timed out waiting for {what}")

    def display(self) -> Any:
        from Xlib import display as xdisplay

        return xdisplay.Display(self.env["DISPLAY"])

    def _tray_ready(self) -> bool:
        d = self.display()
        try:
            atom = d.intern_atom(f"_NET_SYSTEM_TRAY_S{d.get_default_screen()}")
            return d.get_selection_owner(atom) != 0
        finally:
            d.close()

    def _notifications_ready(self) -> bool:
        out = subprocess.run(
            [
                "dbus-send",
                "--session",
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.NameHasOwner",
                "string:org.freedesktop.Notifications",
            ],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
        )
        return "boolean true" in out.stdout

    def notifications(self) -> list[tuple[str, str, str]]:
        if not self.recorded.exists():
            return []
        return [tuple(line.split("\t", 2)) for line in self.recorded.read_text().splitlines()]  # type: ignore[misc]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)


@pytest.fixture(scope="module")
def xsession(tmp_path_factory: pytest.TempPathFactory) -> Iterator[XSession]:
    if MISSING_X_TOOLS:
        pytest.skip(f"missing {', '.join(MISSING_X_TOOLS)}: apt-get install -y xvfb trayer dunst dbus")
    session = XSession(tmp_path_factory.mktemp("xsession"))
    try:
        yield session.start()
    finally:
        session.stop()


@pytest.fixture
def xenv(xsession: XSession, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> XSession:
    """The X session's variables in this process, plus recording BROWSER/xdg-open stand-ins on PATH."""
    for key, value in xsession.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("browser", "xdg-open"):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\necho \"$@\" >> '{tmp_path / (name + '.log')}'\n")
        script.chmod(0o755)
    monkeypatch.setenv("BROWSER", str(bin_dir / "browser"))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    if xsession.recorded.exists():
        xsession.recorded.unlink()
    return xsession


def _opened(tmp_path: Path, name: str) -> list[str]:
    path = tmp_path / f"{name}.log"
    return path.read_text().splitlines() if path.exists() else []


def find_icon_window(session: XSession, workspace: Path) -> Any:
    """The docked icon's X window: pystray names its class ``<icon name>SystemTrayIcon``."""
    d = session.display()
    wanted = f"ctxos-{workspace.name}SystemTrayIcon"

    def walk(window: Any) -> Any:
        try:
            wm_class = window.get_wm_class()
        except Exception:  # noqa: BLE001 - a window destroyed while we walk
            wm_class = None
        if wm_class and wm_class[0] == wanted:
            return window
        for child in window.query_tree().children:
            found = walk(child)
            if found is not None:
                return found
        return None

    return d, walk(d.screen().root)


def icon_colour(display: Any, window: Any) -> tuple[int, int, int]:
    """The most common non-background colour of the icon as the X server shows it."""
    from PIL import Image

    geo = window.get_geometry()
    raw = window.get_image(0, 0, geo.width, geo.height, 2, 0xFFFFFFFF)  # ZPixmap
    image = Image.frombytes("RGB", (geo.width, geo.height), raw.data, "raw", "BGRX")
    data = image.tobytes()
    counts = Counter(tuple(data[i : i + 3]) for i in range(0, len(data), 3))
    background = tuple(image.getpixel((0, 0)))
    colour, _ = next((c, n) for c, n in counts.most_common() if c != background)
    return colour


def click(display: Any, window: Any) -> None:
    """A real left click (XTest) in the middle of ``window``."""
    from Xlib import X
    from Xlib.ext import xtest

    geo = window.get_geometry()
    pos = window.translate_coords(display.screen().root, 0, 0)
    display.screen().root.warp_pointer(-pos.x + geo.width // 2, -pos.y + geo.height // 2)
    display.sync()
    xtest.fake_input(display, X.ButtonPress, 1)
    xtest.fake_input(display, X.ButtonRelease, 1)
    display.sync()


def _icon_seen(display: Any, window: Any) -> str:
    """What the docked icon shows, for a timeout's message."""
    try:
        return f"shows {icon_colour(display, window)}"
    except StopIteration:
        return "shows one colour only"
    except Exception as exc:  # noqa: BLE001
        return repr(exc)


def _window_diag(window: Any) -> str:
    try:
        tree = window.query_tree()
        geo = window.get_geometry()
        return (
            f"{window} map_state {window.get_attributes().map_state}, parent {tree.parent}, "
            f"{geo.width}x{geo.height}+{geo.x}+{geo.y}"
        )
    except Exception as exc:  # noqa: BLE001
        return repr(exc)


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def close_colour(actual: tuple[int, int, int], expected: tuple[int, int, int], tol: int = 40) -> bool:
    return all(abs(a - e) <= tol for a, e in zip(actual, expected))


def shows_colour(display: Any, window: Any, expected: tuple[int, int, int]) -> bool:
    """True when the docked icon shows ``expected``; False (try again) while trayer re-embeds or redraws it."""
    from Xlib.error import XError

    try:
        return close_colour(icon_colour(display, window), expected)
    except (XError, StopIteration):
        return False


# ---------------------------------------------------------------------------- the tray in a daemon context


def _findings_workspace(make_workspace: Callable[..., Path]) -> Path:
    """A workspace with one decaying memory and one conflicting pair (real governance finds them)."""
    shared = (
        "Deploy the api service with blue green releases behind the load balancer, "
        "run database migrations first, then switch traffic and watch the error rate dashboards."
    )
    root = make_workspace(
        {
            "04-skills/deploy-new.md": memory_text("deploy-new", shared, type="skill", importance=0.9, tags=["deploy"]),
            "04-skills/deploy-old.md": memory_text(
                "deploy-old", shared + " Rollback by switching back.", type="skill", importance=0.2, tags=["deploy"]
            ),
            "05-resources/vendor-list.md": memory_text(
                "vendor-list",
                "Vendors we evaluated for log shipping in 2019.",
                type="resource",
                modified="2020-01-15",
                created="2019-11-02",
            ),
            # Clean memories of other types, so a broken file has a cleanliness share to lower.
            "08-rules/review.md": memory_text("review", "Every change gets a second reviewer.", type="rule"),
            "06-decisions/queue.md": memory_text(
                "queue", "We chose a managed queue over running our own brokers.", type="decision"
            ),
            "07-tasks/rotate-keys.md": memory_text(
                "rotate-keys", "Rotate the signing keys before the audit.", type="task"
            ),
            "01-context/team.md": memory_text("team", "Four engineers, one designer, weekly planning.", type="context"),
            "03-projects/search.md": memory_text(
                "search", "The search project adds typo tolerance to queries.", type="project"
            ),
        }
    )
    (root / "_config.yaml").write_text(
        textwrap.dedent("""\
        tray:
          notify_min_interval_s: 0
          min_refresh_gap_s: 0
          refresh_seconds: 300
        """)
    )
    return root


async def _until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll without blocking the loop (the tray's threads need it to answer their RPC calls)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await asyncio.to_thread(predicate)
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


def _menu_item(app: Any, text: str) -> Any:
    return next(item for item in app.icon.menu.items if item.text == text)


async def _activate(app: Any, text: str) -> Any:
    """Activate a menu item the way every pystray backend does: ``item(icon)``; wait for the action."""
    future = _menu_item(app, text)(app.icon)
    return await asyncio.wrap_future(future)


async def _refreshed(component: Any, after: float) -> None:
    app = component.runner.app
    await _until(lambda: (app.state.refreshed_at or 0) > after, what="a tray refresh")


@needs_x
def test_tray_icon_menu_band_and_notifications_in_daemon_context(
    xenv: XSession, make_workspace: Callable[..., Path], tmp_path: Path
) -> None:
    from ctxos.daemon.context import DaemonOptions
    from ctxos.daemon.http_server import HttpServerComponent

    root = _findings_workspace(make_workspace)
    ctx = _context(root, True)
    ctx.options = DaemonOptions(http=True, http_port=0, tray=True)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        ctx.bind_loop(loop)
        quit_requested = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, quit_requested.set)  # as the daemon's main does
        await ctx.run_write(ctx.engine.load)
        ctx.mark_ready()
        http = HttpServerComponent()
        await http.start(ctx)
        from ctxos.daemon.watcher import WatcherComponent

        watcher = WatcherComponent()  # real watcher: the menu's pause/resume acts on it
        await watcher.start(ctx)
        component = tray_mod.TrayComponent()
        t0 = time.time()
        await component.start(ctx)
        try:
            status = component.status()
            assert status["shown"] and status["pystray_backend"] == "xorg" and status["notifications"] == "dbus"
            await _refreshed(component, t0)
            app = component.runner.app

            # The icon is docked in trayer, and its pixels are the band of the real health score.
            health = await ctx.rpc.call(ctx, "health", {})
            score = int(health["score"])
            assert app.state.score == score
            display, window = await asyncio.to_thread(find_icon_window, xenv, root)
            assert window is not None, "no docked icon window"
            await _until(
                lambda: window.get_attributes().map_state == 2,
                timeout=25.0,
                what=lambda: f"the icon to be viewable ({_window_diag(window)})",
            )
            expected = health_band(score)
            await _until(lambda: shows_colour(display, window, expected.rgb), what="band colour")

            # Menu texts come from the daemon.
            governance = await ctx.rpc.call(ctx, "governance", {})
            kinds = Counter(f["kind"] for f in governance["findings"])
            assert kinds["decay"] >= 1 and kinds["conflict"] >= 1, governance
            texts = [item.text for item in app.icon.menu.items if item.text]
            assert f"Health score: {score} ({expected.name})" in texts
            assert f"Decay findings: {kinds['decay']}" in texts
            assert f"Conflict findings: {kinds['conflict']}" in texts

            # One notification for the new findings, through the real notification server.
            await _until(lambda: xenv.notifications(), what="a desktop notification")
            first = xenv.notifications()
            assert len(first) == 1
            app_name, summary, body = first[0]
            n_new = kinds["decay"] + kinds["conflict"]
            assert app_name == "AI Context OS" and f"{n_new} findings need your judgment" in summary
            assert "vendor-list" in body and "deploy-new" in body

            # The health band changes the icon: thresholds moved around the real score ...
            (root / "_config.yaml").write_text(
                f"tray:\n  notify_min_interval_s: 0\n  min_refresh_gap_s: 0\n  band_good_from: {score + 1}\n  band_fair_from: 0\n"
            )
            await ctx.run_write(ctx.engine.reload_config)
            t1 = time.time()
            component.runner.trigger_refresh()
            await _refreshed(component, t1)
            assert app.state.band is FAIR
            await _until(lambda: shows_colour(display, window, FAIR.rgb), what="amber icon")

            # ... and the score itself moving: a broken file lowers cleanliness, the band drops to red.
            (root / "_config.yaml").write_text(
                f"tray:\n  notify_min_interval_s: 0\n  min_refresh_gap_s: 0\n  band_good_from: {score}\n  band_fair_from: {score}\n"
            )
            await ctx.run_write(ctx.engine.reload_config)
            t2 = time.time()
            component.runner.trigger_refresh()
            await _refreshed(component, t2)
            assert app.state.band is GOOD
            await _until(lambda: shows_colour(display, window, GOOD.rgb), what="green icon")
            (root / "09-scratch").mkdir(exist_ok=True)
            for i in range(3):
                (root / f"09-scratch/broken-{i}.md").write_text("---\nid: [unclosed\n---\nbody\n")
            summary_obj = await ctx.run_write(ctx.engine.apply_changes, [f"09-scratch/broken-{i}.md" for i in range(3)])
            t3 = time.time()
            await ctx.notify_change(summary_obj)  # the change-listener path the watcher uses
            await _refreshed(component, t3)
            assert app.state.score is not None and app.state.score < score, (app.state.score, score)
            assert app.state.band is POOR
            await _until(lambda: shows_colour(display, window, POOR.rgb), what="red icon")

            # Still one notification: nothing new of the announced kinds.
            assert len(xenv.notifications()) == 1
            # A new decaying memory: exactly one more notification, about it alone.
            (root / "05-resources/old-runbook.md").write_text(
                memory_text(
                    "old-runbook", "Runbook for the retired batch cluster.", type="resource", modified="2019-03-01"
                )
            )
            summary_obj = await ctx.run_write(ctx.engine.apply_changes, ["05-resources/old-runbook.md"])
            await ctx.notify_change(summary_obj)
            await _until(lambda: len(xenv.notifications()) == 2, what="a second notification")
            _, summary2, body2 = xenv.notifications()[1]
            assert "1 finding needs your judgment" in summary2 and "old-runbook" in body2
            seen = json.loads((root / ".ctxos/tray-notified.json").read_text())["notified"]
            assert len(seen) == n_new + 1

            # A broken _config.yaml: the tooltip and a menu line name the file and line.
            good_config = (root / "_config.yaml").read_text()
            (root / "_config.yaml").write_text(good_config + "query: [oops\n")
            await ctx.run_write(ctx.engine.reload_config)
            t4 = time.time()
            component.runner.trigger_refresh()
            await _refreshed(component, t4)
            line = len(good_config.splitlines()) + 1
            assert f"CONFIG ERROR: _config.yaml line {line}: not valid YAML" in app.icon.title
            texts = [item.text for item in app.icon.menu.items if item.text and item.visible]
            assert any(t.startswith(f"Config error: _config.yaml line {line}") for t in texts), texts
            (root / "_config.yaml").write_text(good_config)
            await ctx.run_write(ctx.engine.reload_config)
            t5 = time.time()
            component.runner.trigger_refresh()
            await _refreshed(component, t5)
            assert "CONFIG ERROR" not in app.icon.title
            assert not any(
                t.startswith("Config error")
                for t in (item.text for item in app.icon.menu.items if item.text and item.visible)
            )

            # Menu actions call the daemon.
            (root / "claude.md").unlink(missing_ok=True)
            router = await _activate(app, "Regenerate router files")
            assert any(f["status"] == "written" for f in router["files"]), router
            assert (root / "claude.md").is_file()
            opened = await _activate(app, "Open workspace folder")
            assert opened == str(root) and _opened(tmp_path, "xdg-open") == [str(root)]
            url = await _activate(app, "Open web view")
            # a one-time log-in link (as `ctxos open` gives), never the bare page or the token
            assert url.startswith(ctx.http_url + "/login?code=") and _opened(tmp_path, "browser") == [url]

            # A real click on the docked icon runs the default item (Open web view).
            await asyncio.to_thread(click, display, window)

            def _diag() -> str:
                qp = display.screen().root.query_pointer()
                pos = window.translate_coords(display.screen().root, 0, 0)
                return (
                    f"pointer {qp.root_x},{qp.root_y} child {qp.child}, icon at {-pos.x},{-pos.y} "
                    f"{window.get_geometry().width}x{window.get_geometry().height}, win {window}"
                )

            await _until(
                lambda: len(_opened(tmp_path, "browser")) == 2,
                what=lambda: f"the click to open the web view (tray actions: {app.actions}) {_diag()}",
            )

            await _activate(app, "Pause watching")
            assert app.state.pause_supported and app.state.paused
            assert watcher.status()["paused"] and _menu_item(app, "Resume watching") is not None
            await _activate(app, "Resume watching")
            assert not app.state.paused and not watcher.status()["paused"]

            await _activate(app, "Quit AI Context OS")
            await asyncio.wait_for(quit_requested.wait(), 5)  # SIGTERM reached this process
            assert app.actions == [
                "regenerate_router",
                "open_workspace",
                "open_web_view",
                "open_web_view",
                "toggle_pause",
                "toggle_pause",
                "quit",
            ]
            display.close()
        finally:
            await component.stop()
            await watcher.stop()
            await http.stop()
            loop.remove_signal_handler(signal.SIGTERM)

        # Restarted tray: the persisted seen-set means no repeat notification.
        again = tray_mod.TrayComponent()
        t4 = time.time()
        await again.start(ctx)
        try:
            await _refreshed(again, t4)
            await asyncio.sleep(0.3)
            assert len(xenv.notifications()) == 2
        finally:
            await again.stop()
        display, window = await asyncio.to_thread(find_icon_window, xenv, root)
        display.close()
        assert window is None, "icon window left behind after stop"

    asyncio.run(scenario())
    ctx.write_sync(ctx.engine.close)
    ctx.shutdown_executors()


@needs_x
def test_only_pystrays_loop_uses_its_x_connection_and_it_never_paints(
    xenv: XSession, make_workspace: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Showing the icon touches pystray's python-xlib connection from its loop thread only.

    pystray's own ``visible = True`` sent its hand-offs on that connection from the setup
    thread, and about one tray start in four here never got past it (daemon/tray/xorg.py,
    ``show_icon``). Also no paint by pystray's loop (a round trip on that connection): the
    tray paints through its own connections. Counted at pystray's class: before the change
    the setup thread sent 2 hand-offs and the loop painted 3 times, on every run.
    """
    import pystray._xorg as pystray_xorg

    painted: list[str] = []
    sent_from: list[str] = []
    original_draw, original_send = pystray_xorg.Icon._draw, pystray_xorg.Icon._send_message

    def counting_draw(self: Any) -> None:
        painted.append(threading.current_thread().name)
        original_draw(self)

    def counting_send(self: Any, *args: Any, **kwargs: Any) -> None:
        sent_from.append(threading.current_thread().name)
        original_send(self, *args, **kwargs)

    monkeypatch.setattr(pystray_xorg.Icon, "_draw", counting_draw)
    monkeypatch.setattr(pystray_xorg.Icon, "_send_message", counting_send)
    root = make_workspace(
        {"05-resources/note.md": memory_text("note", "A note to have a health score.", type="resource")}
    )
    # No desktop notification: dunst stacks a duplicate of one still on screen instead of running
    # the recording script, and the other tests here wait for theirs.
    config = root / "_config.yaml"
    config.write_text((config.read_text() if config.exists() else "") + "\ntray:\n  notifications: false\n")
    ctx = _context(root, True)

    async def scenario() -> None:
        ctx.bind_loop(asyncio.get_running_loop())
        await ctx.run_write(ctx.engine.load)
        ctx.mark_ready()
        component = tray_mod.TrayComponent()
        t0 = time.time()
        await component.start(ctx)
        try:
            status = component.status()
            assert status["shown"] and status["notifications"] == "log", status
            await _refreshed(component, t0)
            display, window = await asyncio.to_thread(find_icon_window, xenv, root)
            try:
                assert window is not None, "no docked icon window"
                state = component.runner.app.state  # a later refresh may move the band: the icon follows it
                await _until(
                    lambda: shows_colour(display, window, state.band.rgb),
                    what=lambda: (
                        f"the icon painted by the tray ({state.band.name} {state.band.rgb}; "
                        f"{_icon_seen(display, window)}; {_window_diag(window)})"
                    ),
                )
            finally:
                display.close()
        finally:
            await component.stop()

    asyncio.run(scenario())
    ctx.write_sync(ctx.engine.close)
    ctx.shutdown_executors()
    assert painted == [], f"pystray painted on its own connection from {painted}"
    assert sent_from and set(sent_from) == {"ctxos-tray"}, sent_from  # the dock request, from the loop only


@needs_x
def test_tray_process_mode_over_the_socket(xenv: XSession, make_workspace: Callable[..., Path]) -> None:
    """The macOS design (tray in its own process, on its main thread, via the socket), run on Linux."""
    from ctxos.daemon.ipc_server import IpcServerComponent

    root = _findings_workspace(make_workspace)
    (root / "_config.yaml").write_text("tray:\n  mode: process\n  notifications: false\n  min_refresh_gap_s: 0\n")
    ctx = _context(root, True)

    async def scenario() -> None:
        from ctxos.daemon.watcher import WatcherComponent

        ctx.bind_loop(asyncio.get_running_loop())
        await ctx.run_write(ctx.engine.load)
        ctx.mark_ready()
        watcher = WatcherComponent()
        await watcher.start(ctx)
        ipc = IpcServerComponent()
        await ipc.start(ctx)
        component = tray_mod.TrayComponent()
        await component.start(ctx)
        try:
            status = component.status()
            assert status["shown"] and status["mode"] == "process", status
            child = component.child
            assert child is not None and child.pid != os.getpid()
            display, window = await _until(
                lambda: (lambda d_w: d_w if d_w[1] is not None else None)(find_icon_window(xenv, root)),
                what="the child's icon",
            )
            health = await ctx.rpc.call(ctx, "health", {})
            expected = health_band(int(health["score"]))
            await _until(
                lambda: shows_colour(display, window, expected.rgb), what="the child's icon in the band colour"
            )
            # No change listener across processes: the child notices the watcher's next batch
            # (here: the config edit moving the thresholds) by polling `status`, then refreshes.
            other = POOR if expected is not POOR else GOOD
            bounds = "band_good_from: 101\n  band_fair_from: 101" if other is POOR else "band_good_from: 0"
            (root / "_config.yaml").write_text(
                f"tray:\n  mode: process\n  notifications: false\n  min_refresh_gap_s: 0\n  {bounds}\n"
            )
            await _until(
                lambda: shows_colour(display, window, other.rgb), timeout=20, what="the child's icon to follow a change"
            )
            display.close()
        finally:
            await component.stop()
            await ipc.stop()
            await watcher.stop()
        assert component.child is not None and component.child.returncode == 0
        display, window = await asyncio.to_thread(find_icon_window, xenv, root)
        display.close()
        assert window is None

    asyncio.run(scenario())
    ctx.write_sync(ctx.engine.close)
    ctx.shutdown_executors()


@needs_x
def test_daemon_process_shows_tray_click_opens_web_view_and_notifies(
    xenv: XSession, make_workspace: Callable[..., Path], daemon_factory: Any, tmp_path: Path
) -> None:
    """End to end: `ctxos daemon --tray` as a real process on the Xvfb display."""
    root = _findings_workspace(make_workspace)
    daemon = daemon_factory(root, tray=True, http=True)
    tray = daemon.wait_for(
        lambda: (daemon.status().get("tray") or {}).get("score") is not None and daemon.status()["tray"],
        message="the tray's first refresh",
    )
    assert tray["shown"] and tray["mode"] == "thread" and tray["pystray_backend"] == "xorg", tray
    assert tray["notifications"] == "dbus"
    display, window = wait_until(
        lambda: (lambda d_w: d_w if d_w[1] is not None else None)(find_icon_window(xenv, root)),
        what="the daemon's docked icon",
    )
    wait_until(lambda: window.get_attributes().map_state == 2, what="the icon to be viewable")
    score = daemon.call("health")["score"]
    wait_until(lambda: shows_colour(display, window, health_band(score).rgb), what="the band colour")

    notes = wait_until(xenv.notifications, what="the findings notification")
    assert len(notes) == 1 and "findings need your judgment" in notes[0][1]

    click(display, window)
    url = daemon.http_url
    opened = wait_until(lambda: _opened(tmp_path, "browser"), what="the click to open the web view")
    assert len(opened) == 1 and opened[0].startswith(url + "/login?code="), opened
    assert daemon.status()["tray"]["actions"] == ["open_web_view"]

    assert daemon.stop() == 0
    display.close()
    display, window = find_icon_window(xenv, root)
    display.close()
    assert window is None
    assert len(xenv.notifications()) == 1


@needs_x
def test_agent_flag_over_mcp_reaches_the_queue_and_one_tray_notification(
    xenv: XSession, make_workspace: Callable[..., Path], daemon_factory: Any
) -> None:
    """An agent flags a memory through ``ctxos mcp`` (stdio): it is in ``ctxos governance`` and dunst shows it once."""
    from mcp import Client, StdioServerParameters
    from mcp_types import Implementation

    root = make_workspace(
        {
            "04-skills/deploy.md": memory_text("deploy", "Deploy with the release checklist.", type="skill"),
            "08-rules/review.md": memory_text("review", "Every change gets a second reviewer.", type="rule"),
        }
    )
    (root / "_config.yaml").write_text("tray:\n  notify_min_interval_s: 0\n  min_refresh_gap_s: 0\n")
    daemon = daemon_factory(root, tray=True)
    daemon.wait_for(
        lambda: (daemon.status().get("tray") or {}).get("score") is not None, message="the tray's first refresh"
    )
    assert xenv.notifications() == []  # nothing needs judgment yet
    ctxos = shutil.which("ctxos") or str(Path(sys.executable).with_name("ctxos"))
    params = StdioServerParameters(
        command=ctxos,
        args=["--workspace", str(root), "mcp"],
        env={
            "CTXOS_RUNTIME_DIR": os.environ["CTXOS_RUNTIME_DIR"],
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", "/tmp"),
        },
    )

    async def agent() -> Any:
        async with Client(params, client_info=Implementation(name="claude-test", version="1")) as client:
            return await client.call_tool(
                "flag_memory", {"id": "deploy", "kind": "stale", "reason": "we deploy with the new pipeline now"}
            )

    flagged = asyncio.run(agent())
    assert not flagged.is_error, flagged.content
    queue = subprocess.run(
        [ctxos, "--workspace", str(root), "governance", "--kind", "flag", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    [finding] = json.loads(queue.stdout)["findings"]
    assert finding["ids"] == ["deploy"] and finding["evidence"]["flags"][0]["by"] == "claude-test via MCP"
    [(app, summary, body)] = wait_until(xenv.notifications, what="the flag's notification")
    assert app == "AI Context OS" and "1 finding needs your judgment" in summary, summary
    assert "1 flagged by agents" in body and "flag: deploy (stale)" in body, body
    # Once per finding: a later refresh (another change) does not announce it again.
    daemon.call("log_session", event="unrelated change")
    time.sleep(1.0)
    assert len(xenv.notifications()) == 1
