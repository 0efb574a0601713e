"""The report's table functions on small frames built here (issue 40): the precision table, one column order in
every group, each figure's standard error, and the noise verdict of a run-vs-run ratio. Pure arithmetic; and the
same arithmetic on the rows the engine wrote in conftest's shared runs (engine_runs), whose right figures the
rows' own measurements give (issue 46). More engine-made runs, end to end: tests/test_report_runs.py."""
from __future__ import annotations

import math
import random
import statistics

import pandas as pd
import pytest
from conftest import EngineRuns

from sweep import report
from sweep.report import compare, figures, tables
from trainables.measure import throughput


def cells(rows: list[tuple], shuffle: int | None = None) -> pd.DataFrame:
    """A long-form scaling frame (figures.scaling's columns) of (framework, batch, precision, compile, GPUs,
    images/s) cells, in the order given or shuffled: the order the store happens to read rows in."""
    frame = pd.DataFrame([{
        "framework": fw, "model": "resnet50_v1", "batch_per_gpu": batch, "data_kind": "synthetic", "precision": p,
        "compile": compiled, "num_gpus": gpus, "nodes": 1, "gpus": gpus, "trials": 1, "status": "ok",
        "images_per_sec": rate, "images_per_sec_source": "steady", "baseline": "ok", "speedup": 1.0,
        "efficiency": 1.0, "pooled": ""} for fw, batch, p, compiled, gpus, rate in rows])
    if shuffle is not None:
        frame = frame.sample(frac=1, random_state=shuffle).reset_index(drop=True)
    frame["speed_group"] = figures.group_labels(frame, figures.SPEED_KEY)
    return frame


PRECISION_RUN = [  # TensorFlow with fp32; MXNet without (its base is tf32); one compiled setting
    ("tensorflow", 64, "fp32", False, 1, 200.0), ("tensorflow", 64, "tf32", False, 1, 250.0),
    ("tensorflow", 64, "bf16", False, 1, 400.0), ("tensorflow", 64, "fp16", True, 1, 500.0),
    ("tensorflow", 64, "fp32", False, 2, 380.0), ("tensorflow", 64, "bf16", False, 2, 700.0),
    ("mxnet", 64, "tf32", False, 1, 150.0), ("mxnet", 64, "bf16", False, 1, 300.0),
    ("mxnet", 128, "bf16", False, 1, 330.0), ("mxnet", 128, "tf32", False, 1, 160.0),
]


def test_precision_table_divides_each_row_by_its_fp32_else_tf32() -> None:
    (table,) = tables.precision_tables(cells(PRECISION_RUN, shuffle=1))
    frame = table.frame
    assert list(frame.columns) == ["fp32", "tf32", "bf16", "fp16 + compiled",
                                   "tf32 / fp32", "bf16 / fp32", "fp16 + compiled / fp32", "bf16 / tf32"]
    assert list(frame.index) == [("mxnet resnet50_v1 b64/GPU synthetic", 1), ("mxnet resnet50_v1 b128/GPU synthetic", 1),
                                 ("tensorflow resnet50_v1 b64/GPU synthetic", 1),
                                 ("tensorflow resnet50_v1 b64/GPU synthetic", 2)]
    tf1 = frame.loc[("tensorflow resnet50_v1 b64/GPU synthetic", 1)]
    assert (tf1["tf32 / fp32"], tf1["bf16 / fp32"], tf1["fp16 + compiled / fp32"]) == (1.25, 2.0, 2.5)
    assert tf1["bf16 / tf32"] == tables.NO_TRIAL  # this row has fp32: its base
    assert frame.loc[("tensorflow resnet50_v1 b64/GPU synthetic", 2), "bf16 / fp32"] == pytest.approx(700 / 380)
    mx = frame.loc[("mxnet resnet50_v1 b64/GPU synthetic", 1)]
    assert mx["bf16 / tf32"] == 2.0 and mx["bf16 / fp32"] == tables.NO_TRIAL  # no fp32 in this row: tf32 is its base
    assert "tf32 where a row has no fp32" in table.title
    assert all(table.unit(row, c) == "x" for row in frame.index for c in frame.columns if " / " in c)


