"""Workspace configuration: ``_config.yaml`` merged over the packaged defaults.

The defaults live in ``default_config.yaml`` (with comments), which is also the
file ``ctxos init`` writes, so the documented and the effective defaults can
never drift apart.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

CONFIG_FILENAME = "_config.yaml"


def default_config_text() -> str:
    """The commented default configuration, as written by ``ctxos init``."""
    return resources.files("ctxos.services").joinpath("default_config.yaml").read_text(encoding="utf-8")


def default_config() -> dict[str, Any]:
    return yaml.safe_load(default_config_text())


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``override`` merged in, recursing into mappings."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


@dataclass
class Config:
    """Effective configuration plus the problem, if ``_config.yaml`` could not be used."""

    data: dict[str, Any] = field(default_factory=default_config)
    error: str | None = None

    def get(self, dotted: str, default: Any = None) -> Any:
        """Look up ``"a.b.c"``; ``default`` when any part is missing."""
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def section(self, name: str) -> dict[str, Any]:
        value = self.data.get(name)
        return value if isinstance(value, dict) else {}


def load_config(workspace: Path) -> Config:
    """Load ``_config.yaml`` from a workspace; a broken file falls back to defaults with an error."""
    defaults = default_config()
    path = Path(workspace) / CONFIG_FILENAME
    if not path.exists():
        return Config(defaults)
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as exc:
        return Config(defaults, error=f"{CONFIG_FILENAME}: cannot be read ({exc}); using defaults")
    if not isinstance(loaded, dict):
        return Config(defaults, error=f"{CONFIG_FILENAME}: top level must be a mapping; using defaults")
    return Config(deep_merge(defaults, loaded))
