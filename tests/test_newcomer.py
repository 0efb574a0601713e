"""What a new user hit (issue 29), one test per defect; each failed on the code before its fix.

The commands run in this process through `sweep.cli.main`, as `python -m sweep` runs them (test_docs.py
runs the docs' commands as a user types them). The slow test at the end makes its runs with the engine.
"""
from __future__ import annotations

import io
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, SWEEPS, run_cli

from sweep import plan, spec
from sweep.cli import main
from sweep.cluster import Node
from sweep.errors import FetchError
from sweep.estimates import Estimator, Hardware, History, Measurement
from sweep.report.compare import ratio_of_tables
from sweep.report.tables import Table
from trainables.config import TrialConfig

CPU = Hardware("cpu-emulated", "AMD EPYC")
ONE_TRIAL = str(SWEEPS / "one_trial.yaml")


def cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


# --- --set is checked at the scale that runs, and says which ------------------------------------------

def test_set_is_checked_at_the_scale_asked_for(capsys: pytest.CaptureFixture) -> None:
    # The smoke scale has no warm-up: one epoch is fine there (it was refused: the full scale was checked).
    code, out, err = cli(capsys, "show", "resnet50_lr_scaling", "--scale", "smoke", "--set", "epochs=1")
    assert code == 0, err
    assert "scale smoke: 10 trials" in out and "scale full" not in out
    # The full scale warms up for 2 epochs: refused, in one line that names the scale it was checked at.
    code, out, err = cli(capsys, "show", "resnet50_lr_scaling", "--scale", "full", "--set", "epochs=2")
    assert code == 2 and not out
    assert err.strip() == ("error: --set epochs=2: warmup_epochs: expected fewer than epochs (2), got 2 (at scale full)")


