"""The CLI's read-only commands and its one-line errors."""
from __future__ import annotations

from pathlib import Path

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