def test_column_order_is_the_same_in_every_group_whatever_order_the_rows_came_in() -> None:
    """fp32, tf32, fp16, bf16, then the compiled ones: in the throughput table within each framework, model and
    batch, and in the precision table, for every order of the same cells."""
    want = None
    for seed in range(6):
        long = cells(PRECISION_RUN, shuffle=seed)
        columns = list(tables.throughput_table(long).frame.columns)
        (precision,) = tables.precision_tables(long)
        assert want is None or (columns, list(precision.frame.columns)) == want, seed
        want = columns, list(precision.frame.columns)
    columns, _ = want
    assert columns == [
        "mxnet resnet50_v1 b64/GPU synthetic precision=tf32", "mxnet resnet50_v1 b64/GPU synthetic precision=bf16",
        "mxnet resnet50_v1 b128/GPU synthetic precision=tf32", "mxnet resnet50_v1 b128/GPU synthetic precision=bf16",
        "tensorflow resnet50_v1 b64/GPU synthetic precision=fp32 compile=False",
        "tensorflow resnet50_v1 b64/GPU synthetic precision=tf32 compile=False",
        "tensorflow resnet50_v1 b64/GPU synthetic precision=bf16 compile=False",
        "tensorflow resnet50_v1 b64/GPU synthetic precision=fp16 compile=True"]


def test_table_headings_name_a_study_only_as_the_layout_they_follow() -> None:
    long = cells(PRECISION_RUN)
    assert tables.throughput_table(long).title == \
        "Throughput, speedup and efficiency (as in study 004, TF's benchmark table)"
    assert "(study" not in tables.throughput_table(long).title


def test_a_trials_stderr_pools_its_epochs_as_one_set_of_steps() -> None:
    """Epoch rows hold each epoch's mean, stderr and step count (trainables/measure.py); the trial's stderr from
    them equals the stderr of all its steps' rates taken together."""
    rng = random.Random(7)
    epochs, rates = [], []
    for epoch, steps in enumerate((5, 1, 8)):
        times = [rng.uniform(0.05, 0.2) for _ in range(steps)]
        measured = throughput(times, images_per_step=32)
        epochs.append({"epoch": epoch, "steady_images_per_sec": measured.mean,
                       "steady_images_per_sec_stderr": measured.stderr, "steady_steps": measured.steps})
        rates += [32 / t for t in times]
    want = statistics.stdev(rates) / math.sqrt(len(rates))
    assert figures.steady_stderr(pd.DataFrame(epochs)) == pytest.approx(want)
    one = pd.DataFrame([{**epochs[1]}])  # a single timed step: no spread to measure
    assert math.isnan(figures.steady_stderr(one))


def test_a_ratio_is_within_noise_where_the_two_intervals_overlap() -> None:
    assert compare.noise_verdict(100.0, 10.0, 130.0, 6.0) == compare.WITHIN  # 30 <= 1.96 x 16
    assert compare.noise_verdict(100.0, 5.0, 130.0, 6.0) == compare.BEYOND  # 30 > 1.96 x 11
    assert compare.noise_verdict(100.0, math.nan, 100.0, 1.0) == compare.NO_STDERR


def test_compared_throughput_marks_each_ratio_with_its_verdict() -> None:
    rows = [("mxnet", 64, "tf32", False, 1, 100.0), ("mxnet", 64, "tf32", False, 2, 150.0)]
    a, b = cells(rows), cells(rows)
    b.loc[b["num_gpus"] == 2, "images_per_sec"] = 250.0
    a["images_per_sec_stderr"], b["images_per_sec_stderr"] = [1.0, 2.0], [1.0, 2.0]
    for side in (a, b):
        side["speedup"] = side["images_per_sec"] / 100.0
        side["speedup_stderr"] = [0.0, 0.03]
    table = report.ratio_of_tables(tables.throughput_table(a), tables.throughput_table(b))
    group = "mxnet resnet50_v1 b64/GPU synthetic"
    assert table.frame.loc[("images/s", 2), group] == pytest.approx(250 / 150)
    assert table.marks.loc[("images/s", 1), group] == compare.WITHIN
    assert table.marks.loc[("images/s", 2), group] == compare.BEYOND
    assert table.marks.loc[("speedup", 1), group] == compare.WITHIN
    assert table.marks.loc[("efficiency", 2), group] == compare.NO_STDERR  # no efficiency stderr given here
    text = report.render_text(table)
    assert "1.67x beyond noise" in text and "1.00x within noise" in text


def test_trials_that_differ_in_their_loader_workers_are_not_pooled_into_one_cell() -> None:
    """The input pipeline's workers change how fast a step gets its images (data: imagenet): 1 and 4 workers are two
    throughput cells, each named by its workers, never one cell averaging them as if they differed in nothing."""
    frame = cells([("pytorch", 64, "bf16", False, 1, 300.0), ("pytorch", 64, "bf16", False, 1, 900.0)])
    frame["loader_workers"] = [1, 4]
    labels = figures.group_labels(frame, figures.SPEED_KEY)
    assert labels.nunique() == 2 and labels.str.contains("loader_workers=1").iloc[0]
    assert list(figures.in_speed_order(frame.iloc[::-1], then=[])["loader_workers"]) == [1, 4]


