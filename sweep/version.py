"""The engine's version, as every session and row of a run records it.

Read from the source tree's pyproject.toml when the package runs from one (a git checkout on
PYTHONPATH, installed or not, tells its own version, not that of some other installed copy), else from
the installed distribution's metadata, else "unknown": a version is a record, never a reason to stop.
"""
from __future__ import annotations

import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


@cache
def engine_version() -> str:
    try:
        project = tomllib.loads(PYPROJECT.read_text()).get("project", {})
        if project.get("name") == "sweep" and isinstance(project.get("version"), str):
            return project["version"]
    except (OSError, ValueError):  # no pyproject.toml beside the package: an installed copy
        pass
    try:
        return metadata.version("sweep")
    except metadata.PackageNotFoundError:
        return "unknown"
