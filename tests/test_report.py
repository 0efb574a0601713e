"""`python -m sweep report`: its numbers recomputed from the Parquet rows, its files, its errors, the notebook.

Every run here is made by the engine (`python -m sweep` on an embedded Ray, CPU-emulated GPUs), so the
report is tested on what the engine really writes: tests/sweeps/report_mix.yaml ends trials in every
status, report_mix_again.yaml is a second run of the same sweep (for --against), report_fallback.yaml
runs without CIFAR-10. The expected figures are recomputed here with plain pandas from the Parquet files.
"""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from cifar_files import write_cifar10
from conftest import ROOT, SWEEPS, run_cli
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image

from sweep import report, store
from sweep.store import RunMeta

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
USABLE = ("completed", "stopped_early")
SPEED_KEY = ["framework", "model", "batch_per_gpu", "data_kind"]
pytestmark = pytest.mark.slow  # three engine runs (about a minute on an idle two-core machine), then reports


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, shared_ray: list[str]) -> dict[str, Path]:
    """The engine's runs: report_mix (a), report_mix again (b), report_fallback (no data). The fallback run
    goes beside the first (another sweep: its own folder); b after a, whose runs share one. b joins the test
    session's Ray (conftest's shared_ray): its default four GPUs; a and the fallback start their own, a for its
    3 GPUs, the fallback because it runs beside a."""
    tmp = tmp_path_factory.mktemp("report")
    data = write_cifar10(tmp / "data", train_per_file=200, test=500)
    results = tmp / "results"

    def run(key: str, sweep: str, extra: list[str]) -> Path:
        data_dir = str(data) if key != "fallback" else str(tmp / "no-data")
        out = run_cli(str(SWEEPS / sweep), "--results", str(results), "--data-dir", data_dir, *extra, timeout=900)
        assert out.returncode in (0, 1), out.stdout[-3000:] + out.stderr[-3000:]  # 1: some trials failed, on purpose
        if key == "a":  # failed trials, and TUNE_PRINT_ALL_TRIAL_ERRORS unset: our one line each, not Tune's traceback
            assert "Trial task failed for trial" not in out.stderr and "Traceback" not in out.stderr, out.stderr[-3000:]
        return store.run_dirs(results, "report_fallback" if key == "fallback" else "report_mix")[-1]

    with ThreadPoolExecutor(1) as beside:
        fallback = beside.submit(run, "fallback", "report_fallback.yaml", [])
        made = {"a": run("a", "report_mix.yaml", ["--emulate-gpus", "3", "--skip-infeasible"])}
        made["b"] = run("b", "report_mix_again.yaml", shared_ray)
        made["fallback"] = fallback.result()
    made["results"] = results
    return made


@pytest.fixture(scope="module")
def mix(runs: dict[str, Path]) -> tuple[subprocess.CompletedProcess, Path]:
    out = run_cli("report", str(runs["a"]), timeout=120)
    assert out.returncode == 0, out.stderr
    return out, runs["a"] / "report"


# --- numbers recomputed from the Parquet rows ---------------------------------------------------------

def data_kinds(trials: pd.DataFrame) -> pd.Series:
    return trials.data_kind.where(~((trials.data == "cifar10") & (trials.data_kind == "synthetic")),
                                  "synthetic (no CIFAR-10)")


def expected_throughput(run_dir: Path) -> pd.DataFrame:
    """images/s per (framework, model, batch, data, GPUs), speedup and efficiency, from trials/ alone."""
    trials = pd.read_parquet(run_dir / "trials")
    trials["data_kind"] = data_kinds(trials)
    usable = trials[trials.status.isin(USABLE) & trials.steady_images_per_sec.notna()]
    rates = usable.groupby([*SPEED_KEY, "num_gpus"]).steady_images_per_sec.mean().rename("images_per_sec").reset_index()
    base = rates[rates.num_gpus == 1].set_index(SPEED_KEY).images_per_sec.rename("base")
    rates = rates.join(base, on=SPEED_KEY)
    rates["speedup"] = rates.images_per_sec / rates.base
    rates["efficiency"] = rates.speedup / rates.num_gpus
    rates["label"] = [f"{r.framework} {r.model} b{r.batch_per_gpu}/GPU {r.data_kind}" for r in rates.itertuples()]
    return rates


