"""Trials that span nodes: a real two-node Ray cluster on this machine, fake GPUs, one CPU device per worker."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from cifar_files import write_cifar10
from conftest import ROOT, SWEEPS, own_processes, run_cli, two_node_cluster

from sweep import store
from trainables.measure import total_over_workers

NODE = {"num_cpus": 2, "num_gpus": 2}
# What a distributed trial starts: its Ray actors, and the framework servers they run as children.
TRIAL_PROCESSES = ("ray::TrialWorker", "ray::RoleProcess", "trainables.mxnet.server", "trainables.tensorflow.server")


@pytest.fixture(scope="module")
def cluster():
    yield from two_node_cluster(NODE)


@pytest.fixture(scope="module")
def cifar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("cifar"), train_per_file=400, test=500)


def trial_processes() -> dict[int, str]:
    """pid -> command line of every process on this machine that a distributed trial of this test process started."""
    return own_processes(*TRIAL_PROCESSES)


def wait_for_no_trial_processes(timeout_s: float = 30) -> dict[int, str]:
    deadline = time.time() + timeout_s
    while (left := trial_processes()) and time.time() < deadline:
        time.sleep(0.5)
    return left


def test_total_over_workers_sums_throughput_and_waits_for_the_slowest() -> None:
    row = {"ray_gpu_ids": "0", "ray_node_id": "a", "hostname": "h", "epoch_time_s": 2.0, "images_per_sec": 100.0,
           "steady_images_per_sec": 120.0, "steady_images_per_sec_stderr": 3.0, "steady_jitter": 4.0, "steady_steps": 9,
           "train_loss": 1.0, "train_acc": 0.5, "val_acc": 0.7, "peak_device_mem_mib": None, "peak_host_rss_mib": 500.0,
           "diverged": False}
    other = {**row, "ray_gpu_ids": "1", "ray_node_id": "b", "epoch_time_s": 3.0, "images_per_sec": 80.0,
             "steady_images_per_sec": 90.0, "steady_images_per_sec_stderr": 4.0, "steady_steps": 8, "train_loss": 2.0,
             "val_acc": None, "peak_host_rss_mib": 700.0}
    total = total_over_workers([row, other])
    assert total["images_per_sec"] == 180.0 and total["steady_images_per_sec"] == 210.0  # tf_cnn's total images/sec
    assert total["steady_images_per_sec_stderr"] == pytest.approx(5.0)
    assert total["epoch_time_s"] == 3.0 and total["steady_steps"] == 8 and total["train_loss"] == 1.5
    assert total["val_acc"] == 0.7  # the first worker validates
    assert total["ray_node_id"] == "a;b" and total["ray_gpu_ids"] == "0;1" and total["peak_host_rss_mib"] == 700.0
    assert not total["diverged"] and total_over_workers([row, {**other, "diverged": True}])["diverged"]


def test_framework_ports_are_drawn_outside_the_kernels_own_range() -> None:
    # TF_CONFIG's and MXNet's scheduler ports: a port the kernel picked (bind(0)) and let go is one it may give
    # the next outgoing connection before the framework binds it; ours come from between Ray's worker ports and
    # that range, at random (two trials asking at once get different ports), each free when drawn.
    from sweep.workers import RAY_WORKER_PORTS_END, _free_address, ephemeral_ports

    ports = [int(_free_address().rsplit(":", 1)[1]) for _ in range(20)]
    assert all(RAY_WORKER_PORTS_END <= p < ephemeral_ports().start for p in ports), ports
    assert len(set(ports)) > 15


# The modes of distributed.yaml, a set a case. CI trains the asynchronous ones (MXNet's dist_async, TensorFlow's
# parameter servers), which no other test of CI trains across nodes; the synchronous ones are heavy (issue 46), as CI
# trains each across the two nodes elsewhere: TensorFlow's replicated from TFRecord (test_tensorflow_input.py), MXNet's
# dist_sync killed and retried and with a worker's framework error (below).
ASYNC = {("mxnet", "dist_async"), ("tensorflow", "parameter_server")}
SYNC = {("mxnet", "dist_sync"), ("tensorflow", "replicated")}


def mode_of(framework: str, kvstore: str | None, variable_update: str | None) -> tuple[str, str]:
    """A trial's mode across nodes: MXNet's kvstore, TensorFlow's variable update."""
    return framework, kvstore if framework == "mxnet" else variable_update


def entry_mode(entry: dict) -> tuple[str, str]:
    return mode_of(entry["framework"], entry.get("kvstore"), entry.get("variable_update"))


