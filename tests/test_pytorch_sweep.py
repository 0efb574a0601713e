"""PyTorch trials through `python -m sweep` on a real two-node Ray cluster on this machine (fake GPUs):
one process per GPU under DistributedDataParallel, on one node and across two; a rank that dies or
hangs fails its trial within a bounded time and the sweep goes on."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from cifar_files import write_cifar10
from conftest import ROOT, SWEEPS, run_cli, trial_workers, two_node_cluster

from sweep import store
from sweep.runner import NODE_LOSS_WATCH_S

NODE = {"num_cpus": 3, "num_gpus": 3}


@pytest.fixture(scope="module")
def cluster():
    yield from two_node_cluster(NODE)


@pytest.fixture(scope="module")
def cifar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("cifar"), train_per_file=400, test=500)


@pytest.mark.slow
@pytest.mark.heavy  # CI runs it in lane 2, on PyTorch's CUDA build (.ci/run)
def test_pytorch_trials_on_1_2_3_gpus_and_2_nodes_run_end_to_end(cluster, cifar: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    out = run_cli(str(SWEEPS / "pytorch.yaml"), "--address", cluster.address, "--data-dir", str(cifar),
                  "--results", str(results), "--scale", "full", timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    # Each multi-GPU trial's ranks end when it ends, as meant: the raylet has no "worker died" to tell.
    assert "A worker died" not in out.stdout + out.stderr, out.stdout[-4000:] + out.stderr[-3000:]
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
        # pd.isna: a missing string reads as None with pandas 2, as NaN with pandas 3's string dtype.
        assert row.framework_version.startswith("pytorch ") and row.layout == "NCHW" and pd.isna(row.compiler)
        assert row.device_kind == "cpu-emulated" and row.peak_device_mem_mib is None
    # Learnable data: each trial learns (chance is 0.1).
    assert (epochs.groupby("trial_id").val_acc.max() > 0.3).all(), epochs[["num_gpus", "nodes", "epoch", "val_acc"]]

    out = run_cli("report", str(folder))
    assert out.returncode == 0, out.stderr[-3000:]
    from sweep import report
    from sweep.report.tables import framework_tables
    run = report.load_run(folder)
    built, figures = report.build_report(run, target_acc=0.3), report.trial_figures(run.trials, run.epochs)
    throughput = built.throughput
    # 2 GPUs on one node and on two are cells of their own, each its trial's rate, never their mean.
    (column,) = throughput.frame.columns
    rate = trials.set_index(["num_gpus", "nodes"]).steady_images_per_sec
    for gpus, (num_gpus, nodes) in {1: (1, 1), "2 on 1 node": (2, 1), "2 on 2 nodes": (2, 2), 3: (3, 1)}.items():
        assert throughput.frame.loc[("images/s", gpus), column] == pytest.approx(rate[num_gpus, nodes])
        assert throughput.frame.loc[("speedup", gpus), column] == pytest.approx(rate[num_gpus, nodes] / rate[1, 1])
    assert not any("differ only in" in note for note in throughput.notes), throughput.notes
    # Per trial, each table names the two 2-GPU trials apart in the same words.
    gpus = [1, "2 on 1 node", "2 on 2 nodes", 3]
    (per_group,) = built.per_run
    assert list(per_group.frame.columns) == [f"GPU ({g})" for g in gpus]
    assert list(built.lr_scaling.frame.index.get_level_values("GPUs")) == gpus
    assert sorted(built.time_to_accuracy.frame.index.get_level_values("GPUs"), key=str) == sorted(gpus, key=str)
    # Side by side with a second framework (this run's trials again, at twice the rate): each 2-GPU column is
    # compared with the other framework's on its own node count, and neither is dropped as a repeated GPU count.
    twice = figures.assign(framework="tensorflow", images_per_sec=figures.images_per_sec * 2, trial_id=figures.trial_id + "t")
    (side_by_side,) = framework_tables(pd.concat([figures, twice], ignore_index=True))
    over_first = side_by_side.frame.loc["Images/s over the first framework"]
    assert list(over_first.index) == [f"GPU ({g}) {fw}" for g in gpus for fw in ("pytorch", "tensorflow")]
    assert list(over_first) == pytest.approx([1.0, 2.0] * 4), over_first
    assert "2 on 1 node: pytorch, 2 on 2 nodes: pytorch, 3 GPUs: pytorch" in side_by_side.notes[0], side_by_side.notes
    # The plots: a line over one node and one across nodes, neither running up and down one GPU count.
    for plot in (report.plot_throughput, report.plot_efficiency):
        drawn = plot(report.scaling(figures), run.emulated).axes[0].get_lines()
        lines = {line.get_label(): list(line.get_xdata()) for line in drawn if line.get_marker() == "o"}
        assert lines == {f"{column}, one node": [1, 2, 3], f"{column}, across nodes": [1, 2]}, lines


def start_sweep(sweep: Path, results: Path, *options: str, **env: str) -> subprocess.Popen:
    """`python -m sweep` on two emulated GPUs, in a session of its own (the test stops it and what it started)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
    full_env.pop("RAY_ADDRESS", None)
    return subprocess.Popen([sys.executable, "-m", "sweep", str(sweep), "--results", str(results), "--emulate-gpus", "2",
                             *options], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=full_env, start_new_session=True)


