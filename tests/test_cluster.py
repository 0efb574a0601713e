"""A real two-node Ray cluster on this machine (fake GPUs), joined with --address."""
from __future__ import annotations

import itertools
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import SWEEPS, run_cli, run_cli_trials_at_once

from sweep import store

NODE = {"num_cpus": 2, "num_gpus": 4}


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args=NODE)
    worker = cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    try:
        yield cluster, worker
    finally:
        cluster.shutdown()


def run_dir(results: Path, name: str) -> Path:
    return store.run_dirs(results, name)[-1]


@pytest.mark.slow
def test_sweep_on_two_nodes_uses_both_and_never_shares_a_gpu(cluster, tmp_path: Path) -> None:
    head, _ = cluster
    results = tmp_path / "results"
    # Three trials at once (the first waits for two more to start: GPUs 1, 1 and 2 of the grid's order): on two
    # nodes, two of them share one, so the check below always has a pair to look at.
    out = run_cli_trials_at_once(str(SWEEPS / "two_nodes.yaml"), "--address", head.address, "--results",
                                 str(results), "--scale", "full", embedded=False, others=2, timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    folder = run_dir(results, "two_nodes")
    summary = pd.read_parquet(folder / "trials").set_index("trial_id")
    epochs = pd.read_parquet(folder / "epochs")
    assert len(summary) == 6 and set(summary.status) == {"completed"}
    assert epochs.ray_node_id.nunique() == 2, "trials should land on both nodes"
    placed = epochs.groupby("trial_id").agg(node=("ray_node_id", "first"), gpus=("ray_gpu_ids", "first"),
                                            nodes=("ray_node_id", "nunique"))
    assert (placed.nodes == 1).all()  # a trial's GPUs sit on one node (one STRICT_PACK bundle)
    overlaps = 0
    for a, b in itertools.combinations(summary.index, 2):
        same_node = placed.loc[a, "node"] == placed.loc[b, "node"]
        concurrent = summary.loc[a, "started_at"] < summary.loc[b, "ended_at"] and summary.loc[b, "started_at"] < summary.loc[a, "ended_at"]
        if same_node and concurrent:
            overlaps += 1
            shared = set(placed.loc[a, "gpus"].split(",")) & set(placed.loc[b, "gpus"].split(","))
            assert not shared, f"{a} and {b} ran at once on GPUs {shared} of one node"
    assert overlaps, "no two trials ran at once on a node: the GPU check had nothing to see"
    assert (summary.device_kind == "cpu-emulated").all()


def test_infeasible_trial_is_rejected_within_seconds(cluster, tmp_path: Path) -> None:
    head, _ = cluster
    results = tmp_path / "results"
    # The defect is Ray's: an infeasible bundle waits for ever. run_cli's 120 s limit catches that (a failure);
    # a wall-clock bound tighter than that would also count Python's and Ray's start on a loaded machine.
    out = run_cli(str(SWEEPS / "too_big.yaml"), "--address", head.address, "--results", str(results), "--scale", "full",
                  timeout=120)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "1 of 3 trials fit no node" in out.stderr and "--skip-infeasible" in out.stderr
    assert "the largest has 4 GPUs" in out.stdout and " 8 " in out.stdout  # the table names the trial
    assert not results.exists()


def test_plan_reads_the_joined_clusters_nodes_and_starts_nothing(cluster, tmp_path: Path) -> None:
    head, _ = cluster
    results = tmp_path / "results"
    out = run_cli("plan", str(SWEEPS / "too_big.yaml"), "--address", head.address, "--results", str(results), timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "plan: too_big at scale full, 3 trials" in out.stdout  # a joined cluster: the full scale, as run's
    assert f"the Ray cluster at {head.address}: 2 nodes, its nodes name no GPU model" in out.stdout
    nodes = [line.split() for line in out.stdout.splitlines() if line.endswith("of 3 trials")]
    assert [n[1:4] for n in nodes] == [["4", "2", "2"]] * 2  # GPUs, CPUs, trials that fit
    assert "fits no node:" in out.stdout and "needs 8 GPUs" in out.stdout
    assert not results.exists()


@pytest.mark.slow
def test_skip_infeasible_records_it_and_runs_the_rest(cluster, tmp_path: Path) -> None:
    head, _ = cluster
    results = tmp_path / "results"
    out = run_cli(str(SWEEPS / "too_big.yaml"), "--address", head.address, "--results", str(results), "--scale", "full",
                  "--skip-infeasible", timeout=300)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]  # one trial did not complete
    summary = pd.read_parquet(run_dir(results, "too_big") / "trials").set_index("num_gpus")
    assert summary.loc[8, "status"] == "infeasible" and "4 GPUs" in summary.loc[8, "error"]
    assert summary.loc[1, "status"] == summary.loc[2, "status"] == "completed"


@pytest.mark.slow
def test_lost_node_trials_rerun_elsewhere_from_checkpoints(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from conftest import ROOT
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args=NODE)
    worker = cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    results = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen([sys.executable, "-m", "sweep", str(SWEEPS / "node_loss.yaml"), "--address", cluster.address,
                             "--results", str(results), "--scale", "full", "--max-failures", "2"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        lost: set[str] = set()
        deadline = time.time() + 240
        while not lost:  # wait until a trial on the worker node has checkpointed an epoch, mid-way
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read()[-3000:]
            runs = store.run_dirs(results, "node_loss")
            if runs:
                try:
                    rows = store.RunStore(runs[-1]).epochs()
                except store.StoreError:
                    continue
                on_worker = rows[rows.ray_node_id == worker.node_id]
                mid = on_worker.groupby("trial_id").epoch.max()
                lost = set(mid[(mid >= 1) & (mid <= 2)].index)  # three or more epochs still to run
            time.sleep(0.3)  # each look reads the run's Parquet (15-40 ms of CPU): the trials keep the cores
        cluster.remove_node(worker)
        out, _ = proc.communicate(timeout=400)
        assert proc.returncode == 0, out[-4000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        cluster.shutdown()

    folder = store.run_dirs(results, "node_loss")[-1]
    summary = pd.read_parquet(folder / "trials").set_index("trial_id")
    epochs = pd.read_parquet(folder / "epochs")
    assert len(summary) == 4 and set(summary.status) == {"completed"}
    assert not epochs.duplicated(["trial_id", "epoch"]).any()
    for tid, rows in epochs.groupby("trial_id"):
        assert sorted(rows.epoch) == list(range(6)), tid
    for tid in lost:
        rows = epochs[epochs.trial_id == tid].sort_values("epoch")
        assert summary.loc[tid, "attempts"] >= 2
        # The rerun continued from a checkpoint: its first epochs' rows are the first attempt's.
        assert rows.attempt.iloc[0] == 1 and rows.attempt.iloc[-1] >= 2, rows[["epoch", "attempt"]]
        assert rows.ray_node_id.iloc[-1] != worker.node_id  # it finished on the surviving node
