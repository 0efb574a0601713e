"""The CLI's read-only commands and its one-line errors."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli

from sweep import spec


def test_list_prints_every_sweep_with_its_description() -> None:
    out = run_cli("list", timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    sweeps = spec.list_sweeps()
    assert len(lines) == len(sweeps) >= 1
    for sweep in sweeps:
        assert any(line.startswith(sweep.name) and sweep.description in line for line in lines)


def test_show_prints_count_and_each_trial() -> None:
    out = run_cli("show", "resnet50_lr_scaling", "--scale", "smoke", timeout=60)
    assert out.returncode == 0, out.stderr
    trials = spec.load("resnet50_lr_scaling").trials("smoke")
    assert f"scale smoke: {len(trials)} trials" in out.stdout
    for t in trials:
        row = next(line for line in out.stdout.splitlines() if t.trial_id in line)
        for value in (t.framework, t.model, str(t.num_gpus), str(t.batch_per_gpu), f"{t.lr:g}"):
            assert value in row.split(), (value, row)


def test_unknown_sweep_is_one_line_and_exit_2() -> None:
    for args in (["no_such_sweep"], ["run", "no_such_sweep"], ["show", "no_such_sweep"]):
        out = run_cli(*args, timeout=60)
        assert out.returncode == 2
        assert out.stdout == ""
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "no_such_sweep" in out.stderr and "Traceback" not in out.stderr


def test_bad_option_is_one_line_and_exit_2() -> None:
    cases = {("resnet50_lr_scaling", "--scale", "huge"):
             "error: python -m sweep run: argument --scale: invalid choice: 'huge' (choose from 'smoke', 'full') (see --help)",
             ("resnet50_lr_scaling", "--emulate-gpus", "0"):
             "error: --emulate-gpus: expected an integer >= 1 and <= 64, got 0",
             ("resnet50_lr_scaling", "--no-such-flag"):
             "error: python -m sweep: unrecognized arguments: --no-such-flag (see --help)"}
    for args, line in cases.items():
        out = run_cli(*args, timeout=60)
        assert out.returncode == 2, out
        assert out.stderr.strip() == line  # the one line names the option, the bad value and what it takes


def test_unreachable_cluster_is_one_line_within_seconds(tmp_path) -> None:
    import time

    t0 = time.time()
    out = run_cli("resnet50_lr_scaling", "--address", "127.0.0.1:1", "--scale", "smoke", "--results", str(tmp_path / "r"),
                  timeout=60)
    assert time.time() - t0 < 30
    assert out.returncode == 2 and "127.0.0.1:1" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_trials_that_differ_in_any_setting_read_differently(tmp_path: Path) -> None:
    """`show`'s table and the console's labels name every setting that tells two trials apart."""
    path = tmp_path / "axes.yaml"
    path.write_text('description: "axes a label must show"\n'
                    "fixed: {framework: mxnet, model: resnet8_cifar, num_gpus: 2, batch_per_gpu: 8, epochs: 1, lr: 0.1}\n"
                    "grid: {image_size: [32, 40], kvstore: [device, local], warmup_steps: [1, 2]}\n")
    trials = spec.load(str(path)).trials("full")
    axes = spec.label_axes(trials)
    labels = {t.label(axes[t.trial_id]) for t in trials}
    assert len(labels) == len(trials) == 8
    assert "mxnet resnet8_cifar gpus=2 batch=8 lr=0.1 image_size=40 warmup_steps=2 kvstore=local" in labels
    out = run_cli("show", str(path), "--scale", "full", timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [line.split()[1:] for line in out.stdout.splitlines() if any(t.trial_id in line for t in trials)]
    assert len(rows) == 8 and len({tuple(r) for r in rows}) == 8  # without the id, still all different
    assert out.stdout.splitlines()[3].split()[-3:] == ["image_size", "warmup_steps", "kvstore"]


def test_a_missing_interpreter_is_refused_before_ray_starts(tmp_path: Path) -> None:
    """`--env FRAMEWORK=PYTHON` (or a sweep file's environments:) naming no interpreter on this machine, where the
    embedded Ray would run the trials: one line naming it, not Ray's start and then 'trials fit no node' (issue 40)."""
    sweep = str(Path(__file__).parent / "sweeps" / "tiny_mxnet.yaml")
    results = tmp_path / "r"
    for given, program in [("mxnet=/nonexistent/python", "/nonexistent/python"),
                           ("mxnet=no-such-python3 -X dev", "no-such-python3")]:
        out = run_cli(sweep, "--env", "tensorflow=/nonexistent/tf", "--env", given, "--results", str(results), timeout=60)
        assert out.returncode == 2 and out.stdout == "", out.stdout[-2000:]  # nothing printed: Ray never started
        assert out.stderr.strip() == (f"error: --env {given}: no interpreter {program} on this machine, where the "
                                      "embedded Ray runs the trials")  # (tensorflow's runs no trial: not refused)
    path = tmp_path / "envs.yaml"
    path.write_text(Path(sweep).read_text() + "environments:\n  mxnet: {py_executable: /nonexistent/python}\n")
    out = run_cli(str(path), "--results", str(results), timeout=60)
    assert out.returncode == 2 and out.stderr.strip() == (
        f"error: {path}: environments: mxnet: no interpreter /nonexistent/python on this machine, where the embedded "
        "Ray runs the trials"), out.stderr
    assert not results.exists()


def test_the_smoke_scale_says_it_trains_a_stand_in_model(tmp_path: Path) -> None:
    """resnet50_lr_scaling's smoke scale trains resnet8_cifar_v2, on synthetic data without CIFAR-10: a run says both
    where it says its scale (issue 40). Each run here stops at once after, on a --results it cannot write (before Ray)."""
    (tmp_path / "a_file").write_text("")
    where = ["--scale", "smoke", "--emulate-gpus", "4", "--data-dir", str(tmp_path / "no-data"),
             "--results", str(tmp_path / "a_file" / "results")]
    out = run_cli("resnet50_lr_scaling", *where, timeout=120)
    assert out.returncode == 2 and "cannot write results there" in out.stderr, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].endswith("; scale smoke") and len(lines) == 3, out.stdout
    assert lines[1] == ("scale smoke trains resnet8_cifar_v2, a small stand-in for the sweep's full-scale "
                        "resnet50_cifar_v2: a check that the sweep runs, not the study's figures")
    assert lines[2] == (f"no CIFAR-10 under {tmp_path / 'no-data'}: the smoke scale trains on synthetic data "
                        "(accuracy columns null)")
    # A sweep whose smoke scale trains its own model, and --set model=, which trains that model at every scale: no line.
    # (tf_cnn_benchmarks: its smoke scale runs on any CPU; resnet50_precision's MXNet bf16 needs AVX-512, refused first.)
    for args in (["tf_cnn_benchmarks"], ["resnet50_lr_scaling", "--set", "model=resnet8_cifar"]):
        out = run_cli(*args, *where, timeout=120)
        assert out.returncode == 2 and "stand-in" not in out.stdout and "; scale smoke" in out.stdout, out.stdout + out.stderr


def test_the_dashboard_is_on_unless_its_option_or_the_environment_says_off(monkeypatch) -> None:
    from sweep.cli import parse
    from sweep.errors import UsageError

    monkeypatch.delenv("SWEEP_DASHBOARD", raising=False)
    assert parse(["resnet50_lr_scaling"]).dashboard == "on"
    assert parse(["resnet50_lr_scaling", "--dashboard", "off"]).dashboard == "off"
    monkeypatch.setenv("SWEEP_DASHBOARD", "off")  # the suite's own runs (tests/conftest.py)
    assert parse(["resnet50_lr_scaling"]).dashboard == "off"
    assert parse(["resnet50_lr_scaling", "--dashboard", "on"]).dashboard == "on"
    monkeypatch.setenv("SWEEP_DASHBOARD", "maybe")
    with pytest.raises(UsageError, match=r"^\$SWEEP_DASHBOARD: expected on or off, got 'maybe'$"):
        parse(["resnet50_lr_scaling"])
