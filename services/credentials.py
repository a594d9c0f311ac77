"""The HTTP credential: one random token per user, kept owner-only outside every workspace.

Why outside the workspace: a workspace may be synced or committed, and a token
in it would travel with it. Why per user and not per workspace: every process
of the same uid can read the user's files anyway (so separate tokens would not
separate anything), and one token lets ``ctxos connect`` write the same header
for every workspace. Other users are the boundary: the file is 0600 in a 0700
folder, and a folder or file owned by someone else is refused, never used.

Where: ``$XDG_STATE_HOME/ctxos/http-token`` (``~/.local/state/ctxos/http-token``
when the variable is unset; macOS: ``~/Library/Application Support/ctxos/http-token``;
services/user_dirs.py). The daemon creates it on its first start; the
client creates it too if it runs first (``ctxos connect``), and both use the
same race-free create-if-absent, so they always agree. Delete the file and
restart the daemon to rotate the token.

``resolve_http_auth`` is the single place that decides what the daemon
requires and what ``connect`` writes: ``daemon.http_token`` in ``_config.yaml``
(an explicit token) wins, ``daemon.http_auth: none`` turns the credential off
(an explicit opt-out), and otherwise the stored token is used. This module only
reads and writes one file; it opens no sockets.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from . import user_dirs
from .config import Config
from .private_dir import PrivateDirError, ensure_private_dir

TOKEN_FILENAME = "http-token"
AUTH_MODES: tuple[str, ...] = ("token", "none")


class CredentialError(RuntimeError):
    """The token file or its folder cannot be trusted or used (says which and why)."""


@dataclass(frozen=True)
class HttpAuth:
    """What HTTP requires: ``mode`` "token" (with ``token``) or "none"; ``source`` says where it came from."""

    mode: Literal["token", "none"]
    token: str | None
    source: str
    path: Path | None = None  # the token file, when the token is the stored one

    @property
    def required(self) -> bool:
        return self.mode == "token"


def token_path() -> Path:
    """Where the per-user HTTP token lives (the per-user state folder, services/user_dirs.py)."""
    return user_dirs.user_state_dir() / TOKEN_FILENAME


def _private_dir(folder: Path) -> None:
    """Create ``folder`` 0700, or check an existing one is ours (tightened to 0700 if looser)."""
    try:
        ensure_private_dir(folder)
    except PrivateDirError as exc:
        raise CredentialError(f"{exc}; the HTTP token is not kept there") from None


def read_token(path: Path | None = None) -> str | None:
    """The stored token, or None when there is none yet. A file another user owns is refused."""
    path = Path(path) if path else token_path()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CredentialError(f"cannot read the HTTP token {path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "r", encoding="utf-8") as handle:
        info = os.fstat(handle.fileno())
        if info.st_uid != os.getuid():
            raise CredentialError(f"{path} belongs to uid {info.st_uid}, not to you; it is not used")
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.fchmod(handle.fileno(), 0o600)
        token = handle.read().strip()
    if not token:
        raise CredentialError(f"{path} is empty; delete it and restart the daemon to make a new token")
    return token


def load_or_create_token(path: Path | None = None) -> str:
    """The stored token, created (random, 0600, in a 0700 folder) when absent.

    Creation writes a private temp file and hard-links it into place, which
    fails if the file appeared meanwhile: two processes starting at once end
    up with the one token that was written first.
    """
    path = Path(path) if path else token_path()
    _private_dir(path.parent)
    existing = read_token(path)
    if existing:
        return existing
    token = secrets.token_urlsafe(32)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)
    stored = read_token(path)
    if not stored:  # pragma: no cover - read_token raises on an empty file
        raise CredentialError(f"{path}: the new HTTP token could not be read back")
    return stored


def resolve_http_auth(config: Config, *, create: bool = True) -> HttpAuth:
    """What HTTP requires under ``config`` (a usable ``Config``): explicit token, opt-out, or the stored token.

    ``create=False`` reads the stored token without making one (None when absent).
    """
    explicit = config.settings.daemon.http_token
    if isinstance(explicit, str) and explicit.strip():
        return HttpAuth("token", explicit.strip(), "daemon.http_token in _config.yaml")
    if config.settings.daemon.http_auth == "none":
        return HttpAuth("none", None, "daemon.http_auth: none in _config.yaml")
    path = token_path()
    token = load_or_create_token(path) if create else read_token(path)
    return HttpAuth("token", token, str(path), path)
