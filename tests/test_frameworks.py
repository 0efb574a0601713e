"""Every framework where it can run: environments per framework, the check per node, placement by it.

The GPU verdicts are decided from inputs (a build's CUDA and GPU code, a failed step's message): no
GPU here. Everything else runs for real: the check's child process imports each framework and trains
a step on a CPU device, and a two-node Ray cluster has a node whose MXNet is broken.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import BARE_HEAD, BARE_NODE, HANG_S, ROOT, TINY, run_cli

from sweep import checks, environments, spec, store
from sweep.cluster import Node
from sweep.environments import Environment
from sweep.errors import SpecError, UsageError
from trainables import probe
from trainables.config import DDP_TIMEOUT_ENV
from trainables.failure import TrialError
from trainables.probe import Build, FrameworkCheck

# Measured builds: mxnet-cu117 1.9.1 carries sm_50/60/70/80/86 and no PTX (cuobjdump on its libmxnet.so);
# tensorflow 2.21's wheel sm_60/70/80/89 and compute_90 (tf.sysconfig.get_build_info()).
MXNET_CU117 = Build("1.9.1", True, "11.7", None, 1)
TF_221 = Build("2.21.0", True, "12.5.1", ("sm_60", "sm_70", "sm_80", "sm_89", "compute_90"), 1)
H100 = ("NVIDIA H100 80GB HBM3", "sm_90")
A100 = ("NVIDIA A100-SXM4-80GB", "sm_80")
NO_KERNEL = TrialError("MXNetError", "Check failed: e == cudaSuccess (209 vs. 0) : CUDA: no kernel image is "
                                     "available for execution on the device", "mxnet.base.MXNetError")


def test_verdicts_on_gpus() -> None:
    # MXNet names no GPU code list: the failed step's CUDA error decides, or its CUDA predating the GPU.
    assert probe.verdict("mxnet", MXNET_CU117, H100, NO_KERNEL) == \
        "mxnet 1.9.1 (CUDA 11.7) has no kernels for sm_90 (NVIDIA H100 80GB HBM3)"
    died = TrialError("ProcessDied", "killed by SIGABRT: terminate called after throwing an instance of 'dmlc::Error'", "")
    assert probe.verdict("mxnet", MXNET_CU117, H100, died).endswith("has no kernels for sm_90 (NVIDIA H100 80GB HBM3)")
    assert probe.verdict("mxnet", MXNET_CU117, A100, None) is None
    assert probe.verdict("mxnet", MXNET_CU117, A100, died) == f"one training step failed: {died}"
    # TensorFlow lists its GPU code: Hopper runs its compute_90 PTX; an sm_89-less build could not run on Ada.
    assert probe.verdict("tensorflow", TF_221, H100, None) is None
    older = Build("2.10.0", True, "11.2", ("sm_35", "sm_50", "sm_60", "sm_70", "sm_75", "compute_80"), 1)
    assert probe.verdict("tensorflow", older, H100, None) is None  # PTX of an older architecture compiles for a newer one
    no_ptx = Build("2.x", True, "11.2", ("sm_60", "sm_70", "sm_80"), 1)
    assert probe.verdict("tensorflow", no_ptx, H100, None) == "tensorflow 2.x (CUDA 11.2) has no kernels for sm_90 (NVIDIA H100 80GB HBM3)"
    assert probe.verdict("tensorflow", no_ptx, ("NVIDIA A10", "sm_86"), None) is None  # sm_80 machine code runs on 8.6
    assert probe.verdict("mxnet", Build("1.9.1", False, None, None, 0), A100, None) == \
        "mxnet 1.9.1 is a CPU build: no kernels for the NVIDIA A100-SXM4-80GB"
    assert probe.verdict("tensorflow", Build("2.21.0", True, "12.5.1", TF_221.archs, 0), H100, None) == \
        "tensorflow 2.21.0 (CUDA 12.5.1) sees no GPU here (NVIDIA H100 80GB HBM3): its CUDA libraries did not load"
    # Emulated GPUs: only the step counts.
    assert probe.verdict("mxnet", Build("1.9.1", False, None, None, 0), None, None) is None


def test_environments_from_sweep_files_and_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "envs.yaml"
    path.write_text(GOOD + 'environments:\n  mxnet: {py_executable: /opt/mx/bin/python, env_vars: {OMP_PLACES: cores}}\n'
                    '  tensorflow: {uv: ["tensorflow==2.21.0"]}\n')
    sweep = spec.load(str(path))
    assert sweep.environments == {"mxnet": Environment("py_executable", "/opt/mx/bin/python", {"OMP_PLACES": "cores"}),
                                  "tensorflow": Environment("uv", ("tensorflow==2.21.0",))}
    chosen = environments.chosen(sweep.environments, ["mxnet={image_uri: nvcr.io/nvidia/mxnet:24.06-py3}"])
    assert chosen["mxnet"].runtime_env("/code") == {"image_uri": "nvcr.io/nvidia/mxnet:24.06-py3"}
    assert chosen["tensorflow"].describe() == "uv tensorflow==2.21.0"
    # An interpreter given relative to the shell becomes absolute; it gets this project's code on PYTHONPATH.
    _, env = environments.parse_option("mxnet=venvs/mx/bin/python")
    assert env.value == str(Path.cwd() / "venvs" / "mx" / "bin" / "python")
    assert env.runtime_env("/code") == {"py_executable": env.value, "env_vars": {"PYTHONPATH": "/code"}}


GOOD = 'description: "test"\nfixed: {model: resnet8_cifar, epochs: 1, lr: 0.1, framework: mxnet, num_gpus: 1, batch_per_gpu: 8}\n'
BAD_ENVIRONMENTS = [
    ("environments: [mxnet]", "environments: expected a mapping of framework"),
    ("environments: {torch: {pip: [torch]}}", "environments: unknown framework 'torch'"),
    ("environments: {mxnet: /opt/python}", "environments: mxnet: expected a mapping with one of py_executable"),
    ("environments: {mxnet: {py_executable: bin/python}}", "mxnet: py_executable: expected an absolute path"),
    ("environments: {mxnet: {pip: []}}", "mxnet: pip: expected a non-empty list of requirements"),
    ("environments: {mxnet: {pip: [mxnet], image_uri: x}}", "mxnet: expected exactly one of py_executable, pip, uv, image_uri, got pip and image_uri"),
    ("environments: {mxnet: {conda: env}}", "mxnet: unknown key 'conda'"),
    ("environments: {mxnet: {image_uri: 'a b'}}", "mxnet: image_uri: expected an image name without spaces"),
    ("environments: {mxnet: {uv: [x], env_vars: [A]}}", "mxnet: env_vars: expected a mapping of NAME: value"),
]


@pytest.mark.parametrize("text,expected", BAD_ENVIRONMENTS, ids=[t for t, _ in BAD_ENVIRONMENTS])
def test_bad_environment_in_a_sweep_file_is_one_line(text: str, expected: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD + text + "\n")
    with pytest.raises(SpecError) as err:
        spec.load(str(path))
    assert expected in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("option,expected", [
    ("mxnet", "--env mxnet: expected FRAMEWORK=PYTHON or FRAMEWORK={image_uri: ...}"),
    ("torch=/usr/bin/python3", "--env torch=/usr/bin/python3: unknown framework 'torch'"),
    ("mxnet={pip: [unclosed}", "--env mxnet={pip: [unclosed}: malformed YAML"),
    ("mxnet={pip: mxnet}", "--env mxnet={pip: mxnet}: pip: expected a non-empty list of requirements"),
])
def test_bad_env_option_is_one_line(option: str, expected: str) -> None:
    with pytest.raises(UsageError) as err:
        environments.chosen({}, [option])
    assert str(err.value).startswith(expected) and "\n" not in str(err.value), str(err.value)


def test_bad_env_option_through_the_cli_is_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    out = run_cli(str(path), "--env", "torch=/usr/bin/python3", "--results", str(tmp_path / "results"), timeout=120)
    assert out.returncode == 2 and out.stderr.strip() == "error: --env torch=/usr/bin/python3: unknown framework 'torch' " \
        "(expected one of mxnet, tensorflow, pytorch, keras)", out.stderr
    assert not (tmp_path / "results").exists()


@pytest.fixture(scope="module")
def env_run(tmp_path_factory: pytest.TempPathFactory, shared_ray: list[str]) -> tuple[Path, str]:
    """A real run whose sweep file names an interpreter that does not exist for MXNet, and whose --env names
    this one; two trials, at most one at a time (--max-concurrent 1): (its run folder, the interpreter given).
    On the session's shared Ray (four emulated GPUs, two CPUs): its subject is the environment, not Ray's start."""
    work = tmp_path_factory.mktemp("env-run")
    path = work / "env_over_file.yaml"
    path.write_text('description: "--env over the file\'s entry"\n'
                    "fixed: {model: resnet8_cifar, framework: mxnet, num_gpus: 1, batch_per_gpu: 8, epochs: 1, lr: 0.05,\n"
                    "        data: synthetic, steps_per_epoch: 2, warmup_steps: 1}\n"
                    "grid: {seed: [1, 2]}\n"
                    "environments:\n  mxnet: {py_executable: /nonexistent/python}\n")
    python = sys.executable
    # No environment `env create` made on this machine (keras's, mxnet's) joins the run's: its own root, empty.
    out = run_cli(str(path), "--env", f"mxnet={python}", "--max-concurrent", "1", "--results", str(work / "results"),
                  *shared_ray, timeout=400, env={"SWEEP_ENVS": str(work / "no-made-environments")})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    return store.run_dirs(work / "results", "env_over_file")[-1], python


@pytest.mark.slow
def test_env_replaces_the_sweep_files_entry_and_the_rows_say_so(env_run: tuple[Path, str]) -> None:
    folder, python = env_run
    epochs = pd.read_parquet(folder / "epochs")
    assert len(epochs) == 2 and set(pd.read_parquet(folder / "trials").status) == {"completed"}
    assert set(epochs.environment) == {f"py_executable {python}"} and set(epochs.python_executable) == {python}
    session = store.RunStore(folder).meta.sessions[-1]
    assert session.environments == {"mxnet": Environment("py_executable", python)}
    assert [(c.framework, c.ok, c.python) for c in session.checks] == [("mxnet", True, python)]


@pytest.mark.slow
def test_max_concurrent_bounds_the_trials_running_at_once(env_run: tuple[Path, str]) -> None:
    """Two 1-GPU trials on four emulated GPUs and two CPUs would start together; --max-concurrent 1 runs them
    one after the other (each trial's interval from Tune's start to its end, as the summary rows keep them)."""
    folder, _ = env_run
    first, second = pd.read_parquet(folder / "trials").sort_values("started_at").itertuples()
    assert first.ended_at <= second.started_at, (first.started_at, first.ended_at, second.started_at)


@pytest.mark.slow
def test_run_json_keeps_sessions_checks_and_environments_and_reads_older_files(env_run: tuple[Path, str]) -> None:
    folder, python = env_run
    text = (folder / "run.json").read_text()  # as the engine wrote it
    meta = store.RunMeta.from_json(text, "run.json")
    assert meta.sessions[0].checks and meta.sessions[0].environments  # something to keep
    assert store.RunMeta.from_json(meta.to_json(), "run.json") == meta
    # run.json as the engine wrote it before sessions had checks and environments: read as having none.
    older = json.loads(text)
    for s in older["sessions"]:
        del s["checks"], s["environments"]
    read = store.RunMeta.from_json(json.dumps(older), "run.json")
    assert read.sessions[0].checks == [] and read.sessions[0].environments == {}
    assert read.sessions[0].command == meta.sessions[0].command and f"--env mxnet={python}" in read.sessions[0].command


def test_unplaceable_trials_and_placement_from_the_checks() -> None:
    from sweep.cluster import Node
    from trainables.config import TrialConfig

    nodes = [Node("a" * 56, "10.0.0.1", 8, 4), Node("b" * 56, "10.0.0.2", 8, 4)]
    broken = "mxnet fails at import: OSError: libmxnet.so: file too short"
    found = [FrameworkCheck(nodes[0].node_id, "mxnet", ok=True), FrameworkCheck(nodes[1].node_id, "mxnet", ok=False, reason=broken),
             FrameworkCheck(nodes[0].node_id, "tensorflow", ok=False, reason="tensorflow is not installed for /x/python"),
             FrameworkCheck(nodes[1].node_id, "tensorflow", ok=False, reason="tensorflow is not installed for /x/python")]
    one = TrialConfig("mxnet", "resnet8_cifar", num_gpus=2, batch_per_gpu=8, epochs=1, lr=0.1)
    spread = TrialConfig("mxnet", "resnet8_cifar", num_gpus=2, batch_per_gpu=8, epochs=1, lr=0.1, nodes=2, kvstore="dist_sync")
    tf = TrialConfig("tensorflow", "resnet8_cifar", num_gpus=1, batch_per_gpu=8, epochs=1, lr=0.1)
    big = TrialConfig("mxnet", "resnet8_cifar", num_gpus=8, batch_per_gpu=8, epochs=1, lr=0.1)
    bad = checks.unplaceable([one, spread, tf, big], nodes, found)
    assert set(bad) == {spread.trial_id, tf.trial_id, big.trial_id}
    assert bad[tf.trial_id] == "tensorflow is not installed for /x/python"  # every node said the same: said once
    assert bad[spread.trial_id].startswith("needs 2 nodes with 1 GPUs and 1 CPUs each; mxnet runs on 1 of the cluster's 2 nodes")
    assert f"node ? bbbbbbbb: {broken}" in bad[spread.trial_id]
    assert "needs 8 GPUs" in bad[big.trial_id]  # too big anywhere: the resources say it
    assert checks.placement(found) == {"mxnet": (nodes[0].node_id,)}  # tensorflow runs nowhere: no placement to make
    assert checks.selector((nodes[0].node_id,)) == {"ray.io/node-id": f"in({nodes[0].node_id})"}


def test_an_interpreter_ray_cannot_start_workers_with_is_refused_before_ray_tries() -> None:
    """Ray retries a py_executable it cannot start for ever, and reports a worker of another Python or Ray
    as a version mismatch: the check tries the interpreter first."""
    import platform
    import sys

    import ray

    here = platform.python_version()
    assert probe.interpreter_problem(sys.executable, ray.__version__, here) is None
    assert probe.interpreter_problem("/nonexistent/python", ray.__version__, here) == \
        "/nonexistent/python: no such interpreter on this node"
    assert probe.interpreter_problem(sys.executable, "2.0.0", here).endswith(
        f"has ray {ray.__version__}; the cluster runs ray 2.0.0 (install ray==2.0.0 there)")
    assert probe.interpreter_problem(sys.executable, ray.__version__, "3.10.0") == (
        f"{sys.executable} is python {here}; the cluster runs python 3.10.0, and Ray's workers need the same "
        "(to the patch version)")
    assert probe.interpreter_problem(f"{sys.executable} -S", ray.__version__, here).startswith(
        f"{sys.executable} -S cannot run Ray workers: ModuleNotFoundError: No module named")  # -S: no site-packages


FAKE_NVIDIA_SMI = """#!/bin/sh
# The NVIDIA driver's tool as it answers on an H100 node (the one thing here that cannot be real).
case "$*" in
  *compute_cap*) echo "NVIDIA H100 80GB HBM3, 9.0" ;;
  *driver_version*) echo "NVIDIA H100 80GB HBM3, 580.159.04" ;;
  -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)" ;;
  *) echo "| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |" ;;
