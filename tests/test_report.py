"""`python -m sweep report`: its numbers recomputed from the Parquet rows, its files, its errors, the notebook.

Most runs here are written through the store's own RunStore (real Parquet, known numbers, every status);
one is a real tiny sweep run through the CLI.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import matplotlib.image
import pandas as pd
import pytest
from conftest import ROOT, run_cli
from PIL import Image

from sweep import report, store
from sweep.schema import Status
from trainables.config import TrialConfig

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
USABLE = ("completed", "stopped_early")
SPEED_KEY = ["framework", "model", "batch_per_gpu", "data_kind"]
ENV = {"hostname": "testhost", "device_kind": "gpu", "gpu_model": "Tesla K80", "gpu_count": 8,
       "gpu_driver": "375.66", "cuda_version": "8.0", "cpu_model": "Xeon E5-2686", "cpu_count": 32,
       "python_version": "3.11.7", "numpy_version": "1.26.4", "os": "Linux 5.4", "ray_version": "2.60.0",
       "engine_version": "0.1.0", "git_commit": "abc123"}


# --- runs written through the store ---------------------------------------------------------------

def trial(framework: str, gpus: int, batch: int = 32, *, rate: float | None = None, status: str = "completed",
          accs: list[float | None] | None = None, times: list[float] | None = None, data_kind: str = "real",
          lr: float | None = None, model: str = "resnet8_cifar") -> dict[str, Any]:
    """One trial to write: config, final status, and its epochs (3 by default, none for an infeasible one)."""
    if accs is None:
        accs = [] if status == "infeasible" else [None] * 3
    times = times if times is not None else [10.0] * len(accs)
    return {"framework": framework, "model": model, "gpus": gpus, "batch": batch, "rate": rate, "status": status,
            "accs": accs, "times": times, "data_kind": data_kind, "lr": lr}


def write_run(results: Path, sweep: str, run_id: str, trials: list[dict[str, Any]], *, target_acc: float | None = 0.7,
              env: dict[str, Any] | None = None, rate_factor: float = 1.0) -> Path:
    """A run folder as the engine writes it: run.json, sweep.yaml, epochs/ and trials/ through RunStore."""
    env = {**ENV, **(env or {})}
    configs = []
    for t in trials:
        values = {"framework": t["framework"], "model": t["model"], "num_gpus": t["gpus"], "batch_per_gpu": t["batch"],
                  "epochs": 3, "seed": 0, "data": "synthetic" if t["data_kind"] == "synthetic" else "cifar10"}
        if t["lr"] is None:
            values.update(lr=0.05 * t["batch"] * t["gpus"] / 32, lr_rule="linear", base_lr=0.05, base_batch=32)
        else:
            values.update(lr=t["lr"], lr_rule="fixed")
        configs.append(TrialConfig(**values))
    meta = store.RunMeta(sweep, run_id, "full", f"{sweep}.yaml", "", None, False, [c.trial_id for c in configs],
                         [store.Session(f"python -m sweep {sweep}", 0.0, "testhost", 1, None, "0.1.0", None, "2.60.0")])
    spec_text = (f"name: {sweep}\ndescription: test\nfixed: {{framework: mxnet, model: resnet8_cifar, num_gpus: 1, "
                 f"batch_per_gpu: 8, epochs: 1, lr: 0.1}}\n" + (f"target_acc: {target_acc}\n" if target_acc else ""))
    run = store.RunStore.create(results, meta, spec_text)
    base = {**env, "sweep": sweep, "run_id": run_id, "scale": "full"}
    for t, config in zip(trials, configs):
        tid = config.trial_id
        for epoch, (acc, seconds) in enumerate(zip(t["accs"], t["times"])):
            rate = None if t["rate"] is None else t["rate"] * rate_factor
            run.write_epoch({
                **base, **store.config_columns(config), "trial_id": tid, "epoch": epoch, "status": "running",
                "data_kind": t["data_kind"],
                "framework_version": f"{t['framework']} 1.0", "epoch_time_s": seconds,
                "images_per_sec": (rate or 50.0) * 0.9, "steady_images_per_sec": rate,
                "steady_steps": 10 if rate else 0, "train_acc": None if acc is None else acc + 0.1, "val_acc": acc,
                "peak_device_mem_mib": [100.0 * (epoch + 1)] * config.num_gpus, "peak_host_rss_mib": 900.0 + epoch,
            })
        rows = run.trial_epochs(tid)
        summary = store.summarize(tid, config, rows, Status(t["status"]), base)
        if t["status"] not in USABLE:
            summary.update(error_type="RuntimeError", error=f"boom ({t['status']})")
        run.finish_trial(summary, rows)
    return run.dir


KNOWN = [
    trial("mxnet", 1, rate=100.0, accs=[0.40, 0.65, 0.72], times=[12.0, 10.0, 10.0]),
    trial("mxnet", 2, rate=190.0, accs=[0.42, 0.71, 0.75], times=[7.0, 5.0, 5.0]),
    trial("mxnet", 2, rate=210.0, accs=[0.30, 0.50, 0.60], times=[6.0, 5.0, 5.0], lr=0.05),  # same speed cell
    trial("mxnet", 4, rate=360.0, accs=[0.35, 0.55, 0.69], times=[4.0, 3.0, 3.0]),
    trial("mxnet", 4, rate=300.0, accs=[0.1, 0.1], times=[3.0, 3.0], status="diverged", lr=3.2),
    trial("mxnet", 8, status="infeasible"),
    trial("mxnet", 1, 64, rate=110.0, accs=[0.38, 0.60, 0.70]),
    trial("mxnet", 2, 64, rate=200.0, accs=[0.37, 0.58, 0.66]),
    trial("mxnet", 1, rate=105.0, data_kind="synthetic"),
    trial("mxnet", 2, rate=200.0, data_kind="synthetic"),
    trial("mxnet", 1, rate=60.0, accs=[0.3, 0.5, 0.6], model="resnet20_cifar"),
    trial("tensorflow", 1, rate=80.0, accs=[0.3], times=[20.0], status="failed"),  # no usable baseline
    trial("tensorflow", 2, rate=150.0, accs=[0.41, 0.66, 0.74]),
    trial("tensorflow", 4, status="oom", accs=[]),  # out of memory at the first step: no epoch
]


@pytest.fixture(scope="module")
def known_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_run(tmp_path_factory.mktemp("known") / "results", "known", "20260101-000000-aaaa", KNOWN)


@pytest.fixture(scope="module")
def known_report(known_run: Path) -> tuple[subprocess.CompletedProcess, Path]:
    out = run_cli("report", str(known_run), timeout=120)
    assert out.returncode == 0, out.stderr
    return out, known_run / "report"


# --- numbers recomputed from the Parquet rows ---------------------------------------------------------

def expected_throughput(run_dir: Path) -> pd.DataFrame:
    """images/s per (framework, model, batch, data, GPUs), speedup and efficiency, from trials/ alone."""
    trials = pd.read_parquet(run_dir / "trials")
    usable = trials[trials.status.isin(USABLE) & trials.steady_images_per_sec.notna()]
    rates = usable.groupby([*SPEED_KEY, "num_gpus"]).steady_images_per_sec.mean().rename("images_per_sec").reset_index()
    base = rates[rates.num_gpus == 1].set_index(SPEED_KEY).images_per_sec.rename("base")
    rates = rates.join(base, on=SPEED_KEY)
    rates["speedup"] = rates.images_per_sec / rates.base
    rates["efficiency"] = rates.speedup / rates.num_gpus
    rates["label"] = [f"{r.framework} {r.model} b{r.batch_per_gpu}/GPU {r.data_kind}" for r in rates.itertuples()]
    return rates


def test_throughput_table_matches_parquet_rows(known_report) -> None:
    _, out = known_report
    table = pd.read_csv(out / "throughput.csv", index_col=[0, 1])
    expected = expected_throughput(out.parent)
    assert len(expected) == 9
    for row in expected.itertuples():
        assert float(table.loc[("images/s", row.num_gpus), row.label]) == pytest.approx(row.images_per_sec)
        if math.isnan(row.base):
            continue
        assert float(table.loc[("speedup", row.num_gpus), row.label]) == pytest.approx(row.speedup)
        assert float(table.loc[("efficiency", row.num_gpus), row.label]) == pytest.approx(row.efficiency)
    mx = "mxnet resnet8_cifar b32/GPU real"
    assert float(table.loc[("images/s", 2), mx]) == pytest.approx(200.0)  # mean of the two lr's
    assert float(table.loc[("speedup", 4), mx]) == pytest.approx(3.6)
    assert float(table.loc[("efficiency", 4), mx]) == pytest.approx(0.9)
    assert table.loc[("images/s", 8), mx] == "infeasible"


def test_missing_baseline_is_said_not_invented(known_report) -> None:
    printed, out = known_report
    table = pd.read_csv(out / "throughput.csv", index_col=[0, 1])
    tf = "tensorflow resnet8_cifar b32/GPU real"
    assert table.loc[("images/s", 1), tf] == "failed"
    assert float(table.loc[("images/s", 2), tf]) == pytest.approx(150.0)
    assert table.loc[("speedup", 2), tf] == "n/a (1-GPU trial failed)"
    assert table.loc[("efficiency", 2), tf] == "n/a (1-GPU trial failed)"
    assert table.loc[("images/s", 4), tf] == "OOM"
    assert "1-GPU trial failed, so no speedup or efficiency" in printed.stdout
    assert "no speedup or efficiency" in (out / "report.md").read_text()


def test_ratio_tables_match_parquet_rows(known_report) -> None:
    _, out = known_report
    expected = expected_throughput(out.parent).set_index([*SPEED_KEY, "num_gpus"]).images_per_sec
    batch = pd.read_csv(out / "ratio_batch_per_gpu_64_vs_32.csv", index_col=0)
    for gpus in (1, 2):
        want = expected[("mxnet", "resnet8_cifar", 64, "real", gpus)] / expected[("mxnet", "resnet8_cifar", 32, "real", gpus)]
        assert batch.loc[gpus, "mxnet resnet8_cifar real"] == pytest.approx(want)
    framework = pd.read_csv(out / "ratio_framework_tensorflow_vs_mxnet.csv", index_col=0)
    assert framework.loc[2, "resnet8_cifar b32/GPU real"] == pytest.approx(150.0 / 200.0)
    model = pd.read_csv(out / "ratio_model_resnet8_cifar_vs_resnet20_cifar.csv", index_col=0)
    assert model.loc[1, "mxnet b32/GPU real"] == pytest.approx(100.0 / 60.0)
    data = pd.read_csv(out / "ratio_data_kind_synthetic_vs_real.csv", index_col=0)
    for gpus in (1, 2):
        want = expected[("mxnet", "resnet8_cifar", 32, "synthetic", gpus)] / expected[("mxnet", "resnet8_cifar", 32, "real", gpus)]
        assert data.loc[gpus, "mxnet resnet8_cifar b32/GPU"] == pytest.approx(want)
        assert data.loc[gpus, "median"] == pytest.approx(want)
    assert "Speedup from synthetic data vs. real data" in (out / "report.md").read_text()


def test_per_run_table_matches_parquet_rows(known_report) -> None:
    _, out = known_report
    table = pd.read_csv(out / "per_run.csv", index_col=[0, 1])
    epochs = pd.read_parquet(out.parent / "epochs")
    trials = pd.read_parquet(out.parent / "trials")
    group = "mxnet resnet8_cifar b32/GPU real linear lr 0.05 x batch/32"
    for gpus in (1, 2, 4):
        t = trials[(trials.framework == "mxnet") & (trials.batch_per_gpu == 32) & (trials.num_gpus == gpus)
                   & (trials.lr_rule == "linear") & (trials.model == "resnet8_cifar") & (trials.data_kind == "real")]
        assert len(t) == 1
        t = t.iloc[0]
        mine = epochs[epochs.trial_id == t.trial_id].sort_values("epoch")
        column = f"GPU ({gpus})"
        assert float(table.loc[(group, "Training time (s)"), column]) == pytest.approx(mine.epoch_time_s.sum())
        assert float(table.loc[(group, "Average time per epoch (s)"), column]) == pytest.approx(mine.epoch_time_s.mean())
        assert float(table.loc[(group, "Images processed per sec"), column]) == pytest.approx(t.steady_images_per_sec)
        assert float(table.loc[(group, "Training accuracy"), column]) == pytest.approx(mine.train_acc.iloc[-1])
        assert float(table.loc[(group, "Test accuracy"), column]) == pytest.approx(mine.val_acc.iloc[-1])
        assert float(table.loc[(group, "Maximum device memory, all GPUs (MiB)"), column]) == pytest.approx(300.0 * gpus)
    assert table.loc[(group, "Images processed per sec"), "GPU (8)"] == "infeasible"


def test_lr_table_names_each_failure(known_report) -> None:
    _, out = known_report
    table = pd.read_csv(out / "lr_scaling.csv", index_col=list(range(8)))
    by_trial = table.reset_index().set_index("trial")
    trials = pd.read_parquet(out.parent / "trials").set_index("trial_id")
    assert set(by_trial.index) == set(trials.index)
    labels = {"diverged": "diverged", "infeasible": "infeasible", "oom": "OOM", "failed": "failed"}
    for tid, t in trials.iterrows():
        row = by_trial.loc[tid]
        assert row["batch size"] == f"{t.batch_per_gpu}x{t.num_gpus}={t.batch_per_gpu * t.num_gpus}"
        if t.status == "completed":
            assert float(row["Accuracy (validation)"]) == pytest.approx(t.final_val_acc, nan_ok=True)
            assert float(row["Throughput (samples/s)"]) == pytest.approx(t.steady_images_per_sec)
        else:
            assert row["Accuracy (validation)"] == labels[t.status]
            assert row["Status"] == labels[t.status]
    md = (out / "report.md").read_text()
    assert "Trials that did not complete" in md and "RuntimeError: boom (oom)" in md


def test_time_to_accuracy_matches_epoch_rows(known_report) -> None:
    _, out = known_report
    table = pd.read_csv(out / "time_to_accuracy.csv", index_col=[0, 1, 2]).reset_index().set_index("trial")
    epochs = pd.read_parquet(out.parent / "epochs")
    trials = pd.read_parquet(out.parent / "trials").set_index("trial_id")
    reached = 0
    for tid, rows in epochs.groupby("trial_id"):
        rows = rows.sort_values("epoch")
        hit = rows[rows.val_acc >= 0.7]
        if rows.val_acc.isna().all():
            continue
        if hit.empty:
            assert table.loc[tid, "Wall time (s)"] == "not reached"
            continue
        reached += 1
        wall = rows[rows.epoch <= hit.epoch.iloc[0]].epoch_time_s.sum()
        assert float(table.loc[tid, "Wall time (s)"]) == pytest.approx(wall)
        assert float(table.loc[tid, "GPU-hours"]) == pytest.approx(wall * trials.loc[tid, "num_gpus"] / 3600)
        assert int(float(table.loc[tid, "Epochs to target"])) == hit.epoch.iloc[0] + 1
    assert reached == 4


def test_target_acc_option_overrides_the_sweep_file(known_run: Path, tmp_path: Path) -> None:
    out = run_cli("report", str(known_run), "--target-acc", "0.5", "--out", str(tmp_path / "r"), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Time to accuracy 0.5" in (tmp_path / "r" / "report.md").read_text()


def test_plots_are_valid_png_files(known_report) -> None:
    printed, out = known_report
    for name in ("throughput_vs_gpus", "efficiency_vs_gpus", "val_acc_vs_lr", "learning_curves"):
        path = out / f"{name}.png"
        assert path.read_bytes()[:8] == PNG_SIGNATURE, name
        with Image.open(path) as image:
            image.verify()
        assert matplotlib.image.imread(path).shape[0] > 100
        assert f"({name}.png)" in (out / "report.md").read_text()
    assert "not a speed result" not in printed.stdout  # real GPUs here


def test_each_table_names_its_source(known_report) -> None:
    _, out = known_report
    md = (out / "report.md").read_text()
    tables = md.count("\n### ")
    assert tables >= 8 and md.count("- Source: run known/20260101-000000-aaaa") == tables
    assert "driver 375.66" in md and "GPU Tesla K80" in md and "framework mxnet 1.0, tensorflow 1.0" in md


def test_run_without_any_1gpu_trial(tmp_path: Path) -> None:
    run = write_run(tmp_path / "results", "nobase", "20260101-000000-bbbb",
                    [trial("mxnet", 2, rate=190.0), trial("mxnet", 4, rate=360.0)], target_acc=None)
    out = run_cli("report", "nobase", "--results", str(tmp_path / "results"), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "no 1-GPU trial, so no speedup or efficiency" in out.stdout
    table = pd.read_csv(run / "report" / "throughput.csv", index_col=[0, 1])
    column = "mxnet resnet8_cifar b32/GPU real"
    assert float(table.loc[("images/s", 4), column]) == pytest.approx(360.0)
    assert table.loc[("speedup", 4), column] == "n/a (no 1-GPU trial)"
    assert "Not computed: no target" in (run / "report" / "report.md").read_text()


def test_against_gives_b_over_a_and_what_changed(known_run: Path, tmp_path: Path) -> None:
    other = write_run(tmp_path / "results", "known", "20260102-000000-cccc", KNOWN,
                      env={"gpu_driver": "384.81"}, rate_factor=1.25)
    out = run_cli("report", str(known_run), "--against", str(other), "--out", str(tmp_path / "cmp"), timeout=120)
    assert out.returncode == 0, out.stderr
    table = pd.read_csv(tmp_path / "cmp" / "compare_throughput.csv", index_col=[0, 1])
    assert float(table.loc[("images/s", 2), "mxnet resnet8_cifar b32/GPU real"]) == pytest.approx(1.25)
    assert float(table.loc[("speedup", 2), "mxnet resnet8_cifar b32/GPU real"]) == pytest.approx(1.0)
    assert "1.25x" in out.stdout
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "driver (gpu_driver): A 375.66 -> B 384.81" in md
    lr = pd.read_csv(tmp_path / "cmp" / "compare_lr_scaling.csv", index_col=list(range(8)))
    assert lr["Throughput (samples/s)"].astype(str).str.startswith("1.25").sum() >= 9


# --- bad input: exit 2, one line -----------------------------------------------------------------------

def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    results = tmp_path / "results"
    empty = store.RunStore.create(results, store.RunMeta("empty", "20260101-000000-dddd", "full", "empty.yaml", "", None,
                                                         False, []), "name: empty\n").dir
    broken = write_run(results, "broken", "20260101-000000-eeee", [trial("mxnet", 1, rate=1.0)])
    next((broken / "trials").glob("*.parquet")).write_bytes(b"not parquet at all")
    known = write_run(results, "known", "20260101-000000-ffff", [trial("mxnet", 1, rate=1.0)])
    a_file = tmp_path / "a_file"
    a_file.write_text("in the way of --out")
    cases = {
        "no sweep or run id 'no_such_sweep'": ["report", "no_such_sweep", "--results", str(results)],
        "no such run folder": ["report", str(tmp_path / "missing" / "run")],
        "empty run": ["report", str(empty)],
        "not a readable Parquet file": ["report", str(broken)],
        "--target-acc": ["report", str(empty), "--target-acc", "2"],
        "cannot write the report there (a file, not a folder": ["report", str(known), "--out", str(a_file)],
        "cannot write the report there (No such file": ["report", str(known), "--out", "/proc/no/report"],
    }
    for expected, args in cases.items():
        out = run_cli(*args, timeout=120)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert expected in out.stderr and "Traceback" not in out.stderr


def test_report_imports_no_framework(known_run: Path, tmp_path: Path) -> None:
    code = ("import sys; from sweep.cli import main; "
            f"rc = main(['report', {str(known_run)!r}, '--out', {str(tmp_path)!r}]); "
            "loaded = {'mxnet', 'tensorflow'} & set(sys.modules); "
            "assert rc == 0 and not loaded, (rc, loaded)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


# --- a real tiny run through the CLI ------------------------------------------------------------------

TINY_SWEEP = """\
name: tiny_report
description: "Two GPU counts of a tiny CIFAR ResNet on synthetic data, for the report tests"
fixed:
  model: resnet8_cifar
  framework: mxnet
  data: synthetic
  batch_per_gpu: 16
  lr: 0.05
  epochs: 1
  steps_per_epoch: 3
  warmup_steps: 1
  val_examples: 64
