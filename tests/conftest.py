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


@pytest.fixture(scope="session")
def mxnet_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second interpreter holding MXNet and what a trial's worker needs (the driver's Ray), and nothing else:
    no TensorFlow, no pandas. Built once per test session (pip, from its cache after the project's install)."""
    import ray

    venv = tmp_path_factory.mktemp("mxnet-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "mxnet==1.9.1", "numpy<2",
                    f"ray=={ray.__version__}"], check=True, timeout=900, capture_output=True)
    return venv / "bin" / "python"


def two_node_cluster(node: dict[str, int]):
    """A real two-node Ray cluster on this machine, each node with these resources (fake GPUs); for a
    module-scoped fixture: yields it, then shuts it down."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args=node)
    cluster.add_node(**node)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        cluster.shutdown()
