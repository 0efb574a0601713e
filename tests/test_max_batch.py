"""`batch_per_gpu: max`: the search for the largest batch that fits (sweep/batch_search.py), its sweep-file and
--set forms, and one run end to end through `python -m sweep` on emulated devices with a memory capacity."""
from __future__ import annotations

from pathlib import Path

import pytest

from sweep import overrides, spec
from sweep.batch_search import FAILED, FIT, OOM, boundary, most_probes, next_probe, training_batch, worst_probes
from sweep.errors import SpecError


def probes(fits_up_to: int, lo: int, hi: int, step: int, fails_at: int | None = None) -> list[tuple[int, str]]:
    """The probe sequence of a search where every batch up to `fits_up_to` fits (and `fails_at`, if given,
    fails for another reason than memory)."""
    outcomes: dict[int, str] = {}
    sequence = []
    while (batch := next_probe(outcomes, lo, hi, step)) is not None:
        outcomes[batch] = FAILED if batch == fails_at else FIT if batch <= fits_up_to else OOM
        sequence.append((batch, outcomes[batch]))
    return sequence


def test_doubling_then_bisection_down_to_the_step() -> None:
    assert probes(200, 8, 4096, 8) == [(8, FIT), (16, FIT), (32, FIT), (64, FIT), (128, FIT), (256, OOM),
                                       (192, FIT), (224, OOM), (208, OOM), (200, FIT)]
    found = boundary(dict(probes(200, 8, 4096, 8)), 8, 4096, 8)
    assert (found.state, found.fit, found.fail, found.probes) == ("found", 200, 208, 10)


def test_everything_fits_up_to_hi() -> None:
    assert probes(10**6, 8, 100, 8) == [(8, FIT), (16, FIT), (32, FIT), (64, FIT), (100, FIT)]
    assert boundary(dict(probes(10**6, 8, 100, 8)), 8, 100, 8).state == "all fit"


def test_nothing_fits_at_lo() -> None:
    assert probes(4, 8, 100, 8) == [(8, OOM)]
    found = boundary({8: OOM}, 8, 100, 8)
    assert (found.state, found.fit, found.fail) == ("none fit", None, 8)


def test_a_failure_that_is_not_memory_stops_the_search_and_is_no_boundary() -> None:
    assert probes(200, 8, 4096, 8, fails_at=64) == [(8, FIT), (16, FIT), (32, FIT), (64, FAILED)]
    found = boundary(dict(probes(200, 8, 4096, 8, fails_at=64)), 8, 4096, 8)
    assert (found.state, found.fit, found.fail) == ("failed", 32, None)


def test_a_boundary_within_one_step_of_the_first_failure_ends_the_bisection() -> None:
    assert probes(36, 16, 64, 16) == [(16, FIT), (32, FIT), (64, OOM), (48, OOM)]  # 32 and 48: one step apart
    assert probes(15, 8, 64, 8) == [(8, FIT), (16, OOM)]


@pytest.mark.parametrize("lo,hi,step", [(8, 64, 8), (8, 1000, 8), (3, 200, 8), (5, 77, 4), (10, 1000, 24), (1, 300, 1)])
def test_the_worst_search_is_the_longest_over_every_boundary(lo: int, hi: int, step: int) -> None:
    every = [tuple(b for b, _ in probes(boundary, lo, hi, step)) for boundary in range(lo - 1, hi + 1)]
    assert worst_probes(lo, hi, step) == max(every, key=lambda s: (len(s), sum(s)))


def test_the_probe_bound_is_the_worst_search() -> None:
    assert most_probes(8, 64, 8) == max(len(probes(b, 8, 64, 8)) for b in range(7, 65)) == 6
    assert most_probes(8, 4096, 8) == 18  # 10 doublings, then 2048 bisected down to 8
    assert most_probes(32, 32, 8) == 1
    assert most_probes(1, 65536, 1) == 32  # the widest range the settings allow: computed at once


def test_training_batch_is_the_boundary_times_the_margin_rounded_down_to_the_step() -> None:
    assert training_batch(200, 1.0, 8) == 200
    assert training_batch(200, 0.9, 8) == 176  # 180 rounded down
    assert training_batch(20, 1.0, 8) == 16
    assert training_batch(5, 0.5, 8) == 5  # never below one step, nor above the boundary