grid:
  num_gpus: [1, 2]
"""


def test_report_on_a_real_tiny_run(tmp_path: Path) -> None:
    sweep_file = tmp_path / "tiny_report.yaml"
    sweep_file.write_text(TINY_SWEEP)
    results = tmp_path / "results"
    ran = run_cli(str(sweep_file), "--results", str(results), "--data-dir", str(tmp_path / "no-data"), timeout=300)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    out = run_cli("report", "tiny_report", "--results", str(results), timeout=120)
    assert out.returncode == 0, out.stderr
    run_dir = store.run_dirs(results, "tiny_report")[-1]
    assert "CPU-emulated devices: not a speed result" in out.stdout
    assert "Throughput, speedup and efficiency (study 004)" in out.stdout
    expected = expected_throughput(run_dir)
    assert list(expected.num_gpus) == [1, 2]
    table = pd.read_csv(run_dir / "report" / "throughput.csv", index_col=[0, 1])
    label = "mxnet resnet8_cifar b16/GPU synthetic"
    for row in expected.itertuples():
        assert float(table.loc[("images/s", row.num_gpus), label]) == pytest.approx(row.images_per_sec)
        assert float(table.loc[("speedup", row.num_gpus), label]) == pytest.approx(row.speedup)
        assert float(table.loc[("efficiency", row.num_gpus), label]) == pytest.approx(row.efficiency)
        assert f"{row.images_per_sec:.1f}" in out.stdout
    for name in ("throughput_vs_gpus", "efficiency_vs_gpus"):
        assert (run_dir / "report" / f"{name}.png").read_bytes()[:8] == PNG_SIGNATURE
    md = (run_dir / "report" / "report.md").read_text()
    assert "device cpu-emulated" in md and "val_acc_vs_lr: not drawn" in md
    plots = report.build_report(report.load_run(run_dir)).plots
    for name, unit in (("throughput_vs_gpus", "images/s"), ("efficiency_vs_gpus", "%")):
        ax = plots[name].axes[0]
        assert report.EMULATED_NOTE in ax.get_title()
        assert ax.get_xlabel() == "GPUs per trial" and unit in ax.get_ylabel()


# --- the notebook ----------------------------------------------------------------------------------------

def test_notebook_runs_top_to_bottom(known_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    # A kernel spec of this very interpreter, so the notebook runs in the environment under test.
    spec_dir = tmp_path / "jupyter" / "kernels" / "sweep-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "sweep test", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))

    notebook = nbformat.read(ROOT / "notebooks" / "analysis.ipynb", as_version=4)
    parameters = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1
    parameters[0].source = f"RUN_DIR = {str(known_run)!r}\nAGAINST = {str(known_run)!r}\nTARGET_ACC = 0.7\n"
    NotebookClient(notebook, kernel_name="sweep-test", timeout=120,
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    outputs = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/markdown", ""))
                      for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "Throughput, speedup and efficiency" in outputs
    assert "speedup(n) = images/s(n) / images/s(1)" in outputs
    assert any("image/png" in o.get("data", {}) for c in notebook.cells if c.cell_type == "code"
               for o in c.get("outputs", []))
