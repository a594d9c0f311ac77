"""The tray's settings (``tray.*`` in ``_config.yaml``), whether a display is there, and its timings."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ctxos.services.config import Config

CALL_TIMEOUT_S = 60.0
SHOW_TIMEOUT_S = 15.0  # import pystray + dock the icon
HANDOFF_TIMEOUT_S = 5.0  # pystray's loop running one hand-off (xorg.show_icon); a round trip or two
STOP_TIMEOUT_S = 5.0
PROBE_INTERVAL_S = 5.0  # process mode: how often the child asks `status` whether files changed
READY_PREFIX = "ctxos-tray:"  # the child's first stdout line: "ctxos-tray: shown" or "ctxos-tray: failed: why"


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
    def from_config(cls, config: Config | None) -> TraySettings:
        """The typed ``tray`` section (checked when the file was loaded: services/settings.py); defaults without one."""
        if config is None:
            return cls()
        t = config.settings.tray
        return cls(
            good_from=t.band_good_from,
            fair_from=t.band_fair_from,
            refresh_seconds=t.refresh_seconds,
            min_refresh_gap_s=t.min_refresh_gap_s,
            notify_min_interval_s=t.notify_min_interval_s,
            notifications=t.notifications,
            mode=t.mode,
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
