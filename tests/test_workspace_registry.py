"""The per-user workspace registry and ``ctxos workspace add|list|remove`` / ``init`` registering.

The CLI runs in a real subprocess; ``XDG_CONFIG_HOME`` is the test's own (conftest).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from ctxos.services.workspace_registry import (
    RegistryError,
    add_workspace,
    load_registry,
    registry_path,
    remove_workspace,
)


def ctxos(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [sys.executable, "-m", "ctxos.client", *args], capture_output=True, text=True, env=dict(os.environ), timeout=120
    )
    if check and out.returncode != 0:
        raise AssertionError(f"ctxos {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return out


def test_add_names_from_folder_dedupes_and_keeps_existing(tmp_path: Path) -> None:
    a, b = tmp_path / "one" / "My Notes", tmp_path / "two" / "my-notes"
    a.mkdir(parents=True), b.mkdir(parents=True)
    assert add_workspace(a) == ("my-notes", True)
    assert add_workspace(b) == ("my-notes-2", True)
    assert add_workspace(a) == ("my-notes", False)  # same folder: same name, no change
    registry = load_registry()
    assert registry.workspaces == {"my-notes": a.resolve(), "my-notes-2": b.resolve()}
    assert registry.default_name() == "my-notes"  # the first one registered
    with pytest.raises(RegistryError, match="already used by"):
        add_workspace(b, "my-notes")
    with pytest.raises(RegistryError, match="not allowed"):
        add_workspace(b, "Bad Name/x")
    assert add_workspace(b, "project", make_default=True) == ("project", False)  # a rename
    registry = load_registry()
    assert registry.default_name() == "project" and "my-notes-2" not in registry.workspaces
    assert remove_workspace("project") == b.resolve() and b.is_dir()
    assert load_registry().default_name() == "my-notes"
    with pytest.raises(RegistryError, match="no workspace named 'nope'"):
        remove_workspace("nope")


def test_registry_file_is_owner_only_and_concurrent_adds_all_land(tmp_path: Path) -> None:
    folders = [tmp_path / f"ws{i}" for i in range(8)]
    for folder in folders:
        folder.mkdir()
    threads = [threading.Thread(target=add_workspace, args=(folder,)) for folder in folders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    path = registry_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert sorted(load_registry().workspaces) == sorted(f"ws{i}" for i in range(8))


def test_broken_registry_names_file_and_line_and_is_not_overwritten(tmp_path: Path) -> None:
    path = registry_path()
    path.parent.mkdir(parents=True)
    path.write_text("workspaces:\n  a: /x\n  b: [unclosed\n", encoding="utf-8")
    with pytest.raises(RegistryError, match=r"workspaces\.yaml line \d+"):
        load_registry()
    (tmp_path / "w").mkdir()
    with pytest.raises(RegistryError):
        add_workspace(tmp_path / "w")
    assert "[unclosed" in path.read_text(encoding="utf-8")
    out = ctxos("workspace", "list", check=False)
    assert out.returncode == 2 and "workspaces.yaml line" in out.stderr


@pytest.mark.slow
def test_cli_init_registers_and_workspace_commands(tmp_path: Path) -> None:
    first, second = tmp_path / "alpha", tmp_path / "beta"
    out = ctxos("init", str(first), "--no-examples")
    assert "registered as 'alpha'" in out.stdout
    data = json.loads(ctxos("init", str(second), "--no-examples", "--json").stdout)
    assert data["registered_as"] == "beta"
    listing = json.loads(ctxos("workspace", "list", "--json").stdout)["workspaces"]
    assert [(row["name"], row["path"], row["default"]) for row in listing] == [
        ("alpha", str(first.resolve()), True),
        ("beta", str(second.resolve()), False),
    ]
    # --workspace NAME reaches the registered folder, before or after the subcommand.
    doctor = json.loads(ctxos("doctor", "--json", "--workspace", "beta").stdout)
    assert doctor["workspace"] == str(second.resolve())
    doctor = json.loads(ctxos("-w", "alpha", "doctor", "--json").stdout)
    assert doctor["workspace"] == str(first.resolve())
    # No --workspace and no CTXOS_WORKSPACE: the registry's default.
    assert json.loads(ctxos("doctor", "--json").stdout)["workspace"] == str(first.resolve())
    ctxos("workspace", "add", str(second), "--name", "project", "--default")
    assert "project" in ctxos("workspace", "list").stdout.split()
    assert json.loads(ctxos("doctor", "--json").stdout)["workspace"] == str(second.resolve())
    removed = ctxos("workspace", "remove", "project")
    assert "unchanged" in removed.stdout and second.is_dir()
    missing = ctxos("workspace", "add", str(tmp_path / "nowhere"), check=False)
    assert missing.returncode == 2 and "is not a folder" in missing.stderr
    unknown = ctxos("workspace", "remove", "nope", check=False)
    assert unknown.returncode == 2 and "no workspace named 'nope'" in unknown.stderr
