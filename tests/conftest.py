"""Shared fixtures: temporary workspaces built from a dict of files."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest
from daemon_helpers import SCRATCH_ENV, short_runtime_dir

# The shared corpora: CTXOS_DATA_DIR when set (as benchmarks/corpora.py reads it), else ../shared/data.
SHARED_DATA = Path(os.environ.get("CTXOS_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")


def shared_texts(per_corpus: int) -> list[str]:
    """Texts of each shared corpus found (markdown files; LoCoMo's dialogue turns): real text for tests that must
    hold on whatever people write (tokenizer ids, joined token costs); empty when the data is not there."""
    texts: list[str] = []
    for corpus in ("tldr", "obsidian-help", "foam-docs", "dendron-vault"):
        folder = SHARED_DATA / corpus
        files = sorted(folder.rglob("*.md"))[:per_corpus] if folder.exists() else []
        texts += [f.read_text(encoding="utf-8", errors="replace") for f in files]
    for sample in (
        sorted((SHARED_DATA / "locomo-dev").rglob("*.json"))[:2] if (SHARED_DATA / "locomo-dev").exists() else []
    ):
        texts += _strings_in(json.loads(sample.read_text(encoding="utf-8")))[:per_corpus]
    return texts


def _strings_in(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings_in(v)]
    return []


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    """Create ``files`` (relative path -> text or bytes) under ``root``; text is dedented."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content).lstrip("\n"), encoding="utf-8")


@pytest.fixture
def make_workspace(tmp_path: Path):
    """Factory: ``make_workspace({"08-rules/x.md": "..."}, init=True) -> Path``."""
    counter = {"n": 0}

    def factory(files: dict[str, str | bytes] | None = None, init: bool = True, examples: bool = False) -> Path:
        counter["n"] += 1
        root = tmp_path / f"ws{counter['n']}"
        root.mkdir()
        if init:
            from ctxos.services.workspace import init_workspace

            init_workspace(root, seed_examples=examples)
        write_files(root, files or {})
        return root

    return factory


def pytest_configure(config: pytest.Config) -> None:
    """One scratch folder for the run (removed at its end), and a private ``XDG_STATE_HOME`` in it.

    The per-user HTTP token (services/credentials.py) lives in the state dir: never the
    real user's. Session-wide, not per test, because module-scoped daemons start before
    per-test fixtures run and the tests must read the token those daemons use.

    Runtime dirs, daemon output files and the daemons' own temp files (``TMPDIR``: the
    builders' multiprocessing folders) go into the scratch folder too, so a run leaves
    nothing behind in ``/tmp``. pytest's ``tmp_path`` folders stay where pytest keeps
    them (the last three runs, for reading after a failure).
    """
    tempfile.gettempdir()  # fixes this process's temp dir (and pytest's basetemp) before TMPDIR changes
    scratch = Path(tempfile.mkdtemp(prefix="ctxos-tests-"))
    os.environ[SCRATCH_ENV] = str(scratch)
    os.environ["TMPDIR"] = str(scratch)
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="state-", dir=scratch)
    # The workspace registry too (each test gets its own in _isolated_env): a module-scoped
    # fixture that runs `ctxos start` or `init` must never register into the real user's.
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="config-", dir=scratch)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the run's scratch folder (daemons the tests started are stopped by then)."""
    scratch = os.environ.pop(SCRATCH_ENV, None)
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Keep tests away from the real home, cache and runtime dirs."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    # The per-user workspace registry (services/workspace_registry.py): one per test.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    # Short path: Unix socket paths are limited to 104/108 bytes.
    runtime_dir = short_runtime_dir()
    monkeypatch.setenv("CTXOS_RUNTIME_DIR", str(runtime_dir))
    monkeypatch.delenv("CTXOS_WORKSPACE", raising=False)
    monkeypatch.delenv("CTXOS_STATE_DIR", raising=False)
    yield
    # Torn down after the test's own fixtures (autouse comes first, leaves last): its daemons are stopped.
    shutil.rmtree(runtime_dir, ignore_errors=True)


@pytest.fixture
def anyio_backend() -> str:
    """``@pytest.mark.anyio`` tests run on asyncio (the daemon's loop)."""
    return "asyncio"


def shared_data(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"shared data {path} is not present on this machine")
    return path


@pytest.fixture
def open_engine(make_workspace):
    """Factory: ``open_engine(files) -> Engine`` loaded on a new workspace of ``files``; closed after the test."""
    from ctxos.services.engine import Engine

    engines: list[Engine] = []

    def factory(files: dict[str, str | bytes]) -> Engine:
        engine = Engine(make_workspace(files))
        engine.load()
        engines.append(engine)
        return engine

    yield factory
    for engine in engines:
        engine.close()
