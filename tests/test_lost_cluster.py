"""The cluster lost mid-run: the driver says so in its own line, exits 75, and --resume recovers the run."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import BARE_HEAD, BARE_NODE, ROOT, SWEEPS, run_cli

from sweep import spec, store
from sweep.gcs import EMBEDDED_GONE_S, LOST_EXIT, Watchdog

SWEEP = str(SWEEPS / "tiny_mxnet.yaml")


def gcs_pid(ray_tmp: Path, driver: int) -> int:
    """The embedded Ray's GCS, as its session's own log names it: the pid in the first line of
    logs/gcs_server.out ("[date time I PID TID] ..."). RAY_TMPDIR is this test's own folder, so the
    session is the driver's and no one else's; the pid is checked to be the driver's child."""
    deadline = time.time() + 60
    while True:
        logs = list((ray_tmp / "ray").glob("session_2*/logs/gcs_server.out"))
        first = logs[0].read_text().split("\n", 1)[0] if logs else ""
        found = re.match(r"\[\S+ \S+ \w (\d+) ", first)
        if found:
            pid = int(found.group(1))
            assert psutil.Process(pid).ppid() == driver, "the GCS in this session is not the driver's"
            return pid
        assert time.time() < deadline, f"no GCS log under {ray_tmp}"
        time.sleep(0.2)


@pytest.mark.slow  # waits out the watchdog's patience: ~5 s
def test_the_watchdog_tells_a_gcs_gone_from_one_slow_to_answer(tmp_path: Path) -> None:
    """A port that refuses connections is a GCS gone (after gone_s); one that accepts and says nothing
    may be a GCS too busy to answer, given silent_s before it counts as lost."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    gone_port = closed.getsockname()[1]
    closed.close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held: list[socket.socket] = []  # accepted and never answered, as a hung GCS would

    def accept() -> None:
        try:
            while True:
                held.append(silent.accept()[0])
        except OSError:  # closed at the end of the test
            pass

    threading.Thread(target=accept, daemon=True).start()
    try:
        for port, gone_s, silent_s, says in ((gone_port, 1.0, 60.0, "Connection refused"),
                                             (silent.getsockname()[1], 0.5, 3.0, "does not answer as a Ray GCS")):
            reasons: list[tuple[float, str]] = []
            t0 = time.monotonic()
            with Watchdog(f"127.0.0.1:{port}", gone_s, silent_s, lambda why: reasons.append((time.monotonic() - t0, why)),
                          interval_s=0.1, timeout_s=0.5):
                while not reasons and time.monotonic() - t0 < 20:
                    time.sleep(0.05)
            assert len(reasons) == 1 and says in reasons[0][1], reasons
            assert max(gone_s, 1.0 if port == gone_port else silent_s) <= reasons[0][0] < 15, reasons
    finally:
        silent.close()
        for connection in held:
            connection.close()



def wait_for_a_first_epoch(proc: subprocess.Popen, results: Path, sweep: str) -> None:
    """Until some trial of the sweep's run has written an epoch row (the run is under way)."""
    deadline = time.time() + 240
    while not any(list((run / "epochs").glob("*.parquet")) for run in store.run_dirs(results, sweep)):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.2)

