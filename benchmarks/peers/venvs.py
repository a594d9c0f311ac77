"""Private virtualenvs for the peers, under ``benchmarks/.cache/venvs/<name>``.

Peers are installed from PyPI by the benchmark itself, each in its own venv, so
their dependencies (basic-memory pulls in several hundred MB and needs Python
3.12+) never touch the project's environment and a fresh clone needs nothing
installed by hand. A venv is reused while its stamp (the requirement list and
interpreter) is unchanged. ``.cache/`` is git-ignored.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .client import Peer, PeerUnavailable

CACHE_DIR = Path(os.environ.get("CTXOS_BENCH_CACHE") or Path(__file__).resolve().parents[1] / ".cache")
VENVS_DIR = CACHE_DIR / "venvs"


def python_version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    major, minor = out.stdout.split()
    return int(major), int(minor)


def find_python(minimum: tuple[int, int]) -> str | None:
    """An interpreter at least ``minimum``: ``CTXOS_BENCH_PYTHON``, this one, PATH, pyenv, uv."""
    candidates: list[str] = []
    if os.environ.get("CTXOS_BENCH_PYTHON"):
        candidates.append(os.environ["CTXOS_BENCH_PYTHON"])
    candidates.append(sys.executable)
    for name in ("python3.14", "python3.13", "python3.12"):
        found = shutil.which(name)
        if found:
            candidates.append(found)
    home = Path.home()
    for pattern in (
        str(home / ".pyenv/versions/3.1[2-9]*/bin/python3"),
        str(home / ".local/share/uv/python/cpython-3.1[2-9]*/bin/python3"),
        "/usr/local/bin/python3.1[2-9]",
        "/usr/bin/python3.1[2-9]",
    ):
        candidates.extend(sorted(glob.glob(pattern), reverse=True))
    for candidate in candidates:
        version = python_version(candidate)
        if version is not None and version >= minimum:
            return candidate
    return None


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_venv(name: str, requirements: list[str], *, minimum_python: tuple[int, int] = (3, 11), log=print) -> Path:
    """Create (or reuse) the venv ``name`` with ``requirements`` installed; return its python.

    Raises ``PeerUnavailable`` with pip's last lines when the install fails, so the
    benchmark can report the peer as not run instead of crashing.
    """
    python = find_python(minimum_python)
    if python is None:
        raise PeerUnavailable(
            f"{name}: no Python >= {minimum_python[0]}.{minimum_python[1]} found (set CTXOS_BENCH_PYTHON)"
        )
    venv = VENVS_DIR / name
    stamp = venv / ".ctxos-bench-stamp"
    wanted = f"{python}\n" + "\n".join(requirements) + "\n"
    if stamp.exists() and stamp.read_text(encoding="utf-8") == wanted and venv_python(venv).exists():
        return venv_python(venv)
    if venv.exists():
        shutil.rmtree(venv)
    VENVS_DIR.mkdir(parents=True, exist_ok=True)
    log(f"[peers] installing {' '.join(requirements)} into {venv} (once; cached afterwards)")
    started = time.perf_counter()
    steps = [
        [python, "-m", "venv", str(venv)],
        [str(venv_python(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirements],
    ]
    for step in steps:
        out = subprocess.run(step, capture_output=True, text=True)
        if out.returncode != 0:
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
            shutil.rmtree(venv, ignore_errors=True)
            raise PeerUnavailable(f"{name}: install failed ({' '.join(step[:4])} ...):\n{tail}")
    stamp.write_text(wanted, encoding="utf-8")
    log(f"[peers] {name} ready in {time.perf_counter() - started:.0f} s")
    return venv_python(venv)


class VenvPeer(Peer):
    """A peer whose worker is one script run by the Python of its own venv (Tantivy, bm25s).

    Subclasses name the venv, its pinned requirements (the first one's version is the
    peer's), the worker script and the folder its index is written to.
    """

    venv_name = ""
    requirements: tuple[str, ...] = ()
    script: Path
    index_folder = ""

    def __init__(self) -> None:
        super().__init__()
        self.python: Path | None = None
        self.version = self.requirements[0].split("==")[1]

    def prepare(self) -> None:
        self.python = ensure_venv(self.venv_name, list(self.requirements))

    def worker_argv(self) -> list[str]:
        assert self.python is not None
        return [str(self.python), str(self.script)]

    def index_paths(self) -> list[Path]:
        assert self.work is not None
        return [self.work / self.index_folder]
