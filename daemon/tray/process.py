"""The tray in its own process, a client of the daemon's socket (macOS: pystray needs the main thread)."""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from pathlib import Path

from ctxos.client.backend import SocketBackend

from .app import TrayApp
from .runner import TrayRunner
from .settings import CALL_TIMEOUT_S, READY_PREFIX, STOP_TIMEOUT_S, TraySettings


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

    backend = SocketBackend(root, timeout=CALL_TIMEOUT_S)
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
