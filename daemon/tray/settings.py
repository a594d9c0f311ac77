"""The tray's settings (``tray.*`` in ``_config.yaml``), whether a display is there, and its timings."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CALL_TIMEOUT_S = 60.0
SHOW_TIMEOUT_S = 15.0  # import pystray + dock the icon
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
