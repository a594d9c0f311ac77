"""The per-user HTTP token file (services/credentials.py): where it lives, its modes, refusals.

Real files in a temporary ``XDG_STATE_HOME``; the last test starts a real
daemon whose token file cannot be trusted and checks HTTP stays off (fail closed).
"""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest
from ctxos.services import credentials
from ctxos.services.config import Config, default_config
from ctxos.services.credentials import (
    CredentialError,
    load_or_create_token,
    read_token,
    resolve_http_auth,
    token_path,
)
from daemon_helpers import daemon_factory, memory_text  # noqa: F401  (fixture)


def test_token_path_follows_xdg_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert token_path() == tmp_path / "ctxos" / "http-token"
    # relative values are ignored, as the XDG spec says
    monkeypatch.setenv("XDG_STATE_HOME", "rel")
    assert token_path() == Path.home() / ".local" / "state" / "ctxos" / "http-token"


def test_created_owner_only_and_stable(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ctxos" / "http-token"
    token = load_or_create_token(path)
    assert len(token) >= 40 and load_or_create_token(path) == token == read_token(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["http-token"]  # no temp file left


def test_loose_modes_are_tightened_and_bad_files_refused(tmp_path: Path) -> None:
    path = tmp_path / "ctxos" / "http-token"
    load_or_create_token(path)
    os.chmod(path, 0o644)
    os.chmod(path.parent, 0o755)
    load_or_create_token(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    path.write_text("\n")
    with pytest.raises(CredentialError, match="is empty"):
        read_token(path)
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CredentialError, match="cannot read"):
        read_token(path)  # a symlink is never followed


def _create(path: str, queue: multiprocessing.Queue[str]) -> None:
    queue.put(load_or_create_token(Path(path)))


def test_concurrent_first_starts_agree_on_one_token(tmp_path: Path) -> None:
    path = tmp_path / "ctxos" / "http-token"
    queue: multiprocessing.Queue[str] = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_create, args=(str(path), queue)) for _ in range(6)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
    tokens = {queue.get(timeout=5) for _ in procs}
    assert tokens == {read_token(path)}


def test_resolve_explicit_opt_out_and_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(credentials, "token_path", lambda env=None: tmp_path / "ctxos" / "http-token")
    data = default_config()
    assert resolve_http_auth(Config(data), create=False).token is None  # nothing made
    stored = resolve_http_auth(Config(data))
    assert stored.mode == "token" and stored.path == tmp_path / "ctxos" / "http-token" and stored.token
    data["daemon"]["http_token"] = "  explicit  "
    assert resolve_http_auth(Config(data)).token == "explicit"
    data["daemon"]["http_token"] = None
    data["daemon"]["http_auth"] = "none"
    none = resolve_http_auth(Config(data))
    assert none.mode == "none" and none.token is None and not none.required


@pytest.mark.slow
def test_an_untrusted_token_file_keeps_http_off(make_workspace, daemon_factory, tmp_path) -> None:  # noqa: F811
    """Fail closed: a token file the daemon cannot use means no HTTP at all, and status says why."""
    state = tmp_path / "own-state"
    path = state / "ctxos" / "http-token"
    path.parent.mkdir(parents=True, mode=0o700)
    path.write_text("")  # empty: not a token
    root = make_workspace({"04-skills/x.md": memory_text("x", "An x skill.", type="skill")})
    daemon = daemon_factory(root, http=True, env={"XDG_STATE_HOME": str(state)})
    status = daemon.status()
    assert status["http"] is None
    assert "HTTP is off" in status["components"]["http"] and str(path) in status["components"]["http"]
