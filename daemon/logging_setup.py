"""Daemon logging: stderr (what systemd/launchd capture) plus a rotating file.

The file, ``.ctxos/logs/daemon.log``, is what ``ctxos start`` users read after
the fact; it rotates at ``daemon.log_max_bytes`` keeping ``daemon.log_backups``
old files so a long-running daemon cannot fill the disk.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from ctxos.services import runtime_paths

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
_HANDLER_TAG = "_ctxos_daemon_handler"


def setup_logging(
    root: Path,
    *,
    max_bytes: int = 1_048_576,
    backups: int = 3,
    level: int = logging.INFO,
    stderr: bool = True,
    log_file: Path | None = None,
) -> Path:
    """Attach the stderr and rotating-file handlers to the root logger; return the log file path.

    Calling it again replaces the handlers this function added (so tests and
    restarts within one process do not duplicate lines) and leaves others alone.
    """
    log_file = Path(log_file) if log_file is not None else runtime_paths.log_path(root)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    root_logger = logging.getLogger()
    for handler in list(root_logger.handlers):
        if getattr(handler, _HANDLER_TAG, False):
            root_logger.removeHandler(handler)
            handler.close()
    formatter = logging.Formatter(LOG_FORMAT)
    handlers: list[logging.Handler] = [
        logging.handlers.RotatingFileHandler(
            log_file, maxBytes=max(0, int(max_bytes)), backupCount=max(0, int(backups)), encoding="utf-8"
        ),
    ]
    if stderr:
        handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(formatter)
        setattr(handler, _HANDLER_TAG, True)
        root_logger.addHandler(handler)
    root_logger.setLevel(level)
    # watchdog logs every inotify detail at DEBUG; keep it at INFO even in verbose mode.
    logging.getLogger("watchdog").setLevel(max(level, logging.INFO))
    return log_file
