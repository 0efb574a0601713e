"""A real two-node Ray cluster on this machine (fake GPUs), joined with --address."""
from __future__ import annotations

import errno
import itertools
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from conftest import BARE_HEAD, BARE_NODE, HANG_S, ROOT, SWEEPS, run_cli, run_cli_trials_at_once

from sweep import store
from sweep.cluster import retried_if_timed_out

NODE = {"num_cpus": 2, "num_gpus": 4, **BARE_NODE}
HEAD = {**NODE, **BARE_HEAD}  # no test here reads the clusters' own dashboards


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    cluster = retried_if_timed_out(lambda: Cluster(initialize_head=True, head_node_args=HEAD))
    worker = retried_if_timed_out(lambda: cluster.add_node(**NODE))
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


@pytest.mark.slow  # the module's two-node cluster: ~20 CPU-s to start (issue 46, the fast lane's 3 minutes)
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


@pytest.mark.slow  # the module's two-node cluster: ~20 CPU-s to start (issue 46, the fast lane's 3 minutes)
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
@pytest.mark.heavy
def test_lost_node_trials_rerun_elsewhere_from_checkpoints(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from conftest import ROOT
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args=HEAD)
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


@pytest.fixture
def port_8265_taken() -> Iterator[bool]:
    """127.0.0.1:8265, Ray's dashboard port, held for the test as another Ray or any server would hold it.
    Yields whether the test holds it: where another process (a Ray started earlier) does, the premise holds already."""
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", 8265))
        held.listen()
        mine = True
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            raise
        mine = False
    try:
        yield mine
    finally:
        held.close()


