"""`python -m sweep env create mxnet` and `env list`, and MXNet trials finding the environment it made.

Each test gets its own $SWEEP_ENVS. The environment is a real venv of this interpreter, made before
`env create` runs, as if an earlier create had been interrupted after its venv: create then finishes it.
To keep the test quick the venv also sees this interpreter's packages (a .pth file adding its
site-packages as a site folder, after the venv's own), so pip installs only what they lack: nothing on the 3.11 stack,
MXNet's numpy-1 stack on a numpy-2 one (into the venv; pip leaves packages outside it alone). A second
create changes nothing. The run at the end uses the environment a real `env create mxnet` made (CI's second lane makes
it), with MXNet and TensorFlow trials side by side.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import ROOT

from sweep import environments, venvs
from trainables.probe import FrameworkCheck


def sweep_cli(*args: str, envs: Path | None, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if envs is not None:
        env[environments.ROOT_VAR] = str(envs)
    return subprocess.run([sys.executable, "-m", "sweep", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _one_line_exit_2(out: subprocess.CompletedProcess, *words: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("error: "), out.stderr
    assert "Traceback" not in out.stderr and all(w in out.stderr for w in words), out.stderr


def _folder(envs: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(environments.ROOT_VAR, str(envs))
    return environments.env_dir("mxnet")


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _one_line_exit_2(sweep_cli("env", "create", "jax", envs=tmp_path), "invalid choice: 'jax'")
    _one_line_exit_2(sweep_cli("env", "create", "tensorflow", envs=tmp_path), "only mxnet", "pip install")
    _one_line_exit_2(sweep_cli("env", "frobnicate", envs=tmp_path), "invalid choice")
    if sys.version_info >= (3, 13):  # numpy 1.26 has no wheel here: refused before anything is made
        _one_line_exit_2(sweep_cli("env", "create", "mxnet", envs=tmp_path), "Python 3.12 at the newest")
        assert not any(tmp_path.iterdir())
        return
    folder = _folder(tmp_path, monkeypatch)
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")  # a folder of the user's, not a venv: left alone
    _one_line_exit_2(sweep_cli("env", "create", "mxnet", envs=tmp_path), "is not a venv")
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    (folder / "pyvenv.cfg").write_text("home = /nowhere\n")
    (folder / environments.MARKER).write_text("{not json")
    _one_line_exit_2(sweep_cli("env", "create", "mxnet", envs=tmp_path), "cannot be read", "remove the folder")
    # Complete by its marker, but its interpreter is gone: a broken environment, said so, not used.
    (folder / environments.MARKER).write_text(json.dumps({"framework": "mxnet"}))
    assert environments.made_environment("mxnet") is not None
    wanted = {"framework": "mxnet", "gpu": False, "requirements": venvs.requirements("mxnet", False),
              "python": sys.version.split()[0], "interpreter": environments.interpreter()}
    (folder / environments.MARKER).write_text(json.dumps(wanted))
    _one_line_exit_2(sweep_cli("env", "create", "mxnet", envs=tmp_path), "not a working environment",
                     "no such interpreter")


def test_the_environment_is_keyed_by_interpreter_and_holds_mxnets_stack(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _folder(tmp_path, monkeypatch)
    assert folder.parent == tmp_path and folder.name.startswith(f"mxnet-py{sys.version.split()[0]}-")
    monkeypatch.delenv(environments.ROOT_VAR)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert environments.env_dir("mxnet").parent == tmp_path / "data" / "sweep" / "envs"
    cpu, gpu = venvs.requirements("mxnet", False), venvs.requirements("mxnet", True)
    assert "mxnet==1.9.1" in cpu and "mxnet-cu117==1.9.1" in gpu and "mxnet==1.9.1" not in gpu
    from importlib import metadata
    assert f"ray=={metadata.version('ray')}" in cpu  # the driver's very Ray (its core: workers run there)
    assert {"numpy>=1.26,<2", "pandas>=2.2,<3", "pyarrow>=14,<25", "setuptools"} <= set(cpu)
    assert not any(r.startswith("matplotlib") for r in cpu)  # the report's: the driver draws, not a trial


def test_a_missing_framework_check_names_the_command() -> None:
    missing = FrameworkCheck("n1", "mxnet", ok=False, reason="mxnet is not installed for /usr/bin/python3")
    assert environments.with_hint(missing, {}).reason.endswith(
        "; make it an environment of its own: python -m sweep env create mxnet")
    env = environments.Environment("py_executable", "/opt/mx/bin/python")
    assert environments.with_hint(missing, {"mxnet": env}) == missing  # it has one: the reason stands as it is
    other = FrameworkCheck("n1", "tensorflow", ok=False, reason="tensorflow is not installed for /usr/bin/python3")
    assert environments.with_hint(other, {}).reason.endswith("install it: pip install -e '.[tensorflow]'")


@pytest.mark.slow
def test_create_finishes_a_started_environment_then_changes_nothing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _folder(tmp_path, monkeypatch)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    # As a site folder (its own .pth files too: setuptools' distutils shim, which MXNet's import needs).
    (folder / "lib" / version / "site-packages" / "drivers.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    first = sweep_cli("env", "create", "mxnet", envs=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr[-3000:]
    assert "making a venv" not in first.stdout and "installing into it" in first.stdout  # resumed, not remade
    assert "mxnet environment ready" in first.stdout
    row = next(line for line in first.stdout.splitlines() if line.startswith("  mxnet "))  # the check's table
    assert row.split()[1:3] == [str(folder), "1.9.1"] and row.rstrip().endswith("OK"), first.stdout
    marker = folder / environments.MARKER
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    second = sweep_cli("env", "create", "mxnet", envs=tmp_path)
    assert second.returncode == 0 and "up to date, nothing changed" in second.stdout, second.stdout + second.stderr
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()} == before
    assert json.loads(marker.read_text())["requirements"] == venvs.requirements("mxnet", False)

    # MXNet trials use it without --env; the sweep file's environments: and --env override it.
    made = environments.made_environment("mxnet")
    assert made == environments.Environment("py_executable", str(folder / "bin" / "python"))
    assert environments.chosen({}, [])["mxnet"] == made
    mine = environments.Environment("py_executable", "/opt/mx/bin/python")
    assert environments.chosen({"mxnet": mine}, [])["mxnet"] == mine
    assert environments.chosen({}, [f"mxnet={sys.executable}"])["mxnet"].value == sys.executable
    plan = sweep_cli("plan", str(ROOT / "tests" / "sweeps" / "tiny_mxnet.yaml"), "--nodes", "1", "--gpus-per-node", "2",
                     "--results", str(tmp_path / "results"), envs=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert (f"mxnet trials run in py_executable {folder}/bin/python (made by `python -m sweep env create mxnet`)"
            in plan.stdout.splitlines()), plan.stdout

    listed = sweep_cli("env", "list", envs=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[2:]}
    assert rows["mxnet"].split()[1:3] == [str(folder), "1.9.1"] and rows["mxnet"].rstrip().endswith("OK")
    assert "driver's Python" in rows["tensorflow"]


def test_env_list_names_the_command_where_mxnet_is_missing(tmp_path: Path) -> None:
    """Only where the driver's Python lacks MXNet (the numpy-2 stack) and no environment was made."""
    if importlib.util.find_spec("mxnet") is not None:
        pytest.skip("MXNet is installed in this interpreter (the numpy-1 stack)")
    listed = sweep_cli("env", "list", envs=tmp_path)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("  mxnet "))
    assert "driver's Python" in row and row.rstrip().endswith(
        f"FAILED: mxnet is not installed for {sys.executable}; make it an environment of its own: "
        "python -m sweep env create mxnet"), row


