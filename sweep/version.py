"""The engine's version and git commit, as every session and row of a run records them.

Read from the source tree's pyproject.toml when the package runs from one (a git checkout on
PYTHONPATH, installed or not, tells its own version, not that of some other installed copy), else from
the installed distribution's metadata, else "unknown": a version is a record, never a reason to stop.
"""
from __future__ import annotations

import subprocess
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent  # the folder holding sweep/ and trainables/
PYPROJECT = PROJECT_DIR / "pyproject.toml"


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


def git_commit(root: Path = PROJECT_DIR) -> str | None:
    """The project's own commit (12 hex digits; "-dirty" with uncommitted changes to tracked files), or None
    where `root` is not the top of a git work tree: a copy of the project inside another repository (a bundle
    unpacked in some checkout) would otherwise name that repository's commit, which says nothing of this code."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)

    try:
        top = git("rev-parse", "--show-toplevel")
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
            return None
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head.stdout.strip() + ("-dirty" if dirty else "")) if head.returncode == 0 else None
