"""The per-user list of workspaces: ``$XDG_CONFIG_HOME/ctxos/workspaces.yaml``.

Why a registry: one daemon per user serves every workspace (docs/daemon.md),
so it needs to know them all, and a short name (``--workspace notes``,
``/w/notes/mcp``, ``federate: [global]``) is easier to type and to keep in a
tool's config than a path. The file is small and written by ``ctxos
workspace add/remove`` and ``ctxos init``; a person may edit it too::

    # Workspaces served by the per-user ctxos daemon.
    default: notes
    workspaces:
      notes: /home/me/AI-Context-OS
      global: /home/me/global-memory

Writes are atomic (temp file + rename), owner-only (0600 in a 0700 folder),
and serialised by an ``flock`` on a sibling lock file so two ``ctxos init``
runs at once both land. A file that does not parse is an error naming the
file and line; it is never overwritten by a write (the person fixes it).
This module reads and writes one file; it opens no sockets.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import user_dirs
from .atomic import atomic_write_text
from .private_dir import PrivateDirError, ensure_private_dir

REGISTRY_FILENAME = "workspaces.yaml"
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
HEADER = (
    "# Workspaces served by the per-user ctxos daemon: name -> folder.\n"
    "# Edit with `ctxos workspace add PATH [--name N]` / `ctxos workspace remove NAME`.\n"
)


class RegistryError(ValueError):
    """The registry file is unusable, or a name/path was refused (the message says which and why)."""


def registry_path() -> Path:
    """``$XDG_CONFIG_HOME/ctxos/workspaces.yaml`` (macOS: ``~/Library/Application Support/ctxos/``; services/user_dirs.py)."""
    return user_dirs.user_config_dir() / REGISTRY_FILENAME


def name_from_folder(path: Path) -> str:
    """A registry name from a folder name: lower case, runs of other characters become ``-``."""
    base = re.sub(r"[^a-z0-9._-]+", "-", Path(path).name.lower()).strip("-._") or "workspace"
    return base[:63] if NAME_PATTERN.match(base[:63]) else "workspace"


def check_name(name: str) -> str:
    if not NAME_PATTERN.match(name or ""):
        raise RegistryError(
            f"workspace name {name!r} is not allowed: use lower-case letters, digits, "
            f"'.', '_' and '-' (it appears in URLs such as /w/NAME/mcp)"
        )
    return name


@dataclass
class Registry:
    """Name -> absolute folder, plus the default workspace's name (served at ``/mcp``)."""

    workspaces: dict[str, Path] = field(default_factory=dict)
    default: str | None = None
    path: Path | None = None

    def name_for(self, folder: Path) -> str | None:
        """The name ``folder`` is registered under, or None."""
        target = Path(folder).expanduser().resolve()
        for name, registered in self.workspaces.items():
            if registered == target:
                return name
        return None

    def default_name(self) -> str | None:
        """The default workspace: the ``default`` entry if registered, else the first one."""
        if self.default in self.workspaces:
            return self.default
        return next(iter(self.workspaces), None)

    def to_text(self) -> str:
        data: dict[str, object] = {}
        if self.default_name():
            data["default"] = self.default_name()
        data["workspaces"] = {name: str(path) for name, path in self.workspaces.items()}
        return HEADER + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def load_registry(path: Path | None = None) -> Registry:
    """Read the registry; an absent file is an empty registry, a broken one a :class:`RegistryError`."""
    path = Path(path) if path else registry_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Registry(path=path)
    except OSError as exc:
        raise RegistryError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise RegistryError(
            f"{path}{where}: not valid YAML ({getattr(exc, 'problem', None) or exc}); fix or delete the file"
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("workspaces", {}) or {}, dict):
        raise RegistryError(f"{path}: expected 'workspaces:' mapping names to folders")
    registry = Registry(path=path)
    for name, folder in (data.get("workspaces") or {}).items():
        name = str(name)
        if not NAME_PATTERN.match(name) or not isinstance(folder, str) or not folder.strip():
            raise RegistryError(
                f"{path}: entry {name!r}: a name (lower-case letters, digits, '.', '_', '-') and a folder are required"
            )
        registry.workspaces[name] = Path(folder).expanduser().resolve()
    default = data.get("default")
    registry.default = str(default) if isinstance(default, str) else None
    return registry


def save_registry(registry: Registry, path: Path | None = None) -> Path:
    """Write the registry atomically, owner-only, in an owner-only folder."""
    path = Path(path or registry.path or registry_path())
    _private_dir(path.parent)
    atomic_write_text(path, registry.to_text(), mode=0o600)
    return path


def _private_dir(folder: Path) -> None:
    try:
        ensure_private_dir(folder)
    except PrivateDirError as exc:
        raise RegistryError(f"{exc}; the workspace registry is not kept there") from None


@contextmanager
def editing(path: Path | None = None) -> Iterator[Registry]:
    """Load, let the caller change, and save the registry under an exclusive lock."""
    path = Path(path) if path else registry_path()
    _private_dir(path.parent)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        registry = load_registry(path)
        before = registry.to_text()
        yield registry
        if registry.to_text() != before:
            save_registry(registry, path)
    finally:
        os.close(fd)


def add_workspace(
    folder: Path, name: str | None = None, *, make_default: bool = False, path: Path | None = None
) -> tuple[str, bool]:
    """Register ``folder`` (as ``name``, else a name from its folder name); return ``(name, added)``.

    A folder already registered keeps its name (``added`` False) unless another
    ``name`` is asked for, which renames it. A name taken by another folder is
    refused when given explicitly, and made unique (``-2``, ``-3`` ...) when derived.
    """
    folder = Path(folder).expanduser().resolve()
    with editing(path) as registry:
        current = registry.name_for(folder)
        if name is not None:
            check_name(name)
            owner = registry.workspaces.get(name)
            if owner is not None and owner != folder:
                raise RegistryError(f"the name {name!r} is already used by {owner}; pick another with --name")
        if current is not None and (name is None or name == current):
            if make_default:
                registry.default = current
            return current, False
        if current is not None:
            del registry.workspaces[current]
            if registry.default == current:
                registry.default = name
        if name is None:
            base = name_from_folder(folder)
            name, n = base, 2
            while name in registry.workspaces:
                name, n = f"{base[:60]}-{n}", n + 1
        registry.workspaces[name] = folder
        if make_default or registry.default_name() is None:
            registry.default = name
        return name, current is None


def remove_workspace(name: str, path: Path | None = None) -> Path:
    """Forget ``name`` (its folder is untouched); return the folder it named."""
    with editing(path) as registry:
        if name not in registry.workspaces:
            known = ", ".join(registry.workspaces) or "none"
            raise RegistryError(f"no workspace named {name!r} is registered (registered: {known})")
        folder = registry.workspaces.pop(name)
        if registry.default == name:
            registry.default = next(iter(registry.workspaces), None)
        return folder


def lookup(name: str, path: Path | None = None) -> Path | None:
    """The folder registered as ``name``, or None (also when the registry cannot be read)."""
    try:
        return load_registry(path).workspaces.get(name)
    except RegistryError:
        return None
