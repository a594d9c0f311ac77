"""Per-user folders outside every workspace: config, state and cache, named by platformdirs.

One place decides where ctxos keeps what belongs to the person rather than to a workspace
(the workspace registry, the HTTP token, the parse-cache key, the per-user daemon's log,
the index of a read-only workspace), so every module agrees and no module spells XDG out.

Where (``<app>`` is ``ctxos``):

| kind   | Linux and other Unix                            | macOS                                      |
|--------|-------------------------------------------------|--------------------------------------------|
| config | ``$XDG_CONFIG_HOME/<app>``, else ``~/.config/<app>`` | ``$XDG_CONFIG_HOME/<app>``, else ``~/Library/Application Support/<app>`` |
| state  | ``$XDG_STATE_HOME/<app>``, else ``~/.local/state/<app>`` | ``$XDG_STATE_HOME/<app>``, else ``~/Library/Application Support/<app>`` |
| cache  | ``$XDG_CACHE_HOME/<app>``, else ``~/.cache/<app>`` | ``$XDG_CACHE_HOME/<app>``, else ``~/Library/Caches/<app>`` |

An XDG variable counts only when it is an absolute path, as the XDG spec says (platformdirs
checks this). The variables are read when a function is called, not at import, so tests
isolate them per test (tests/conftest.py). Folders are not created here: the callers make
them owner-only (services/private_dir.py).
"""

from __future__ import annotations

from pathlib import Path

import platformdirs

APP_DIRNAME = "ctxos"


def user_config_dir() -> Path:
    """Where the person's ctxos settings live (the workspace registry)."""
    return platformdirs.user_config_path(APP_DIRNAME, appauthor=False)


def user_state_dir() -> Path:
    """Where ctxos keeps per-user state (the HTTP token, the parse-cache key, the per-user daemon's log)."""
    return platformdirs.user_state_path(APP_DIRNAME, appauthor=False)


def user_cache_dir() -> Path:
    """Where ctxos keeps caches it can rebuild (the index of a read-only workspace)."""
    return platformdirs.user_cache_path(APP_DIRNAME, appauthor=False)