def trial_row(run_dir: Path, **config) -> pd.Series:
    trials = pd.read_parquet(run_dir / "trials")
    match = trials[np.logical_and.reduce([trials[k] == v for k, v in config.items()])]
    assert len(match) == 1, (config, len(match))
    return match.iloc[0]


def test_the_engine_made_every_status_and_true_accuracies(runs) -> None:
    trials = pd.read_parquet(runs["a"] / "trials")
    assert sorted(trials.status) == sorted(["completed"] * 9 + ["diverged", "failed", "oom", "infeasible"])
    epochs = pd.read_parquet(runs["a"] / "epochs")
    scored = epochs.val_acc.dropna()
    assert len(scored) and scored.between(0, 1).all(), scored.max()  # a fraction of the images it claims
    assert epochs.train_acc.dropna().between(0, 1).all()


def test_report_names_the_command_that_ran(mix, runs) -> None:
    _, out = mix
    command = json.loads((runs["a"] / "run.json").read_text())["sessions"][0]["command"]
    assert command.startswith("python -m sweep ") and "--skip-infeasible" in command
    assert f"- Command: `{command}`; scale smoke" in (out / "report.md").read_text()


def test_throughput_table_matches_parquet_rows(mix) -> None:
    _, out = mix
    table = pd.read_csv(out / "throughput.csv", index_col=[0, 1])
    expected = expected_throughput(out.parent)
    assert len(expected) == 8  # mxnet resnet8 b8 real, b16 real, b8 synthetic at 1 and 2 GPUs; tensorflow 1; resnet14 2
    for row in expected.itertuples():
        assert float(table.loc[("images/s", row.num_gpus), row.label]) == pytest.approx(row.images_per_sec)
        if math.isnan(row.base):
            continue
        assert float(table.loc[("speedup", row.num_gpus), row.label]) == pytest.approx(row.speedup)
        assert float(table.loc[("efficiency", row.num_gpus), row.label]) == pytest.approx(row.efficiency)
    assert table.loc[("images/s", 4), "mxnet resnet8_cifar b8/GPU real"] == "infeasible"


def test_a_cell_that_pools_trials_says_what_differs(mix) -> None:
    printed, out = mix
    trials = pd.read_parquet(out.parent / "trials")
    pair = trials[(trials.framework == "mxnet") & (trials.model == "resnet8_cifar") & (trials.batch_per_gpu == 8)
                  & (trials.num_gpus == 2) & (trials.data == "cifar10") & trials.status.isin(USABLE)]
    assert sorted(pair.lr) == [0.05, 0.1]
    table = pd.read_csv(out / "throughput.csv", index_col=[0, 1])
    assert float(table.loc[("images/s", 2), "mxnet resnet8_cifar b8/GPU real"]) == pytest.approx(
        pair.steady_images_per_sec.mean())
    assert "In 1 cell(s) several trials differ only in lr_setting, lr: images/s is their mean." in printed.stdout


def test_missing_baseline_is_said_not_invented(mix) -> None:
    printed, out = mix
    table = pd.read_csv(out / "throughput.csv", index_col=[0, 1])
    column = "mxnet resnet14_cifar b8/GPU real"
    assert table.loc[("images/s", 1), column] == "-"
    assert float(table.loc[("images/s", 2), column]) > 0
    assert table.loc[("speedup", 2), column] == "n/a (no 1-GPU trial)"
    assert f"{column}: no 1-GPU trial, so no speedup or efficiency" in printed.stdout