@pytest.mark.slow
@pytest.mark.heavy
def test_a_lost_gcs_is_one_line_exit_75_and_resume_recovers(tmp_path: Path) -> None:
    results = tmp_path / "results"
    ray_tmp = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # short: Ray's socket paths must stay < 108 bytes
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_TMPDIR": str(ray_tmp)}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, "-m", "sweep", SWEEP, "--results", str(results)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_a_first_epoch(proc, results, "tiny_mxnet")
        os.kill(gcs_pid(ray_tmp, proc.pid), signal.SIGKILL)
        killed = time.monotonic()
        out, err = proc.communicate(timeout=120)
        seconds = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    run = store.RunStore(store.run_dirs(results, "tiny_mxnet")[-1])
    assert proc.returncode == LOST_EXIT, (proc.returncode, out[-2000:], err[-3000:])
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: lost the Ray cluster mid-run (the embedded Ray's GCS"), err
    assert f"resume with: python -m sweep {SWEEP} --resume {run.meta.run_id} --results {results}" in out
    # Timed from the kill (Ray already up). The driver sees its GCS's process has exited at the watchdog's next
    # look (every 2 s); a refusing port it cannot see behind gets EMBEDDED_GONE_S (10 s), and the defect is Ray's
    # own 60 s reconnect. The bound leaves 8 s for the driver's exit on a loaded machine.
    assert seconds < EMBEDDED_GONE_S, seconds
    trials = spec.load(SWEEP).trials("smoke")
    assert len(run.trials()) < len(trials), "every trial ended before the loss: the test proved nothing"

    status = run_cli("status", SWEEP, "--results", str(results), timeout=60)
    assert status.returncode == 0 and "--resume" in status.stdout, status.stdout + status.stderr
    again = run_cli(SWEEP, "--results", str(results), "--resume", timeout=400)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    summary, epochs = run.trials(), run.epochs()
    assert sorted(summary.trial_id) == sorted(t.trial_id for t in trials) and set(summary.status) == {"completed"}
    for t in trials:
        assert sorted(epochs[epochs.trial_id == t.trial_id].epoch) == list(range(t.epochs)), t.trial_id


@pytest.mark.slow
def test_a_lost_head_node_of_a_joined_cluster_is_one_line_and_exit_75(tmp_path: Path) -> None:
    """--address: the head node (and the GCS on it) goes; the driver outlasts Ray's own minute and says so."""
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 2, "num_gpus": 4}
    cluster = Cluster(initialize_head=True, head_node_args={**node, **BARE_HEAD})
    cluster.add_node(**node, **BARE_NODE)
    cluster.wait_for_nodes()
    results = tmp_path / "results"
    # 8 s of grace instead of Ray's minute (CI time); the default is the same code with 60.
    grace_s = 8
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "SWEEP_GCS_GRACE_S": str(grace_s)}
    proc = subprocess.Popen([sys.executable, "-m", "sweep", str(SWEEPS / "node_loss.yaml"), "--address", cluster.address,
                             "--results", str(results), "--scale", "full"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_a_first_epoch(proc, results, "node_loss")
        lost = time.monotonic()  # before: the GCS goes early in remove_node, and the driver's grace starts then
        cluster.remove_node(cluster.head_node)
        out, err = proc.communicate(timeout=300)
        seconds = time.monotonic() - lost
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        cluster.shutdown()
    assert proc.returncode == LOST_EXIT, (proc.returncode, out[-2000:], err[-3000:])
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: lost the Ray cluster mid-run (its head node or GCS"), err
    run = store.RunStore(store.run_dirs(results, "node_loss")[-1])
    assert f"--resume {run.meta.run_id}" in out
    # The trials whose actors died with the head are not failures: no summary row, so --resume runs them.
    assert not [tid for tid, status in run.finished().items() if not status.done], \
        run.trials()[["status", "error_type", "error"]].to_dict("records")
    # Timed from the head's removal (Ray up long before). The grace asked for is 8 s, the defect Ray's own
    # minute (60 s): the bound leaves the driver 52 s to notice and exit on a loaded machine, and is still
    # short of the minute. The lower bound: it did wait out the grace (its clock starts as the head goes).
    assert grace_s <= seconds < 60, seconds


def test_the_joined_clusters_grace_is_read_once_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from sweep import gcs
    from sweep.errors import UsageError

    monkeypatch.delenv(gcs.GRACE_VARIABLE, raising=False)
    assert gcs.joined_grace() == gcs.RAY_RECONNECT_S
    monkeypatch.setenv(gcs.GRACE_VARIABLE, "15")
    assert gcs.joined_grace() == 15
    for bad in ("soon", "0", "nan", "1e9"):
        monkeypatch.setenv(gcs.GRACE_VARIABLE, bad)
        with pytest.raises(UsageError, match="SWEEP_GCS_GRACE_S: expected seconds from 1 to 3600"):
            gcs.joined_grace()