@pytest.mark.slow
def test_a_sweep_runs_mxnet_in_its_environment_and_tensorflow_in_the_drivers(tmp_path: Path) -> None:
    """The sweep CI's second lane runs (tests/sweeps/stacks.yaml): every framework's trials, MXNet's in
    the environment `env create mxnet` made, the others (Keras on jax and torch among them) in the driver's Python;
    their rows say which."""
    made = environments.made_environment("mxnet")
    missing = [name for name in ("jax", "keras", "torch") if importlib.util.find_spec(name) is None]
    if made is None or missing:
        why = ("no environment made by `python -m sweep env create mxnet` for this interpreter" if made is None else
               f"the driver's Python lacks {', '.join(missing)}: stacks.yaml runs keras on jax and torch in it")
        if os.environ.get("SWEEP_EXPECT_MADE_ENV"):
            pytest.fail(why)
        pytest.skip(why)
    out = sweep_cli(str(ROOT / "tests" / "sweeps" / "stacks.yaml"), "--results", str(tmp_path), envs=None)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    assert f"mxnet trials run in py_executable {made.value} (made by `python -m sweep env create mxnet`)" in out.stdout
    run_dir = next((tmp_path / "stacks").iterdir())
    rows = pq.read_table(run_dir / "epochs").to_pylist()
    frameworks = {r["framework"] for r in rows}
    from sweep import spec

    planned = spec.load(str(ROOT / "tests" / "sweeps" / "stacks.yaml")).trials("full")
    swept = {t.framework for t in planned}
    assert frameworks == swept and "mxnet" in frameworks and all(r["status"] == "completed" for r in rows)
    assert sorted((r["keras_backend"], r["num_gpus"]) for r in rows if r["framework"] == "keras" and r["epoch"] == 0) \
        == sorted((t.keras_backend, t.num_gpus) for t in planned if t.framework == "keras")
    for r in rows:
        if r["framework"] == "mxnet":
            assert (r["environment"], r["python_executable"]) == (made.describe(), made.value), r
            assert r["numpy_version"].startswith("1.")
        else:
            assert r["environment"] is None and r["python_executable"] == sys.executable, r
    checks = json.loads((run_dir / "run.json").read_text())["sessions"][0]["checks"]
    assert {c["framework"]: c["ok"] for c in checks} == dict.fromkeys(frameworks, True)
    assert sorted(c["keras_backend"] for c in checks if c["framework"] == "keras") == ["jax", "torch"]