def test_ratio_tables_match_parquet_rows(mix) -> None:
    _, out = mix
    expected = expected_throughput(out.parent).set_index([*SPEED_KEY, "num_gpus"]).images_per_sec
    batch = pd.read_csv(out / "ratio_batch_per_gpu_16_vs_8.csv", index_col=0)
    for gpus in (1, 2):
        want = expected[("mxnet", "resnet8_cifar", 16, "real", gpus)] / expected[("mxnet", "resnet8_cifar", 8, "real", gpus)]
        assert batch.loc[gpus, "mxnet resnet8_cifar real"] == pytest.approx(want)
    framework = pd.read_csv(out / "ratio_framework_tensorflow_vs_mxnet.csv", index_col=0)
    want = expected[("tensorflow", "resnet8_cifar", 8, "real", 1)] / expected[("mxnet", "resnet8_cifar", 8, "real", 1)]
    assert framework.loc[1, "resnet8_cifar b8/GPU real"] == pytest.approx(want)
    model = pd.read_csv(out / "ratio_model_resnet8_cifar_vs_resnet14_cifar.csv", index_col=0)
    want = expected[("mxnet", "resnet8_cifar", 8, "real", 2)] / expected[("mxnet", "resnet14_cifar", 8, "real", 2)]
    assert model.loc[2, "mxnet b8/GPU real"] == pytest.approx(want)
    data = pd.read_csv(out / "ratio_data_kind_synthetic_vs_real.csv", index_col=0)
    for gpus in (1, 2):
        want = expected[("mxnet", "resnet8_cifar", 8, "synthetic", gpus)] / expected[("mxnet", "resnet8_cifar", 8, "real", gpus)]
        assert data.loc[gpus, "mxnet resnet8_cifar b8/GPU"] == pytest.approx(want)
        assert data.loc[gpus, "median"] == pytest.approx(want)
    assert "Speedup from synthetic data vs. real data" in (out / "report.md").read_text()


def test_per_run_table_matches_parquet_rows(mix) -> None:
    _, out = mix
    table = pd.read_csv(out / "per_run.csv", index_col=[0, 1])
    epochs = pd.read_parquet(out.parent / "epochs")
    group = "mxnet resnet8_cifar b16/GPU real lr 0.05"
    for gpus in (1, 2):
        t = trial_row(out.parent, framework="mxnet", model="resnet8_cifar", batch_per_gpu=16, num_gpus=gpus)
        mine = epochs[epochs.trial_id == t.trial_id].sort_values("epoch")
        column = f"GPU ({gpus})"
        assert float(table.loc[(group, "Training time (s)"), column]) == pytest.approx(mine.epoch_time_s.sum())
        assert float(table.loc[(group, "Average time per epoch (s)"), column]) == pytest.approx(mine.epoch_time_s.mean())
        assert float(table.loc[(group, "Images processed per sec"), column]) == pytest.approx(t.steady_images_per_sec)
        assert float(table.loc[(group, "Training accuracy"), column]) == pytest.approx(mine.train_acc.iloc[-1])
        assert float(table.loc[(group, "Test accuracy"), column]) == pytest.approx(mine.val_acc.iloc[-1])
        assert pd.isna(table.loc[(group, "Maximum device memory, all GPUs (MiB)"), column])  # emulated: no counter
    assert "Device memory n/a: no device counter" in (out / "report.md").read_text()


def test_frameworks_side_by_side_match_parquet_rows(mix) -> None:
    """MXNet and TensorFlow trials that differ in nothing else sit in one table, a column per GPU count and
    framework, with each framework's images/s over the first framework's (MXNet's) at the same GPU count."""
    _, out = mix
    table = pd.read_csv(out / "frameworks.csv", index_col=[0, 1])
    groups = set(table.index.get_level_values(0))
    group = next(g for g in groups if "b8/GPU real lr 0.05" in g and "resnet8_cifar" in g)
    mx = trial_row(out.parent, framework="mxnet", model="resnet8_cifar", batch_per_gpu=8, num_gpus=1,
                   data_kind="real", lr=0.05)
    tf = trial_row(out.parent, framework="tensorflow", model="resnet8_cifar", batch_per_gpu=8, num_gpus=1,
                   data_kind="real")
    for trial, column in ((mx, "GPU (1) mxnet"), (tf, "GPU (1) tensorflow")):
        assert float(table.loc[(group, "Images processed per sec"), column]) == pytest.approx(trial.steady_images_per_sec)
        assert float(table.loc[(group, "Test accuracy"), column]) == pytest.approx(trial.final_val_acc)
    ratio = table.loc[(group, "Images/s over the first framework")]
    assert float(ratio["GPU (1) mxnet"]) == pytest.approx(1.0)
    assert float(ratio["GPU (1) tensorflow"]) == pytest.approx(tf.steady_images_per_sec / mx.steady_images_per_sec)
    assert "## Frameworks side by side" in (out / "report.md").read_text()


