"""``ctxos simulate`` and ``ctxos reindex`` through the real command, in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import shared_data

CTXOS = str(Path(sys.executable).with_name("ctxos"))


def run(*args: str, env_extra: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(env_extra or {})
    proc = subprocess.run([CTXOS, *args], capture_output=True, text=True, env=env, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"ctxos {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_init_then_simulate_table_json_and_show(tmp_path):
    ws = tmp_path / "ws"
    run("init", str(ws))
    table = run("-w", str(ws), "simulate", "how do I write a good memory", "--budget", "800").stdout
    for expected in (
        "intent:",
        "expanded:",
        "id",
        "tier",
        "tokens",
        "score",
        "sem",
        "bm25",
        "graph",
        "rec",
        "imp",
        "freq",
        "writing-good-memories",
        "memory-hygiene",
        "semantic: wordllama-l2-supercat-256",
        "from",
    ):
        assert expected in table
    assert "→" in table.splitlines()[1] or "given" in table.splitlines()[1]  # the intent's reason
    data = json.loads(
        run("-w", str(ws), "simulate", "how do I write a good memory", "--budget", "800", "--json").stdout
    )
    assert data["tokens_used"] <= 800 and data["budget_tokens"] == 800
    assert data["intent"] in ("default", "debug", "brainstorm", "recall")
    assert data["selected"] and all("shares" in s for s in data["selected"])
    assert data["semantic_model"] == "wordllama-l2-supercat-256" and data["intent_reason"]
    assert all(s["sources"] for s in data["selected"] if s["reason"] != "catalog")
    assert {"bm25", "vector"} & {src for s in data["selected"] for src in s["sources"]}
    assert data["rendered"].startswith("## Rules")
    shown = run(
        "-w", str(ws), "simulate", "memory hygiene rules", "--budget", "500", "--show", "--intent", "debug"
    ).stdout
    assert "intent:   debug" in shown and "## Rules" in shown and "### memory-hygiene" in shown


def test_reindex_json(tmp_path):
    ws = tmp_path / "ws"
    run("init", str(ws))
    data = json.loads(run("-w", str(ws), "reindex", "--json").stdout)
    assert data["indexed"] == 5 and data["invalid"] == [] and data["index"]["documents"] == 5
    assert "indexed 5 memories" in run("-w", str(ws), "reindex").stdout


def test_bad_arguments_and_missing_workspace_exit_nonzero(tmp_path):
    ws = tmp_path / "ws"
    run("init", str(ws))
    bad_intent = run("-w", str(ws), "simulate", "x", "--intent", "nonsense", check=False)
    assert bad_intent.returncode == 2 and "unknown intent" in bad_intent.stderr
    bad_budget = run("-w", str(ws), "simulate", "x", "--budget", "-5", check=False)
    assert bad_budget.returncode == 2 and "budget_tokens: must be between 1 and 200000 (got -5)" in bad_budget.stderr
    empty = run("-w", str(ws), "simulate", "   ", check=False)
    assert empty.returncode == 2 and "empty" in empty.stderr
    missing = run("-w", str(tmp_path / "nope"), "simulate", "x", check=False)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert run("-w", str(tmp_path / "nope"), "reindex", check=False).returncode == 2


def test_obsidian_help_vault_every_file_indexed_or_explained(tmp_path):
    """Read in place (never copied); derived state goes to a tmp CTXOS_STATE_DIR."""
    vault = shared_data("obsidian-help")
    env = {"CTXOS_STATE_DIR": str(tmp_path / "state")}
    reindex = json.loads(run("-w", str(vault), "reindex", "--json", env_extra=env).stdout)
    doctor = json.loads(run("-w", str(vault), "doctor", "--json", env_extra=env).stdout)
    from ctxos.services.workspace import iter_memory_paths

    candidates = list(iter_memory_paths(vault))
    invalid_paths = {item["path"] for item in (doctor["invalid"] if isinstance(doctor, dict) else doctor)}
    assert {f["path"] for f in reindex["invalid"]} == invalid_paths  # doctor lists every skipped file
    assert reindex["indexed"] == reindex["index"]["documents"]
    assert reindex["indexed"] + len(reindex["invalid"]) == len(candidates)
    result = json.loads(
        run(
            "-w",
            str(vault),
            "simulate",
            "how do I embed an image in a note",
            "--budget",
            "1500",
            "--json",
            env_extra=env,
        ).stdout
    )
    assert result["tokens_used"] <= 1500
    top = [s["id"] for s in result["selected"] if s["reason"] == "scored"][:3]
    assert any("mbed" in t or "ttach" in t or "mage" in t for t in top), top
    assert not (vault / ".ctxos").exists()  # nothing written beside the files


def test_cli_uses_the_running_daemon(make_workspace):
    """With a daemon up, simulate/list/doctor go through its socket (no in-process note)."""
    import os
    import subprocess
    import sys

    from daemon_helpers import memory_text, running_daemon

    root = make_workspace({"04-skills/deploy.md": memory_text("deploy", "How we deploy the zebra service")})
    with running_daemon(root) as daemon:
        env = {**os.environ, "CTXOS_RUNTIME_DIR": str(daemon.runtime_dir)}
        out = subprocess.run(
            [sys.executable, "-m", "ctxos.client", "-w", str(root), "simulate", "zebra deploy"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "deploy" in out.stdout and "in-process" not in out.stderr
        (root / "04-skills/new.md").write_text(memory_text("new", "fresh zebra"))
        daemon.wait_for(lambda: daemon.has_memory("new"))
        listed = subprocess.run(
            [sys.executable, "-m", "ctxos.client", "-w", str(root), "list", "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert '"new"' in listed.stdout and "in-process" not in listed.stderr


def test_workspace_flag_works_after_the_subcommand_and_version_prints(tmp_path):
    """``--workspace`` before or after the command (nested ones too), and ``ctxos --version``."""
    ws = tmp_path / "ws"
    run("init", str(ws))
    after = json.loads(run("list", "--json", "--workspace", str(ws)).stdout)
    before = json.loads(run("--workspace", str(ws), "list", "--json").stdout)
    assert after == before and {m["id"] for m in after} >= {"memory-hygiene"}
    other = tmp_path / "missing"
    refused = run("-w", str(ws), "status", "-w", str(other), check=False)  # the later flag wins
    assert refused.returncode == 2 and str(other) in refused.stderr
    run("service", "install", "--print", "--workspace", str(ws))  # a nested command parses it too
    bad = run("service", "install", "--print", "--no-such-flag", check=False)
    assert bad.returncode == 2 and "unrecognized arguments" in bad.stderr
    version = run("--version").stdout.strip()
    assert version.startswith("ctxos ") and version.split()[1][0].isdigit()


def test_graph_text_accounts_for_every_community_and_dangling_link():
    """The counts on the first line match what is listed plus what is said to be hidden."""
    import re

    vault = shared_data("obsidian-help")
    out = run("-w", str(vault), "graph").stdout
    total = int(re.search(r"(\d+) communit(?:y|ies) \(modularity", out).group(1))
    listed = len(re.findall(r"^  community \S+:", out, flags=re.M))
    more = re.search(r"(\d+) more not shown", out)
    singles = re.search(r"(\d+) single-memory communit(?:y|ies) not listed", out)
    assert listed + (int(more.group(1)) if more else 0) + (int(singles.group(1)) if singles else 0) == total
    dangling = re.search(r"^(\d+) dangling links? \(to no memory\):", out, flags=re.M)
    if dangling:
        shown = len(re.findall(r"^  \S.* -> ", out, flags=re.M))
        rest = re.search(r"\.\.\. and (\d+) more", out)
        assert shown + (int(rest.group(1)) if rest else 0) == int(dangling.group(1))