def test_the_keras_environment_holds_jax_on_numpy_2_and_is_cpu_only(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Keras 3 on JAX needs numpy >= 2 (jax 0.10.2 says so): its environment holds jax[cpu], keras 3 and numpy 2
    besides what a trial imports; --gpu is refused in one line before anything is made (a GPU machine's
    image brings its own CUDA JAX)."""
    from importlib import metadata

    from sweep.errors import UsageError

    wanted = venvs.requirements("keras", False)
    assert {"keras>=3.15,<4", "jax[cpu]>=0.10", "numpy>=2", f"ray=={metadata.version('ray')}"} <= set(wanted)
    assert not any(r.startswith(("matplotlib", "mxnet", "tensorflow", "torch")) for r in wanted)
    monkeypatch.setenv(environments.ROOT_VAR, str(tmp_path))
    with pytest.raises(UsageError, match=r"--gpu is for mxnet only; keras's environment is CPU-only"):
        venvs.create("keras", True)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
# Heavy (issue 46: ~60 CPU-s and a 1.2 GB install): CI's lane 2 makes MXNet's environment for real, twice, through the
# same venvs.create; keras's own requirements and refusals are checked above.
@pytest.mark.heavy
def test_create_keras_makes_a_numpy_2_jax_environment_then_changes_nothing(tmp_path: Path) -> None:
    """A real `env create keras` (pip's cache makes it about 40 s; 1.2 GB), then a second that changes nothing."""
    create = ("import sys; from sweep import venvs; sys.exit(venvs.create('keras', False))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), environments.ROOT_VAR: str(tmp_path)}
    first = subprocess.run([sys.executable, "-c", create], cwd=ROOT, capture_output=True, text=True, timeout=1800, env=env)
    assert first.returncode == 0 and "keras environment ready" in first.stdout, first.stdout + first.stderr[-3000:]
    folder = next(tmp_path.glob("keras-py*"))
    versions = subprocess.run([str(folder / "bin" / "python"), "-c",
                               "import numpy, jax, keras; print(numpy.__version__, jax.__version__, keras.version(), "
                               "jax.devices()[0].platform)"], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "KERAS_BACKEND": "jax"})
    numpy_version, jax_version, keras_version, platform_name = versions.stdout.split()
    assert numpy_version.startswith("2.") and keras_version.startswith("3.") and platform_name == "cpu", versions
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    second = subprocess.run([sys.executable, "-c", create], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert second.returncode == 0 and "up to date, nothing changed" in second.stdout, second.stdout + second.stderr
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()} == before
