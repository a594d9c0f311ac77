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
    loaded = yaml.safe_load(default_config_text())
    if not isinstance(loaded, dict):  # the packaged file is a mapping; say so if a build broke it
        raise ValueError("default_config.yaml is not a mapping of settings")
    return loaded


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
    usable: bool = True  # False: the file did not parse or validate (``data`` are then not the user's)

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
    """Load ``_config.yaml`` from a workspace.

    A file that does not parse or does not validate gives a ``Config`` whose
    ``error`` names the file and line (``_config.yaml line 7: ...``) and whose
    ``usable`` is False. Its data are the defaults, but callers must not
    treat them as the user's choice: the engine keeps its last good
    configuration (``Engine.reload_config``) and HTTP refuses to start on a
    first start with a broken file (fail closed: no security setting falls
    back to an open default).
    """
    defaults = default_config()
    path = Path(workspace) / CONFIG_FILENAME
    if not path.exists():
        return Config(defaults)
    try:
        text = path.read_text(encoding="utf-8")
        loaded = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        # Where the broken construct starts (context) beats where the parser gave up (often the end).
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return Config(defaults, error=f"{CONFIG_FILENAME}{where}: not valid YAML ({problem})", usable=False)
    except (UnicodeDecodeError, OSError) as exc:
        return Config(defaults, error=f"{CONFIG_FILENAME}: cannot be read ({exc})", usable=False)
    if not isinstance(loaded, dict):
        return Config(
            defaults, error=f"{CONFIG_FILENAME} line 1: the top level must be a mapping of sections", usable=False
        )
    problems = validate(loaded)
    if problems:
        dotted, message = problems[0]
        line = _key_line(text, dotted)
        where = f" line {line}" if line else ""
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return Config(defaults, error=f"{CONFIG_FILENAME}{where}: {dotted} {message}{more}", usable=False)
    return Config(deep_merge(defaults, loaded))


# Security-relevant keys are checked strictly: a wrong type must never turn into an open default.
def _is_port(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 65535


def _is_positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _is_positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


_CHECKS: dict[str, tuple[Any, str]] = {
    "daemon.http_host": (
        lambda v: isinstance(v, str) and bool(v.strip()),
        "must be a host name (127.0.0.1, ::1 or localhost)",
    ),
    "daemon.http_port": (_is_port, "must be a whole number from 0 to 65535"),
    "daemon.http_token": (
        lambda v: v is None or (isinstance(v, str) and bool(v.strip())),
        "must be a non-empty string, or null",
    ),
    "daemon.http_auth": (lambda v: v in ("token", "none"), "must be token (the default) or none"),
    "http_limits.mcp_session_idle_s": (_is_positive, "must be a positive number of seconds"),
    "http_limits.mcp_max_sessions": (_is_positive_int, "must be a positive whole number"),
    "http_limits.sse_max_streams": (_is_positive_int, "must be a positive whole number"),
    # writing generated files into a person's vault only when asked: a typo must not mean "yes"
    "router.write_to_workspace": (lambda v: v is None or isinstance(v, bool), "must be true, false or null"),
}
_SECTIONS = ("daemon", "http_limits")


def validate(loaded: dict[str, Any]) -> list[tuple[str, str]]:
    """``(dotted key, problem)`` for each value of ``loaded`` (the user's file) that cannot be used."""
    problems: list[tuple[str, str]] = []
    for section in _SECTIONS:
        if section in loaded and not isinstance(loaded[section], dict):
            problems.append((section, "must be a mapping of settings"))
    from .federation import CONFIG_KEY, check_federate

    federate_problem = check_federate(loaded.get(CONFIG_KEY))
    if federate_problem:
        problems.append((CONFIG_KEY, f"{federate_problem}, not {loaded.get(CONFIG_KEY)!r}"))
    for dotted, (check, message) in _CHECKS.items():
        section, key = dotted.split(".", 1)
        node = loaded.get(section)
        if isinstance(node, dict) and key in node and not check(node[key]):
            problems.append((dotted, f"{message}, not {node[key]!r}"))
    daemon = loaded.get("daemon")
    if isinstance(daemon, dict) and daemon.get("http_auth") == "none" and daemon.get("http_token"):
        # Two settings that contradict each other: refuse rather than guess which one was meant.
        problems.append(("daemon.http_auth", "is none but daemon.http_token is set; remove one of them"))
    return problems


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
