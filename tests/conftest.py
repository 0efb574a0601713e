"""Shared test helpers: the CLI as a real subprocess, small CIFAR-format data sets."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = Path(__file__).resolve().parent / "sweeps"


def run_cli(*args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m sweep ARGS` in a fresh process, as a user runs it."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("RAY_ADDRESS", None) if env is None or "RAY_ADDRESS" not in env else None
    return subprocess.run([sys.executable, "-m", "sweep", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return tmp_path / "results"