def test_speedup_and_efficiency_of_an_engine_made_run_are_its_measured_rates_ratios(engine_runs: EngineRuns) -> None:
    """Issue 46: the report's efficiency was checked by slow tests only. The engine's run 1 (tiny_mxnet on 1 and 2
    emulated GPUs, one epoch each), read with plain pandas: each epoch row's images/s counts every device's images
    (steps x batch per GPU x GPUs over the epoch's time), each trial's steady rate is its epoch's, and the report's
    speedup(2) is rate(2) / rate(1), efficiency speedup / 2, in figures.scaling and in the throughput table alike.
    Run 0's 2-GPU trial was infeasible: its cells say so, and no speedup is made up for it."""
    run_dir = engine_runs.run_dir(1)
    trials, epochs = pd.read_parquet(run_dir / "trials"), pd.read_parquet(run_dir / "epochs")
    assert sorted(trials.num_gpus) == [1, 2] and set(trials.status) == {"completed"}
    for row in epochs.itertuples():
        assert row.images_per_sec * row.epoch_time_s == pytest.approx(row.steps * row.batch_per_gpu * row.num_gpus,
                                                                      rel=1e-9)
    rate = {int(r.num_gpus): r.steady_images_per_sec for r in trials.itertuples()}
    assert rate == {int(r.num_gpus): r.steady_images_per_sec for r in epochs.itertuples()}  # one epoch each
    speedup = rate[2] / rate[1]

    run = report.load_run(run_dir)
    long = figures.scaling(figures.trial_figures(run.trials, run.epochs)).set_index("num_gpus")
    assert list(long.baseline) == ["ok", "ok"] and long.loc[1, "speedup"] == 1.0
    assert long.loc[1, "images_per_sec"] == rate[1] and long.loc[2, "images_per_sec"] == rate[2]
    assert long.loc[2, "speedup"] == pytest.approx(speedup, rel=1e-12)
    assert long.loc[2, "efficiency"] == pytest.approx(speedup / 2, rel=1e-12)
    (column,) = tables.throughput_table(long.reset_index()).frame.columns
    table = tables.throughput_table(long.reset_index()).frame[column]
    assert table[("images/s", 2)] == rate[2] and table[("speedup", 1)] == 1.0
    assert table[("speedup", 2)] == pytest.approx(speedup, rel=1e-12)
    assert table[("efficiency", 1)] == 1.0 and table[("efficiency", 2)] == pytest.approx(speedup / 2, rel=1e-12)

    first = report.load_run(engine_runs.run_dir(0))
    cells = figures.scaling(figures.trial_figures(first.trials, first.epochs)).set_index("num_gpus")
    assert cells.loc[2, "status"] == "infeasible" and cells.loc[2, "trials"] == 0
    assert math.isnan(cells.loc[2, "speedup"]) and math.isnan(cells.loc[2, "efficiency"])


def test_mfu_stands_beside_images_per_sec_where_rows_have_it_and_its_absence_is_said(engine_runs: EngineRuns) -> None:
    """Issue 44: the engine's run 1 was made on emulated devices: no MFU row in the table, and a note saying why.
    The same rows as a real GPU's would carry them (the store's utilisation on an H100 at bf16): an MFU row, each
    cell the trial's MFU, and the MFU plot drawn."""
    from sweep.report import plots
    from trainables.peaks import utilisation

    run = report.load_run(engine_runs.run_dir(1))
    emulated = figures.scaling(figures.trial_figures(run.trials, run.epochs))
    table = tables.throughput_table(emulated)
    assert "MFU" not in table.frame.index.get_level_values(0)
    assert any(note == "No MFU: emulated devices." for note in table.notes)
    assert plots.plot_mfu(emulated, True) is None

    trials = run.trials.copy()
    trials["device_kind"], trials["gpu_model"], trials["computed_precision"] = "gpu", "NVIDIA H100 80GB HBM3", "bf16"
    for column in ("achieved_tflops", "mfu", "mfu_note"):
        trials[column] = [utilisation(row)[column] for row in trials.to_dict("records")]
    assert trials["mfu"].notna().all()
    on_gpu = figures.scaling(figures.trial_figures(trials, run.epochs)).set_index("num_gpus")
    frame = tables.throughput_table(on_gpu.reset_index()).frame
    (column,) = frame.columns
    by_gpus = trials.set_index("num_gpus")["mfu"]
    assert frame[column][("MFU", 1)] == pytest.approx(by_gpus[1]) and frame[column][("MFU", 2)] == pytest.approx(by_gpus[2])
    assert plots.plot_mfu(on_gpu.reset_index(), False) is not None
