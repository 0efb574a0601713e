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
from conftest import HANG_S, ROOT, SETS, SWEEPS, TINY, EngineRuns, copy_run, run_cli

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
    deadline = time.time() + HANG_S  # only a hang: each look below stops at a run that ended
    while not ready(*progress(results)):
        assert proc.poll() is None, "the sweep ended before the kill point: " + proc.stdout.read()[-2000:]
        assert time.time() < deadline, "kill point never reached"
        time.sleep(0.5)  # each look reads the run's Parquet (~40 ms of CPU): the trials keep the cores
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
@pytest.mark.parametrize("signals", [(signal.SIGKILL,) * 3,
                                     pytest.param((signal.SIGINT, signal.SIGTERM), marks=pytest.mark.heavy)],
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


@pytest.mark.slow
def test_resume_refuses_an_edited_sweep_and_options_that_need_it(tmp_path: Path) -> None:
    results = tmp_path / "results"
    sweep_file = tmp_path / "tiny_mxnet.yaml"
    sweep_file.write_text(Path(SWEEP).read_text())
    # An unfinished run, as the engine leaves it when its driver is killed before any trial ends.
    proc = start(results, sweep=str(sweep_file))
    deadline = time.time() + HANG_S  # only a hang: a loaded machine takes minutes to start Ray
    while run_dir(results) is None or not (run_dir(results) / "run.json").is_file():
        # What the run said where it ended first (once, in a fresh clone's CI: exit 2, its output not kept).
        assert proc.poll() is None, "the run ended before it started: " + proc.stdout.read()[-3000:]
        assert time.time() < deadline, "the run never started"
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


def test_corrupt_parquet_in_a_run_is_named_and_loses_nothing(engine_runs: EngineRuns, tmp_path: Path) -> None:
    """An engine-made run, with a file that is not Parquet put among its epoch files."""
    results = tmp_path / "results"
    run = store.RunStore(copy_run(engine_runs, 1, results))
    (part,) = list(run.epochs_dir.iterdir())  # the engine compacted the finished run into one part file
    before = part.read_bytes()
    rows = pd.read_parquet(part)
    (run.epochs_dir / "zz.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(StoreError, match=r"zz\.parquet"):
        run.epochs()
    out = run_cli("status", TINY, "--results", str(results), timeout=60)
    assert out.returncode == 2 and "zz.parquet" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert part.read_bytes() == before
    pd.testing.assert_frame_equal(pd.read_parquet(part), rows)


def test_compaction_keeps_every_row_once_and_a_replay_still_replaces(engine_runs: EngineRuns, tmp_path: Path) -> None:
    """The engine's finished run (its two trials' rows in one part file), then a trial retried after it: an
    epoch replayed and a next epoch, written as a trial writes them (edited copies of the engine's rows)."""
    run = store.RunStore(copy_run(engine_runs, 1, tmp_path))
    a, b = sorted((row for tid in run.meta.trials for row in run.trial_epochs(tid)), key=lambda r: r["num_gpus"])
    replay = {**a, "images_per_sec": a["images_per_sec"] + 1000, "reported_at": a["reported_at"] + 100, "attempt": 2}
    run.write_epoch(replay)  # epoch 0 of a again: the newer row wins everywhere it is read
    rows = run.epochs().set_index(["trial_id", "epoch"])
    assert len(rows) == 2 and rows.loc[(a["trial_id"], 0), "images_per_sec"] == replay["images_per_sec"]
    assert [r["images_per_sec"] for r in run.trial_epochs(a["trial_id"])] == [replay["images_per_sec"]]
    later = {**b, "epoch": 1, "reported_at": b["reported_at"] + 100}
    run.write_epoch(later)  # b is running again: its file stays its own
    run.compact({a["trial_id"]})
    names = sorted(p.name for p in run.epochs_dir.iterdir())
    assert len(names) == 2 and names[0] == f"{b['trial_id']}.parquet" and names[1].startswith("part-")
    rows = run.epochs()  # the store's reader: each row once, the newest
    assert len(rows) == 3 and not rows.duplicated(["trial_id", "epoch"]).any()
    assert rows.set_index(["trial_id", "epoch"]).loc[(a["trial_id"], 0), "images_per_sec"] == replay["images_per_sec"]
    run.compact({a["trial_id"], b["trial_id"]})  # the run finished again
    assert len(list(run.epochs_dir.iterdir())) == 1
    plain = pd.read_parquet(run.epochs_dir)  # the documented one-liner on a finished run: each row once
    assert sorted(zip(plain.trial_id, plain.epoch)) == sorted([(a["trial_id"], 0), (b["trial_id"], 0), (b["trial_id"], 1)])
    assert plain.set_index(["trial_id", "epoch"]).loc[(a["trial_id"], 0), "images_per_sec"] == replay["images_per_sec"]


def test_a_resume_lists_only_the_trials_without_a_row(engine_runs: EngineRuns, tmp_path: Path) -> None:
    """Issue 46: a resume that trained finished trials again was caught by slow tests only. What a resume will run,
    without Ray (launch.prepare, the run's checks before Ray starts), on a copy of the engine's run 0: its 1-GPU
    trial completed, its 2-GPU trial infeasible. --retry-failed lists the infeasible one and only it; without it
    the run is finished and nothing is resumed."""
    from sweep import cli, launch
    from sweep.errors import UsageError

    results = tmp_path / "results"
    copy_run(engine_runs, 0, results)
    run_id, rows = engine_runs.run_ids[0], engine_runs.trials(0)
    assert sorted(rows.status) == ["completed", "infeasible"]
    prepared = launch.prepare(cli.parse([TINY, *SETS, "--results", str(results), "--resume", run_id, "--retry-failed"]))
    assert sorted(t.trial_id for t in prepared.all_trials) == sorted(rows.index)
    assert [t.trial_id for t in prepared.trials] == list(rows.index[rows.status == "infeasible"])
    with pytest.raises(UsageError, match="is finished: nothing to resume"):
        launch.prepare(cli.parse([TINY, *SETS, "--results", str(results), "--resume", run_id]))


@pytest.fixture(scope="module")
def resumed(engine_runs: EngineRuns, tmp_path_factory: pytest.TempPathFactory,
            shared_ray: list[str]) -> tuple[Path, dict, dict]:
    """A copy of the engine's run 0 resumed by the engine with --retry-failed (its infeasible 2-GPU trial now fits
    the shared Ray's four emulated GPUs): (the run's folder, its trial rows before and after, as {trial: row})."""
    results = tmp_path_factory.mktemp("resumed") / "results"
    run = store.RunStore(copy_run(engine_runs, 0, results))
    before = {"trials": run.trials().set_index("trial_id"), "epochs": run.epochs().set_index(["trial_id", "epoch"]),
              "attempts": {t: run.attempts(t) for t in run.meta.trials}}
    out = run_cli(TINY, *SETS, "--results", str(results), "--resume", engine_runs.run_ids[0], "--retry-failed",
                  *shared_ray, timeout=HANG_S)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = store.RunStore(run.dir)
    after = {"trials": run.trials().set_index("trial_id"), "epochs": run.epochs().set_index(["trial_id", "epoch"]),
             "attempts": {t: run.attempts(t) for t in run.meta.trials}}
    return run.dir, before, after


@pytest.mark.slow  # an engine run of its own (the resume): ~30 s
def test_a_resume_runs_no_finished_trial_again(resumed: tuple[Path, dict, dict]) -> None:
    """The engine's resume, end to end: the completed trial is not started again (its attempts stay 1) and none
    of its rows is rewritten (its summary and epoch rows are as they were, to the timestamp); the retried trial ran
    once and now has its rows."""
    _, before, after = resumed
    trials = before["trials"]
    done = trials.index[trials.status == "completed"][0]
    retried = trials.index[trials.status == "infeasible"][0]
    assert before["attempts"] == {done: 1, retried: 0} and after["attempts"] == {done: 1, retried: 1}
    pd.testing.assert_series_equal(after["trials"].loc[done], trials.loc[done])
    pd.testing.assert_frame_equal(after["epochs"].loc[[done]], before["epochs"].loc[[done]])
    assert after["trials"].loc[retried, "status"] == "completed" and after["trials"].loc[retried, "attempts"] == 1
    assert len(after["epochs"].loc[[retried]]) == 1


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
        # Ctrl-C twice: the first starts the orderly stop (which ends with the `resume with` lines), the second,
        # sent as soon as the first is acknowledged and so while the trial is being stopped, aborts at once
        # without them. (Not at the same instant: two pending SIGINTs reach Python's handler as one.)
        proc.send_signal(signal.SIGINT)
        first = proc.stdout.readline()
        while first and not first.startswith("interrupted (SIGINT)"):
            first = proc.stdout.readline()
        assert "Ctrl-C again aborts at once" in first, first
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 130, out[-2000:]
        assert "interrupted" in out.splitlines() and "resume with" not in out, out[-2000:]
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # what the aborted driver left, in its own session only
        except ProcessLookupError:
            pass
    status = run_cli("status", str(sweep), "--results", str(results), timeout=60)
    assert "running now" not in status.stdout and "--resume" in status.stdout, status.stdout  # its driver is gone


# --- Ctrl-C during start-up (issue 40): nothing half-made is left, and nothing is out of sight ----------------

def test_ctrl_c_while_the_run_folder_is_made_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT to this process while RunStore.create writes the sweep file (as Ctrl-C at that moment of a
    start does): the folder, its epochs/ and trials/, and the temporary file are all gone again. The signal is sent
    from inside the write, once its bytes are in the temporary file and before it replaces the sweep file: the same
    moment at any load (a watcher thread polling for the file raced the write, and lost it on a loaded machine)."""
    results = tmp_path / "results"
    meta = store.RunMeta(sweep="tiny_mxnet", run_id=store.new_run_id(), scale="smoke", spec_path=SWEEP,
                         spec_sha256="0" * 64, data_dir=None, emulated=True, trials=["t1"])
    fsync, signalled = os.fsync, []

    def fsync_then_ctrl_c(fd: int) -> None:
        fsync(fd)
        if ".sweep.yaml.tmp-" in os.readlink(f"/proc/self/fd/{fd}"):
            assert list(results.glob("*/*/.sweep.yaml.tmp-*")), "the temporary file is there when the signal comes"
            signalled.append(fd)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler raises KeyboardInterrupt in this thread before the sleep ends

    monkeypatch.setattr(store.os, "fsync", fsync_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):  # Python's own Ctrl-C handler: conftest's _ctrl_c_as_a_users_process_has_it
        store.RunStore.create(results, meta, "name: tiny_mxnet\n")
    assert signalled, "the sweep file's write was interrupted"
    assert not results.exists(), sorted(map(str, results.rglob("*")))


def test_a_half_made_run_folder_is_listed_and_deleted(tmp_path: Path) -> None:
    """A start killed (SIGKILL) while it made its run's folder leaves it without a run.json, as the issue found it:
    `runs` lists it and `rm` deletes it."""
    results = tmp_path / "results"
    half = results / "tiny_mxnet" / "20261124-112119-e9cc"
    (half / "epochs").mkdir(parents=True)
    (half / "trials").mkdir()
    (half / ".sweep.yaml.tmp-4242").write_text("name: tiny")
    for args in (["runs"], ["runs", "tiny_mxnet"]):
        listed = run_cli(*args, "--results", str(results), timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.strip() == ("tiny_mxnet 20261124-112119-e9cc: incomplete: its start was stopped before it "
                                         "wrote run.json; python -m sweep rm tiny_mxnet 20261124-112119-e9cc deletes it")
    gone = run_cli("rm", "tiny_mxnet", "20261124-112119-e9cc", "--yes", "--results", str(results), timeout=60)
    assert gone.returncode == 0 and "deleted run 20261124-112119-e9cc of tiny_mxnet" in gone.stdout, gone.stderr
    assert not half.exists()
    assert run_cli("runs", "--results", str(results), timeout=60).stdout.startswith("no runs under")
