"""Failures are results: a trial that raises, runs out of memory or diverges is a row, and the sweep goes on."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import SWEEPS, run_cli

from sweep import store
from sweep.runner import _failure_status


@pytest.mark.slow
def test_failed_trials_are_rows_and_the_sweep_goes_on(tmp_path: Path) -> None:
    results = tmp_path / "results"
    out = run_cli(str(SWEEPS / "failures.yaml"), "--results", str(results), timeout=400)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]  # some trials failed
    assert "Traceback" not in out.stdout
    run_dir = store.run_dirs(results, "failures")[-1]
    summary = pd.read_parquet(run_dir / "trials").set_index(["framework", "model", "batch_per_gpu", "lr"])
    assert len(summary) == 4
    healthy = summary.loc[("mxnet", "resnet8_cifar", 8, 0.05)]
    assert healthy.status == "completed" and healthy.epochs_done == 2
    raised = summary.loc[("mxnet", "inception_v3", 8, 0.05)]
    assert raised.status == "failed" and raised.error_type == "ValueError" and "kernel size exceed input" in raised.error
    oom = summary.loc[("tensorflow", "resnet8_cifar", 65536, 0.05)]
    assert oom.status == "oom" and oom.error_type == "ResourceExhaustedError" and "OOM" in oom.error
    diverged = summary.loc[("mxnet", "resnet8_cifar", 8, 1e8)]
    assert diverged.status == "diverged" and diverged.error_type is None and "not finite" in diverged.error
    epochs = pd.read_parquet(run_dir / "epochs")
    div_rows = epochs[epochs.trial_id == diverged.trial_id]
    assert len(div_rows) >= 1 and div_rows.status.eq("diverged").all()  # the rows it has stay
    for line in ("failed (", "OOM (ResourceExhaustedError", "diverged"):
        assert line in out.stdout


@pytest.mark.parametrize("error_type,message,expected", [
    ("ResourceExhaustedError", "OOM when allocating tensor with shape[64,256,56,56]", "oom"),
    ("MXNetError", "[12:00:00] src/storage/pooled_storage_manager.h:161: cudaMalloc retry failed: out of memory", "oom"),
    ("MemoryError", "Unable to allocate 72.8 TiB for an array", "oom"),
    ("OutOfMemoryError", "Task was killed due to the node running low on memory.", "oom"),
    ("ValueError", "Computed output size would be zero or negative", "failed"),
    ("RayActorError", "The actor died unexpectedly before finishing this task.", "failed"),
])
def test_failure_classification(error_type: str, message: str, expected: str) -> None:
    assert _failure_status(error_type, message) == expected
