"""A non-editable install holds every subpackage and the package data.

The source folders sit at the repository root and are installed as ``ctxos.*`` (setup.py
computes the package list). An editable install hides a missing package, because the
import falls through to the source tree, so this builds the real wheel (``pip wheel``,
the same build ``pip install .`` runs) and compares its contents with the tree.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOTS = ("services", "daemon", "client", "packaging")
# Package data the code reads at run time: the default config, the example memories,
# the web page and the service files.
DATA = (
    "services/default_config.yaml",
    "services/examples/*.md",
    "daemon/web/*.*",
    "daemon/web/vendor/cytoscape/*",
    "packaging/ctxos.service",
    "packaging/ctxos.plist",
)


def _source_files() -> set[str]:
    files: set[str] = set()
    for root in ROOTS:
        files.update(f"ctxos/{p.relative_to(ROOT).as_posix()}" for p in (ROOT / root).rglob("*.py"))
    for pattern in DATA:
        files.update(f"ctxos/{p.relative_to(ROOT).as_posix()}" for p in ROOT.glob(pattern) if p.is_file())
    return {f for f in files if "__pycache__" not in f}


@pytest.mark.slow
def test_wheel_holds_every_subpackage_and_the_package_data(tmp_path):
    # Built from a copy: setuptools reuses a build/ folder in the tree, which can hold files of an older layout.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for root in ROOTS:
        shutil.copytree(ROOT / root, src / root, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("ai_context_os-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = _source_files()
    assert "ctxos/services/history/__init__.py" in expected  # the subpackages are in the comparison
    assert expected - names == set(), "missing from the wheel"
    assert {n for n in names if n.startswith("ctxos/") and n.endswith(".py")} - expected == set()
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "ctxos = ctxos.client.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