def test_lr_table_names_each_failure(mix) -> None:
    _, out = mix
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
    assert "## Trials that did not complete" in md
    for words in ("OOM: ResourceExhaustedError", "failed: ValueError", "diverged: training loss not finite",
                  "infeasible: Infeasible: needs 4 GPUs"):
        assert words in md, words


def test_time_to_accuracy_matches_epoch_rows_and_the_target_is_read_by_the_spec_loader(mix) -> None:
    _, out = mix
    md = (out / "report.md").read_text()
    assert "Time to accuracy 0.7" in md  # `target_acc: 7e-1`, which plain YAML would read as text
    table = pd.read_csv(out / "time_to_accuracy.csv", index_col=[0, 1, 2]).reset_index().set_index("trial")
    epochs = pd.read_parquet(out.parent / "epochs")
    trials = pd.read_parquet(out.parent / "trials").set_index("trial_id")
    checked = 0
    for tid, rows in epochs.groupby("trial_id"):
        rows = rows.sort_values("epoch")
        if rows.val_acc.isna().all():
            continue
        hit = rows[rows.val_acc >= 0.7]
        checked += 1
        if hit.empty:
            assert table.loc[tid, "Wall time (s)"] == "not reached"
            continue
        wall = rows[rows.epoch <= hit.epoch.iloc[0]].epoch_time_s.sum()
        assert float(table.loc[tid, "Wall time (s)"]) == pytest.approx(wall)
        assert float(table.loc[tid, "GPU-hours"]) == pytest.approx(wall * trials.loc[tid, "num_gpus"] / 3600)
        assert int(float(table.loc[tid, "Epochs to target"])) == hit.epoch.iloc[0] + 1
    assert checked >= 7


