"""Per-user folders (services/user_dirs.py, platformdirs): the Linux paths are exactly the XDG ones.

These are the paths existing installs already use, so they must not move: the registry under
``$XDG_CONFIG_HOME/ctxos``, the token, cache key and log under ``$XDG_STATE_HOME/ctxos``, the
index of a read-only workspace under ``$XDG_CACHE_HOME/ctxos``, with the spec's defaults.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ctxos.services import parse_cache, runtime_paths, user_dirs, workspace_registry
from ctxos.services.credentials import token_path

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the XDG defaults are the Linux layout")


def test_xdg_variables_name_the_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / var))
    assert user_dirs.user_config_dir() == tmp_path / "XDG_CONFIG_HOME" / "ctxos"
    assert workspace_registry.registry_path() == tmp_path / "XDG_CONFIG_HOME" / "ctxos" / "workspaces.yaml"
    assert token_path() == tmp_path / "XDG_STATE_HOME" / "ctxos" / "http-token"
    assert parse_cache.key_path() == tmp_path / "XDG_STATE_HOME" / "ctxos" / "cache-key"
    assert runtime_paths.user_log_path() == tmp_path / "XDG_STATE_HOME" / "ctxos" / "logs" / "daemon.log"
    assert user_dirs.user_cache_dir() == tmp_path / "XDG_CACHE_HOME" / "ctxos"
    assert not (tmp_path / "XDG_CONFIG_HOME").exists()  # naming a folder does not create it


@pytest.mark.parametrize("value", [None, "", "relative/dir"])
def test_unset_or_relative_variables_give_the_spec_defaults(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    for var in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    home = Path.home()
    assert user_dirs.user_config_dir() == home / ".config" / "ctxos"
    assert user_dirs.user_state_dir() == home / ".local" / "state" / "ctxos"
    assert user_dirs.user_cache_dir() == home / ".cache" / "ctxos"
