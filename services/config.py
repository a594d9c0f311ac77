"""Workspace configuration: ``_config.yaml`` merged over the packaged defaults.

The defaults live in ``default_config.yaml`` (with comments), which is also the
file ``ctxos init`` writes, so the documented and the effective defaults can
never drift apart.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import InitVar, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .settings import Settings, describe

CONFIG_FILENAME = "_config.yaml"


def default_config_text() -> str:
    """The commented default configuration, as written by ``ctxos init``."""
    return resources.files("ctxos.services").joinpath("default_config.yaml").read_text(encoding="utf-8")


def default_config() -> dict[str, Any]:
    """A fresh copy of the defaults (callers may change it)."""
    return copy.deepcopy(_default_data())


@functools.cache
def _default_data() -> dict[str, Any]:
    # Parsed once per process: pure-Python YAML takes ~15 ms for this file, and the config is
    # loaded on every reload, HTTP start and tray refresh in process mode.
    loaded = yaml.safe_load(default_config_text())
    if not isinstance(loaded, dict):  # the packaged file is a mapping; say so if a build broke it
        raise ValueError("default_config.yaml is not a mapping of settings")
    return loaded


@functools.cache
def _default_settings() -> Settings:
    return Settings.model_validate(_default_data())


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``override`` merged in, recursing into mappings."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


@dataclass(frozen=True)
class ConfigProblem:
    """One value of ``_config.yaml`` that cannot be used: where, which setting, and why."""

    field: str  # dotted: "daemon.http_port"
    reason: str  # in user words: "must be a whole number from 0 to 65535, not 'x'"
    line: int | None = None  # 1-based line in the file, when it can be found
    file: str = CONFIG_FILENAME

    def __str__(self) -> str:
        where = f" line {self.line}" if self.line else ""
        return f"{self.file}{where}: {self.field} {self.reason}"


@dataclass
class Config:
    """Effective configuration plus the problems, if ``_config.yaml`` could not be used.

    ``settings`` is the typed model (``config.settings.query.candidate_k``); ``data`` the same
    values as a plain mapping for the few places that pass sections on (``get("a.b")``).
    """

    data: dict[str, Any] = field(default_factory=default_config)
    error: str | None = None
    usable: bool = True  # False: the file did not parse or validate (``data`` are then not the user's)
    problems: list[ConfigProblem] = field(default_factory=list)  # every field that failed, for doctor
    checked: InitVar[Settings | None] = None  # ``data`` already validated (load_config): not done twice
    settings: Settings = field(init=False)

    def __post_init__(self, checked: Settings | None) -> None:
        self.settings = checked if checked is not None else Settings.model_validate(self.data)

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

    def problem_lines(self) -> list[str]:
        """Each problem on its own line (what ``ctxos doctor`` lists); the error when there are none."""
        return [str(p) for p in self.problems] or ([self.error] if self.error else [])


def load_config(workspace: Path) -> Config:
    """Load ``_config.yaml`` from a workspace.

    A file that does not parse or does not validate gives a ``Config`` whose
    ``error`` names the file and line (``_config.yaml line 7: ...``), whose
    ``problems`` list every field that failed, and whose ``usable`` is False.
    Its data are the defaults, but callers must not treat them as the user's
    choice: the engine keeps its last good configuration
    (``Engine.reload_config``) and HTTP refuses to start on a first start with
    a broken file (fail closed: no security setting falls back to an open
    default).
    """
    defaults, default_settings = default_config(), _default_settings()
    path = Path(workspace) / CONFIG_FILENAME
    if not path.exists():
        return Config(defaults, checked=default_settings)
    try:
        text = path.read_text(encoding="utf-8")
        loaded = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        # Where the broken construct starts (context) beats where the parser gave up (often the end).
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        error = f"{CONFIG_FILENAME}{where}: not valid YAML ({problem})"
        return Config(defaults, error=error, usable=False, checked=default_settings)
    except (UnicodeDecodeError, OSError) as exc:
        return Config(
            defaults, error=f"{CONFIG_FILENAME}: cannot be read ({exc})", usable=False, checked=default_settings
        )
    if not isinstance(loaded, dict):
        error = f"{CONFIG_FILENAME} line 1: the top level must be a mapping of sections"
        return Config(defaults, error=error, usable=False, checked=default_settings)
    merged = deep_merge(defaults, loaded)
    settings, found = _check(merged, loaded)
    problems = [ConfigProblem(dotted, message, _key_line(text, dotted)) for dotted, message in found]
    if settings is None or problems:
        more = f" (and {len(problems) - 1} more: ctxos doctor lists them)" if len(problems) > 1 else ""
        return Config(defaults, error=f"{problems[0]}{more}", usable=False, problems=problems, checked=default_settings)
    return Config(merged, checked=settings)


def validate(loaded: dict[str, Any]) -> list[tuple[str, str]]:
    """``(dotted key, problem)`` for each value of ``loaded`` (the user's file) that cannot be used.

    The file is merged over the defaults and checked against the typed model, so a problem
    is reported for every field at once, in user words, with the value that was given.
    """
    return _check(deep_merge(default_config(), loaded), loaded)[1]


def _check(merged: dict[str, Any], loaded: dict[str, Any]) -> tuple[Settings | None, list[tuple[str, str]]]:
    """The typed settings of ``merged`` (None when a field fails) and the problems found."""
    problems: list[tuple[str, str]] = []
    settings: Settings | None = None
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        for error in exc.errors():
            dotted = ".".join(str(part) for part in error["loc"])
            given = f", not {error['input']!r}" if "input" in error and not isinstance(error["input"], dict) else ""
            problems.append((dotted, describe(error) + given))
    daemon = loaded.get("daemon")
    if isinstance(daemon, dict) and daemon.get("http_auth") == "none" and daemon.get("http_token"):
        # Two settings that contradict each other: refuse rather than guess which one was meant.
        problems.append(("daemon.http_auth", "is none but daemon.http_token is set; remove one of them"))
    return settings, problems


def _key_line(text: str, dotted: str) -> int | None:
    """The 1-based line where ``dotted`` is set in ``text`` (None when it cannot be found)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for part in dotted.split("."):
        if not isinstance(node, yaml.MappingNode):
            return line
        for key_node, value_node in node.value:
            if getattr(key_node, "value", None) == part:
                line = key_node.start_mark.line + 1
                node = value_node
                break
        else:
            return line
    return line
