"""plan, --set, runs, status --run and rm, on two runs the engine makes once for the session (conftest.engine_runs).

The runs: tests/sweeps/tiny_mxnet.yaml with `--set epochs=1 --set batch_per_gpu=8` (two trials: 1 and 2
GPUs), first on one emulated GPU with --skip-infeasible (the 1-GPU trial runs, the 2-GPU one is recorded
infeasible; nothing is known yet, so nothing is estimated), then on the default four (the 1-GPU trial is
estimated from the first run, the 2-GPU one from the model's cost at its measured rate).
"""
from __future__ import annotations

import json
import os
import pty
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, SETS, SWEEPS, TINY as SWEEP, EngineRuns, run_cli

from sweep import store
from sweep.plan import Plan, trial_time
from sweep.runs import resume_command
from trainables.config import TrialConfig



@pytest.fixture
def runs(engine_runs: EngineRuns) -> EngineRuns:
    """conftest's two engine-made runs (shared by the session); read them, copy before changing them."""
    return engine_runs


def one_line_error(out: subprocess.CompletedProcess, *words: str) -> None:
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr
    for word in words:
        assert word in out.stderr, (word, out.stderr)


def cli(capsys: pytest.CaptureFixture, *args: str) -> subprocess.CompletedProcess:
    """The CLI in this process (its refusals take milliseconds; a process of its own takes seconds to start)."""
    from sweep.cli import main

    code = main(list(args))
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


def test_each_run_is_headed_by_its_plan_which_run_json_records(runs: EngineRuns) -> None:
    assert runs.first.returncode == 1 and runs.second.returncode == 0, runs.second.stdout[-3000:] + runs.second.stderr[-2000:]
    assert len(runs.run_ids) == 2
    one, two = (t.trial_id for t in _trials())
    for out in (runs.first, runs.second):  # the plan comes before the run starts
        assert out.stdout.index("plan: tiny_mxnet at scale smoke, 2 trials (--set batch_per_gpu=8 --set epochs=1)") \
            < out.stdout.index("sweep tiny_mxnet: 2 trials at scale smoke")
    assert f"fits no node: {two} needs 2 GPUs" in runs.first.stdout
    assert "estimated makespan and GPU-hours: unknown" in runs.first.stdout
    first = runs.meta(0).sessions[0].estimate
    assert [(t.trial_id, t.seconds, t.source) for t in first.trials] == [(one, None, "none")]  # the infeasible one is not handed to Tune
    second = runs.meta(1).sessions[0].estimate
    planned = {t.trial_id: t for t in second.trials}
    assert planned[one].source == "measured" and planned[one].seconds == pytest.approx(runs.trials(0).wall_time_s[one])
    assert planned[two].source == "model" and planned[two].seconds > 0
    assert second.hardware.startswith("cpu-emulated (") and second.node_gpus == [4.0] and second.makespan_s > 0
    # The run ends saying how far off its estimates were.
    actual = runs.trials(1).wall_time_s
    errors = [abs(planned[t].seconds - actual[t]) / actual[t] for t in (one, two)]
    assert f"estimates off by a median {statistics.median(errors):.0%} over 2 trials" in runs.second.stdout


def test_set_is_recorded_and_part_of_the_runs_identity(runs: EngineRuns, capsys: pytest.CaptureFixture) -> None:
    meta = runs.meta(0)
    assert meta.overrides == {"epochs": 1, "batch_per_gpu": 8}
    assert set(runs.trials(0).epochs) == {1} and set(runs.trials(0).batch_per_gpu) == {8}
    assert resume_command("tiny_mxnet", meta.run_id, meta.overrides, "results").endswith("--set batch_per_gpu=8 --set epochs=1")
    # The first run has an infeasible trial: --retry-failed would run it again. Another --set is refused ...
    resume = [SWEEP, "--resume", meta.run_id, "--retry-failed", "--results", str(runs.results)]
    out = run_cli(*resume, "--set", "epochs=2", "--set", "batch_per_gpu=8", timeout=60)
    one_line_error(out, f"run {meta.run_id} was started with --set batch_per_gpu=8 --set epochs=1",
                   "this command gives --set batch_per_gpu=8 --set epochs=2", "--force")
    one_line_error(cli(capsys, *resume), "this command gives no --set")
    # ... and the same one, or --force, gets past that check (to the next: the scale asked for, before Ray starts).
    for extra in (SETS, ["--force", "--set", "lr=0.1"]):
        one_line_error(cli(capsys, *resume, *extra, "--scale", "full"), "is at scale smoke, not full")