def tiny_sweep(folder: Path, shape: str) -> str:
    """A sweep file of one short PyTorch trial of `shape` (its GPUs, its nodes), on synthetic data."""
    path = folder / "taken.yaml"
    path.write_text("name: taken\ndescription: \"Test sweep: one short trial while 8265 is taken\"\n"
                    "fixed: {framework: pytorch, model: resnet8_cifar, data: synthetic, batch_per_gpu: 8, epochs: 1,\n"
                    f"        steps_per_epoch: 2, val_examples: 16, warmup_steps: 1, lr: 0.05, {shape}}}\n")
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["num_gpus: 1", "nodes: 2, gpus_per_node: 1"], ids=["one_node", "across_nodes"])
def test_embedded_ray_moves_its_dashboard_past_a_taken_8265(port_8265_taken: bool, tmp_path: Path, shape: str) -> None:
    # Across nodes, the engine starts its nodes through ray.cluster_utils.Cluster, whose default dashboard port is
    # 8265 with no retry: that run once ended in Ray's traceback (exit 1) where 8265 was taken.
    out = run_cli(tiny_sweep(tmp_path, shape), "--emulate-gpus", "1", "--dashboard", "on", "--results",
                  str(tmp_path / "results"), timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "done: 1 completed, 0 failed" in out.stdout and "Traceback" not in out.stderr
    port = int(re.search(r"^Ray dashboard: http://127\.0\.0\.1:(\d+) ", out.stdout, re.M).group(1))
    assert 8265 < port <= 8265 + 50 or (port == 8265 and not port_8265_taken), out.stdout  # the one Ray bound


# Ray's start as it times out on a loaded machine, twice: its GCS and raylet started, then no registration within Ray's 30 s.
TIMES_OUT_ONCE = """
import os, sys
import ray._private.node as node
from sweep import cluster

real, tries = node.Node.start_ray_processes, []
def start_ray_processes(self):
    real(self)
    tries.append(1)
    if len(tries) <= 2:
        raise Exception("The current node timed out during startup. This could happen because some of the raylet "
                        "failed to startup or the GCS has become overloaded.")
node.Node.start_ray_processes = start_ray_processes
started = cluster.start(None, 1, emulated=True)
gcs = [pid for pid in cluster._rays_processes() if b"gcs_server" in open(f"/proc/{pid}/cmdline", "rb").read()]
print(len(tries), len(started.nodes), len(gcs))
cluster.stop(started)
"""


@pytest.mark.slow
def test_an_embedded_ray_whose_raylet_did_not_register_in_time_is_started_again_in_its_place_twice() -> None:
    """Ray waits a fixed 30 s for a new raylet to register with its GCS; three test workers on two cores ran past it
    (issue 46), twice in a row once. The engine stops what each such start began and starts Ray again, up to three
    starts: one cluster, one GCS."""
    out = subprocess.run([sys.executable, "-c", TIMES_OUT_ONCE], cwd=ROOT, capture_output=True, text=True,
                         timeout=HANG_S, env={**os.environ, "RAY_ADDRESS": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["3", "1", "1"], out.stdout + out.stderr[-2000:]  # three starts, one node, one GCS


# An embedded Ray as `run --dashboard off` starts it: which of its processes the cluster's raylet and this script run.
STARTED_BARE = """
import os
from pathlib import Path
from sweep import cluster

started = cluster.start(None, 1, None, emulated=True)
parents = {}
for entry in Path("/proc").iterdir():
    try:
        parents[entry.name] = ((entry / "stat").read_text().rsplit(")", 1)[1].split()[1],
                               (entry / "cmdline").read_bytes().replace(b"\\0", b" ").decode(errors="replace"))
    except (OSError, ValueError):
        pass
def under(pid, ancestor):
    while pid in parents and pid != "1":
        pid = parents[pid][0]
        if pid == ancestor:
            return True
    return False
raylet = next(pid for pid, (_, argv) in parents.items() if "/raylet " in argv and under(pid, str(os.getpid())))
workers = [argv for pid, (parent, argv) in parents.items() if parent == raylet and "Agent" not in argv]
modules = [argv for pid, (_, argv) in parents.items() if "ray-dashboard-" in argv and under(pid, str(os.getpid()))]
print(started.dashboard_url, len(workers), len(modules))
cluster.stop(started)
"""


@pytest.mark.slow
def test_an_embedded_ray_without_its_dashboard_runs_no_dashboard_modules_and_no_idle_workers() -> None:
    """`--dashboard off` (the suite's runs): no dashboard's head and modules. And never workers Ray starts ahead for
    tasks of the default runtime environment, which no trial, rank or check of the engine is (issue 46): as many as
    the node has CPUs, each ~0.6 CPU-s to import Ray, idle until the end."""
    out = subprocess.run([sys.executable, "-c", STARTED_BARE], cwd=ROOT, capture_output=True, text=True,
                         timeout=HANG_S, env={**os.environ, "RAY_ADDRESS": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["None", "0", "0"], out.stdout + out.stderr[-2000:]


@pytest.mark.slow
def test_embedded_ray_that_cannot_start_its_dashboard_says_so_in_one_line(tmp_path: Path) -> None:
    host = "203.0.113.1"  # TEST-NET-3: no address of this machine, so no port of it can be bound
    with socket.socket() as probe:
        try:
            probe.bind((host, 0))
            pytest.skip(f"{host} is an address of this machine")
        except OSError:
            pass
    # Ray waits RAY_DASHBOARD_STARTUP_TIMEOUT_S (60 s) for a dashboard that never says where it listens.
    out = run_cli(tiny_sweep(tmp_path, "num_gpus: 1"), "--emulate-gpus", "1", "--dashboard-host", host, "--dashboard", "on", "--results",
                  str(tmp_path / "results"), timeout=400, env={"RAY_DASHBOARD_STARTUP_TIMEOUT_S": "10"})
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-3000:]
    assert out.stderr.startswith(f"error: could not start the embedded Ray (dashboard on {host}): "), out.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_joined_cluster_started_with_its_dashboard_port_taken_runs_and_says_it_has_no_dashboard(tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    # Started as `ray start --head` starts a head (--dashboard-port, 8265 by default): its dashboard on that port with
    # no retry, so here, where the test holds the port, none at all. A port of the test's own, not 8265: another test
    # process's Ray may hold 8265 and let it go at any moment.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        head = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 1,
                                                            "dashboard_port": held.getsockname()[1]})
    try:
        assert head.webui_url is None  # the premise: the head started no dashboard
        out = run_cli(tiny_sweep(tmp_path, "num_gpus: 1"), "--address", head.address, "--results",
                      str(tmp_path / "results"), timeout=400)
    finally:
        head.shutdown()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "done: 1 completed, 0 failed" in out.stdout
    assert "Ray dashboard: none on this cluster (its head started none: no ray[default] there, or its dashboard " \
           "port was taken)" in out.stdout
