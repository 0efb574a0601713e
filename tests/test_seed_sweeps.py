"""Early stopping marks the trials ASHA stopped.

The shipped studies' smoke runs take a minute or more each on two cores: they run in
benchmarks/study_smokes.py. In the suite, the README's first run (tests/test_docs.py) is one, resnet50_lr_scaling
at its smoke scale, checked with the same checks (study_smokes.problems), and the precision study's is another
(tests/test_precision.py).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from cifar_files import write_cifar10
from conftest import SWEEPS, run_cli

from sweep import store


@pytest.mark.slow
def test_early_stopping_marks_stopped_trials(tmp_path: Path, shared_ray: list[str]) -> None:
    data = write_cifar10(tmp_path / "data", train_per_file=200, test=200)
    results = tmp_path / "results"
    out = run_cli(str(SWEEPS / "early_stop.yaml"), "--results", str(results), "--data-dir", str(data),
                  "--max-concurrent", "4", *shared_ray, timeout=600)  # the session's Ray: ASHA is the subject
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = pd.read_parquet(store.run_dirs(results, "early_stop")[-1] / "trials")
    assert set(summary.status) <= {"completed", "stopped_early"}
    stopped = summary[summary.status == "stopped_early"]
    assert len(stopped) >= 1, summary[["lr", "status", "epochs_done", "best_val_acc"]]
    assert (stopped.epochs_done < 4).all()
    assert (summary[summary.status == "completed"].epochs_done == 4).all()
