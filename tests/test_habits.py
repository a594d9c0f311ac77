"""mypy checks every installed package under its installed name (``ctxos.*``).

The source folders sit at the repository root and are installed as ``ctxos.<folder>``
(setup.py). mypy cannot follow setuptools' editable-install hook, so it reads the code
through ``.mypy/ctxos/<folder>`` symlinks (``[tool.mypy]`` in pyproject.toml). A new
source folder without its symlink and its entry in ``packages`` would silently go
unchecked, and its imports elsewhere would type as ``Any``; this test says so instead.
The gate itself (``ruff check``, ``ruff format --check``, ``mypy``) runs in ``.ci/run``.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _source_roots() -> tuple[str, ...]:
    """``ROOTS`` as setup.py declares it (read, not imported: importing setup.py runs setup())."""
    match = re.search(r"^ROOTS = (\(.*?\))$", (ROOT / "setup.py").read_text(encoding="utf-8"), re.M)
    assert match, "setup.py no longer declares ROOTS = (...) on one line"
    roots = ast.literal_eval(match.group(1))
    assert roots and all(isinstance(r, str) for r in roots)
    return tuple(roots)


def test_mypy_checks_every_source_folder_under_its_installed_name() -> None:
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    roots = _source_roots()
    assert sorted(mypy["packages"]) == sorted(f"ctxos.{root}" for root in roots)
    base = ROOT / mypy["mypy_path"] / "ctxos"
    for root in roots:
        link = base / root
        assert link.is_symlink(), f"{link.relative_to(ROOT)} is missing: add `ln -s ../../{root} {link}`"
        assert link.resolve() == (ROOT / root).resolve(), f"{link.relative_to(ROOT)} points elsewhere"
    assert sorted(p.name for p in base.iterdir()) == sorted(roots), "a symlink for a folder that is not installed"


def test_the_strict_override_names_real_modules() -> None:
    """The strict section must match the installed module names, or it silently checks nothing."""
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]["overrides"]
    strict = [o for o in overrides if o.get("disallow_untyped_defs")]
    assert strict, "no strict section in [tool.mypy]"
    assert sorted(strict[0]["module"]) == ["ctxos.services", "ctxos.services.*"]
