"""The typed configuration (services/settings.py): one model, every bad field listed, last good kept.

In-process engine and the real ``ctxos doctor`` command (a subprocess, in-process backend:
no daemon is running for the workspace); the daemon side is tests/test_config_fail_closed.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ctxos.services.config import Config, load_config
from ctxos.services.engine import Engine

BAD = textwrap.dedent(
    """\
    query:
      candidate_k: many
      min_score: -1
    daemon:
      http_port: "3847"
    history:
      mode: svn
    tray: [1, 2]
    """
)


def test_defaults_are_typed_and_the_file_overrides_them(tmp_path: Path) -> None:
    assert Config().settings.query.candidate_k == 60 and Config().settings.daemon.http_auth == "token"
    (tmp_path / "_config.yaml").write_text("query:\n  candidate_k: 80\ngraph:\n  leiden_seed: 7\n")
    config = load_config(tmp_path)
    assert config.usable and not config.problems
    assert config.settings.query.candidate_k == 80 and config.settings.query.candidate_k_max == 150
    assert config.settings.graph.leiden_seed == 7
    assert config.get("query.candidate_k") == 80  # the plain mapping agrees


def test_every_bad_field_is_listed_with_line_and_reason(tmp_path: Path) -> None:
    (tmp_path / "_config.yaml").write_text(BAD)
    config = load_config(tmp_path)
    assert not config.usable
    lines = [str(p) for p in config.problems]
    assert lines == [
        "_config.yaml line 2: query.candidate_k must be a whole number, not 'many'",
        "_config.yaml line 3: query.min_score must be at least 0, not -1",
        "_config.yaml line 5: daemon.http_port must be a whole number from 0 to 65535, not '3847'",
        "_config.yaml line 8: tray must be a mapping of settings, not [1, 2]",
        "_config.yaml line 7: history.mode must be one of 'auto', 'git', 'journal' or 'off', not 'svn'",
    ]
    assert config.error == lines[0] + " (and 4 more: ctxos doctor lists them)"
    # The data are the defaults (never the broken values), but not the user's: callers fail closed.
    assert config.settings.daemon.http_port == 3847


def test_engine_keeps_the_last_good_config_and_doctor_lists_every_problem(tmp_path: Path) -> None:
    (tmp_path / "_config.yaml").write_text("query:\n  candidate_k: 80\n")
    engine = Engine(tmp_path)
    engine.load()
    try:
        assert engine.config.settings.query.candidate_k == 80
        (tmp_path / "_config.yaml").write_text(BAD)
        engine.reload_config()
        assert engine.config.settings.query.candidate_k == 80  # the last good value, not the default
        assert engine.config.error.endswith("keeping the last good configuration")
        assert len(engine.problems) == 5 and engine.problems[1].startswith("_config.yaml line 3: query.min_score")
    finally:
        engine.close()
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ctxos")), "--workspace", str(tmp_path), "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr
    config_lines = [line for line in proc.stdout.splitlines() if line.startswith("config: ")]
    assert (
        config_lines[0]
        == "config: _config.yaml line 2: query.candidate_k must be a whole number, not 'many' (and 4 more: ctxos doctor lists them)"
    )
    assert (
        "config: _config.yaml line 7: history.mode must be one of 'auto', 'git', 'journal' or 'off', not 'svn'"
        in config_lines
    )
    assert len(config_lines) == 6  # the summary, then each of the five fields


def test_security_settings_are_strict(tmp_path: Path) -> None:
    for text, expected in [
        ("daemon:\n  http_auth: off\n", "daemon.http_auth must be token (the default) or none, not False"),
        ("daemon:\n  http_token: ''\n", "daemon.http_token must be a non-empty string, or null, not ''"),
        ("daemon:\n  http_auth: none\n  http_token: abc\n", "daemon.http_auth is none but daemon.http_token is set"),
        ("http_limits:\n  mcp_max_sessions: 1.5\n", "http_limits.mcp_max_sessions must be a positive whole number"),
        ("router:\n  write_to_workspace: 'yes'\n", "router.write_to_workspace must be true, false or null, not 'yes'"),
        ("federate: global\n", "federate must be a list of registered workspace names"),
    ]:
        (tmp_path / "_config.yaml").write_text(text)
        config = load_config(tmp_path)
        assert not config.usable and expected in config.error, (text, config.error)
