"""The report's "speedup from using synth vs real" (study 004's table, issue 41): synthetic images/s beside each real
data's, their ratio, and the input-bound mark; on a hand-made scaling frame, then on rows the engine made from a
small run with data: synthetic and data: imagenet (a generated set), as the report prints and writes it."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from sweep.report import figures, tables


def cells(rows: list[tuple]) -> pd.DataFrame:
    """A long-form scaling frame of (data_kind, data_format, decode, GPUs, images/s, input wait share) cells."""
    frame = pd.DataFrame([{
        "framework": "pytorch", "model": "resnet50_v1", "batch_per_gpu": 64, "data_kind": kind, "data_format": fmt,
        "decode": decode, "loader_workers": None, "precision": "bf16", "compile": False, "num_gpus": gpus, "nodes": 1,
        "gpus": gpus, "trials": 1, "status": "ok", "images_per_sec": rate, "input_wait_share": wait,
        "input_images_per_sec": math.nan if fmt is None else 900.0} for kind, fmt, decode, gpus, rate, wait in rows])
    frame["speed_group"] = figures.group_labels(frame, figures.SPEED_KEY)
    return frame


def test_synthetic_beside_each_real_data_with_their_ratio_and_the_input_bound_cells_marked() -> None:
    long = cells([("synthetic", None, "cpu", 1, 1000.0, math.nan), ("synthetic", None, "cpu", 2, 1900.0, math.nan),
                  ("imagenet", "jpeg", "cpu", 1, 800.0, 0.20), ("imagenet", "jpeg", "cpu", 2, 1890.0, 0.01),
                  ("imagenet", "jpeg", "gpu", 1, 990.0, 0.049)])
    [table] = tables.synth_vs_real_tables(long)
    group = "pytorch resnet50_v1 b64/GPU"
    frame = table.frame
    assert list(frame.columns) == ["synthetic", "real", "synthetic / real", "input wait", "pipeline alone per GPU"]
    assert frame.loc[(group, 1, "imagenet jpeg decode=cpu"), "synthetic / real"] == pytest.approx(1000 / 800)
    assert frame.loc[(group, 2, "imagenet jpeg decode=cpu"), "synthetic / real"] == pytest.approx(1900 / 1890)
    assert frame.loc[(group, 1, "imagenet jpeg decode=gpu"), "real"] == 990.0
    marks = table.marks
    assert marks.loc[(group, 1, "imagenet jpeg decode=cpu"), "real"] == tables.INPUT_BOUND  # 20% of the time waiting
    assert marks.loc[(group, 2, "imagenet jpeg decode=cpu"), "real"] == ""
    assert marks.loc[(group, 1, "imagenet jpeg decode=gpu"), "real"] == ""  # 4.9%: not above 5%
    from sweep.report.render import render_text
    text = render_text(table)
    assert "800.0 input-bound" in text and "1.25x" in text and "20.0%" in text
    # A real cell without a synthetic one of the same key says so; a run of one kind of data has no such table.
    lone = cells([("synthetic", None, "cpu", 1, 1000.0, math.nan), ("imagenet", "jpeg", "cpu", 4, 3000.0, 0.0)])
    assert tables.synth_vs_real_tables(lone)[0].frame.iloc[0]["synthetic / real"] == tables.NO_TRIAL
    assert tables.synth_vs_real_tables(long[long["data_kind"] == "imagenet"]) == []


@pytest.mark.slow
def test_the_report_prints_and_writes_synth_vs_real_from_an_engine_run(tmp_path: Path, shared_ray: list[str]) -> None:
    from conftest import run_cli

    from sweep import imagenet_like, store

    data_dir = tmp_path / "data"
    imagenet_like.make_imagenet_like(data_dir, classes=2, per_class=16, val_per_class=4, quiet=True)
    sweep = tmp_path / "synth_real.yaml"
    sweep.write_text(textwrap.dedent("""\
        description: "Test sweep: synthetic beside a generated image folder, PyTorch, 1 GPU"
        fixed: {framework: pytorch, model: resnet8_cifar, image_size: 32, num_gpus: 1, batch_per_gpu: 8, epochs: 1,
                steps_per_epoch: 4, lr: 0.05, warmup_steps: 1, loader_workers: 1}
        grid: {data: [synthetic, imagenet]}
        """))
    results = tmp_path / "results"
    # On the session's shared Ray, one trial at a time (as on one emulated GPU): each rate measured alone.
    out = run_cli(str(sweep), "--data-dir", str(data_dir), "--results", str(results), *shared_ray, "--max-concurrent", "1",
                  timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run_dir = store.run_dirs(results, "synth_real")[-1]
    epochs = store.RunStore(run_dir).epochs().set_index("data_kind")
    real, synthetic = epochs.loc["imagenet-generated"], epochs.loc["synthetic"]
    assert real["data_format"] == "jpeg" and real["input_images_per_sec"] > 0 and real["decode"] == "cpu"
    assert pd.isna(synthetic["data_format"]) and pd.isna(synthetic["input_images_per_sec"])

    out = run_cli("report", str(run_dir), timeout=120)
    assert out.returncode == 0, out.stderr
    title = ("Speedup from using synthetic data vs. real data (as in study 004, TF's benchmark table), and whether the "
             "input bound the step")
    assert len(out.stdout.split(title)) == 2, out.stdout  # printed on the console, as the other tables are
    assert f"### {title}" in (run_dir / "report" / "report.md").read_text()
    table = pd.read_csv(run_dir / "report" / "synth_vs_real.csv", index_col=[0, 1, 2])
    [(key, row)] = list(table.iterrows())
    assert key == ("pytorch resnet8_cifar b8/GPU", 1, "imagenet-generated jpeg")
    assert float(row["synthetic"]) == pytest.approx(synthetic["steady_images_per_sec"])
    assert float(row["real"]) == pytest.approx(real["steady_images_per_sec"])
    assert float(row["synthetic / real"]) == pytest.approx(synthetic["steady_images_per_sec"] / real["steady_images_per_sec"])
    share = real["steady_input_wait_share"]  # one epoch: the trial's share is its own
    assert 0 <= share < 1
    assert float(row["input wait"]) == pytest.approx(share)
    # The mark is in the cell's row; the legend under the table names "input-bound" whatever the share.
    printed = out.stdout.split(title)[1].split("\n\n")[0]
    (row_line,) = [line for line in printed.splitlines() if line.lstrip().startswith("pytorch resnet8_cifar b8/GPU")]
    assert ("input-bound" in row_line) == (share > tables.INPUT_BOUND_SHARE), printed


def test_the_input_study_crosses_gpus_workers_decode_and_frameworks_with_synthetic_beside() -> None:
    from collections import Counter

    from sweep import spec

    sweep = spec.load("imagenet_input")
    trials = sweep.trials("full")
    real = [t for t in trials if t.data == "imagenet"]
    assert {t.data for t in trials} == {"imagenet", "synthetic"} and sweep.study.startswith("004_")
    assert {t.num_gpus for t in trials} == {1, 2, 4, 8} and {t.loader_workers for t in real} == {2, 4, 8, 15}
    assert Counter((t.framework, t.decode) for t in real) == {(fw, "cpu"): 16 for fw in {t.framework for t in trials}} | {
        ("pytorch", "gpu"): 16}
    # Synthetic data has no input pipeline: one trial per framework and GPU count, not one per worker count.
    assert Counter((t.framework, t.num_gpus) for t in trials if t.data == "synthetic") == {
        (fw, g): 1 for fw in {t.framework for t in trials} for g in (1, 2, 4, 8)}
    assert {(t.model, t.precision, t.batch_per_gpu) for t in trials} == {("resnet50_v1", "bf16", 256)}
    smoke = sweep.trials("smoke")  # runs here: no decode: gpu (no torchvision beside a CPU torch)
    assert {t.decode for t in smoke} == {"cpu"} and {t.data for t in smoke} == {"imagenet", "synthetic"}
    assert len({t.num_gpus for t in smoke}) > 1 and len({t.loader_workers for t in smoke if t.data == "imagenet"}) > 1


@pytest.mark.parametrize("name", ["tf_cnn_benchmarks", "tf_cnn_benchmarks_pytorch"])
def test_imagenet_beside_cifar10_in_study_004s_files_leaves_every_other_trial_as_it_was(name: str, tmp_path: Path) -> None:
    """The file with `imagenet` taken out of its data axis is the file as it was: the same trials, the same ids; the
    smoke scale, which runs without an image folder, has no imagenet trial."""
    from sweep import spec

    text = spec.sweep_path(name).read_text()
    assert text.count("data: [synthetic, cifar10, imagenet]") == 1
    before = tmp_path / f"{name}.yaml"
    before.write_text(text.replace("data: [synthetic, cifar10, imagenet]", "data: [synthetic, cifar10]"))
    now, then = spec.load(name), spec.load(str(before))
    full = now.trials("full")
    assert {t.trial_id for t in full if t.data != "imagenet"} == {t.trial_id for t in then.trials("full")}
    assert sum(t.data == "imagenet" for t in full) == len(full) // 3
    assert [t.trial_id for t in now.trials("smoke")] == [t.trial_id for t in then.trials("smoke")]
    assert {t.data for t in now.trials("smoke")} == {"synthetic", "cifar10"}