def test_plan_checks_set_at_the_scale_it_plans(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    code, out, err = cli(capsys, "plan", "resnet50_lr_scaling", "--set", "epochs=1", "--results", str(tmp_path))
    assert code == 0, err
    assert out.startswith("plan: resnet50_lr_scaling at scale smoke, 10 trials (--set epochs=1)")


# --- plan: ranges, certainty, what run refuses, Hopper ---------------------------------------------------

def _measured(config: TrialConfig, wall: float, run: str) -> Measurement:
    return Measurement(config, "one_trial", run, 0.0, CPU, wall, None)


def test_a_plans_ranges_never_go_below_zero() -> None:
    sweep = spec.load(ONE_TRIAL)
    trials = sweep.trials("smoke")
    # Three runs of the one trial, one ten times the others: a spread of +-730%.
    history = History([_measured(trials[0], wall, f"r{i}") for i, wall in enumerate([1.0, 1.2, 10.0])], [])
    target = plan.Target([Node("node-1", "local", 2.0, 2.0)], CPU, "one node")
    made, _ = plan.build(sweep, "smoke", trials, target, history)
    assert made.trials[0].uncertainty > 1
    assert made.makespan_range_s[0] > 0 and made.gpu_hours_range[0] > 0
    assert made.makespan_range_s[0] <= made.makespan_s <= made.makespan_range_s[1]


def test_an_estimate_for_a_network_never_measured_claims_no_error_bar() -> None:
    small = [TrialConfig("mxnet", "resnet8_cifar", num_gpus=1, batch_per_gpu=b, epochs=2, lr=0.1, steps_per_epoch=4)
             for b in (16, 32, 64)]
    history = History([_measured(c, 5.0 + i, f"r{i}") for i, c in enumerate(small)], [])
    estimator = Estimator(history, CPU)
    assert estimator.guess(TrialConfig("mxnet", "resnet8_cifar", num_gpus=1, batch_per_gpu=32, epochs=3, lr=0.1,
                                       steps_per_epoch=4)).uncertainty is not None  # the same network: its error holds
    # (on another number of GPUs, not: they share a node's cores and links, test_estimates.py)
    big = estimator.guess(TrialConfig("mxnet", "resnet50_v1", num_gpus=1, batch_per_gpu=32, epochs=2, lr=0.1))
    assert big.source == "model" and big.uncertainty is None
    assert "none of them mxnet resnet50_v1" in big.basis


def test_plan_refuses_what_run_refuses(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    code, out, err = cli(capsys, "plan", ONE_TRIAL, "--set", "num_gpus=100", "--results", str(tmp_path))
    assert code == 2 and "fits" not in out
    assert "the embedded Ray emulates at most 64 per node" in err


def test_a_hopper_plan_names_mxnets_limit_and_says_each_reason_once(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    code, out, err = cli(capsys, "plan", "resnet50_precision", "--scale", "full", "--nodes", "1", "--gpus-per-node", "4",
                         "--gpu-model", "H100", "--results", str(tmp_path))
    assert code == 0, err
    assert "inf CPUs" not in out and "1 CPUs" not in out
    assert "no pip build of MXNet runs on H100" in out
    unfit = [line for line in out.splitlines() if line.startswith("fits no node")]
    assert len(unfit) == 1 and unfit[0].startswith("fits no node: 36 trials (") and "needs 8 GPUs and 1 CPU on one node" in unfit[0]
    # The same trials on A100s: no Hopper note.
    code, out, _ = cli(capsys, "plan", "resnet50_precision", "--scale", "full", "--nodes", "1", "--gpus-per-node", "8",
                       "--gpu-model", "A100", "--results", str(tmp_path))
    assert code == 0 and "Hopper" not in out


def test_counts_are_singular_where_they_are_one(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    code, out, err = cli(capsys, "plan", ONE_TRIAL, "--nodes", "1", "--gpus-per-node", "1", "--results", str(tmp_path))
    assert code == 0, err
    assert out.startswith("plan: one_trial at scale smoke, 1 trial\n")
    assert "cluster: 1 node of 1 GPU like this machine's" in out
    code, out, _ = cli(capsys, "show", ONE_TRIAL, "--scale", "smoke")
    assert "scale smoke: 1 trial\n" in out


# --- one-line messages ---------------------------------------------------------------------------------

def test_status_takes_max_trials(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    code, _, err = cli(capsys, "status", str(SWEEPS / "tiny_mxnet.yaml"), "--max-trials", "5", "--results", str(tmp_path))
    assert code == 2 and "grid: 6 trials at scale smoke, more than the limit of 5" in err
    code, _, err = cli(capsys, "status", str(SWEEPS / "tiny_mxnet.yaml"), "--max-trials", "6", "--results", str(tmp_path))
    assert code == 2 and f"no run of tiny_mxnet under {tmp_path}" in err


def test_a_name_of_other_letters_is_told_ascii(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    path = tmp_path / "résumé_σweep.yaml"
    path.write_text((SWEEPS / "one_trial.yaml").read_text().replace("name: one_trial\n", ""))
    code, _, err = cli(capsys, "show", str(path))
    assert code == 2 and "ASCII" in err and len(err.strip().splitlines()) == 1


def test_report_of_a_sweep_never_run_says_so(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    code, _, err = cli(capsys, "report", "resnet50_lr_scaling", "--results", str(tmp_path))
    assert code == 2
    assert err.startswith(f"error: no run of resnet50_lr_scaling under {tmp_path}")


def test_an_empty_set_value_is_called_nothing(capsys: pytest.CaptureFixture) -> None:
    code, _, err = cli(capsys, "show", ONE_TRIAL, "--set", "lr=")
    assert code == 2 and err.strip() == "error: --set lr=: expected a number in (0, inf], got nothing"


def test_a_cut_download_says_what_is_kept_and_how_to_resume(tmp_path: Path) -> None:
    import socket

    from sweep import download

    with socket.socket() as s:  # a port nobody listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    part = tmp_path / "cifar-10-python.tar.gz.part"
    part.write_bytes(b"x" * (3 << 20))
    with open(part, "ab") as f:
        with pytest.raises(FetchError) as e:
            download.download(f"http://127.0.0.1:{port}/cifar.tar.gz", f, part, io.StringIO(), 200 << 20, "CIFAR-10")
    assert "the 3.0 MiB downloaded so far are kept" in str(e.value) and "run the same command again to resume" in str(e.value)
    assert part.stat().st_size == 3 << 20


# --- labels: a framework's own settings, and the arithmetic ---------------------------------------------

def test_a_frameworks_own_settings_show_for_it_alone(capsys: pytest.CaptureFixture) -> None:
    code, out, _ = cli(capsys, "show", "poseidon_distributed", "--scale", "smoke")
    assert code == 0
    head, *rows = [line.split() for line in out.splitlines() if line.startswith("  ")]
    kv, vu = head.index("kvstore"), head.index("variable_update")
    for row in rows:
        assert (row[kv] == "-") == (row[1] == "tensorflow"), row
        assert (row[vu] == "-") == (row[1] == "mxnet"), row


def test_labels_name_the_arithmetic(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    # A --set precision: every label says it, though nothing in the sweep varies.
    code, out, _ = cli(capsys, "plan", ONE_TRIAL, "--set", "precision=bf16", "--results", str(tmp_path))
    assert code == 0 and "mxnet resnet8_cifar gpus=1 batch=16 lr=0.05 precision=bf16" in out
    # A sweep that varies precision and XLA: every console label names them, each for its framework.
    trials = spec.load("resnet50_precision").trials("smoke")
    axes = spec.label_axes(trials)
    for t in trials:
        label = t.label(axes[t.trial_id])
        assert f"precision={t.precision}" in label, label
        assert ("compile=" in label) == (t.framework == "tensorflow"), label
        assert "kvstore" not in label and "variable_update" not in label
    # An axis at its default (image_size null: the model's own input) says so, not "None".
    sized = [TrialConfig("pytorch", "resnet50_v1", num_gpus=1, batch_per_gpu=8, epochs=1, lr=0.1, image_size=size)
             for size in (None, 64)]
    assert [t.label(("image_size",)) for t in sized] == ["pytorch resnet50_v1 gpus=1 batch=8 lr=0.1 image_size=default",
                                                         "pytorch resnet50_v1 gpus=1 batch=8 lr=0.1 image_size=64"]


# --- report --against: a pandas warning ------------------------------------------------------------------

def test_comparing_tables_of_other_groups_warns_of_nothing() -> None:
    # Three levels in the order the report writes them (not sorted), as the time-to-accuracy table's
    # (trial group, GPUs, trial): filling such a frame cell by cell made pandas warn "indexing past lexsort depth".
    rows = pd.MultiIndex.from_tuples([("mxnet b8", 2, "t2"), ("mxnet b16", 1, "t1"), ("tensorflow b8", 2, "t3")],
                                     names=["trial group", "GPUs", "trial"])
    a = Table("t", "T", pd.DataFrame({"g1": [2.0, 1.0, 2.0]}, index=rows))
    b = Table("t", "T", pd.DataFrame({"g2": [3.0, 1.5]}, index=rows[:2]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = ratio_of_tables(a, b)
    assert out.frame.loc[("mxnet b16", 1, "t1"), "g1"] == "only in A"
    assert out.frame.loc[("tensorflow b8", 2, "t3"), "g2"] == "only in B"


# --- runs with and without --env (engine-made) ------------------------------------------------------------

@pytest.mark.slow
def test_env_runs_are_quiet_and_a_comparison_names_the_environment(tmp_path: Path, shared_ray: list[str]) -> None:
    """The same one-trial sweep, run plainly, then with MXNet's trials under --env (this interpreter, so in
    worker actors): the second prints no raylet alarm and no colour codes, and `report --against` lists
    the environment among what differs. A plan for other hardware quotes no estimate error of this one. Both runs
    on the session's shared Ray: their subject is the environment and the report, not Ray's start."""
    results = tmp_path / "results"
    plain = run_cli(ONE_TRIAL, "--results", str(results), "--set", "data=synthetic", *shared_ray, timeout=900)
    assert plain.returncode == 0, plain.stdout[-2000:] + plain.stderr[-2000:]
    env = run_cli(ONE_TRIAL, "--results", str(results), "--set", "data=synthetic", "--env", f"mxnet={sys.executable}",
                  *shared_ray, timeout=900)
    assert env.returncode == 0, env.stdout[-2000:] + env.stderr[-2000:]
    both = env.stdout + env.stderr
    assert "(raylet)" not in both and "A worker died" not in both and "\x1b[" not in both
    first, second = sorted(p for p in (results / "one_trial").iterdir())
    rows = pd.read_parquet(second / "trials")
    assert rows.environment.notna().all()
    compared = run_cli("report", str(first), "--against", str(second), "--out", str(tmp_path / "cmp"), timeout=300)
    assert compared.returncode == 0, compared.stderr
    md = (tmp_path / "cmp" / "compare" / "compare.md").read_text() if (tmp_path / "cmp" / "compare").is_dir() \
        else next((tmp_path / "cmp").rglob("compare.md")).read_text()
    assert "framework environment (environment)" in md and "nothing recorded differs" not in md
    # The store's runs were on emulated CPUs: an H100 plan of the sweep quotes no error of theirs.
    here = run_cli("plan", ONE_TRIAL, "--results", str(results), "--set", "data=synthetic", timeout=120)
    assert "last run" in here.stdout, here.stdout
    h100 = run_cli("plan", ONE_TRIAL, "--results", str(results), "--set", "data=synthetic", "--nodes", "1",
                   "--gpus-per-node", "1", "--gpu-model", "H100", timeout=120)
    assert h100.returncode == 0 and "last run" not in h100.stdout, h100.stdout


@pytest.mark.slow
def test_a_second_run_beside_a_running_one_says_each_has_its_own_ray(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """While one run's driver runs tiny_mxnet in its embedded Ray, a new run of the same sweep is told the
    truth: the two share this machine, each in its own Ray (it was told they share "the cluster")."""
    import argparse
    import os
    import signal
    import time

    from sweep import launch
    from sweep.runs import latest_unfinished

    results = tmp_path / "results"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    first = subprocess.Popen([sys.executable, "-m", "sweep", str(SWEEPS / "tiny_mxnet.yaml"), "--results", str(results),
                              "--set", "epochs=50", "--set", "data=synthetic"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 600
        while time.time() < deadline:  # until its driver has recorded its session
            state = latest_unfinished(results, "tiny_mxnet") if (results / "tiny_mxnet").is_dir() else None
            if state is not None and state.driver:
                break
            assert first.poll() is None, first.stdout.read()
            time.sleep(1)
        args = argparse.Namespace(sweep=str(SWEEPS / "tiny_mxnet.yaml"), results=str(results), address=None)
        launch._note_unfinished(args, spec.load(args.sweep), results)
        said = capsys.readouterr().out
        assert f"its driver (pid {first.pid}) is running it now, in its own embedded Ray" in said, said
        assert "shares the cluster" not in said
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=300)
