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


def test_tunes_closing_error_leaves_out_the_probes_whose_oom_is_their_result() -> None:
    """Tune ends a Tuner.fit whose trials failed with `ERROR tune.py ... Trials did not complete: [...]` (logger
    ray.tune.tune); a largest-batch probe out of memory is a result (issue 40), so the line leaves it out."""
    import logging
    from types import SimpleNamespace

    from sweep.runner import ResultsNotErrors

    class Kept(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(record.getMessage())

    probe, broken = SimpleNamespace(trial_id="probe_1"), SimpleNamespace(trial_id="other_2")
    tune_log, kept, results = logging.getLogger("ray.tune.tune"), Kept(), ResultsNotErrors({"probe_1"})
    tune_log.addHandler(kept)
    tune_log.addFilter(results)
    try:
        tune_log.error("Trials did not complete: %s", [probe])  # as ray/tune/tune.py logs it
        tune_log.error("Trials did not complete: %s", [probe, broken])
        tune_log.error("something else: %s", [probe])
    finally:
        tune_log.removeFilter(results)
        tune_log.removeHandler(kept)
    assert kept.lines == [f"Trials did not complete: {[broken]}", f"something else: {[probe]}"]


def test_runs_counts_a_probe_out_of_memory_as_a_probe_not_a_failure(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    from sweep import store
    from sweep.cli import main
    from sweep.schema import Status
    from trainables.config import TrialConfig

    def trial(batch: int, probe: str | None) -> TrialConfig:
        return TrialConfig(framework="mxnet", model="resnet8_cifar", num_gpus=1, batch_per_gpu=batch, epochs=1,
                           lr=0.05, data="synthetic", max_batch_probe=probe)

    ended = [(trial(32, "cfg"), Status.COMPLETED), (trial(64, "cfg"), Status.OOM), (trial(8, None), Status.OOM),
             (trial(16, None), Status.FAILED)]
    meta = store.RunMeta("mb", "20261126-000000-abcd", "smoke", "mb.yaml", "", None, True,
                         [t.trial_id for t, _ in ended], searches_done=True)
    run = store.RunStore.create(tmp_path, meta, "name: mb\n")
    for t, status in ended:
        run.finish_trial(store.summarize(t.trial_id, t, [], status, {"sweep": "mb", "run_id": meta.run_id}), [])
    assert main(["runs", "--results", str(tmp_path)]) == 0
    head, line = capsys.readouterr().out.splitlines()
    assert head.split()[4:10] == ["trials", "done", "failed", "oom", "probes", "interrupted"]
    assert line.split()[4:10] == ["4", "1", "2", "1", "0", "0"]  # an ordinary trial's oom is a failure still


def test_a_run_of_one_gpu_count_draws_no_scaling_plots() -> None:
    """A search alone measures one GPU count: the throughput plot would be a dot per batch, the efficiency plot its
    ideal line alone (issue 40). With a second GPU count both are drawn."""
    import pandas as pd

    from sweep.report.plots import plot_efficiency, plot_throughput

    one = pd.DataFrame({"speed_group": ["b32", "b64"], "num_gpus": [1, 1], "nodes": [1, 1],
                        "images_per_sec": [720.0, None], "efficiency": [1.0, None], "baseline": ["ok", "oom"]})
    assert plot_throughput(one, True) is None and plot_efficiency(one, True) is None
    two = pd.concat([one, one.iloc[:1].assign(num_gpus=2, images_per_sec=1300.0, efficiency=0.9)], ignore_index=True)
    assert plot_throughput(two, True) is not None and plot_efficiency(two, True) is not None


@pytest.mark.slow
def test_search_finds_the_boundary_under_emulated_memory_and_resumes_without_repeating_a_probe(tmp_path: Path) -> None:
    """Through `python -m sweep`, real Ray, real MXNet steps: interrupted after its first probe, resumed, trained at
    its boundary, reported."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import re

    import pandas as pd
    from conftest import ROOT, SWEEPS, run_cli

    from sweep import store
    from sweep.console import rate

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
    assert "Trials did not complete" not in resumed.stdout + resumed.stderr  # Tune's error line: not for a result
    # Each probe's epoch line reads its steady images/s, the table's figure, not the epoch's with its warm-up in.
    steady = {b: f"{rate(r)} img/s," for b, r in trials.steady_images_per_sec.items()}
    for batch, figure in steady.items():
        assert re.search(rf"batch={batch} lr=0.05  epoch 0 \(1 of 1 done\): {re.escape(figure)}", resumed.stdout
                         + out), (figure, resumed.stdout)
    status = run_cli("status", sweep, "--results", str(results), timeout=120)
    assert "of the failed, 1 probe of largest-batch searches ran out of memory" in status.stdout, status.stdout
    listed = run_cli("runs", "--results", str(results), timeout=120).stdout.splitlines()
    assert listed[1].split()[5:11] == ["3", "2", "0", "1", "0", "0"], listed  # trials, done, failed, oom probes, ...

    report = run_cli("report", str(runs[-1]), timeout=120)
    assert report.returncode == 0 and "Largest batch per GPU that fits" in report.stdout, report.stdout + report.stderr
    table = pd.read_csv(runs[-1] / "report" / "max_batch.csv")
    row = table.iloc[0]
    assert (row["state"], row["max batch"], row["first oom"], row["probes"], row["emulated"]) == ("found", 32, 64, 2, True)
    assert (row["trains at"], row["training"]) == (32, "completed")
    assert row["its MiB/device"] == pytest.approx(trials.loc[32, "emulated_device_mem_mib"], abs=0.1)
    # One GPU count: no scaling plots (a dot, an ideal line alone), and report.md says why.
    assert not list((runs[-1] / "report").glob("*_vs_gpus.png"))
    assert "- throughput_vs_gpus: not drawn, one GPU count" in (runs[-1] / "report" / "report.md").read_text()


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
