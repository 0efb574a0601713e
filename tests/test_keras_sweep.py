"""framework: keras from the driver's side (issue 43): where each Keras backend's trials run, the framework check per
backend, and study 000 on today's backends (search_spaces/keras3_backends.yaml) end to end.

Keras's environment (`python -m sweep env create keras`) holds JAX alone, on numpy 2: keras trials on jax run there
where the driver's Python has no jax (CI's first lane, numpy 1), those on tensorflow and torch in the driver's
Python; an environment named for keras (environments:, --env) holds for all three (sweep/environments.py).
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
from cifar_files import write_cifar10
from conftest import HANG_S, ROOT, run_cli

from sweep import checks, environments, spec
from sweep.environments import Environment
from sweep.trial import TrialRuntime
from trainables import probe
from trainables.config import KERAS_BACKENDS, TrialConfig

STUDY = ROOT / "search_spaces" / "keras3_backends.yaml"
DRIVER_HAS_JAX = importlib.util.find_spec("jax") is not None
CHANCE = 0.1  # ten classes


def _made_keras_environment(envs: Path, monkeypatch: pytest.MonkeyPatch) -> Environment:
    """A complete environment by `env create keras`'s marker, under $SWEEP_ENVS (its interpreter is not run here)."""
    monkeypatch.setenv(environments.ROOT_VAR, str(envs))
    folder = environments.env_dir("keras")
    folder.mkdir(parents=True)
    (folder / environments.MARKER).write_text(json.dumps({"framework": "keras"}))
    return Environment("py_executable", str(environments.env_python(folder)))


def _keras_trial(backend: str) -> TrialConfig:
    return TrialConfig(framework="keras", keras_backend=backend, model="resnet8_cifar", num_gpus=1, batch_per_gpu=8,
                       epochs=1, lr=0.05)


def test_each_keras_backend_runs_where_the_rule_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = _made_keras_environment(tmp_path / "envs", monkeypatch)
    chosen = environments.chosen({}, [])
    # The made environment holds JAX alone: jax's trials only, and only where the driver's Python has no jax.
    assert environments.of(chosen, "keras/jax") == (None if DRIVER_HAS_JAX else made)
    assert environments.of(chosen, "keras/tensorflow") is None and environments.of(chosen, "keras/torch") is None
    runtime = TrialRuntime(run_dir=str(tmp_path), data_dir=None, emulated=True, columns={}, environments=chosen)
    assert runtime.environment(_keras_trial("jax")) == environments.of(chosen, "keras/jax")
    assert runtime.environment(_keras_trial("torch")) is None and runtime.runtime_env(_keras_trial("torch")) is None
    if not DRIVER_HAS_JAX:
        assert environments.origin("keras/jax", made).endswith("(made by `python -m sweep env create keras`)")
    # One named for keras, in the sweep file or by --env, holds for every backend; the made one gives way to it.
    mine = Environment("py_executable", "/opt/keras/bin/python")
    for named in (environments.chosen({"keras": mine}, []), environments.chosen({}, ["keras=/opt/keras/bin/python"])):
        assert [environments.of(named, f"keras/{b}") for b in KERAS_BACKENDS] == [mine] * 3
        assert "keras/jax" not in named
    # MXNet's made environment is keyed as before: the rule is one for every framework.
    assert environments.of(chosen, "mxnet") == environments.made_environment("mxnet")


