"""A shipped study runs at its smoke scale through the engine, and early stopping works.

tf_cnn_benchmarks runs here: its smoke scale varies every axis the studies have (framework, model, data,
batch, GPUs, variable_update). The other studies' smoke runs take minutes each on two cores: they run in
benchmarks/study_smokes.py, which this test shares its checks with.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
import pytest
from cifar_files import write_cifar10
from conftest import ROOT, SWEEPS, run_cli

from sweep import store

sys.path.insert(0, str(ROOT / "benchmarks"))
from study_smokes import problems  # noqa: E402


@pytest.mark.slow
def test_tf_cnn_benchmarks_smoke_scale_runs(tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    # One node, 4 emulated GPUs, the machine's CPUs (as `run` would start it here), joined with --address as
    # benchmarks/study_smokes.py joins it.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": os.cpu_count(), "num_gpus": 4,
                                                            "include_dashboard": False})
    try:
        cluster.wait_for_nodes()
        data = write_cifar10(tmp_path / "data", train_per_file=40, test=64)
        results = tmp_path / "results"
        out = run_cli("tf_cnn_benchmarks", "--address", cluster.address, "--scale", "smoke", "--results", str(results),
                      "--data-dir", str(data), timeout=900)
    finally:
        cluster.shutdown()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert problems("tf_cnn_benchmarks", results) == []
    epochs = pd.read_parquet(store.run_dirs(results, "tf_cnn_benchmarks")[-1] / "epochs")
    assert set(epochs.data_kind) == {"real", "synthetic"} and set(epochs.framework) == {"mxnet", "tensorflow"}


@pytest.mark.slow
def test_early_stopping_marks_stopped_trials(tmp_path: Path) -> None:
    data = write_cifar10(tmp_path / "data", train_per_file=200, test=200)
    results = tmp_path / "results"
    out = run_cli(str(SWEEPS / "early_stop.yaml"), "--results", str(results), "--data-dir", str(data),
                  "--max-concurrent", "4", timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = pd.read_parquet(store.run_dirs(results, "early_stop")[-1] / "trials")
    assert set(summary.status) <= {"completed", "stopped_early"}
    stopped = summary[summary.status == "stopped_early"]
    assert len(stopped) >= 1, summary[["lr", "status", "epochs_done", "best_val_acc"]]
    assert (stopped.epochs_done < 4).all()
    assert (summary[summary.status == "completed"].epochs_done == 4).all()