@pytest.mark.slow
@pytest.mark.parametrize("modes", [ASYNC, pytest.param(SYNC, marks=pytest.mark.heavy)], ids=["async", "sync"])
def test_two_node_trials_train_in_every_mode_and_leave_no_process(cluster, cifar: Path, tmp_path: Path,
                                                                  modes: set[tuple[str, str]]) -> None:
    # The sweep's trials of these modes, a run per framework: TensorFlow's workers end through Ray's own exit when
    # their trial ended well, so the raylet prints no "A worker died or was killed ... OOM killer" line after them
    # (MXNet's dist kvstore workers, blocked on their stopped servers, end hard: it does after theirs).
    results = tmp_path / "results"
    sweep = yaml.safe_load((SWEEPS / "distributed.yaml").read_text())
    assert {entry_mode(e) for e in sweep["include"]} == ASYNC | SYNC  # every mode of the file is in one case
    summaries, all_epochs = [], []
    for framework in ("tensorflow", "mxnet"):
        entries = [e for e in sweep["include"] if e["framework"] == framework and entry_mode(e) in modes]
        path = tmp_path / f"distributed_{framework}.yaml"
        path.write_text(yaml.safe_dump({**sweep, "name": path.stem, "include": entries}))
        out = run_cli(str(path), "--address", cluster.address, "--data-dir", str(cifar), "--results", str(results),
                      "--scale", "full", timeout=900)
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
        if framework == "tensorflow":
            assert "A worker died" not in out.stdout + out.stderr, out.stdout[-4000:]
        folder = store.run_dirs(results, path.stem)[-1]
        summaries.append(pd.read_parquet(folder / "trials"))
        all_epochs.append(pd.read_parquet(folder / "epochs"))
    summary = pd.concat(summaries).set_index("trial_id")
    epochs = pd.concat(all_epochs)
    assert set(summary.status) == {"completed"}
    assert {mode_of(r.framework, r.kvstore, r.variable_update) for r in summary.itertuples()} == modes
    assert set(summary.model) == {"resnet8_cifar", "resnet8_cifar_v2"}  # both model families in each case
    assert not epochs.duplicated(["trial_id", "epoch"]).any()
    for tid, rows in epochs.groupby("trial_id"):
        rows = rows.sort_values("epoch")
        mode = summary.loc[tid, ["framework", "kvstore", "variable_update"]].tolist()
        assert list(rows.epoch) == [0, 1, 2], mode
        assert (rows.nodes == 2).all() and (rows.num_gpus == 2).all() and (rows.global_batch == 64).all()
        for nodes, gpus in zip(rows.ray_node_id, rows.ray_gpu_ids):
            assert len(set(nodes.split(";"))) == 2, (mode, nodes)  # one worker on each node (STRICT_SPREAD)
            assert len(gpus.split(";")) == 2, (mode, gpus)
        assert (rows.steady_images_per_sec > 0).all() and (rows.images_per_sec > 0).all()
        # Learned (chance is 0.1): the best epoch, as parameter_server's asynchronous updates make the last noisy
        # (0.789, 0.457, 0.547 in one run here).
        assert rows.val_acc.max() > 0.6, (mode, list(rows.val_acc))
        assert rows.train_loss.iloc[-1] < rows.train_loss.iloc[0], mode
    assert not wait_for_no_trial_processes(), "processes left behind"


