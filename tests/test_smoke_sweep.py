"""The walking skeleton end to end: `python -m sweep resnet50_lr_scaling` on an embedded Ray."""
from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli_trials_at_once

# An embedded Ray and four trials, two at a time (~35 CPU-s): heavy (issue 46). CI runs the whole smoke scale as the
# README's first run (tests/test_docs.py: every trial completed, on emulated GPUs), the fallback to synthetic data
# without CIFAR-10 (tests/test_report.py), and the GPUs of trials at once, never shared (tests/test_cluster.py).
pytestmark = [pytest.mark.slow, pytest.mark.heavy]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    tmp = tmp_path_factory.mktemp("smoke")
    # Four of the smoke scale's trials: 1 GPU, batch 16 (the whole scale runs in the README's first run,
    # tests/test_docs.py, on CIFAR-10 data), two at a time on the 2 emulated GPUs (for certain: the first waits
    # for the second's start).
    out = run_cli_trials_at_once("resnet50_lr_scaling", "--set", "num_gpus=1", "--set", "batch_per_gpu=16", "--results",
                                 str(tmp / "results"), "--data-dir", str(tmp / "no-data"), embedded=True)
    runs = sorted((tmp / "results" / "resnet50_lr_scaling").iterdir())
    return out, runs[-1] if runs else None


def test_smoke_sweep_completes_every_trial(smoke_run) -> None:
    out, run_dir = smoke_run
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "no GPU found: emulating" in out.stdout
    assert "synthetic data" in out.stdout
    assert "scale smoke trains resnet8_cifar_v2, a small stand-in for the sweep's full-scale resnet50_cifar_v2" in out.stdout
    # Those trials, written out: 2 frameworks x lr 0.025 (the linear rule's 0.05 x 16 / 128) and the include entry's
    # fixed lr 0.4, its batch 32 set to 16.
    expected = sorted((f, b, lr) for f in ("mxnet", "tensorflow") for b, lr in ((16, 0.025), (16, 0.4)))
    epochs = pd.read_parquet(run_dir / "epochs")
    summary = pd.read_parquet(run_dir / "trials")
    assert sorted(zip(summary.framework, summary.batch_per_gpu, summary.lr)) == expected
    assert set(summary.status) == {"completed"} and set(summary.num_gpus) == {1}
    for trial_id, rows in epochs.groupby("trial_id"):
        assert sorted(rows.epoch) == [0, 1], trial_id  # each epoch once
    assert set(epochs.trial_id) == set(summary.trial_id)
    assert (epochs.images_per_sec > 0).all()
    assert set(epochs.device_kind) == {"cpu-emulated"}
    assert set(epochs.data_kind) == {"synthetic"}
    assert epochs.val_acc.isna().all() and epochs.train_acc.isna().all()  # never invented on synthetic data
    required = {"sweep", "run_id", "trial_id", "framework", "model", "num_gpus", "batch_per_gpu", "global_batch",
                "lr", "epoch", "images_per_sec", "epoch_time_s", "train_loss", "train_acc", "val_acc",
                "device_kind", "data_kind", "status"}
    assert required <= set(epochs.columns)
    assert (epochs.global_batch == epochs.batch_per_gpu * epochs.num_gpus).all()


def test_concurrent_trials_got_distinct_devices(smoke_run) -> None:
    _, run_dir = smoke_run
    summary = pd.read_parquet(run_dir / "trials").set_index("trial_id")
    epochs = pd.read_parquet(run_dir / "epochs")
    ids = epochs.groupby("trial_id").ray_gpu_ids.first().map(lambda s: set(s.split(",")))
    for trial, gpus in ids.items():  # each trial got as many device ids as it asked for
        assert len(gpus) == summary.loc[trial, "num_gpus"]
    overlapping = 0
    for a, b in itertools.combinations(summary.index, 2):
        if summary.loc[a, "started_at"] < summary.loc[b, "ended_at"] and summary.loc[b, "started_at"] < summary.loc[a, "ended_at"]:
            overlapping += 1
            assert not ids[a] & ids[b], f"trials {a} and {b} ran at the same time on GPUs {ids[a] & ids[b]}"
    assert overlapping, "no two trials ran at the same time: the device check saw nothing"
