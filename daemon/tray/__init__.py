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
  via :class:`LoopBackend` (in-process) or the client's ``SocketBackend``.
- **Refresh on change.** The tray re-reads health and findings after every
  applied batch of file changes (a change listener; coalesced, at most one
  refresh per ``tray.min_refresh_gap_s``, 30 s, because health and governance
  cost seconds on a workspace of a thousand memories) and every ``tray.refresh_seconds`` for what
  changes with time alone (decay).
- **pystray's xorg backend** (the fallback on Linux without PyGObject) has no
  menu and no notifications: a left click runs the default item (Open web view,
  where everything in the menu is also available) and notifications go over
  D-Bus directly (``notify.py``). Its click, redraw and stop problems are
  worked around in ``xorg.py``.

One module per job: ``settings.py`` (``tray.*`` config, display check, timings),
``backends.py`` (how the tray calls the daemon in-process), ``app.py`` (state,
menu and actions), ``runner.py`` (the icon's and the refresh loop's threads),
``component.py`` (the daemon component), ``process.py`` (the child process,
``python -m ctxos.daemon.tray``), ``icon.py``, ``notify.py`` and ``xorg.py``.
"""

from __future__ import annotations

from .app import TrayApp, TrayState, workspace_line
from .backends import LoopBackend, TrayBackend
from .component import TrayComponent
from .process import process_main
from .runner import TrayRunner
from .settings import TraySettings, display_problem

__all__ = [
    "LoopBackend",
    "TrayApp",
    "TrayBackend",
    "TrayComponent",
    "TrayRunner",
    "TraySettings",
    "TrayState",
    "display_problem",
    "process_main",
    "workspace_line",
]
