"""Kill the driver anywhere (SIGKILL, SIGINT, SIGTERM), resume, and find every row exactly once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest
from conftest import ROOT, SWEEPS, run_cli

from sweep import spec, store
from sweep.errors import StoreError

SWEEP = str(SWEEPS / "tiny_mxnet.yaml")


def start(results: Path, *extra: str, sweep: str = SWEEP) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    # A session of its own, so the test can stop every process the driver started, and only those.
    return subprocess.Popen([sys.executable, "-m", "sweep", sweep, "--results", str(results), *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)


def run_dir(results: Path) -> Path | None:
    runs = store.run_dirs(results, "tiny_mxnet")
    return runs[-1] if runs else None


def progress(results: Path) -> tuple[int, int]:
    """(trials with a summary row, epoch rows) in the store now."""
    folder = run_dir(results)
    if folder is None:
        return 0, 0
    run = store.RunStore(folder)
    try:
        return len(run.trials()), len(run.epochs())
    except store.StoreError:
        return 0, 0


def interrupt_when(proc: subprocess.Popen, results: Path, ready: Callable[[int, int], bool], sig: int) -> str:
    deadline = time.time() + 240
    while not ready(*progress(results)):
        assert proc.poll() is None, "the sweep ended before the kill point: " + proc.stdout.read()[-2000:]
        assert time.time() < deadline, "kill point never reached"
        time.sleep(0.2)
    proc.send_signal(sig)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if sig == signal.SIGKILL else None  # what the dead driver left
    return out


def starts(results: Path) -> dict[str, int]:
    run = store.RunStore(run_dir(results))
    return {t: run.attempts(t) for t in run.meta.trials}


def finished(results: Path) -> set[str]:
    return set(store.RunStore(run_dir(results)).trials().trial_id)


# SIGKILL at each kill point; an orderly stop takes one path (sweep/runner.py), so Ctrl-C's SIGINT and then
# SIGTERM (kill, a batch scheduler, docker stop) share one run: the first while trials are surely mid-way.
@pytest.mark.slow
@pytest.mark.parametrize("signals", [(signal.SIGKILL,) * 3, (signal.SIGINT, signal.SIGTERM)],
                         ids=["SIGKILL", "SIGINT-then-SIGTERM"])
def test_interrupted_sweep_resumes_with_every_row_exactly_once(signals: tuple[int, ...], tmp_path: Path) -> None:
    results = tmp_path / "results"
    trials = spec.load(SWEEP).trials("smoke")
    total = len(trials)
    kill_points = [
        lambda done, rows: rows >= 1,  # before the first trial finishes
        lambda done, rows: done >= total // 2,  # in the middle
        lambda done, rows: done >= total - 1,  # near the end
    ]
    proc = start(results)
    frozen: dict[str, int] = {}  # starts of trials already ended: must never grow
    for point, sig in zip(kill_points, signals):
        out = interrupt_when(proc, results, point, sig)
        ended = finished(results)
        complete = len(ended) == total
        if sig != signal.SIGKILL:  # an orderly stop, and the code a shell gives the signal
            # Sent before the first trial ends and with half the trials still to run: checked every time.
            name = signal.Signals(sig).name
            assert not complete, f"{name} came after every trial ended: the kill points are too late"
            assert f"interrupted ({name})" in out and "resume with" in out, out[-2000:]
            assert proc.returncode == 128 + sig, (proc.returncode, out[-2000:])
        # Tiny trials: after a SIGKILL near the end, the last one may have ended first; nothing is left to resume.
        status = run_cli("status", SWEEP, "--results", str(results), timeout=60)
        assert status.returncode == 0 and ("--resume" in status.stdout) != complete, status.stdout + status.stderr
        now = starts(results)
        assert all(now[t] == frozen[t] for t in frozen), "an ended trial was trained again"
        frozen = {t: now[t] for t in ended}
        if complete:
            break
        proc = start(results, "--resume")
    else:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]

    run = store.RunStore(run_dir(results))
    summary, epochs = run.trials(), run.epochs()
    assert sorted(summary.trial_id) == sorted(t.trial_id for t in trials)  # one summary row each
    assert set(summary.status) == {"completed"}
    for t in trials:
        rows = epochs[epochs.trial_id == t.trial_id]
        assert sorted(rows.epoch) == list(range(t.epochs)), t.trial_id  # each epoch once
    assert not epochs.duplicated(["run_id", "trial_id", "epoch"]).any()
    final = starts(results)
    assert all(final[t] == frozen[t] for t in frozen)
    assert sum(final.values()) > total, "no trial was ever interrupted: the test proved nothing"
    status = run_cli("status", SWEEP, "--results", str(results), timeout=60)
    assert f"{total} done" in status.stdout and "--resume" not in status.stdout


def test_resume_refuses_an_edited_sweep_and_options_that_need_it(tmp_path: Path) -> None:
    results = tmp_path / "results"
    sweep_file = tmp_path / "tiny_mxnet.yaml"
    sweep_file.write_text(Path(SWEEP).read_text())
    # An unfinished run, as the engine leaves it when its driver is killed before any trial ends.
    proc = start(results, sweep=str(sweep_file))
    deadline = time.time() + 240
    while run_dir(results) is None or not (run_dir(results) / "run.json").is_file():
        assert proc.poll() is None and time.time() < deadline, "the run never started"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    run_id = run_dir(results).name
    assert finished(results) == set()
    sweep_file.write_text(sweep_file.read_text().replace("epochs: 3", "epochs: 4"))
    out = run_cli(str(sweep_file), "--results", str(results), "--resume", timeout=60)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert f"changed since run {run_id}" in out.stderr and "epochs: 3" in out.stderr and "--force" in out.stderr
    out = run_cli(str(sweep_file), "--results", str(results), "--resume", "nope", timeout=60)
    assert out.returncode == 2 and "no run nope" in out.stderr
    out = run_cli(str(sweep_file), "--results", str(results), "--retry-failed", timeout=60)
    assert out.returncode == 2 and "--resume" in out.stderr


def test_corrupt_parquet_in_a_run_is_named_and_loses_nothing(tmp_path: Path) -> None:
    results = tmp_path / "results"
    run = store.RunStore.create(results, store.RunMeta("tiny_mxnet", "r1", "smoke", "x.yaml", "", None, True, ["a", "b"]),
                                "description: x\n")
    row = {"sweep": "tiny_mxnet", "run_id": "r1", "trial_id": "a", "epoch": 0, "images_per_sec": 5.0}
    run.write_epoch(row)
    before = (run.epochs_dir / "a.parquet").read_bytes()
    (run.epochs_dir / "zz.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(StoreError, match=r"zz\.parquet"):
        run.epochs()
    out = run_cli("status", str(SWEEPS / "tiny_mxnet.yaml"), "--results", str(results), timeout=60)
    assert out.returncode == 2 and "zz.parquet" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert (run.epochs_dir / "a.parquet").read_bytes() == before
    assert pd.read_parquet(run.epochs_dir / "a.parquet").images_per_sec.tolist() == [5.0]


def test_compaction_keeps_every_row_once_and_a_replay_still_replaces(tmp_path: Path) -> None:
    run = store.RunStore.create(tmp_path, store.RunMeta("s", "r", "smoke", "s.yaml", "", None, True, ["a", "b", "c"]),
                                "description: x\n")
    clock = iter(range(100))
    for trial, epochs in (("a", 3), ("b", 2), ("c", 2)):
        for epoch in range(epochs):
            run.write_epoch({"run_id": "r", "trial_id": trial, "epoch": epoch, "images_per_sec": 1.0,
                             "reported_at": float(next(clock))})
    run.write_epoch({"run_id": "r", "trial_id": "a", "epoch": 1, "images_per_sec": 2.0, "reported_at": float(next(clock))})
    run.compact({"a", "b"})  # c is still running: its file stays its own
    names = sorted(p.name for p in run.epochs_dir.iterdir())
    assert len(names) == 2 and names[0] == "c.parquet" and names[1].startswith("part-")
    plain = pd.read_parquet(run.epochs_dir)  # the documented one-liner: each row once
    assert len(plain) == 7 and not plain.duplicated(["trial_id", "epoch"]).any()
    assert plain.set_index(["trial_id", "epoch"]).loc[("a", 1), "images_per_sec"] == 2.0
    # A trial retried after compaction replays an epoch: the newer row wins everywhere it is read.
    fresh = store.RunStore(run.dir)
    fresh.write_epoch({"run_id": "r", "trial_id": "b", "epoch": 1, "images_per_sec": 3.0, "reported_at": 1000.0})
    rows = fresh.epochs().set_index(["trial_id", "epoch"])
    assert len(rows) == 7 and rows.loc[("b", 1), "images_per_sec"] == 3.0
    assert [r["images_per_sec"] for r in fresh.trial_epochs("b")] == [1.0, 3.0]
    fresh.compact({"a", "b", "c"})
    assert len(list(run.epochs_dir.iterdir())) == 1
    assert len(pd.read_parquet(run.epochs_dir)) == 7


@pytest.mark.slow
def test_a_run_whose_driver_is_alive_is_not_resumed_beside_it(tmp_path: Path) -> None:
    sweep = tmp_path / "live.yaml"
    sweep.write_text("""\