SEARCH = """name: mb
description: a search
fixed: {framework: mxnet, num_gpus: 1, epochs: 0, lr: 0.05, batch_per_gpu: max, max_batch_range: [8, 64], image_size: 16}
grid: {model: [resnet8_cifar, resnet20_cifar]}
"""


def test_batch_max_in_a_sweep_file_gives_one_search_per_configuration(tmp_path: Path) -> None:
    path = tmp_path / "mb.yaml"
    path.write_text(SEARCH)
    sweep = spec.load(str(path))
    assert sweep.trials("smoke") == []
    searches = sweep.searches("smoke")
    assert [(s.values["model"], s.lo, s.hi, s.step) for s in searches] == [("resnet8_cifar", 8, 64, 8),
                                                                           ("resnet20_cifar", 8, 64, 8)]
    probe = searches[0].probe(16, capacity_mib=512)
    assert (probe.batch_per_gpu, probe.epochs, probe.steps_per_epoch, probe.data) == (16, 1, 4, "synthetic")
    assert probe.max_batch_probe == searches[0].config_id and probe.memory_capacity_mib == 512
    assert searches[0].probe(16).trial_id != probe.trial_id  # another capacity is another probe
    assert searches[0].training(64) is None  # epochs 0: the search alone


def test_batch_max_by_set_and_its_settings(tmp_path: Path) -> None:
    path = tmp_path / "mb.yaml"
    path.write_text(SEARCH.replace("epochs: 0, ", "epochs: 2, ").replace("batch_per_gpu: max, ", "batch_per_gpu: 8, "))
    sweep = overrides.apply(spec.load(str(path)), overrides.parse(
        ["batch_per_gpu=max", "max_batch_range=[16,128]", "max_batch_step=16", "max_batch_margin=0.5"]))
    assert overrides.trials(sweep, "smoke") == []
    search = sweep.searches("smoke")[0]
    assert (search.lo, search.hi, search.step, search.margin) == (16, 128, 16, 0.5)
    assert search.training(100).batch_per_gpu == 48 and search.training(100).epochs == 2
    with pytest.raises(SpecError, match="max_batch_step: expected at most the range's hi"):
        overrides.trials(overrides.apply(sweep, {**sweep.overrides, "max_batch_step": 256}), "smoke")


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """In this process: each refusal comes before Ray starts (milliseconds), and writes nothing."""
    from sweep.cli import main

    sweep, results = str(Path(__file__).parent / "sweeps" / "max_batch.yaml"), str(tmp_path / "results")
    cases = [(["run", sweep, "--set", "batch_per_gpu=maxx"], "--set batch_per_gpu=maxx: expected an integer >= 1"),
             (["run", sweep, "--set", "max_batch_range=[64,8]"], "--set max_batch_range=[64,8]: expected [lo, hi]"),
             (["run", sweep, "--emulate-gpu-memory", "2 parsecs"], "--emulate-gpu-memory 2 parsecs: expected a size"),
             (["plan", sweep, "--emulate-gpu-memory", "2 parsecs"], "--emulate-gpu-memory 2 parsecs: expected a size"),
             (["run", sweep, "--set", "max_batch_step=128"], "max_batch_step: expected at most the range's hi (64)")]
    for args, words in cases:
        assert main([*args, "--results", results]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and words in err, (args, err)
    assert not Path(results).exists()


def test_plan_and_show_say_how_many_probes_a_search_may_take(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from sweep.cli import main

    sweep = str(Path(__file__).parent / "sweeps" / "max_batch.yaml")
    assert main(["plan", sweep, "--emulate-gpu-memory", "100MiB", "--set", "max_batch_range=[8,4096]",
                 "--set", "max_batch_step=8", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "max batch search " in out and "mxnet resnet8_cifar gpus=1: at most 18 probes (batch 8 to 4096, step 8)" in out
    assert main(["show", sweep, "--scale", "smoke"]) == 0
    assert "batch 32 to 64, step 32, at most 2 probes; the search alone (epochs 0)" in capsys.readouterr().out


@pytest.mark.slow
def test_search_finds_the_boundary_under_emulated_memory_and_resumes_without_repeating_a_probe(tmp_path: Path) -> None:
    """Through `python -m sweep`, real Ray, real MXNet steps: interrupted after its first probe, resumed, trained at
    its boundary, reported."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import pandas as pd
    from conftest import ROOT, SWEEPS, run_cli

    from sweep import store

    sweep, results = str(SWEEPS / "max_batch.yaml"), tmp_path / "results"
    # Then it trains at its boundary: one epoch of two steps (epochs 0 would be the search alone).
    options = ("--results", str(results), "--emulate-gpu-memory", "100MiB", "--set", "epochs=1", "--set", "steps_per_epoch=2")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    first = subprocess.Popen([sys.executable, "-m", "sweep", sweep, *options], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env={**env, "PYTHONUNBUFFERED": "1"})
    deadline = time.time() + 240
    while not (runs := store.run_dirs(results, "max_batch")) or not (runs[-1] / "trials").is_dir() \
            or not list((runs[-1] / "trials").glob("*.parquet")):  # the first probe's summary row
        assert first.poll() is None and time.time() < deadline, first.communicate()[0][-3000:]
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 130, out[-3000:]
    run = store.RunStore(runs[-1])
    before = set(run.trials().trial_id)
    assert run.meta.searches_done is False and "resume with:" in out

    resumed = run_cli(sweep, "--resume", *options, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    everything = run.trials()
    training = everything[everything.max_batch_probe.isna()]
    assert list(zip(training.batch_per_gpu, training.status, training.epochs)) == [(32, "completed", 1)]
    trials = everything[everything.max_batch_probe.notna()].set_index("batch_per_gpu").sort_index()
    assert list(trials.index) == [32, 64] and run.meta.searches_done is True
    assert all(run.attempts(tid) == 1 for tid in before)  # a probe that had ended was not run again
    assert list(trials.status) == ["completed", "oom"]
    assert trials.loc[64, "error_type"] == "EmulatedOutOfMemoryError" and "out of memory" in trials.loc[64, "error"]
    assert (trials.memory_capacity_mib == 100).all() and (trials.device_kind == "cpu-emulated").all()
    assert trials.loc[32, "emulated_device_mem_mib"] <= 100 < trials.loc[64, "emulated_device_mem_mib"]
    assert "1 probes out of memory (the searches' boundaries)" in resumed.stdout
    status = run_cli("status", sweep, "--results", str(results), timeout=120)
    assert "of the failed, 1 probe of largest-batch searches ran out of memory" in status.stdout, status.stdout

    report = run_cli("report", str(runs[-1]), timeout=120)
    assert report.returncode == 0 and "Largest batch per GPU that fits" in report.stdout, report.stdout + report.stderr
    table = pd.read_csv(runs[-1] / "report" / "max_batch.csv")
    row = table.iloc[0]
    assert (row["state"], row["max batch"], row["first oom"], row["probes"], row["emulated"]) == ("found", 32, 64, 2, True)
    assert (row["trains at"], row["training"]) == (32, "completed")
    assert row["its MiB/device"] == pytest.approx(trials.loc[32, "emulated_device_mem_mib"], abs=0.1)


def test_study_000s_memory_rows_are_the_documents() -> None:
    # The report sets study 000's "Maximum Memory Consumption" beside a search's boundary: each figure must be
    # the document's own, under its model's heading and its backend's "Reduce Randomization" table.
    import re

    from sweep.report import seeds

    document = Path(__file__).resolve().parents[2] / "shared" / "seeds" / seeds.STUDY_000
    if not document.is_file():  # a clone without the studies beside it (CI and the workplace have them)
        pytest.skip(f"no study document at {document}")
    text = document.read_text()
    models = {"resnet50_v1": "## Resnet50", "inception_v3": "## Inception_v3"}
    backends = {"mxnet": "#### MXNet Backend", "tensorflow": "#### Tensorflow Backend"}
    for (framework, model), figures in seeds.STUDY_000_MEMORY.items():
        section = text[text.index(models[model]):]
        table = section[section.index(backends[framework]):].split("\n\n")[0]
        gpus = [int(g) for g in re.findall(r"GPU\s*\((\d+)\)", table)]
        memory = re.search(r"Maximum Memory Consumption\s*\|(.*)\|", table).group(1)
        assert dict(zip(gpus, (float(v) for v in memory.split("|")))) == figures, (framework, model)
    assert seeds.study_000_mib_per_gpu("tensorflow", "resnet50_v1", 4) == 43778 / 4
    assert seeds.study_000_mib_per_gpu("pytorch", "resnet50_v1", 1) is None
    assert seeds.study_000_mib_per_gpu("mxnet", "resnet50_v1", 3) is None
