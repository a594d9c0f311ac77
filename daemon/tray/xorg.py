"""Work-arounds for pystray 0.19.5's ``xorg`` backend, over X connections of our own.

pystray's xorg backend (the Linux fallback without PyGObject) was seen here to:

1. create its icon window without ``ButtonPressMask``, so clicks never arrive
   (pystray issue #151: "callbacks not working");
2. send a fresh dock request on every ``Icon.icon`` change, after which the
   tray host (trayer) sometimes re-embeds the icon into a 1-pixel-wide slot;
3. hand ``title``/``icon``/``stop`` to its loop thread through one reply
   queue shared by all such hand-offs, while other threads use the same
   python-xlib connection: seen here, ``stop()`` returning while the icon
   stayed on screen, and a dead-lock between a hand-off and the loop's own
   ``get_geometry`` round trip.

So after pystray has docked the icon, the tray never touches pystray's
connection from another thread again, and becomes the icon's only painter.
:class:`XorgAssist` opens two connections of its own: one only *sends*
(painting, the window title, destroy; under a lock, one thread at a time), the
other only *reads* (button presses, Expose/Map/Configure to repaint, and the
DestroyNotify to end). X lets any client do these to any window; pystray's
loop keeps the docking and exits on its window's DestroyNotify, as it does
after its own stop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("ctxos.daemon.tray")


def is_xorg_icon(icon: Any) -> bool:
    return type(icon).__module__ == "pystray._xorg"


def take_over_painting(icon: Any) -> None:
    """Stop pystray's loop from painting the icon; :class:`XorgAssist` is its only painter.

    Done before the icon is shown, not after it docked: pystray repaints on every Expose
    and ConfigureNotify with a ``get_geometry`` round trip on its loop's connection, which
    the tray host's embedding sends while the icon is still being shown; one painter from
    the start leaves nothing for the two to race over.
    """
    icon._draw = lambda: None


def show_icon(icon: Any, timeout: float) -> None:
    """``icon.visible = True`` for pystray's xorg icon, asked from a connection of our own.

    pystray's setter hands ``_update_icon`` and ``_show`` to its loop thread by sending a
    ClientMessage on the loop's own python-xlib connection from the calling thread, then
    waits on a queue with no timeout. python-xlib shares a connection between threads
    through a hand-rolled send/receive protocol, and here that hand-off sometimes never
    arrived: the setup thread waited forever and the daemon gave up on the tray after 15 s
    (traced 2026-12-06: "setup entered", never "visible set", in about one run of the tray
    tests in four). The same ClientMessage sent from another connection reaches the loop
    too (X delivers an event with no mask to the window's creator), so pystray's connection
    is only ever used by its loop thread, as after docking (``XorgAssist``). ``timeout``
    bounds each wait; running out raises instead of hanging.

    A connection of its own, not ``XorgAssist``'s: creating the assist before the icon is
    shown (to send over its connection) made trayer leave the icon embedded but unmapped at
    1x1 in 3 of 8 runs of the tray tests (2026-12-06); created after, 12 of 12 passed.
    """
    import queue

    from Xlib import X, display
    from Xlib.protocol import event as xevent

    conn = display.Display()
    try:
        window = conn.create_resource_object("window", int(icon._window.id))
        for step in ("_update_icon", "_show"):  # what the setter runs, in its order
            atom = conn.intern_atom(f"_PYSTRAY_{step.upper()}")  # pystray's name for the hand-off
            message = xevent.ClientMessage(window=window, client_type=atom, data=(32, (X.CurrentTime, 0, 0, 0, 0)))
            window.send_event(message, event_mask=X.NoEventMask)
            conn.flush()
            try:
                result = icon._queue.get(timeout=timeout)
            except queue.Empty:
                raise RuntimeError(f"pystray's loop did not run {step} within {timeout:.0f} s") from None
            if result is not True:  # sys.exc_info() of what failed in the loop
                raise result[1]
        icon._visible = True
    finally:
        conn.close()


class XorgAssist:
    """Clicks, redraws, title and stop for one docked xorg icon."""

    def __init__(self, icon: Any, on_click: Callable[[], None]) -> None:
        from Xlib import X, display

        self.icon = icon
        self.on_click = on_click
        self.window_id = int(icon._window.id)
        self.image = icon.icon
        self._lock = threading.Lock()
        self._closed = False
        take_over_painting(icon)  # already done by the runner before docking; kept for other callers
        self._send = display.Display()
        self._send_window = self._send.create_resource_object("window", self.window_id)
        self._recv = display.Display()
        recv_window = self._recv.create_resource_object("window", self.window_id)
        recv_window.change_attributes(event_mask=X.ButtonPressMask | X.StructureNotifyMask | X.ExposureMask)
        self._recv.sync()
        self._paint()
        self._thread = threading.Thread(target=self._read_events, name="ctxos-tray-xclicks", daemon=True)
        self._thread.start()

    def _read_events(self) -> None:
        from Xlib import X

        try:
            while True:
                event = self._recv.next_event()
                if event.type == X.ButtonPress and event.detail == 1:
                    try:
                        self.on_click()
                    except Exception:  # noqa: BLE001
                        log.exception("tray: click handler failed")
                elif event.type == X.DestroyNotify and event.window.id == self.window_id:
                    break
                elif event.type in (X.Expose, X.MapNotify, X.ConfigureNotify):
                    if event.type != X.Expose or event.count == 0:
                        self._paint()
        except Exception as exc:  # noqa: BLE001 - the display went away
            log.debug("tray: X event reader ended: %r", exc)
        finally:
            try:
                self._recv.close()
            except Exception:  # noqa: BLE001
                pass

    def _request(self, fn: Callable[[Any], None]) -> None:
        with self._lock:
            if self._closed:
                return
            fn(self._send_window)
            self._send.flush()

    def set_image(self, image: Any) -> None:
        """Show a new picture (and keep pystray's notion of it current)."""
        self.image = image
        self.icon._icon = image
        self.icon._icon_valid = True
        self._paint()

    def _paint(self) -> None:
        """Scale the picture to the window and put it there, as pystray's own draw does."""
        image = self.image

        def paint(window: Any) -> None:
            from PIL import Image

            geo = window.get_geometry()
            if image is None or geo.width < 1 or geo.height < 1:
                return
            scaled = Image.new("RGB", (geo.width, geo.height))
            scaled.paste(image.resize((geo.width, geo.height), Image.Resampling.LANCZOS))
            gc = window.create_gc()
            window.put_pil_image(gc, 0, 0, scaled)
            gc.free()

        try:
            self._request(paint)
        except Exception as exc:  # noqa: BLE001 - e.g. the window is gone
            log.debug("tray: painting the icon: %r", exc)

    def is_embedded(self) -> bool:
        """True once the system tray has reparented the icon window (it is no longer a child of the root)."""
        result: list[bool] = []

        def check(window: Any) -> None:
            tree = window.query_tree()
            result.append(tree.parent.id != tree.root.id)

        self._request(check)
        return bool(result and result[0])

    def ensure_embedded(self, attempts: int = 5, wait_s: float = 3.0) -> bool:
        """Wait for the tray to embed the icon; re-send the dock request a bounded number of times.

        Seen here: trayer sometimes ignores pystray's one dock request, and the
        icon stays an unmapped 1x1 window on the root that nobody sees.
        """
        import time

        from Xlib import X
        from Xlib.protocol import event as xevent

        for attempt in range(attempts):
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if self.is_embedded():
                    return True
                time.sleep(0.05)
            if attempt == attempts - 1:
                break
            log.info("tray: the system tray has not embedded the icon yet; asking again")

            def request_dock(window: Any) -> None:
                d = self._send
                selection = d.intern_atom(f"_NET_SYSTEM_TRAY_S{d.get_default_screen()}")
                owner = d.get_selection_owner(selection)
                if owner == X.NONE:
                    return
                opcode = d.intern_atom("_NET_SYSTEM_TRAY_OPCODE")
                message = xevent.ClientMessage(
                    window=owner, client_type=opcode, data=(32, (X.CurrentTime, 0, self.window_id, 0, 0))
                )
                owner.send_event(message, event_mask=X.NoEventMask)

            self._request(request_dock)
        return False

    def set_title(self, title: str) -> None:
        self.icon._title = title
        self._request(lambda w: w.set_wm_name(title.encode("latin-1", "replace").decode("latin-1")))

    def destroy(self, timeout: float = 5.0) -> None:
        """Destroy the icon window: pystray's loop and our reader both end on its DestroyNotify."""
        try:
            self._request(lambda w: w.destroy())
        except Exception as exc:  # noqa: BLE001 - already gone
            log.debug("tray: destroying the icon window: %r", exc)
        with self._lock:
            self._closed = True
        # What pystray's stop() would record; otherwise Icon.__del__ later hands a stop to a loop that is gone.
        self.icon._running = False
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        try:
            self._send.close()
        except Exception:  # noqa: BLE001
            pass