@pytest.mark.slow
@pytest.mark.heavy
def test_mxnet_dist_kvstores_start_from_conv_weights_mkldnn_has_reordered(cluster, tmp_path: Path) -> None:
    """AlexNet's conv weights are in MKLDNN's layout after an inference-mode forward; MXNet 1.9.1's
    rank 0 then silently skipped their initial push and the servers aborted (every run, both kvstores)."""
    sweep = tmp_path / "alexnet.yaml"
    sweep.write_text("""\
description: "AlexNet across two nodes, both MXNet dist kvstores, a couple of steps"
fixed: {framework: mxnet, model: alexnet, image_size: 63, data: synthetic, nodes: 2, gpus_per_node: 1,
        batch_per_gpu: 4, epochs: 2, steps_per_epoch: 2, warmup_steps: 1, val_examples: 8, lr: 0.01}
grid: {kvstore: [dist_sync, dist_async]}
""")
    results = tmp_path / "results"
    out = run_cli(str(sweep), "--address", cluster.address, "--results", str(results), "--scale", "full", timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    epochs = pd.read_parquet(store.run_dirs(results, "alexnet")[-1] / "epochs")
    assert sorted(epochs.groupby("kvstore").epoch.max().items()) == [("dist_async", 1), ("dist_sync", 1)]
    assert not wait_for_no_trial_processes(), "processes left behind"


def kill_sweep(tmp_path: Path, mode: str) -> Path:
    path = tmp_path / "kill.yaml"
    # Three epochs left once one is checkpointed: 2-4 s for the kill to land. TensorFlow's parameter-server
    # steps (a round trip to the servers each) are slower than MXNet's: fewer of them take as long.
    steps = 15 if "parameter_server" in mode else 25
    path.write_text(f"""\
description: "a distributed trial of several epochs, to kill a worker under"
fixed: {{model: resnet8_cifar, data: synthetic, nodes: 2, gpus_per_node: 1, batch_per_gpu: 16, epochs: 5,
         steps_per_epoch: {steps}, warmup_steps: 1, lr: 0.05, {mode}}}
""")
    return path


def victim(kind: str) -> int | None:
    """A process of the running trial to kill: MXNet's second worker actor, or a TensorFlow worker server."""
    for pid, cmdline in sorted(trial_processes().items()):
        if kind == "worker actor" and cmdline.startswith("ray::TrialWorker"):
            return pid
        if kind == "worker server" and "trainables.tensorflow.server" in cmdline:
            try:
                if b'"type": "worker"' in Path(f"/proc/{pid}/environ").read_bytes():
                    return pid
            except OSError:
                continue
    return None


@pytest.mark.slow
@pytest.mark.parametrize("mode,kind", [
    ("framework: mxnet, kvstore: dist_sync", "worker actor"),
    pytest.param("framework: tensorflow, variable_update: parameter_server", "worker server", marks=pytest.mark.heavy),
], ids=["mxnet-dist_sync", "tensorflow-parameter_server"])
def test_a_killed_worker_ends_its_trial_and_the_retry_finishes_it(cluster, tmp_path: Path, mode: str, kind: str) -> None:
    results = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen([sys.executable, "-m", "sweep", str(kill_sweep(tmp_path, mode)), "--address", cluster.address,
                             "--results", str(results), "--scale", "full", "--max-failures", "1"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        deadline = time.time() + 300
        while True:  # kill once the trial has checkpointed an epoch, mid-way through its five
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read()[-3000:]
            runs = store.run_dirs(results, "kill")
            try:
                done = store.RunStore(runs[-1]).epochs() if runs else None
            except store.StoreError:
                done = None
            if done is not None and len(done) and done.epoch.max() >= 1 and (pid := victim(kind)):
                break
            time.sleep(0.5)  # each look reads the run's Parquet (~15 ms of CPU): the trial keeps the cores
        first_attempt = trial_processes()
        os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=400)
        assert proc.returncode == 0, out[-4000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    folder = store.run_dirs(results, "kill")[-1]
    summary = pd.read_parquet(folder / "trials")
    epochs = pd.read_parquet(folder / "epochs").sort_values("epoch")
    assert list(summary.status) == ["completed"] and summary.attempts.iloc[0] == 2, out[-3000:]
    assert list(epochs.epoch) == [0, 1, 2, 3, 4]  # every epoch exactly once
    assert epochs.attempt.iloc[0] == 1 and epochs.attempt.iloc[-1] == 2  # the retry went on from a checkpoint
    left = wait_for_no_trial_processes()
    assert not left, f"processes left behind: {left}"
    assert not set(first_attempt) & set(trial_processes())


@pytest.mark.slow
def test_framework_errors_in_workers_are_rows_and_the_sweep_goes_on(cluster, tmp_path: Path) -> None:
    """An MXNetError and a TensorFlow OpError raised in the worker actors of two-node trials: each is a
    summary row naming the framework's class, and the sweep goes on to its healthy trial."""
    sweep = tmp_path / "worker_errors.yaml"
    sweep.write_text("""\
description: "two-node trials whose workers raise their framework's own errors, and a healthy trial"
fixed: {model: resnet8_cifar, data: synthetic, epochs: 1, steps_per_epoch: 2, warmup_steps: 1, lr: 0.05}
include:  # TensorFlow's first: its allocator's 10 s retry of the failed allocation overlaps the others
  - {framework: tensorflow, nodes: 2, gpus_per_node: 1, batch_per_gpu: 65536, image_size: 1024}
  - {framework: mxnet, nodes: 2, gpus_per_node: 1, kvstore: dist_sync, batch_per_gpu: 65536, image_size: 1024}
  - {framework: mxnet, num_gpus: 1, batch_per_gpu: 8}
""")
    results = tmp_path / "results"
    out = run_cli(str(sweep), "--address", cluster.address, "--results", str(results), "--scale", "full", timeout=600)
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-3000:]  # some trials failed, none ended the sweep
    assert "done: 1 completed, 2 failed, 0 not finished" in out.stdout
    summary = pd.read_parquet(store.run_dirs(results, "worker_errors")[-1] / "trials").set_index(["framework", "nodes"])
    mxnet_error, tf_error, healthy = (summary.loc[k] for k in (("mxnet", 2), ("tensorflow", 2), ("mxnet", 1)))
    assert (mxnet_error.status, mxnet_error.error_type, mxnet_error.error_class) == ("failed", "MXNetError", "mxnet.base.MXNetError")
    assert "larger than 2^31 elements" in mxnet_error.error
    assert (tf_error.status, tf_error.error_type) == ("oom", "ResourceExhaustedError") and "OOM" in tf_error.error
    assert tf_error.error_class == "tensorflow.python.framework.errors_impl.ResourceExhaustedError"
    assert healthy.status == "completed"
    assert not wait_for_no_trial_processes(), "processes left behind"


@pytest.mark.slow
@pytest.mark.heavy
def test_mxnet_in_its_own_interpreter_one_node_and_two(cluster, mxnet_venv: Path, tmp_path: Path) -> None:
    """MXNet trials, one-node and dist_sync over two nodes (workers, servers, scheduler), in an interpreter
    the test built with MXNet and Ray only; TensorFlow asked to run there is found missing before any trial."""
    sweep = tmp_path / "own_env.yaml"
    sweep.write_text(f"""\
description: "MXNet in its own interpreter, on one node and on two"
fixed: {{model: resnet8_cifar, data: synthetic, epochs: 2, steps_per_epoch: 3, warmup_steps: 1, batch_per_gpu: 8, lr: 0.05}}
include:
  - {{framework: mxnet, num_gpus: 1}}
  - {{framework: mxnet, nodes: 2, gpus_per_node: 1, kvstore: dist_sync}}
  - {{framework: tensorflow, num_gpus: 1}}
environments:
  mxnet: {{py_executable: {mxnet_venv}}}
""")
    results = tmp_path / "results"
    out = run_cli(str(sweep), "--address", cluster.address, "--results", str(results), "--scale", "full",
                  "--env", f"tensorflow={mxnet_venv}", "--skip-infeasible", timeout=600)
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-3000:]  # the TensorFlow trial is infeasible
    folder = store.run_dirs(results, "own_env")[-1]
    summary = pd.read_parquet(folder / "trials").set_index(["framework", "nodes"])
    epochs = pd.read_parquet(folder / "epochs")
    assert summary.loc[("tensorflow", 1)].status == "infeasible"
    assert summary.loc[("tensorflow", 1)].error == f"tensorflow is not installed for {mxnet_venv}"
    mxnet = epochs[epochs.framework == "mxnet"]
    assert set(summary.loc["mxnet"].status) == {"completed"} and len(mxnet) == 4
    # The rows say where they ran: that interpreter, its MXNet and numpy, the sweep's environment.
    venv_numpy = subprocess.run([str(mxnet_venv), "-c", "import numpy; print(numpy.__version__)"],
                                capture_output=True, text=True, check=True).stdout.strip()
    assert set(mxnet.python_executable) == {str(mxnet_venv)} and set(mxnet.framework_version) == {"mxnet 1.9.1"}
    assert set(mxnet.numpy_version) == {venv_numpy} and set(mxnet.environment) == {f"py_executable {mxnet_venv}"}
    two = mxnet[mxnet.nodes == 2]
    assert all(len(set(n.split(";"))) == 2 for n in two.ray_node_id)  # a worker on each node
    # ... and TensorFlow is absent there, as the check found before any trial.
    checks = store.RunStore(folder).meta.sessions[-1].checks
    assert {(c.framework, c.ok, c.python) for c in checks} == {("mxnet", True, str(mxnet_venv)),
                                                               ("tensorflow", False, str(mxnet_venv))}
    absent = subprocess.run([str(mxnet_venv), "-c", "import tensorflow"], capture_output=True, text=True)
    assert "No module named 'tensorflow'" in absent.stderr
    assert not wait_for_no_trial_processes(), "processes left behind"
