"""Honesty of the measuring instrument: learning, determinism, warm-up, checkpoints, throughput."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cifar_files import write_cifar10
from conftest import ROOT

from trainables.config import TrialConfig
from trainables.loop import Devices, run_trial

# TensorFlow's cases take 8-16 s each (its import and graph building): the full suite runs them, the fast lane not.
FRAMEWORKS = ("mxnet", pytest.param("tensorflow", marks=pytest.mark.slow))


@pytest.fixture(scope="module")
def cifar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("cifar"), train_per_file=400, test=500)


def run_local(config: dict[str, Any], *args: str) -> list[dict[str, Any]]:
    """One trial's loop in its own process (frameworks never share one), without Ray."""
    out = subprocess.run([sys.executable, "-m", "trainables.local", json.dumps(config), *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow  # 3 epochs of 2,000 real images: 40-80 s in MXNet, as long again in TensorFlow
@pytest.mark.parametrize("framework", ("mxnet", "tensorflow"))
def test_learns_real_cifar_format_data_well_above_chance(framework: str, cifar: Path) -> None:
    rows = run_local({"framework": framework, "model": "resnet8_cifar", "num_gpus": 2, "batch_per_gpu": 32,
                      "epochs": 3, "lr": 0.05, "lr_decay_epochs": [2]}, "--data-dir", str(cifar))
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    assert rows[-1]["data_kind"] == "real" and rows[-1]["device_kind"] == "cpu-emulated"
    assert rows[-1]["val_acc"] > 0.8, [r["val_acc"] for r in rows]
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    assert [r["lr_applied"] for r in rows] == pytest.approx([0.05, 0.05, 0.005])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_same_seed_same_first_epoch_and_restart_continues(framework: str, cifar: Path, tmp_path: Path) -> None:
    config = {"framework": framework, "model": "resnet8_cifar", "num_gpus": 1, "batch_per_gpu": 32,
              "epochs": 2, "steps_per_epoch": 6, "val_examples": 128, "lr": 0.05}
    full = run_local(config, "--data-dir", str(cifar))
    # Same trial again, stopped after its first epoch, then restarted from that checkpoint.
    first = run_local({**config, "epochs": 1}, "--data-dir", str(cifar), "--checkpoint-dir", str(tmp_path / "ckpt"))
    resumed = run_local(config, "--data-dir", str(cifar), "--restore", str(tmp_path / "ckpt"))
    assert first[0]["train_loss"] == pytest.approx(full[0]["train_loss"], rel=1e-3)
    assert [r["epoch"] for r in resumed] == [1]  # continues at the next epoch, not from scratch
    assert resumed[0]["train_loss"] == pytest.approx(full[1]["train_loss"], rel=1e-2)
    assert resumed[0]["val_acc"] == pytest.approx(full[1]["val_acc"], abs=0.02)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_checkpoint_of_another_model_is_refused(framework: str, tmp_path: Path) -> None:
    """Restoring weights into a network they were not saved from fails loudly, never half-loaded."""
    config = {"framework": framework, "model": "resnet8_cifar", "num_gpus": 1, "batch_per_gpu": 8, "epochs": 1,
              "steps_per_epoch": 2, "warmup_steps": 1, "lr": 0.05, "data": "synthetic"}
    run_local(config, "--checkpoint-dir", str(tmp_path / "ckpt"))
    other = {**config, "model": "resnet8_cifar_v2", "epochs": 2}
    out = subprocess.run([sys.executable, "-m", "trainables.local", json.dumps(other), "--restore", str(tmp_path / "ckpt")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "does not fit this model" in out.stderr if framework == "tensorflow" else "Parameter" in out.stderr
    assert '"epoch"' not in out.stdout  # no epoch trained on a half-restored model


class Clock:
    """The loop's clock, moved by the backend's steps alone: what the test measures is what it set."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


class SlowStartBackend:
    """A framework-free backend whose first steps are slow, as a first step's graph compile is.
    Each step moves `clock` on by its duration instead of sleeping."""

    layout = "NHWC"
    framework_version = "fake 0"
    framework_cuda_version = None
    framework_cudnn_version = None
    put_ahead = False

    def __init__(self, slow_steps: int, slow_s: float, fast_s: float, clock: Clock | None = None) -> None:
        self.slow_steps, self.slow_s, self.fast_s, self.steps = slow_steps, slow_s, fast_s, 0
        self.clock = clock or Clock()

    def param_count(self) -> int:
        return 1

    def put(self, x: np.ndarray, y: np.ndarray) -> Any:
        return x, y

    def synthetic(self) -> Any:
        return None, None

    def train_step(self, batch: Any, lr: float) -> tuple[float, int, int]:
        self.steps += 1
        self.clock.now += self.slow_s if self.steps <= self.slow_steps else self.fast_s
        return 1.0, 0, 10  # the tests' batch of 10

    def eval_step(self, batch: Any) -> tuple[int, int]:
        return 0, len(batch[0])

    def device_peak_mib(self) -> None:
        return None

    def precision_columns(self) -> dict[str, Any]:
        return {"layout": self.layout, "tf32_allowed": False, "loss_scale": None}

    def compute_dtype(self) -> str:
        return "float32"

    def save(self, path: str) -> None:
        pass

    def load(self, path: str) -> None:
        pass


def test_warmup_steps_are_not_counted_in_steady_throughput(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop and its step timer read an injected clock: the figures are exact, whatever the load."""
    import trainables.loop
    import trainables.measure

    clock = Clock()
    monkeypatch.setattr(trainables.loop, "time", clock)
    monkeypatch.setattr(trainables.measure, "time", clock)
    cfg = TrialConfig(framework="mxnet", model="resnet8_cifar", num_gpus=1, batch_per_gpu=10, epochs=2,
                      lr=0.1, data="synthetic", steps_per_epoch=8, warmup_steps=3)
    rows: list[dict[str, Any]] = []
    run_trial(cfg, Devices("cpu-emulated", 1, ("0",)), None, lambda m, c: rows.append(m),
              backend=SlowStartBackend(slow_steps=3, slow_s=0.2, fast_s=0.01, clock=clock))
    first, second = rows
    assert first["steady_steps"] == 5 and second["steady_steps"] == 8  # warm-up only at the trial's start
    assert first["steady_images_per_sec"] == pytest.approx(10 / 0.01, rel=1e-6)  # slow steps left out
    assert second["steady_images_per_sec"] == pytest.approx(10 / 0.01, rel=1e-6)
    assert first["epoch_time_s"] == pytest.approx(3 * 0.2 + 5 * 0.01)
    assert first["images_per_sec"] == pytest.approx(80 / 0.65)  # the epoch figure includes the slow steps
    assert first["steady_images_per_sec_stderr"] is not None and first["steady_jitter"] is not None


def test_nan_loss_ends_the_trial_as_diverged(tmp_path: Path) -> None:
    """A real MXNet trial at lr 1e8 (as tests/sweeps/failures.yaml's diverging trial): its loss goes to NaN, the
    trial stops in that epoch, and the checkpoint kept is the last healthy epoch's, never the broken model."""
    config = {"framework": "mxnet", "model": "resnet8_cifar", "num_gpus": 1, "batch_per_gpu": 8, "epochs": 6,
              "steps_per_epoch": 3, "warmup_steps": 0, "lr": 1e8, "data": "synthetic"}
    ckpt = tmp_path / "ckpt"
    rows = run_local(config, "--checkpoint-dir", str(ckpt))
    flags = [r["diverged"] for r in rows]
    assert flags[-1] and not any(flags[:-1]) and len(rows) < config["epochs"], flags  # stops in the epoch it diverged
    loss = rows[-1]["train_loss"]
    assert loss is None or not math.isfinite(loss), loss
    healthy = len(rows) - 1
    if healthy:
        assert json.loads((ckpt / "checkpoint.json").read_text())["epoch"] == healthy - 1
    else:
        assert not ckpt.exists()  # diverged in its first epoch: nothing was ever checkpointed