description: "one MXNet trial long enough to look at while it runs"
fixed: {framework: mxnet, model: resnet8_cifar, data: synthetic, num_gpus: 1, batch_per_gpu: 8, epochs: 1000,
        steps_per_epoch: 3, warmup_steps: 1, lr: 0.05}
""")
    results = tmp_path / "results"
    proc = start(results, sweep=str(sweep))
    try:
        deadline = time.time() + 240
        while not any(p for run in store.run_dirs(results, "live") for p in (run / "epochs").glob("*.parquet")):
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read()[-3000:]
            time.sleep(0.3)
        status = run_cli("status", str(sweep), "--results", str(results), timeout=60)
        assert f"running now: driver pid {proc.pid} on this host" in status.stdout, status.stdout + status.stderr
        assert "--resume" not in status.stdout
        again = run_cli(str(sweep), "--results", str(results), "--resume", timeout=60)
        assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1, again.stderr
        assert f"is running now (driver pid {proc.pid} on this host)" in again.stderr
        # Nor deleted under it; `runs` says it is running.
        run_id = store.run_dirs(results, "live")[-1].name
        deleted = run_cli("rm", str(sweep), run_id, "--yes", "--results", str(results), timeout=60)
        assert deleted.returncode == 2 and f"running (pid {proc.pid}) on this host" in deleted.stderr, deleted.stderr
        assert f"running (pid {proc.pid})" in run_cli("runs", "--results", str(results), timeout=60).stdout
        assert proc.poll() is None, "the refused resume stopped the running sweep"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 143, out[-2000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    status = run_cli("status", str(sweep), "--results", str(results), timeout=60)
    assert "running now" not in status.stdout and "--resume" in status.stdout, status.stdout  # its driver is gone
