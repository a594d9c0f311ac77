"""A broken ``_config.yaml`` never opens the door, against real daemon processes.

- a running daemon whose config breaks keeps its last good configuration (the
  token stays required) and says which file and line is wrong;
- a first start with a broken config refuses to start HTTP, and ``ctxos start``
  and ``ctxos status`` say so and why;
- a second workspace whose configured port is taken: ``start`` warns loudly,
  ``status`` shows it, and the first workspace's daemon is untouched.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ctxos.services.config import load_config
from daemon_helpers import daemon_factory, free_port, memory_text  # noqa: F401  (fixture)
from web_helpers import http

pytestmark = pytest.mark.slow

SKILL = {"04-skills/deploy.md": memory_text("deploy", "Deploy with the blue pipeline.", type="skill")}


def _ctxos(root: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("ctxos")), "--workspace", str(root), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def test_validation_errors_name_the_line(tmp_path: Path) -> None:
    (tmp_path / "_config.yaml").write_text("query:\n  default_budget: 4000\ndaemon:\n  http_port: 'many'\n")
    config = load_config(tmp_path)
    assert not config.usable and config.error.startswith("_config.yaml line 4: daemon.http_port must be")
    (tmp_path / "_config.yaml").write_text("daemon:\n  http_token: s3cret\n  bad: [unclosed\n\nquery: {}\n")
    config = load_config(tmp_path)
    assert not config.usable and config.error.startswith("_config.yaml line 3: not valid YAML")


def test_a_typo_keeps_the_last_good_config_and_the_token(make_workspace, daemon_factory) -> None:  # noqa: F811
    root = make_workspace(SKILL)
    config = root / "_config.yaml"
    config.write_text("daemon:\n  http_token: kept-s3cret-token\n", encoding="utf-8")
    daemon = daemon_factory(root, http=True, debounce_ms=50)
    base = daemon.http_url
    bearer = {"Authorization": "Bearer kept-s3cret-token"}
    assert http("GET", base + "/api/status").status == 401
    config.write_text("daemon:\n  http_token: kept-s3cret-token\nquery: [oops\n", encoding="utf-8")
    daemon.wait_for(lambda: daemon.status().get("config_error"), message="the config error")
    error = daemon.status()["config_error"]
    assert error.startswith("_config.yaml line 3: not valid YAML") and "keeping the last good" in error
    assert daemon.call("doctor")["config_error"] == error
    for path in ("/api/status", "/api/memories"):
        assert http("GET", base + path).status == 401, path  # still closed
    assert http("POST", base + "/mcp", raw=b"{}").status == 401
    assert http("GET", base + "/api/status", headers=bearer).status == 200
    assert "_config.yaml line 3" in _ctxos(root, "status").stdout


def test_first_start_with_a_broken_config_serves_no_http(make_workspace, daemon_factory) -> None:  # noqa: F811
    root = make_workspace(SKILL)
    port = free_port()
    (root / "_config.yaml").write_text(f"daemon:\n  http_port: {port}\n  http_token: [a, b]\n", encoding="utf-8")
    started = _ctxos(root, "start")
    try:
        assert started.returncode == 0, started.stderr
        assert "WARNING: this daemon serves NO HTTP" in started.stderr
        assert "_config.yaml line 3: daemon.http_token must be" in started.stderr
        status = _ctxos(root, "status").stdout
        assert "NOT SERVING" in status and "_config.yaml line 3" in status
        with pytest.raises(OSError):
            http("GET", f"http://127.0.0.1:{port}/api/status", timeout=3)
    finally:
        _ctxos(root, "stop")


def test_second_workspace_on_a_busy_port_says_so(make_workspace, daemon_factory) -> None:  # noqa: F811
    first = daemon_factory(make_workspace(SKILL), http=True)
    port = first.http_port
    second = make_workspace(SKILL)
    (second / "_config.yaml").write_text(f"daemon:\n  http_port: {port}\n", encoding="utf-8")
    started = _ctxos(second, "start")
    try:
        assert started.returncode == 0, started.stderr
        assert "WARNING: this daemon serves NO HTTP" in started.stderr
        assert f"HTTP port 127.0.0.1:{port} is already in use" in started.stderr
        assert "http," not in started.stdout  # no address claimed
        status = _ctxos(second, "status", "--json")
        assert '"http": null' in status.stdout and "already in use" in status.stdout
        # connect never writes the port the other workspace's daemon answers on
        target = second / "cursor.json"
        refused = _ctxos(second, "connect", "cursor", "--transport", "http", "--write", "--config", str(target))
        assert refused.returncode != 0 and "serves no HTTP" in refused.stderr and not target.exists()
    finally:
        _ctxos(second, "stop")
    assert first.status()["http"] == f"http://127.0.0.1:{port}"  # the first one is untouched
    # The first daemon runs on a port given with --http-port (its config says 3847): connect asks it.
    printed = _ctxos(first.root, "connect", "cursor", "--transport", "http", "--print")
    assert f"http://127.0.0.1:{port}/mcp" in printed.stdout and "address from the running daemon" in printed.stdout
    # No daemon: the configured port, and it says so.
    idle = _ctxos(second, "connect", "cursor", "--transport", "http", "--print")
    assert f"http://127.0.0.1:{port}/mcp" in idle.stdout and "no daemon is running" in idle.stdout
