"""Package list for setuptools: every package under the four source folders, installed as ``ctxos.*``.

The source folders sit at the repository root (``services/`` is ``ctxos.services``), which
``[tool.setuptools.packages.find]`` cannot express, so the list is computed here: a new
subpackage (``services/history/``, a split module's folder) is installed without anyone
remembering to list it. Everything else is in ``pyproject.toml``.
"""

from setuptools import find_packages, setup

ROOTS = ("services", "daemon", "client", "packaging")

setup(
    package_dir={f"ctxos.{root}": root for root in ROOTS},
    packages=[f"ctxos.{name}" for name in find_packages(include=[*ROOTS, *(f"{root}.*" for root in ROOTS)])],
)
