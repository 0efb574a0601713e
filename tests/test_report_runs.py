"""Issue 40's report fixes on runs the engine made: a precision sweep's precision table (console, report.md,
CSV), `report --against` naming the settings that differ and whether each ratio is within the runs' noise,
and the notebook run the way docs/reports.md says. The expected figures are recomputed from the Parquet rows.

The runs: tests/sweeps/report_precision.yaml (7 PyTorch trials, 2 of them on 2 GPUs), conftest's engine_runs
(tiny_mxnet twice, shared with other tests) and one more tiny_mxnet run at another batch.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from conftest import ROOT, SWEEPS, TINY, run_cli

from sweep import store
from trainables.config import PRECISIONS

pytestmark = pytest.mark.slow  # engine runs: about a minute each on an idle two-core machine


@pytest.fixture(scope="module")
def precision_run(tmp_path_factory: pytest.TempPathFactory, shared_ray: list[str]) -> Path:
    results = tmp_path_factory.mktemp("precision") / "results"
    out = run_cli(str(SWEEPS / "report_precision.yaml"), "--results", str(results), *shared_ray, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return store.run_dirs(results, "report_precision")[-1]


def test_a_precision_sweep_prints_and_writes_its_precision_table(precision_run: Path) -> None:
    out = run_cli("report", str(precision_run), timeout=120)
    assert out.returncode == 0, out.stderr
    title = "Throughput by precision and compiler per GPU count, and each over fp32 (tf32 where a row has no fp32)"
    printed = out.stdout.split(title)
    assert len(printed) == 2, out.stdout  # on the console, as the throughput table is
    for batch in (2, 4):
        assert f"pytorch resnet8_cifar b{batch}/GPU synthetic" in printed[1]
    assert f"### {title}" in (precision_run / "report" / "report.md").read_text()

    table = pd.read_csv(precision_run / "report" / "precision.csv", index_col=[0, 1])
    assert list(table.columns) == ["fp32", "tf32", "bf16", "tf32 / fp32", "bf16 / fp32", "bf16 / tf32"]
    trials = pd.read_parquet(precision_run / "trials")
    assert set(trials.status) == {"completed"} and len(trials) == 7
    for (batch, gpus), rows in trials.groupby(["batch_per_gpu", "num_gpus"]):
        rate = rows.set_index("precision").steady_images_per_sec
        row = table.loc[(f"pytorch resnet8_cifar b{batch}/GPU synthetic", gpus)]
        assert float(row["tf32"]) == pytest.approx(rate["tf32"]) and float(row["bf16"]) == pytest.approx(rate["bf16"])
        base = "fp32" if "fp32" in rate else "tf32"  # fp32 ran at batch 2 on 1 GPU only
        assert float(row[f"bf16 / {base}"]) == pytest.approx(rate["bf16"] / rate[base])
        other = {"fp32": "tf32", "tf32": "fp32"}[base]
        assert row[f"bf16 / {other}"] == "-"

    # One column order in every group of the throughput table: fp32, tf32, bf16 within each batch.
    throughput = pd.read_csv(precision_run / "report" / "throughput.csv", index_col=[0, 1])
    for batch in (2, 4):
        shown = [c.split("precision=")[1] for c in throughput.columns if f" b{batch}/GPU " in c]
        assert shown == sorted(shown, key=PRECISIONS.index) and len(shown) == (3 if batch == 2 else 2), shown


@pytest.fixture(scope="module")
def batch_16_run(tmp_path_factory: pytest.TempPathFactory, shared_ray: list[str]) -> Path:
    """tiny_mxnet as conftest's second engine run made it (four emulated GPUs, the smoke scale), but for
    `--set batch_per_gpu=16`, on the session's shared Ray."""
    results = tmp_path_factory.mktemp("batch-16") / "results"
    out = run_cli(TINY, "--set", "epochs=1", "--set", "batch_per_gpu=16", "--results", str(results), *shared_ray,
                  timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return store.run_dirs(results, "tiny_mxnet")[-1]


def test_against_lists_the_settings_that_differ(engine_runs, batch_16_run: Path, tmp_path: Path) -> None:
    out = run_cli("report", str(engine_runs.run_dir(1)), "--against", str(batch_16_run), "--out", str(tmp_path),
                  timeout=120)
    assert out.returncode == 0, out.stderr
    expected = ["--set (run.json): A batch_per_gpu=8 epochs=1 -> B batch_per_gpu=16 epochs=1",
                "batch_per_gpu (trial rows): A 8 -> B 16"]
    md = (tmp_path / "compare.md").read_text()
    settings = md.split("## What differs in the settings")[1].split("##")[0]
    for line in expected:
        assert f"- {line}" in settings, settings
        assert f"  {line}" in out.stdout, out.stdout  # on the console too
    assert settings.count("\n- ") == 2, settings  # nothing else: same sweep file, scale, data


def test_against_says_whether_each_ratio_is_within_the_runs_noise(engine_runs, tmp_path: Path) -> None:
    """The 1-GPU trial ran in both runs with the same settings: its images/s ratio is within noise where the
    two runs' 95% intervals overlap. Each trial ran one epoch, so its stderr is its epoch row's."""
    a, b = engine_runs.run_dir(0), engine_runs.run_dir(1)
    out = run_cli("report", str(a), "--against", str(b), "--out", str(tmp_path), timeout=120)
    assert out.returncode == 0, out.stderr
    (rate_a, se_a), (rate_b, se_b) = (_one_gpu_epoch(run) for run in (a, b))
    within = abs(rate_b - rate_a) <= 1.96 * (se_a + se_b)
    verdict = "within noise" if within else "beyond noise"
    noise = pd.read_csv(tmp_path / "compare_throughput_noise.csv", index_col=[0, 1])
    (column,) = noise.columns
    assert noise.loc[("images/s", 1), column] == verdict
    assert noise.loc[("speedup", 1), column] == "within noise"  # 1 / 1, exactly
    ratios = pd.read_csv(tmp_path / "compare_throughput.csv", index_col=[0, 1])
    assert float(ratios.loc[("images/s", 1), column]) == pytest.approx(rate_b / rate_a)
    assert re.search(rf"images/s\s+1\s+{rate_b / rate_a:.2f}x {verdict}", out.stdout), out.stdout
    assert "within noise: the two runs' 95% intervals" in (tmp_path / "compare.md").read_text()


def _one_gpu_epoch(run: Path) -> tuple[float, float]:
    epochs = pd.read_parquet(run / "epochs")
    (row,) = epochs[(epochs.num_gpus == 1) & (epochs.status == "completed")].itertuples()
    return row.steady_images_per_sec, row.steady_images_per_sec_stderr


def test_the_notebook_runs_with_the_command_the_docs_give(engine_runs, tmp_path: Path) -> None:
    """docs/reports.md's command for the notebook, run as written from a checkout's root (`.venv/bin/` is this
    interpreter's folder). The notebook reads the latest run of its SWEEP, resnet50_lr_scaling: an engine-made
    tiny_mxnet run stands in for one under that name."""
    text = (ROOT / "docs" / "reports.md").read_text()
    (line,) = [line for line in text.splitlines() if line.startswith(".venv/bin/jupyter execute ")]
    run = engine_runs.run_dir(1)
    shutil.copytree(run, tmp_path / "results" / "resnet50_lr_scaling" / run.name)
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / "analysis.ipynb", tmp_path / "notebooks")
    command = [str(Path(sys.executable).parent / "jupyter"), *shlex.split(line)[1:]]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    written = nbformat.read(tmp_path / "notebooks" / "analysis_out.ipynb", as_version=4)
    outputs = "".join(str(o) for cell in written.cells if cell.cell_type == "code" for o in cell.outputs)
    assert f"tiny_mxnet/{run.name}" in outputs and "Throughput, speedup and efficiency" in outputs