def epoch_rows(results: Path, name: str) -> pd.DataFrame:
    """The epoch rows of the sweep's latest run so far (none while it has none)."""
    runs = store.run_dirs(results, name)
    try:
        return store.RunStore(runs[-1]).epochs() if runs else pd.DataFrame()
    except store.StoreError:
        return pd.DataFrame()


def wait_for(what, timeout_s: float = 240, proc: subprocess.Popen | None = None):
    deadline = time.time() + timeout_s
    while not (found := what()):
        assert proc is None or proc.poll() is None, proc.stdout.read()[-3000:] if proc else ""
        assert time.time() < deadline, "never happened"
        time.sleep(0.3)
    return found


@pytest.mark.slow
def test_a_rank_that_dies_or_hangs_fails_its_trial_in_bounded_time_and_the_sweep_goes_on(tmp_path: Path) -> None:
    # Three 2-GPU trials one after the other: the first loses a rank to SIGKILL, the second has one frozen
    # (SIGSTOP: its peer waits in the all-reduce until the process group's timeout), the third completes.
    sweep = tmp_path / "ranks.yaml"
    sweep.write_text("""\
description: "PyTorch 2-GPU trials: a rank killed, a rank frozen, one that completes"
fixed: {framework: pytorch, model: resnet8_cifar, data: synthetic, num_gpus: 2, batch_per_gpu: 4, steps_per_epoch: 2,
        warmup_steps: 0, lr: 0.05}
include:
  - {seed: 1, epochs: 2000}
  - {seed: 2, epochs: 2000}
  - {seed: 3, epochs: 2}
""")
    # 30 s: a validation pass of these trials takes well under a second, the ranks' start a few seconds. At a load of
    # 25-30 on two cores (the suite's files three at a time beside other work) a rank that was not frozen went 12 s
    # without running, and its trial timed out before the test froze one.
    results, timeout_s = tmp_path / "results", 30
    proc = start_sweep(sweep, results, "--max-concurrent", "1", "--scale", "full", SWEEP_DDP_TIMEOUT_S=str(timeout_s))
    try:
        def epochs_of(seed: int) -> int:
            rows = epoch_rows(results, "ranks")
            return int((rows.seed == seed).sum()) if len(rows) else 0

        wait_for(lambda: epochs_of(1) >= 1, proc=proc)
        first = sorted(wait_for(lambda: trial_workers(proc.pid), proc=proc))
        assert len(first) == 2, first
        os.kill(first[1], signal.SIGKILL)
        killed_at = time.time()
        # Two epochs in: by then the first trial's processes (and any retry of it) have ended, so the
        # TrialWorkers of the session are the second trial's ranks.
        wait_for(lambda: epochs_of(2) >= 2, proc=proc)
        second = sorted(wait_for(lambda: trial_workers(proc.pid) - set(first), proc=proc))
        assert len(second) == 2, second
        os.kill(second[1], signal.SIGSTOP)
        stopped_at = time.time()
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, out[-3000:]  # some trials failed; their rows are written
    trials = pd.read_parquet(store.run_dirs(results, "ranks")[-1] / "trials").set_index("seed")
    assert trials.loc[3, "status"] == "completed", trials[["status", "error"]]
    died, hung = trials.loc[1], trials.loc[2]
    assert died.status == "failed" and died.error_type in ("ActorDiedError", "RayActorError"), (died.error_type, died.error)
    # At once: Ray reports the death, and an embedded Ray whose GCS and raylet run has lost no node (a joined
    # cluster's GCS is watched NODE_LOSS_WATCH_S for that first).
    assert died.ended_at - killed_at < NODE_LOSS_WATCH_S, died.ended_at - killed_at
    assert hung.status == "failed" and ("timed out" in hung.error.lower() or "timeout" in hung.error.lower()), hung.error
    # The peer's collective times out; the frozen rank is killed without first waiting for it to exit (10 s): well
    # before twice the timeout, at any load.
    assert timeout_s * 0.8 < hung.ended_at - stopped_at < timeout_s * 2, hung.ended_at - stopped_at


