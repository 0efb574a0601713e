"""PyTorch trials through `python -m sweep` on a real two-node Ray cluster on this machine (fake GPUs):
one process per GPU under DistributedDataParallel, on one node and across two; a rank that dies or
hangs fails its trial within a bounded time and the sweep goes on."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from cifar_files import write_cifar10
from conftest import ROOT, SWEEPS, run_cli

from sweep import store

NODE = {"num_cpus": 3, "num_gpus": 3}


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args=NODE)
    cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture(scope="module")
def cifar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("cifar"), train_per_file=400, test=500)


@pytest.mark.slow
def test_pytorch_trials_on_1_2_3_gpus_and_2_nodes_run_end_to_end(cluster, cifar: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    out = run_cli(str(SWEEPS / "pytorch.yaml"), "--address", cluster.address, "--data-dir", str(cifar),
                  "--results", str(results), "--scale", "full", timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    folder = store.run_dirs(results, "pytorch")[-1]
    trials, epochs = pd.read_parquet(folder / "trials"), pd.read_parquet(folder / "epochs")
    assert set(trials.status) == {"completed"}
    assert sorted(zip(trials.nodes, trials.num_gpus)) == [(1, 1), (1, 2), (1, 3), (2, 2)]
    assert not epochs.duplicated(["trial_id", "epoch"]).any() and len(epochs) == 4 * 2
    for row in epochs.itertuples():
        gpus = row.ray_gpu_ids.split(";") if row.num_gpus > 1 else [row.ray_gpu_ids]
        assert len(gpus) == row.num_gpus  # a process (a row part) per GPU, each with one
        assert len(set(row.ray_node_id.split(";"))) == row.nodes  # the 2-node trial: one rank on each
        assert 0 <= row.val_acc <= 1 and row.steady_images_per_sec > 0
        assert row.framework_version.startswith("pytorch ") and row.layout == "NCHW" and row.compiler is None
        assert row.device_kind == "cpu-emulated" and row.peak_device_mem_mib is None
    # Learnable data: each trial learns (chance is 0.1).
    assert (epochs.groupby("trial_id").val_acc.max() > 0.3).all(), epochs[["num_gpus", "nodes", "epoch", "val_acc"]]

    out = run_cli("report", str(folder))
    assert out.returncode == 0, out.stderr[-3000:]
    from sweep import report
    throughput = report.build_report(report.load_run(folder)).throughput.frame
    assert len(throughput) >= 1 and "pytorch" in throughput.to_string()
