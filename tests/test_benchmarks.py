"""The benchmark scripts (benchmarks/): their helpers agree with the engine; each script starts.

The benchmarks themselves take minutes and are run by hand (benchmarks/README.md); these checks
take seconds.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import _common  # noqa: E402
from sweep import spec  # noqa: E402
from sweep.schema import Status  # noqa: E402
from sweep.store import summarize  # noqa: E402
from trainables.config import TrialConfig  # noqa: E402


def test_trial_steady_is_the_summary_rows_figure() -> None:
    epochs = [
        {"steady_images_per_sec": 100.0, "steady_steps": 30, "epoch_time_s": 2.0, "val_acc": None,
         "peak_device_mem_mib": None, "peak_host_rss_mib": 1.0, "train_acc": None},
        {"steady_images_per_sec": 130.0, "steady_steps": 40, "epoch_time_s": 1.5, "val_acc": None,
         "peak_device_mem_mib": None, "peak_host_rss_mib": 1.0, "train_acc": None},
    ]
    config = TrialConfig("mxnet", "resnet8_cifar", num_gpus=1, batch_per_gpu=64, epochs=2, lr=0.1)
    summary = summarize("t", config, epochs, Status.COMPLETED, {})
    assert _common.trial_steady(epochs) == pytest.approx(summary["steady_images_per_sec"])


def test_spec_settings_give_the_same_trial() -> None:
    """A resolved trial written back as a one-trial sweep file is the same trial (same id)."""
    for item in spec.list_sweeps():
        sweep = spec.load(item.name)
        for trial in sweep.trials("smoke")[:3]:
            text = _common.sweep_yaml("one", _common.spec_settings(trial))
            again = spec.parse(text, Path("one.yaml")).trials("full")
            assert [t.trial_id for t in again] == [trial.trial_id]


def test_packing_benchmark_trials_are_engine_trials() -> None:
    """Its trials get the engine's resource request and order, as a sweep's would."""
    import packing_makespan
    from sweep import packing
    from sweep.runner import trial_resources

    trials, seconds = packing_makespan.make_trials(1.0)
    assert [trial_resources({"trial": t.to_dict()}).bundles for t in trials[:1]] == [[{"CPU": 1, "GPU": 1}]]
    ordered, _, makespan = packing.order(trials, seconds, [8, 8], [64, 64])
    assert makespan < packing.simulate(trials, seconds, [8, 8], [64, 64])


@pytest.mark.parametrize("script", ["engine_vs_raw.py", "yardsticks.py", "store_speed.py", "packing_makespan.py",
                                    "estimates.py", "soak.py", "gpu_yardsticks.py", "learnability.py",
                                    "cifar10_conv_collapse.py", "input_pipeline.py"])
def test_script_help(script: str) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage" in proc.stdout


def test_gpu_yardsticks_reads_tf_cnn_benchmarks_closing_figure() -> None:
    import gpu_yardsticks

    log = (ROOT / "tests/logs/tf_cnn_benchmarks_cpu.log").read_text()  # a real run's output
    assert gpu_yardsticks.parse_total_images_per_sec(log) == 250.34  # not a per-step "images/sec" line
    assert gpu_yardsticks.parse_total_images_per_sec("Running warm up\nnan loss") is None
    cells = gpu_yardsticks.grid([64, 256], list(gpu_yardsticks.CELLS))
    assert [c.label for c in cells][:2] == ["b64 fp32", "b64 fp16"] and len(cells) == 8
    assert gpu_yardsticks.theirs_command(cells[3], 20, 100)[-2:] == ["--use_fp16", "--xla"]


def test_gpu_yardsticks_refuses_without_a_gpu_in_one_line(tmp_path: Path) -> None:
    from trainables.environment import real_gpu_count

    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_yardsticks.py"), "--tf-benchmarks",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    if real_gpu_count() == 0:
        assert "no GPU here" in proc.stderr


@pytest.mark.slow
def test_gpu_yardsticks_engine_side_on_emulated_devices(tmp_path: Path) -> None:
    """Our half of the grid through `python -m sweep` (real Ray, real Parquet), shrunk to run on a CPU."""
    import gpu_yardsticks

    cells = gpu_yardsticks.grid([4], ["fp32", "XLA"])
    ours, command = gpu_yardsticks.run_ours(cells, 1, 2, tmp_path, extra=["--emulate-gpus", "1"],
                                            model="resnet8_cifar", image_size=32)
    assert set(ours) == {"b4 fp32", "b4 XLA"} and all(v and v > 0 for v in ours.values()), ours
    assert "-m sweep" in command
    theirs = {"b4 fp32": 250.34, "b4 XLA": None}
    text = gpu_yardsticks.table(cells, theirs, ours)
    ratio = text.splitlines()[-1]
    assert f"{ours['b4 fp32'] / 250.34:.2f}x" in ratio and ratio.endswith("| - |")