@pytest.mark.slow
def test_a_rank_busy_long_after_its_peers_or_alone_fails_the_call_in_the_collective_timeout() -> None:
    # The hung rank above is found by its peer's collective timeout only where the peer waits in a collective.
    # Rank 0 validating while the others are done, or writing the checkpoint alone, has no such peer: the
    # coordinator's Group.get bounds those, for PyTorch (real Ray actors, calls that sleep; SWEEP_DDP_TIMEOUT_S=2).
    script = textwrap.dedent("""
        import os, time
        import ray
        os.environ["SWEEP_DDP_TIMEOUT_S"] = "2"
        from sweep.workers import Group, RankTimedOut
        from trainables.config import TrialConfig

        @ray.remote(max_concurrency=4)  # a call still sleeping does not hold up the next case's
        class Rank:
            def call(self, seconds):
                time.sleep(seconds)
                return seconds

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # not the module's cluster
        ranks = [Rank.remote(), Rank.remote()]
        cases = {"pytorch": (("in time", (0, 0.5)), ("behind", (0, 30)), ("alone", (30,))),
                 "mxnet": (("in time", (0, 0.5)), ("behind", (0, 3)))}
        for framework, calls in cases.items():
            group = Group(TrialConfig(framework, "resnet8_cifar", num_gpus=2, batch_per_gpu=4, epochs=1, lr=0.1), None)
            group.workers = ranks
            for label, seconds in calls:
                started = time.monotonic()
                try:
                    print(framework, label, "returned", group.get([r.call.remote(s) for r, s in zip(ranks, seconds)]))
                except RankTimedOut as e:
                    print(framework, label, round(time.monotonic() - started), e)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "pytorch in time returned [0, 0.5]", lines
    assert lines[1].startswith("pytorch behind 2 rank 1 of the trial timed out: still busy 2 s"), lines
    assert lines[2].startswith("pytorch alone 2 rank 0 of the trial timed out"), lines
    assert lines[3:] == ["mxnet in time returned [0, 0.5]", "mxnet behind returned [0, 3]"], lines  # others: unbounded


@pytest.mark.slow
def test_a_killed_pytorch_trial_resumes_from_its_last_epoch(tmp_path: Path, shared_ray: list[str]) -> None:
    # One 2-GPU trial; the driver and every process it started are SIGKILLed after two epochs; --resume
    # restarts the trial from its newest checkpoint (rank 0 wrote it, both ranks load it). 10 epochs of tiny steps:
    # with 6, one run in the full suite had all six rows written by the time the killed run's rows were read.
    sweep = tmp_path / "resume.yaml"
    sweep.write_text("""\
description: "one PyTorch 2-GPU trial, killed and resumed"
fixed: {framework: pytorch, model: resnet8_cifar, data: synthetic, num_gpus: 2, batch_per_gpu: 4, epochs: 10,
        steps_per_epoch: 3, warmup_steps: 0, lr: 0.05}
""")
    results = tmp_path / "results"
    proc = start_sweep(sweep, results)

    def rows() -> pd.DataFrame:
        return epoch_rows(results, "resume")

    try:
        wait_for(lambda: len(rows()) >= 2, proc=proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = rows()
    assert 2 <= len(before) < 10, before[["epoch", "attempt"]]
    # The resume on the session's shared Ray: its subject is the checkpoint, not Ray's start.
    out = run_cli(str(sweep), "--results", str(results), "--resume", *shared_ray, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    after = rows()
    assert sorted(after.epoch) == list(range(10)) and not after.duplicated(["trial_id", "epoch"]).any()
    resumed = after[after.attempt == after.attempt.max()]
    # The second attempt began where the first one's rows (and so its checkpoints) ended, not at epoch 0.
    assert after.attempt.nunique() == 2 and resumed.epoch.min() in (before.epoch.max(), before.epoch.max() + 1)
    assert resumed.epoch.min() > 0
    trials = pd.read_parquet(store.run_dirs(results, "resume")[-1] / "trials")
    assert list(trials.status) == ["completed"] and list(trials.attempts) == [2]