esac
"""


@pytest.mark.parametrize("framework,version", [("mxnet", "1.9.1"),  # TensorFlow's import (5-11 s): the full suite
                                               pytest.param("tensorflow", "2.21.0", marks=pytest.mark.slow)])
def test_the_check_on_a_gpu_node_finds_a_cpu_build(framework: str, version: str, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """The GPU path of the check, with only the GPU faked (nvidia-smi): this machine's builds are CPU builds."""
    (tmp_path / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # the GPU Ray gave the check's task
    found = probe.check(framework, "node", emulated=None)  # a joined cluster: the node says it has a GPU
    assert (found.gpu, found.arch, found.device, found.version) == ("NVIDIA H100 80GB HBM3", "sm_90", "gpu", version)
    assert not found.ok and found.reason == f"{framework} {version} is a CPU build: no kernels for the NVIDIA H100 80GB HBM3"


def test_a_check_outside_ray_shows_its_process_the_one_gpu_it_trains_on(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    """`env list` and an embedded run check without Ray: the check's process sees only the GPU it is given,
    as a Ray task's process sees only the GPU Ray gave it (not all of a node's GPUs, each of which a framework
    would set up). The child records its CUDA_VISIBLE_DEVICES through a sitecustomize module."""
    (tmp_path / "nvidia-smi").write_text(FAKE_NVIDIA_SMI.replace(
        '-L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)" ;;',
        '-L) printf "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\\n" ;;'))
    (tmp_path / "nvidia-smi").chmod(0o755)
    seen = tmp_path / "seen"
    (tmp_path / "sitecustomize.py").write_text(
        f"import os\nopen({str(seen)!r}, 'a').write(os.environ.get('CUDA_VISIBLE_DEVICES', 'unset') + '\\n')\n")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert probe.environment.real_gpu_count() == 2 and probe.first_gpu() == "0"
    found = probe.check("mxnet", "local", None, probe.first_gpu())
    assert (found.gpu, found.device) == ("NVIDIA H100 80GB HBM3", "gpu")
    assert seen.read_text().split() == ["0"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # a user's choice of GPU is kept
    seen.unlink()
    probe.check("mxnet", "local", None, probe.first_gpu())
    assert seen.read_text().split() == ["1"]


def test_the_check_says_why_a_framework_fails_at_import(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A broken install (libmxnet.so not a library): the framework crashes at import, in the check's child."""
    not_a_library = tmp_path / "libmxnet.so"
    not_a_library.write_text("not a shared library\n")
    monkeypatch.setenv("MXNET_LIBRARY_PATH", str(not_a_library))
    found = probe.check("mxnet", "node", emulated=True)
    assert not found.ok and found.version is None
    assert found.reason.startswith("mxnet fails at import: OSError: ") and str(not_a_library) in found.reason


SLOW_NETS = "import time\n\ntime.sleep(60)\n\n\ndef build(num_classes, image_size):\n    raise AssertionError('never built')\n"


def test_a_check_past_its_bound_says_so_and_names_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A check is bounded (SWEEP_CHECK_TIMEOUT_S, 300 s by default): a node too busy to answer in time (here a model
    module that sleeps at import) fails its check with the bound and the variable that gives it longer."""
    (tmp_path / "slow_nets.py").write_text(SLOW_NETS)
    monkeypatch.setenv(probe.TIMEOUT_ENV, "2")
    found = probe.check("mxnet", "node", emulated=True, models=(("slow_nets:build", 32, 10),), code=str(tmp_path))
    # The bound ended it, not the module's sleep: past that, the check would have said the model's own error.
    assert not found.ok and found.reason == "no answer within 2 s (SWEEP_CHECK_TIMEOUT_S gives a busy node longer)"
    assert checks.wait_s("default") == 62 and checks.wait_s("pip") == 662  # the driver's wait: Ray's start beyond it


@pytest.mark.parametrize("variable,run", [(probe.TIMEOUT_ENV, False), (probe.TIMEOUT_ENV, True), (DDP_TIMEOUT_ENV, True)],
                         ids=["check bound, env list", "check bound, run", "ranks' bound, run"])
def test_a_bad_bound_is_one_line_before_anything_runs(variable: str, run: bool, tmp_path: Path) -> None:
    """The seconds a run's processes read from the environment: a bad value is the driver's one line, not a trial's
    traceback (the ranks' bound was read first by the ranks, each failing its trial)."""
    command = [TINY, "--results", str(tmp_path / "results")] if run else ["env", "list"]
    out = run_cli(*command, env={variable: "soon"}, timeout=120)
    assert out.returncode == 2 and out.stderr == f"error: {variable}: expected seconds from 1 to 86400, got 'soon'\n"
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_a_joined_clusters_checks_take_the_drivers_bound(tmp_path: Path, shared_ray: list[str]) -> None:
    """The bound reaches every node's check with the run (sweep/cluster.py: TRIAL_ENV), whatever the node was started
    with: the shared cluster's own processes hold the suite's 1800 s."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "slow_nets.py").write_text(SLOW_NETS)
    path = tmp_path / "slow.yaml"
    path.write_text("description: a check that cannot answer in time\n"
                    "fixed: {model: 'slow_nets:build', framework: mxnet, num_gpus: 1, batch_per_gpu: 8, epochs: 1,\n"
                    "        lr: 0.05, data: synthetic, steps_per_epoch: 2, warmup_steps: 1}\n")
    results = tmp_path / "results"
    out = run_cli(str(path), "--code", str(code), "--results", str(results), *shared_ray, timeout=HANG_S,
                  env={probe.TIMEOUT_ENV: "2"})
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr
    assert "FAILED: no answer within 2 s (SWEEP_CHECK_TIMEOUT_S gives a busy node longer)" in out.stdout, out.stdout
    assert "1 of 1 trials fit no node" in out.stderr and not results.exists()


def test_a_passing_check_is_kept_for_the_rest_of_a_test_run_and_only_there(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    """Issue 46: the suite's engine runs checked the same MXNet in the same interpreter hundreds of times. Under
    SWEEP_KEPT_CHECKS (set by tests/conftest.py) a passing check is kept and read back, not run again: a kept
    result edited here comes back as it was edited. Another environment is another check (a broken install is
    found, and its failure is not kept), and without the variable, as outside the tests, every check runs."""
    kept = tmp_path / "kept"
    kept.mkdir()
    monkeypatch.setenv(probe.KEPT_CHECKS, str(kept))
    first = probe.check("mxnet", "node-a", emulated=True)
    assert first.ok and first.version == "1.9.1"
    (file,) = kept.iterdir()
    said = json.loads(file.read_text())
    file.write_text(json.dumps({**said, "build": {**said["build"], "version": "as kept"}}))
    again = probe.check("mxnet", "node-b", emulated=True)
    assert again.ok and again.version == "as kept" and again.node_id == "node-b"
    # An emulated check's GPU number names no device: the check Ray runs on fake GPU 3 is the same check.
    assert probe.check("mxnet", "node-b", emulated=True, gpu_id="3").version == "as kept"
    # Started from another folder, by another shell command, in a Ray task's environment (its threads, its logging),
    # with the project on PYTHONPATH once more (as a Ray worker's child has it): the same check.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path))
    monkeypatch.setenv("_", "/usr/bin/timeout")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONWARNINGS", "ignore::DeprecationWarning")
    search = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), *search]))
    assert probe.check("mxnet", "node-b", emulated=True).version == "as kept"
    not_a_library = tmp_path / "libmxnet.so"
    not_a_library.write_text("not a shared library\n")
    monkeypatch.setenv("MXNET_LIBRARY_PATH", str(not_a_library))
    assert not probe.check("mxnet", "node-a", emulated=True).ok
    assert list(kept.iterdir()) == [file]
    monkeypatch.delenv("MXNET_LIBRARY_PATH")
    monkeypatch.delenv(probe.KEPT_CHECKS)
    assert probe.check("mxnet", "node-a", emulated=True).version == "1.9.1"


BROKEN_SWEEP = """\
description: "MXNet and TensorFlow trials on two nodes; MXNet is broken on one of them"
fixed: {model: resnet8_cifar, data: synthetic, epochs: 1, steps_per_epoch: 2, warmup_steps: 1, batch_per_gpu: 8, lr: 0.05}
include:
  - {framework: mxnet, num_gpus: 1, seed: [1, 2, 3, 4]}
  - {framework: tensorflow, num_gpus: 1}
  - {framework: mxnet, nodes: 2, gpus_per_node: 1, kvstore: dist_sync}
"""


@pytest.mark.slow
def test_a_framework_that_runs_on_no_node_stops_the_run_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    results = tmp_path / "results"
    # An interpreter that is there but cannot run Ray's workers (one that is not there is refused before Ray starts).
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'this python is broken' >&2\nexit 1\n")
    python.chmod(0o755)
    out = run_cli(str(path), "--env", f"mxnet={python}", "--results", str(results), timeout=300)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stdout[-3000:] + out.stderr
    assert "1 of 1 trials fit no node" in out.stderr and "--skip-infeasible" in out.stderr
    assert f"FAILED: {python} cannot run Ray workers: this python is broken" in out.stdout  # the checks' table
    assert "1 trial fits no node (the cluster has 1 node; the largest has 2 GPUs" in out.stdout  # one of each: singular
    assert out.stdout.rstrip().endswith(f"{python} cannot run Ray workers: this python is broken")  # the infeasible table
    assert not results.exists()


def test_checks_started_before_ray_stand_for_each_node_with_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """start_here checks the frameworks of the driver's Python without Ray; run() hands each node with GPUs
    that check under its own id, and starts no Ray task for it (no Ray runs here)."""
    not_a_library = tmp_path / "libmxnet.so"
    not_a_library.write_text("not a shared library\n")
    monkeypatch.setenv("MXNET_LIBRARY_PATH", str(not_a_library))
    here = checks.start_here(["mxnet", "tensorflow"], {"tensorflow": Environment("uv", ("tensorflow==2.21.0",))},
                             emulated=True)
    assert list(here) == ["mxnet"]  # a framework with its own environment is checked in it, by Ray
    nodes = [Node("a" * 56, "10.0.0.1", cpus=2, gpus=2), Node("b" * 56, "10.0.0.2", cpus=2, gpus=0),
             Node("c" * 56, "10.0.0.3", cpus=2, gpus=1)]
    found = checks.run(nodes, ["mxnet"], {}, None, True, here)
    assert [(c.node_id, c.framework, c.ok, c.device) for c in found] == [
        ("a" * 56, "mxnet", False, "cpu-emulated"), ("c" * 56, "mxnet", False, "cpu-emulated")]
    assert found[0].reason.startswith("mxnet fails at import: OSError: ") and str(not_a_library) in found[0].reason


@pytest.mark.slow
def test_an_embedded_runs_check_in_the_drivers_python_finds_a_broken_framework(tmp_path: Path) -> None:
    """An embedded run checks the frameworks of the driver's Python in that Python while Ray starts
    (sweep/checks.py, start_here): a broken MXNet there stops the run as a failed Ray task's check would."""
    not_a_library = tmp_path / "libmxnet.so"
    not_a_library.write_text("not a shared library\n")
    path = tmp_path / "good.yaml"
    path.write_text(BROKEN_SWEEP)  # its 2-node trial makes the embedded Ray two nodes: the check stands for both
    results = tmp_path / "results"
    out = run_cli(str(path), "--results", str(results), timeout=300,
                  env={"MXNET_LIBRARY_PATH": str(not_a_library)})
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stdout[-3000:] + out.stderr
    assert "5 of 6 trials fit no node" in out.stderr
    table = out.stdout.split("framework checks (")[1].split("\ntrials")[0]
    assert len(re.findall(r" mxnet .*FAILED: mxnet fails at import: OSError: .*libmxnet.so", table)) == 2, table
    assert len(re.findall(r" tensorflow .* OK", table)) == 2, table  # the other framework of the same Python is unharmed
    assert not results.exists()


@pytest.fixture(scope="module")
def broken_node(tmp_path_factory: pytest.TempPathFactory):
    """Two Ray nodes (2 fake GPUs each); on the second, libmxnet.so is not a library (a broken install):
    MXNet fails at import there, in any trial or check its raylet starts."""
    from ray.cluster_utils import Cluster

    not_a_library = tmp_path_factory.mktemp("broken") / "libmxnet.so"
    not_a_library.write_text("not a shared library\n")
    node = {"num_cpus": 2, "num_gpus": 2}
    cluster = Cluster(initialize_head=True, head_node_args={**node, **BARE_HEAD})  # no dashboard: none read here
    broken = cluster.add_node(**node, **BARE_NODE, env_vars={"MXNET_LIBRARY_PATH": str(not_a_library)})
    cluster.wait_for_nodes()
    try:
        yield cluster, broken.node_id
    finally:
        cluster.shutdown()


@pytest.mark.slow
def test_trials_go_only_to_the_nodes_where_their_framework_runs(broken_node, tmp_path: Path) -> None:
    cluster, broken = broken_node
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN_SWEEP)
    results = tmp_path / "results"
    out = run_cli(str(path), "--address", cluster.address, "--results", str(results), "--scale", "full",
                  "--skip-infeasible", timeout=600)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]  # the two-node MXNet trial is infeasible
    # The checks' table: MXNet fails at import on the broken node, the rest is OK.
    table = out.stdout[out.stdout.index("framework checks"):].splitlines()
    lines = {(line.split()[1], line.split()[2]): line for line in table[2:6]}  # (node, framework) -> line
    assert "FAILED: mxnet fails at import: OSError" in lines[(broken[:8], "mxnet")]
    assert [line.endswith("  OK") for key, line in sorted(lines.items()) if key != (broken[:8], "mxnet")] == [True] * 3
    assert "1 trial fits no node" in out.stdout and "mxnet runs on 1 of the cluster's 2 nodes" in out.stdout
    run_dir = store.run_dirs(results, "broken")[-1]
    summary = pd.read_parquet(run_dir / "trials").set_index(["framework", "nodes", "seed"]).sort_index()
    epochs = pd.read_parquet(run_dir / "epochs")
    # Every MXNet trial ran, and on the healthy node: one placed on the broken node would have failed at import.
    mxnet = epochs[epochs.framework == "mxnet"]
    assert mxnet.trial_id.nunique() == 4 and set(mxnet.ray_node_id) == {cluster.head_node.node_id}
    assert (summary.loc["mxnet", 1].status == "completed").all() and summary.loc[("tensorflow", 1, 0)].status == "completed"
    spread = summary.loc[("mxnet", 2, 0)]
    assert spread.status == "infeasible" and "mxnet runs on 1 of the cluster's 2 nodes" in spread.error
    assert "mxnet fails at import: OSError" in spread.error
    # run.json keeps the checks, typed.
    session = store.RunStore(run_dir).meta.sessions[-1]
    assert {(c.node_id == broken, c.framework, c.ok) for c in session.checks} == {
        (False, "mxnet", True), (True, "mxnet", False), (False, "tensorflow", True), (True, "tensorflow", True)}
    assert all(c.version and c.device == "cpu-emulated" for c in session.checks if c.ok)