def test_plan_says_where_each_backend_runs(tmp_path: Path) -> None:
    envs = tmp_path / "envs"
    with pytest.MonkeyPatch.context() as patch:
        made = _made_keras_environment(envs, patch)
    out = run_cli("plan", str(STUDY), "--nodes", "1", "--gpus-per-node", "2", "--results", str(tmp_path / "results"),
                  env={environments.ROOT_VAR: str(envs)}, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    jax = "the driver's Python" if DRIVER_HAS_JAX else f"{made.describe()} (made by `python -m sweep env create keras`)"
    assert f"keras/jax trials run in {jax}" in lines, out.stdout
    assert "keras/tensorflow trials run in the driver's Python" in lines
    assert "keras/torch trials run in the driver's Python" in lines


def test_a_missing_backend_checks_as_not_installed_and_names_the_command() -> None:
    if DRIVER_HAS_JAX:
        pytest.skip("this Python has jax: keras on jax runs in it")
    found = probe.check("keras/jax", "n1", True)  # the real check: its child process, in this Python
    assert (found.framework, found.keras_backend, found.runs_as, found.ok) == ("keras", "jax", "keras/jax", False)
    assert found.reason == f"jax is not installed for {sys.executable}"
    assert environments.with_hint(found, {}).reason == (f"jax is not installed for {sys.executable}; make it an "
                                                        "environment of its own: python -m sweep env create keras")
    assert environments.with_hint(found, {"keras": Environment("py_executable", "/opt/k/bin/python")}) == found
    torch = probe.FrameworkCheck.failed("n1", "keras/torch", "torch is not installed for /x/python")
    assert environments.with_hint(torch, {}).reason.endswith("; install it: pip install -e '.[pytorch]'")


def test_the_checks_table_has_a_line_per_backend_and_places_each_by_its_own_checks() -> None:
    made = Environment("py_executable", "/envs/keras/bin/python")
    ok = probe.FrameworkCheck("n1" * 8, "keras", ok=True, hostname="a", version="3.15.0 on jax 0.10.2",
                              keras_backend="jax")
    failed = probe.FrameworkCheck.failed("n2" * 8, "keras/jax", "jax is not installed for /x/python", hostname="b")
    torch = probe.FrameworkCheck("n1" * 8, "keras", ok=True, hostname="a", version="3.15.0 on torch 2.13.0",
                                 keras_backend="torch")
    lines = checks.table([ok, failed, torch], {"keras/jax": made}, 3).splitlines()[2:]
    assert [line.split()[2] for line in lines] == ["keras/jax", "keras/jax", "keras/torch"]
    assert "3.15.0 on jax 0.10.2" in lines[0] and "3.15.0 on torch 2.13.0" in lines[2] and "default" in lines[2]
    # keras on jax runs on the node whose check passed; keras on torch anywhere it was checked (all passed).
    assert checks.placement([ok, failed, torch]) == {"keras/jax": ("n1" * 8,)}


def test_a_backend_the_driver_lacks_is_one_line_before_ray_starts(tmp_path: Path) -> None:
    if DRIVER_HAS_JAX:
        pytest.skip("this Python has jax: keras on jax runs in it")
    out = run_cli(str(STUDY), "--results", str(tmp_path / "results"), "--data-dir", str(tmp_path / "none"),
                  env={environments.ROOT_VAR: str(tmp_path / "no-envs")}, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip() == (f"error: keras_backend jax: jax is not installed for {sys.executable} and no "
                                  "environment is named for keras (environments:, --env); make it an environment of "
                                  "its own: python -m sweep env create keras"), out.stderr
    assert "Ray dashboard" not in out.stdout and not (tmp_path / "results").exists()


def _jax_runs() -> bool:
    return DRIVER_HAS_JAX or environments.made_environment("keras") is not None


@pytest.mark.slow
@pytest.mark.heavy  # CI runs it in lane 2, where the driver holds all three backends (.ci/run)
def test_the_study_smoke_runs_every_backend_and_reports_study_000_per_backend(tmp_path: Path, shared_ray: list[str]) -> None:
    """keras3_backends.yaml's smoke scale through `python -m sweep` on learnable data: every backend on 1 emulated
    GPU, jax and tensorflow on 2 (keras on torch is one GPU so far), checked first (Keras's version and the
    backend's), above chance; the report's study 000 table per backend and the backends side by side, from the rows
    the engine wrote. Keras on jax runs in the environment `env create keras` made where the driver's Python has no
    jax; without either, the other two run, then the test is skipped, saying so."""
    text = STUDY.read_text()
    study = tmp_path / STUDY.name
    if not _jax_runs():  # the grid's backends less jax, whatever else it lists
        text, dropped = re.subn(r"(?m)^(\s*keras_backend: \[)jax, ", r"\1", text)
        assert dropped == 1, "the study's grid no longer lists its backends as this test reads them"
    study.write_text(text)
    planned = spec.load(str(study)).trials("smoke")
    backends = sorted({t.keras_backend for t in planned})
    data = write_cifar10(tmp_path / "data", train_per_file=200, test=200)
    results = tmp_path / "results"
    out = run_cli(str(study), *shared_ray, "--results", str(results), "--data-dir", str(data), timeout=HANG_S)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    # The framework check: one per backend, naming Keras's version and the backend's.
    for backend in backends:
        line = next((row for row in out.stdout.splitlines() if re.match(rf"\s+\S+ \S+\s+keras/{backend}\s", row)), None)
        assert line and re.search(rf"\s3\.\d+\.\d+ on {backend} \d+\.\d+", line) and line.rstrip().endswith("OK"), \
            out.stdout
    run_dir = next((results / "keras3_backends").iterdir())
    trials = pd.read_parquet(run_dir / "trials")
    assert sorted(zip(trials.keras_backend, trials.num_gpus)) == sorted((t.keras_backend, t.num_gpus) for t in planned)
    assert set(trials.num_gpus) == {1, 2} and set(backends) >= {"tensorflow", "torch"}
    assert (trials.status == "completed").all() and (trials.framework == "keras").all(), trials.status
    assert trials.final_val_acc.between(0, 1).all() and (trials.final_val_acc > CHANCE).all(), trials.final_val_acc
    made = environments.made_environment("keras")
    for t in trials.itertuples():
        env = made if t.keras_backend == "jax" and not DRIVER_HAS_JAX else None
        ran_in = t.environment if isinstance(t.environment, str) else None  # a null: None, or NaN under pandas 3
        assert ran_in == (env.describe() if env else None), t
        assert t.python_executable == (env.value if env else sys.executable), t
    found = json.loads((run_dir / "run.json").read_text())["sessions"][0]["checks"]
    assert sorted(c["keras_backend"] for c in found) == sorted(backends) and all(c["ok"] for c in found)

    report = run_cli("report", str(run_dir), timeout=300)
    assert report.returncode == 0, report.stderr
    per_run = pd.read_csv(run_dir / "report" / "per_run.csv", index_col=[0, 1])
    side = pd.read_csv(run_dir / "report" / "frameworks.csv", index_col=[0, 1])
    epochs = pd.read_parquet(run_dir / "epochs")
    for t in trials.itertuples():
        # Study 000's table of this backend: its own group, a column per GPU count.
        group = next(g for g in set(per_run.index.get_level_values(0))
                     if g.startswith(f"keras {t.model} ") and f"keras_backend={t.keras_backend}" in g)
        column = f"GPU ({t.num_gpus})"
        mine = epochs[epochs.trial_id == t.trial_id]
        assert float(per_run.loc[(group, "Training time (s)"), column]) == pytest.approx(mine.epoch_time_s.sum())
        assert float(per_run.loc[(group, "Average time per epoch (s)"), column]) == pytest.approx(mine.epoch_time_s.mean())
        assert float(per_run.loc[(group, "Images processed per sec"), column]) == pytest.approx(t.steady_images_per_sec)
        assert float(per_run.loc[(group, "Training accuracy"), column]) == pytest.approx(t.final_train_acc)
        assert float(per_run.loc[(group, "Test accuracy"), column]) == pytest.approx(t.final_val_acc)
        assert "Maximum device memory, all GPUs (MiB)" in per_run.loc[group].index
        # The backends side by side (the model all three train): each over the first in name order at the same GPUs.
        (row,) = set(side.index.get_level_values(0))
        if t.model != "resnet8_cifar":
            continue
        assert float(side.loc[(row, "Images processed per sec"), f"{column} keras/{t.keras_backend}"]) == \
            pytest.approx(t.steady_images_per_sec)
    for gpus in (1, 2):
        at = trials[(trials.num_gpus == gpus) & (trials.model == "resnet8_cifar")].sort_values("keras_backend")
        base = at.steady_images_per_sec.iloc[0]  # the first backend in name order with a trial at this GPU count
        for t in at.itertuples():
            assert float(side.loc[(row, "Images/s over the first framework"), f"GPU ({gpus}) keras/{t.keras_backend}"]) \
                == pytest.approx(t.steady_images_per_sec / base)
    if "jax" not in backends:
        pytest.skip("keras on jax not run: no jax in this Python and no environment made by "
                    "`python -m sweep env create keras`")