def test_target_acc_option_overrides_the_sweep_file(runs, tmp_path: Path) -> None:
    out = run_cli("report", str(runs["a"]), "--target-acc", "0.5", "--out", str(tmp_path / "r"), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Time to accuracy 0.5" in (tmp_path / "r" / "report.md").read_text()


def test_plots_are_valid_png_files_whose_legends_cover_no_point(mix) -> None:
    printed, out = mix
    for name in ("throughput_vs_gpus", "efficiency_vs_gpus", "val_acc_vs_lr", "learning_curves"):
        path = out / f"{name}.png"
        assert path.read_bytes()[:8] == PNG_SIGNATURE, name
        with Image.open(path) as image:
            image.verify()
        assert matplotlib.image.imread(path).shape[0] > 100
        assert f"({name}.png)" in (out / "report.md").read_text()
    assert "not a speed result" in printed.stdout  # emulated GPUs here
    built = report.build_report(report.load_run(out.parent))
    assert built.plots.pop("mfu_vs_gpus") is None  # emulated devices: no MFU to draw (tests/test_report_tables.py draws one)
    for name, fig in built.plots.items():
        FigureCanvasAgg(fig).draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend()
            assert legend is not None, name
            box = legend.get_window_extent(renderer)
            points = np.concatenate([ax.transData.transform(line.get_xydata()) for line in ax.get_lines()
                                     if len(line.get_xydata())])
            inside = (points[:, 0] >= box.x0) & (points[:, 0] <= box.x1) & (points[:, 1] >= box.y0) & (points[:, 1] <= box.y1)
            assert not inside.any(), f"{name}: the legend covers {inside.sum()} data points"
        if name in ("throughput_vs_gpus", "efficiency_vs_gpus"):
            assert report.EMULATED_NOTE in fig.axes[0].get_title()


def test_each_table_names_its_source(mix) -> None:
    _, out = mix
    md = (out / "report.md").read_text()
    tables = md.count("\n### ")
    label = f"report_mix/{out.parent.name}"
    assert tables >= 8 and md.count(f"- Source: run {label}") == tables
    assert "device cpu-emulated" in md and "framework mxnet 1.9.1, tensorflow 2.21.0" in md
    # A count reads as one, though the infeasible trial recorded none (its column reads back as floats).
    assert re.search(r"; CPUs \d+;", md) and not re.search(r"CPUs [\d, ]*\d\.0\b", md), md


def test_against_takes_a_run_id_and_gives_b_over_a(runs, tmp_path: Path) -> None:
    a, b = runs["a"], runs["b"]
    out = run_cli("report", a.name, "--against", b.name, "--results", str(runs["results"]), "--out",
                  str(tmp_path / "cmp"), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "warning" not in out.stdout  # one sweep's two runs
    table = pd.read_csv(tmp_path / "cmp" / "compare_throughput.csv", index_col=[0, 1])
    ea = expected_throughput(a).set_index(["label", "num_gpus"])
    eb = expected_throughput(b).set_index(["label", "num_gpus"])
    label = "mxnet resnet8_cifar b16/GPU real"
    for gpus in (1, 2):
        want = eb.loc[(label, gpus), "images_per_sec"] / ea.loc[(label, gpus), "images_per_sec"]
        assert float(table.loc[("images/s", gpus), label]) == pytest.approx(want)
    assert table.loc[("images/s", 1), "tensorflow resnet8_cifar b8/GPU real"] == "only in A"
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "## What differs in the environment" in md


def test_against_another_sweep_warns(runs, tmp_path: Path) -> None:
    out = run_cli("report", runs["a"].name, "--against", runs["fallback"].name, "--results", str(runs["results"]),
                  "--out", str(tmp_path / "cmp"), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "warning: comparing runs of two sweeps (report_mix and report_fallback)" in out.stdout


def test_a_trial_that_fell_back_to_synthetic_data_is_not_pooled(runs) -> None:
    out = run_cli("report", str(runs["fallback"]), timeout=120)
    assert out.returncode == 0, out.stderr
    table = pd.read_csv(runs["fallback"] / "report" / "throughput.csv", index_col=[0, 1])
    asked, fell = (trial_row(runs["fallback"], data=d) for d in ("synthetic", "cifar10"))
    assert asked.data_kind == fell.data_kind == "synthetic"
    assert float(table.loc[("images/s", 1), "mxnet resnet8_cifar b8/GPU synthetic"]) == pytest.approx(
        asked.steady_images_per_sec)
    assert float(table.loc[("images/s", 1), "mxnet resnet8_cifar b8/GPU synthetic (no CIFAR-10)"]) == pytest.approx(
        fell.steady_images_per_sec)
    assert "differ only" not in out.stdout


def test_a_report_says_on_the_console_why_accuracy_is_null(runs, mix) -> None:
    """Issue 40: without CIFAR-10 a trial that asked for it trains on synthetic data, and its accuracy is null;
    the report says why on the console, not only in report.md. A run that had its data says nothing of it."""
    out = run_cli("report", str(runs["fallback"]), "--out", str(runs["fallback"] / "report-null"), timeout=120)
    assert out.returncode == 0, out.stderr
    trials = pd.read_parquet(runs["fallback"] / "trials")
    fell = trials[(trials.data == "cifar10") & (trials.data_kind == "synthetic")]
    assert len(fell) == 1 and fell.final_val_acc.isna().all() and fell.final_train_acc.isna().all()
    said = "No accuracy in 1 trial: no CIFAR-10 was found under the data folder, so it trained on synthetic data"
    assert said in out.stdout
    assert said in (runs["fallback"] / "report-null" / "report.md").read_text()
    assert "No accuracy" not in mix[0].stdout


def test_headings_name_a_study_only_as_the_layout_they_follow(mix) -> None:
    """Issue 40: report_mix is no study, and its headings never read as if it were one: each names a study
    with the words that say which ("as in study 004, TF's benchmark table")."""
    from sweep.report import seeds

    printed, out = mix
    md = (out / "report.md").read_text()
    for text in (md, printed.stdout):
        named = list(re.finditer(r"study (\d{3})", text))
        assert named, text[:500]
        for m in named:
            assert text[m.end():].startswith(f", {seeds.STUDIES[m.group(1)][1]}"), text[m.start() - 60:m.end() + 40]
    assert "Throughput, speedup and efficiency (as in study 004, TF's benchmark table)" in printed.stdout
    for heading in ("## Per trial group (as in study 000, Keras' MXNet vs TensorFlow backends)",
                    "LR scaling: accuracy, time per epoch and throughput per trial (as in study 001, MXNet's LR-scaling grid)",
                    "Time to accuracy 0.7 (DAWNBench's rule, as in study 003, Poseidon)"):
        assert heading in md, heading


# --- bad input: exit 2, one line -----------------------------------------------------------------------

def test_bad_input_is_one_line_and_exit_2(runs, tmp_path: Path) -> None:
    results = tmp_path / "results"
    broken = results / "report_mix" / "broken"
    shutil.copytree(runs["a"], broken)  # a run of the engine's, then damaged
    next((broken / "trials").glob("*.parquet")).write_bytes(b"not parquet at all")
    empty = results / "report_mix" / "empty"  # as a driver killed before any trial ended leaves it
    shutil.copytree(runs["a"], empty, ignore=shutil.ignore_patterns("*.parquet"))
    a_file = tmp_path / "a_file"
    a_file.write_text("in the way of --out")
    cases = [
        ("no sweep or run id 'no_such_sweep'", ["report", "no_such_sweep", "--results", str(results)]),
        ("no such run folder", ["report", str(tmp_path / "missing" / "run")]),
        ("empty run", ["report", str(empty)]),
        ("not a readable Parquet file", ["report", str(broken)]),
        ("--target-acc", ["report", str(runs["a"]), "--target-acc", "2"]),
        ("cannot write the report there (a file, not a folder", ["report", str(runs["a"]), "--out", str(a_file)]),
        ("cannot write the report there (No such file", ["report", str(runs["a"]), "--out", "/proc/no/report"]),
        ("no sweep or run id 'nope'", ["report", str(runs["a"]), "--against", "nope", "--results", str(results)]),
    ]
    for expected, args in cases:
        out = run_cli(*args, timeout=120)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert expected in out.stderr and "Traceback" not in out.stderr, (expected, out.stderr)


def test_a_run_whose_sweep_file_no_longer_loads_still_reports(runs, tmp_path: Path) -> None:
    run_dir = tmp_path / "report_mix" / runs["b"].name
    shutil.copytree(runs["b"], run_dir)
    (run_dir / "sweep.yaml").write_text("description: [unclosed\n")
    out = run_cli("report", str(run_dir), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "- Sweep file: its sweep.yaml does not load:" in (run_dir / "report" / "report.md").read_text()
    meta = RunMeta.from_json((run_dir / "run.json").read_text(), "run.json")
    assert meta.sweep == "report_mix" and meta.command.startswith("python -m sweep")


def test_report_imports_no_framework(runs, tmp_path: Path) -> None:
    code = ("import sys; from sweep.cli import main; "
            f"rc = main(['report', {str(runs['a'])!r}, '--out', {str(tmp_path)!r}]); "
            "loaded = {'mxnet', 'tensorflow'} & set(sys.modules); "
            "assert rc == 0 and not loaded, (rc, loaded)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


# The notebook is run as shipped, on an engine-made run, by tests/test_docs.py.
