"""Every shipped seed sweep runs at its smoke scale through the engine, and early stopping works."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from cifar_files import write_cifar10
from conftest import SWEEPS, run_cli

from sweep import spec, store

# resnet50_lr_scaling's smoke run is tests/test_smoke_sweep.py.
OTHERS = ["keras_mxnet_vs_tf_resnet50", "keras_mxnet_vs_tf_inception_v3", "cifar10_conv_mgpu", "tf_cnn_benchmarks"]


@pytest.fixture(scope="module")
def cluster():
    """One Ray for the four studies' runs (as `run` would start it here: one node, 4 emulated GPUs, the
    machine's CPUs), joined with --address: each run saves starting and stopping a Ray of its own."""
    import os

    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": os.cpu_count(), "num_gpus": 4,
                                                            "include_dashboard": False})
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        cluster.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("name", OTHERS)
def test_seed_sweep_smoke_scale_runs(name: str, cluster, tmp_path: Path) -> None:
    data = write_cifar10(tmp_path / "data", train_per_file=40, test=64)
    results = tmp_path / "results"
    out = run_cli(name, "--address", cluster.address, "--scale", "smoke", "--results", str(results),
                  "--data-dir", str(data), timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    folder = store.run_dirs(results, name)[-1]
    summary = pd.read_parquet(folder / "trials")
    epochs = pd.read_parquet(folder / "epochs")
    trials = spec.load(name).trials("smoke")
    assert sorted(summary.trial_id) == sorted(t.trial_id for t in trials)
    assert set(summary.status) == {"completed"}
    assert set(epochs.framework) == {"mxnet", "tensorflow"}
    real = epochs[epochs.data == "cifar10"]
    assert (real.data_kind == "real").all() and real.val_acc.notna().all()
    assert (epochs[epochs.data == "synthetic"].val_acc.isna()).all()
    assert (epochs.param_count > 0).all() and (epochs.images_per_sec > 0).all()
    # One model means one architecture: both frameworks report the same parameter count.
    assert (epochs.groupby(["model", "image_size"]).param_count.nunique() == 1).all()


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