def test_bad_set_is_one_line_naming_it_for_run_show_and_plan(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cases = [(["--set", "lr=abc"], "--set lr=abc: expected a number"),
             (["--set", "nope=1"], "--set nope=1: unknown setting 'nope'"),
             (["--set", "lr"], "--set lr: expected key=value"),
             (["--set", "lr=[1,"], "--set lr=[1,: malformed value"),
             (["--set", "epochs=1", "--set", "epochs=2"], "epochs is set twice"),
             (["--set", "warmup_epochs=5"], "--set warmup_epochs=5: warmup_epochs: expected fewer than epochs (3)")]
    results = tmp_path / "results"
    for args, words in cases:
        for command in (["run"], ["show"], ["plan", "--results", str(results)]):
            out = cli(capsys, *command, SWEEP, *args, *(["--results", str(results)] if command == ["run"] else []))
            one_line_error(out, words)
    assert not results.exists()
    one_line_error(run_cli(SWEEP, "--set", "lr=abc", "--results", str(results), timeout=60), "--set lr=abc")  # as a user runs it
    show = run_cli("show", SWEEP, "--scale", "smoke", *SETS, timeout=60)
    assert show.returncode == 0 and "scale smoke: 2 trials" in show.stdout and "with --set batch_per_gpu=8 --set epochs=1" in show.stdout


def test_plan_lists_trials_fits_and_estimates_without_data_or_ray(runs: EngineRuns) -> None:
    before = sorted(str(p) for p in runs.results.rglob("*"))
    t0 = time.time()
    out = run_cli("plan", SWEEP, *SETS, "--results", str(runs.results), timeout=60)  # no data/ folder here
    assert out.returncode == 0, out.stderr
    assert time.time() - t0 < 30 and "Ray dashboard" not in out.stdout and "CIFAR" not in out.stdout  # nothing started
    assert sorted(str(p) for p in runs.results.rglob("*")) == before  # nothing written
    one, two = (t.trial_id for t in _trials())
    lines = out.stdout.splitlines()
    assert lines[0] == "plan: tiny_mxnet at scale smoke, 2 trials (--set batch_per_gpu=8 --set epochs=1)"
    assert "an embedded Ray as `run` would start it here: 1 node with 4 emulated GPUs" in lines[1]
    walls = [runs.trials(i).wall_time_s[one] for i in (0, 1)]
    row = next(line for line in lines if line.startswith(f"  {one}"))
    # The median as the plan writes a trial's time: in minutes past one, which a loaded machine's runs reach.
    assert "median of 2 earlier runs of this trial" in row and trial_time(statistics.median(walls)) in row
    # The 2-GPU trial ran once (the first run found it no node): its spread is the one repeated trials showed, each
    # run against the other (what a measured estimate, the earlier run, was off by: max(a / b, b / a) - 1).
    spread = max(walls) / min(walls) - 1
    assert f"1 earlier run of this trial; repeats here vary +-{spread:.0%}" in next(l for l in lines if l.startswith(f"  {two}"))
    assert "estimates from 2 trials measured in 2 earlier runs on cpu-emulated" in out.stdout
    # The last run's estimates set against what its trials took, as run.json and the summary rows say.
    assert f"last run {runs.run_ids[1]} (session 1): estimates off by a median" in out.stdout


def test_plan_json_is_the_plan_dataclass(runs: EngineRuns) -> None:
    out = run_cli("plan", SWEEP, *SETS, "--results", str(runs.results), "--json", timeout=60)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert set(plan) == {f.name for f in fields(Plan)}
    assert plan["overrides"] == {"epochs": 1, "batch_per_gpu": 8} and plan["scale"] == "smoke"
    assert [t["source"] for t in plan["trials"]] == ["measured", "measured"]
    low, high = plan["makespan_range_s"]
    assert low <= plan["makespan_s"] <= high and plan["lower_bound_s"] <= plan["makespan_s"]
    hours = sum(t["num_gpus"] * t["seconds"] for t in plan["trials"]) / 3600
    assert plan["gpu_hours"] == pytest.approx(hours)
    last = plan["last_run"]
    assert last["run_id"] == runs.run_ids[1] and last["trials"] == 2
    assert last["makespan_actual_s"] == pytest.approx(runs.trials(1).ended_at.max() - runs.trials(1).started_at.min())


def test_plan_for_a_described_cluster_needs_no_ray(runs: EngineRuns, capsys: pytest.CaptureFixture) -> None:
    base = ["plan", SWEEP, *SETS, "--results", str(runs.results)]
    two = _trials()[1].trial_id
    small = cli(capsys, *base, "--nodes", "2", "--gpus-per-node", "1", "--cpus-per-node", "4")
    assert small.returncode == 0, small.stderr
    assert "2 nodes of 1 GPU like this machine's" in small.stdout and f"fits no node: {two}" in small.stdout
    other = cli(capsys, *base, "--nodes", "4", "--gpus-per-node", "8", "--gpu-model", "H100")
    assert other.returncode == 0 and "estimates for gpu (H100)" in other.stdout
    # Nothing measured on any GPU here (issue 44): each trial's training FLOPs at the default MFU of the H100's peak.
    assert "estimated makespan and GPU-hours: unknown" not in other.stdout and "estimated makespan" in other.stdout
    assert "MFU 10% (the default: no trial of the store has one) of 495 TFLOP/s at tf32" in other.stdout
    alone = cli(capsys, *base, "--gpu-model", "H100")  # the GPU alone: nodes of it, as the largest trial needs
    assert alone.returncode == 0, alone.stderr
    assert "1 node of 2 GPUs H100, as the largest trial needs" in alone.stdout and "fits no node" not in alone.stdout
    # On real GPUs a trial takes the node's cores per GPU for each of its GPUs; emulated ones keep 1.
    h100 = cli(capsys, *base, "--nodes", "2", "--gpus-per-node", "8", "--cpus-per-node", "96", "--gpu-model", "H100", "--json")
    assert h100.returncode == 0, h100.stderr
    assert sorted((t["num_gpus"], t["cpus"]) for t in json.loads(h100.stdout)["trials"]) == [(1, 12), (2, 24)]
    assert sorted(t["cpus"] for t in json.loads(cli(capsys, *base, "--json").stdout)["trials"]) == [1, 1]
    for args, words in [(["--nodes", "2"], "--nodes and --gpus-per-node go together"),
                        (["--cpus-per-node", "8"], "give --nodes and --gpus-per-node too"),
                        (["--gpu-model", "H100", "--address", "127.0.0.1:1"], "give one or the other"),
                        (["--gpu-model", "Voodoo5"], "--gpu-model Voodoo5: unknown GPU model, with no run on it in the store; expected one of A10, "),
                        (["--nodes", "2", "--gpus-per-node", "2", "--address", "127.0.0.1:1"], "give one or the other"),
                        (["--nodes", "0", "--gpus-per-node", "2"], "--nodes: expected an integer >= 1")]:
        one_line_error(cli(capsys, *base, *args), words)


def test_plan_for_a_gpu_without_a_published_peak_times_it_by_its_own_runs(runs: EngineRuns, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    """Issue 44: `plan --gpu-model M` for a GPU the peak table lacks is refused only when the store has no run on it
    either. Here the engine's two runs, their summary rows marked as run on an RTX 4090 (no published peak): accepted,
    each trial timed from those runs (measured, or the model at their rate), its basis said, nothing scaled by peaks."""
    results = tmp_path / "results"
    shutil.copytree(runs.results, results)
    for part in (results / "tiny_mxnet").glob("*/trials/*.parquet"):
        rows = pd.read_parquet(part)
        rows["device_kind"], rows["gpu_model"] = "gpu", "NVIDIA GeForce RTX 4090"
        rows.to_parquet(part)
    from trainables import peaks

    assert peaks.gpu_model("RTX 4090") is None
    one, two = (t.trial_id for t in _trials())
    out = cli(capsys, "plan", SWEEP, *SETS, "--results", str(results), "--gpu-model", "RTX 4090")
    assert out.returncode == 0, out.stderr
    assert "1 node of 2 GPUs RTX 4090, as the largest trial needs" in out.stdout
    assert "estimates from 2 trials measured in 2 earlier runs on gpu (RTX 4090)" in out.stdout
    lines = out.stdout.splitlines()
    walls = [runs.trials(i).wall_time_s[one] for i in (0, 1)]
    assert "median of 2 earlier runs of this trial" in next(line for line in lines if line.startswith(f"  {one}"))
    # As the plan writes a trial's time: 1:06 min beside two busy processes (2026-11-29), 66.1 s did not show.
    assert trial_time(statistics.median(walls)) in next(line for line in lines if line.startswith(f"  {one}"))
    assert "1 earlier run of this trial" in next(line for line in lines if line.startswith(f"  {two}"))
    assert "TFLOP/s" not in out.stdout and "error unknown" not in out.stdout  # nothing scaled by a peak, nothing unknown
    # Trials never run: the model's cost at those runs' rate, on their GPU.
    other = cli(capsys, "plan", SWEEP, "--set", "epochs=2", "--set", "batch_per_gpu=8", "--results", str(results),
                "--gpu-model", "RTX 4090", "--json")
    assert other.returncode == 0, other.stderr
    trials = json.loads(other.stdout)["trials"]
    assert [t["source"] for t in trials] == ["model", "model"] and all(t["seconds"] > 0 for t in trials)
    assert all("model cost at the rate of 2 measured trials (error unknown" in t["basis"] for t in trials)
    assert all(t["uncertainty"] is None for t in trials)  # one trial on 1 GPU, one on 2: neither predicts the other
    # The same GPU with no run in the store: refused, as before.
    one_line_error(cli(capsys, "plan", SWEEP, *SETS, "--results", str(tmp_path / "empty"), "--gpu-model", "RTX 4090"),
                   "--gpu-model RTX 4090: unknown GPU model, with no run on it in the store")


def test_runs_lists_every_run_with_its_counts_gpu_hours_date_and_command(runs: EngineRuns, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    for args in (["runs"], ["runs", "tiny_mxnet"], ["runs", SWEEP]):
        out = run_cli(*args, "--results", str(runs.results), timeout=60) if args == ["runs"] else cli(
            capsys, *args, "--results", str(runs.results))
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].split()[:5] == ["sweep", "run", "scale", "started", "trials"] and len(lines) == 3
        for i, (done, failed) in enumerate([(1, 1), (2, 0)]):
            cells = lines[i + 1].split()
            meta = runs.meta(i)
            assert cells[:3] == ["tiny_mxnet", meta.run_id, "smoke"]
            assert cells[3] == time.strftime("%Y-%m-%d", time.localtime(meta.sessions[0].started_at))
            assert cells[5:11] == ["2", str(done), str(failed), "0", "0", "0"]  # ... failed, oom probes, interrupted, pending
            assert cells[11] == f"{store.RunStore(runs.run_dir(i)).gpu_hours():.4f}" and cells[12] == "finished"
            assert lines[i + 1].endswith(meta.command) and "--set epochs=1" in meta.command
    one_line_error(cli(capsys, "runs", "nosuch", "--results", str(runs.results)), "no run of nosuch")
    empty = cli(capsys, "runs", "--results", str(tmp_path / "none"))
    assert empty.returncode == 0 and empty.stdout.startswith("no runs under")


def test_status_of_a_given_run(runs: EngineRuns, capsys: pytest.CaptureFixture) -> None:
    first = runs.run_ids[0]
    out = run_cli("status", SWEEP, "--run", first, "--results", str(runs.results), timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"tiny_mxnet run {first} (smoke scale, 2 trials): 1 done, 0 running or interrupted, 1 failed, 0 pending" in out.stdout
    latest = cli(capsys, "status", "tiny_mxnet", "--results", str(runs.results))
    assert f"run {runs.run_ids[1]} " in latest.stdout and "2 done" in latest.stdout
    for bad in ("nope", "../tiny_mxnet", "."):
        one_line_error(cli(capsys, "status", SWEEP, "--run", bad, "--results", str(runs.results)), f"no run {bad}")


def rm(results: Path, run_id: str, *extra: str, answer: str | None = None) -> subprocess.CompletedProcess:
    """`rm` with its input a pipe, or a terminal that types `answer`."""
    args = [sys.executable, "-m", "sweep", "rm", "tiny_mxnet", run_id, "--results", str(results), *extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if answer is None:
        return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    main, terminal = pty.openpty()
    try:
        os.write(main, answer.encode() + b"\n")
        return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60, env=env, stdin=terminal)
    finally:
        os.close(main)
        os.close(terminal)


def test_rm_asks_first_and_deletes_only_what_it_is_told(runs: EngineRuns, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    results = tmp_path / "results"
    shutil.copytree(runs.results, results)  # the engine's runs, deletable
    first, second = runs.run_ids
    one_line_error(rm(results, first), "not a terminal", "--yes")  # asks, and nobody can answer
    kept = rm(results, first, answer="n")
    assert kept.returncode == 0 and "not deleted" in kept.stdout and f"run {first} of tiny_mxnet: finished" in kept.stdout
    assert (results / "tiny_mxnet" / first / "run.json").is_file()
    gone = rm(results, first, answer="y")
    assert gone.returncode == 0 and f"deleted run {first}" in gone.stdout, gone.stdout + gone.stderr
    assert not (results / "tiny_mxnet" / first).exists() and (results / "tiny_mxnet" / second / "run.json").is_file()
    assert cli(capsys, "rm", "tiny_mxnet", second, "--yes", "--results", str(results)).returncode == 0
    assert store.run_dirs(results, "tiny_mxnet") == []
    for bad in ("nope", "../../etc"):
        one_line_error(cli(capsys, "rm", "tiny_mxnet", bad, "--yes", "--results", str(results)), f"no run {bad} of tiny_mxnet")


def _trials() -> list[TrialConfig]:
    """The fixture's two trials, 1 GPU then 2: tiny_mxnet.yaml's fixed settings with SETS over them, written
    out by hand (not through the --set code that the runs test)."""
    fixed = {"framework": "mxnet", "model": "resnet8_cifar", "epochs": 1, "steps_per_epoch": 3, "val_examples": 64,
             "warmup_steps": 1, "lr": 0.05, "batch_per_gpu": 8}
    return [TrialConfig(**fixed, num_gpus=1), TrialConfig(**fixed, num_gpus=2)]


def test_the_benchmark_replays_the_history_as_the_runs_saw_it(runs: EngineRuns) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "estimates.py"), "--results", str(runs.results)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[1]: line.split() for line in out.stdout.splitlines() if line.startswith("tiny_mxnet ")}
    first, second = runs.run_ids
    assert rows[first][2:6] == ["1", "0", "0", "1"]  # trials, measured, model, none: nothing known before it
    assert rows[second][2:6] == ["2", "1", "1", "0"]
    # Replayed from the runs before it, the second run's estimates are those it recorded when it started.
    recorded = {t.trial_id: t.seconds for t in runs.meta(1).sessions[0].estimate.trials}
    actual = runs.trials(1).wall_time_s
    errors = [abs(recorded[t] - actual[t]) / actual[t] for t in recorded]
    assert rows[second][6] == f"{statistics.median(errors):.0%}"
    replayed, taken, made = rows[second][10], rows[second][12], rows[second][14]  # "1.7 / 2.9 s (1.7 s)"
    makespan = runs.trials(1).ended_at.max() - runs.trials(1).started_at.min()
    assert replayed == made.strip("(") and float(taken) == pytest.approx(makespan, abs=0.05)
    assert "trial estimates: median |error|" in out.stdout and "over 2 trials" in out.stdout
    assert "stated ranges held for" in out.stdout


def test_a_run_json_from_before_plans_and_set_still_reads(runs: EngineRuns) -> None:
    """An engine-made run.json with the fields this feature added taken out, as earlier engines wrote it."""
    raw = json.loads((runs.run_dir(1) / "run.json").read_text())
    del raw["overrides"]
    for session in raw["sessions"]:
        del session["estimate"]
    meta = store.RunMeta.from_json(json.dumps(raw), "run.json")
    assert meta.overrides == {} and meta.sessions[0].estimate is None
    assert meta.sessions[0].command == runs.meta(1).command and meta.trials == runs.meta(1).trials


def test_a_damaged_run_is_listed_as_such_and_can_still_be_deleted(runs: EngineRuns, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    results = tmp_path / "results"
    shutil.copytree(runs.results, results)
    first, second = runs.run_ids
    (results / "tiny_mxnet" / first / "run.json").write_text("{not json")
    listed = cli(capsys, "runs", "--results", str(results))
    assert listed.returncode == 0, listed.stderr
    assert f"tiny_mxnet {first}: unreadable:" in listed.stdout and f"tiny_mxnet  {second}" in listed.stdout
    plan = cli(capsys, "plan", SWEEP, *SETS, "--results", str(results))  # its summary rows still teach
    assert plan.returncode == 0 and "in 2 earlier runs on" in plan.stdout, plan.stdout + plan.stderr
    gone = cli(capsys, "rm", "tiny_mxnet", first, "--yes", "--results", str(results))
    assert gone.returncode == 0 and not (results / "tiny_mxnet" / first).exists(), gone.stdout + gone.stderr


@pytest.mark.slow
def test_resume_of_a_run_not_the_latest_with_retry_failed_and_force(runs: EngineRuns, tmp_path: Path,
                                                                     shared_ray: list[str]) -> None:
    """The first run (its 2-GPU trial infeasible on one emulated GPU) resumed by its id while a later run exists,
    on the shared Ray's four GPUs: --retry-failed runs the infeasible trial, --force takes the run as it was started
    (its --set values, not the ones given now); the completed trial is not trained again, the later run untouched."""
    results = tmp_path / "results"
    shutil.copytree(runs.results, results)
    first, second = runs.run_ids
    one, two = (t.trial_id for t in _trials())
    later = {p: p.read_bytes() for p in (results / "tiny_mxnet" / second).rglob("*") if p.is_file()}
    out = run_cli(SWEEP, "--resume", first, "--retry-failed", "--force", "--set", "epochs=2", "--results", str(results),
                  *shared_ray, timeout=400, env={"SWEEP_PROGRESS": "live"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    # SWEEP_PROGRESS=live: the live view although the output is a pipe (plain lines otherwise: test_watching).
    assert "\x1b[" in out.stdout and "] 2/2 trials  0 running  0 failed  0 pending" in out.stdout, out.stdout[-2000:]
    run = store.RunStore(results / "tiny_mxnet" / first)
    summary = run.trials().set_index("trial_id")
    assert summary.status.to_dict() == {one: "completed", two: "completed"}
    assert set(summary.epochs) == {1} and run.meta.overrides == {"epochs": 1, "batch_per_gpu": 8}
    assert len(run.meta.sessions) == 2 and "--retry-failed" in run.meta.sessions[1].command
    assert {t: run.attempts(t) for t in (one, two)} == {one: 1, two: 1}  # one ran in the first session only
    assert sorted(zip(run.epochs().trial_id, run.epochs().epoch)) == sorted([(one, 0), (two, 0)])
    assert {p: p.read_bytes() for p in (results / "tiny_mxnet" / second).rglob("*") if p.is_file()} == later


def test_plan_emulate_gpus_shapes_the_embedded_ray_as_run_would(runs: EngineRuns, capsys: pytest.CaptureFixture) -> None:
    one, two = (t.trial_id for t in _trials())
    narrow = cli(capsys, "plan", SWEEP, *SETS, "--emulate-gpus", "1", "--results", str(runs.results))
    assert narrow.returncode == 0, narrow.stderr
    assert "1 node with 1 emulated GPU and" in narrow.stdout and "node-1     1 " in narrow.stdout, narrow.stdout
    assert f"fits no node: {two} needs 2 GPUs" in narrow.stdout and f"fits no node: {one}" not in narrow.stdout
    wide = cli(capsys, "plan", SWEEP, *SETS, "--emulate-gpus", "3", "--results", str(runs.results))
    assert wide.returncode == 0 and "1 node with 3 emulated GPUs and" in wide.stdout, wide.stdout + wide.stderr
    assert "fits no node" not in wide.stdout
    one_line_error(cli(capsys, "plan", SWEEP, "--emulate-gpus", "0"), "--emulate-gpus: expected an integer >= 1")


def test_plan_warns_of_more_processes_than_cores_without_refusing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # The newcomer's 64 emulated GPUs on a 2-core laptop: 64 processes take turns on 2 cores. One line, and the plan
    # (and a run: it prints the same plan) goes on.
    base = ["plan", SWEEP, *SETS, "--set", "num_gpus=64", "--results", str(tmp_path / "results")]
    laptop = cli(capsys, *base, "--nodes", "1", "--gpus-per-node", "64", "--cpus-per-node", "2")
    assert laptop.returncode == 0, laptop.stderr
    warned = [line for line in laptop.stdout.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "up to 64 processes (one per GPU) on a node of 2 cores" in warned[0], laptop.stdout
    assert "fits no node" not in laptop.stdout
    roomy = cli(capsys, *base, "--nodes", "1", "--gpus-per-node", "64", "--cpus-per-node", "64")
    assert roomy.returncode == 0 and "warning:" not in roomy.stdout, roomy.stdout
    here = cli(capsys, *base)  # the embedded Ray on this machine, as `run` would start it
    assert here.returncode == 0, here.stderr
    cores = os.cpu_count() or 1
    assert (f"up to 64 processes (one per GPU) on a node of {cores} core" in here.stdout) == (cores < 64), here.stdout


def test_plan_warns_of_more_host_memory_than_a_node_has(runs: EngineRuns) -> None:
    # The memory each GPU's share took in the engine's runs (their rows' peak host RSS), times a trial's GPUs,
    # against a node's memory: a node of less than that gets one line, a larger one none.
    from sweep import estimates
    from sweep.cluster import Node
    from sweep.plan import Target, resource_warnings

    history = estimates.history(runs.results)
    trials = _trials()
    per_gpu = max(m.host_mib_per_gpu for m in history.measurements if m.host_mib_per_gpu)
    nodes = [Node("node-1", "local", 64.0, 4.0)]
    small = Target(nodes, estimates.Hardware("cpu-emulated", None), "a small node", memory_mib=per_gpu / 2)
    (line,) = resource_warnings(trials, small, history)
    assert line.startswith("warning: 2 trials") and "of host memory on a node" in line and "expect swapping" in line
    roomy = Target(nodes, small.hardware, "a large node", memory_mib=per_gpu * 100)
    assert resource_warnings(trials, roomy, history) == []


@pytest.mark.slow
def test_a_run_with_more_gpus_than_cores_warns_in_one_line_and_runs(tmp_path: Path) -> None:
    # A run prints its plan, warnings included: one more emulated GPU than this machine has cores (the newcomer's
    # 64 on 2), and the trial still runs to the end.
    cores = os.cpu_count() or 1
    if cores >= 64:
        pytest.skip("the embedded Ray emulates at most 64 GPUs on a node: none beyond this machine's cores")
    sweep = str(SWEEPS / "one_trial.yaml")
    out = run_cli(sweep, "--set", f"num_gpus={cores + 1}", "--set", "data=synthetic", "--set", "epochs=1",
                  "--results", str(tmp_path / "results"), timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    warned = [line for line in out.stdout.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and f"{cores + 1} processes (one per GPU) on a node of {cores} core" in warned[0], out.stdout
    assert "1 completed, 0 failed" in out.stdout
