"""The framework check: can this framework train here, on this node, in this environment?

sweep/checks.py runs `check` as a Ray task pinned to each node, in each framework's environment,
before any trial. `check` imports no framework itself: it reads the node's GPU from the NVIDIA driver,
then starts `python -m trainables.probe FRAMEWORK GPU EMULATED` in the same interpreter, which imports
the framework, reports its build and trains one step of the real loop (trainables.loop, the real
backend, a tiny model) on one of the node's GPUs, or on a CPU device where GPUs are emulated: the same
code either way. A child process, because a framework may kill the process it runs in (a crash at
import, a fatal CUDA error); what it said before dying still counts.

The verdict is one line, for example "mxnet 1.9.1 (CUDA 11.7) has no kernels for sm_90 (NVIDIA H100
80GB HBM3)": from the build's GPU code list where the framework gives one (TensorFlow), else from
the failed step's error and the CUDA version the build predates the GPU by (MXNet).
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from pathlib import Path

from trainables import environment
from trainables.config import env_seconds, runs_as
from trainables.failure import TrialError, first_line, trial_error

PREFIX = "SWEEP_PROBE "  # the child's result lines, among whatever the framework prints
# How long the check's child may take to import its framework and train its step: seconds on an idle node, minutes
# on a busy one (keras on jax took 272 s of wall time for 17 CPU-s beside CI's first lane on two cores). The driver
# reads it from its environment (sweep/launch.py refuses a bad value) and passes it to every node (sweep/cluster.py).
TIMEOUT_ENV = "SWEEP_CHECK_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0
NO_ANSWER = "no answer within"


def step_timeout_s() -> float:
    """$SWEEP_CHECK_TIMEOUT_S, else 300 s; ValueError naming the variable for anything but seconds from 1 to 86400."""
    return env_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT_S, 86400)


# CUDA errors that mean "this build has no code for this GPU" (cudaErrorNoKernelImageForDevice,
# CUDA_ERROR_NO_BINARY_FOR_GPU, and cudaErrorInvalidDeviceFunction from older runtimes).
NO_KERNEL_WORDS = ("no kernel image is available", "no_binary_for_gpu", "invalid device function")
# The first CUDA release that compiles for each architecture: a build made with an older CUDA has no
# code for it (and without PTX of an older architecture, nothing to compile from at run time).
FIRST_CUDA = {"sm_70": (9, 0), "sm_75": (10, 0), "sm_80": (11, 0), "sm_86": (11, 1), "sm_87": (11, 4),
              "sm_89": (11, 8), "sm_90": (11, 8), "sm_100": (12, 8), "sm_120": (12, 8)}


@dataclass(frozen=True)
class Build:
    """What a framework says of itself (trainables/<framework>/backend.py: build())."""

    version: str
    gpu_build: bool  # built with CUDA
    cuda: str | None  # the CUDA version it was built with, where readable
    archs: tuple[str, ...] | None  # the GPU code it carries (sm_80, compute_90), where it says
    gpus: int  # GPUs it sees here


@dataclass(frozen=True)
class FrameworkCheck:
    """One framework on one node: run.json keeps them (sweep/store.py), the console prints them."""

    node_id: str
    framework: str
    ok: bool
    reason: str | None = None  # one line, when not ok
    hostname: str | None = None  # the node's, or its address where the check could not say
    python: str | None = None  # the interpreter the framework ran in
    version: str | None = None  # the framework's
    cuda: str | None = None  # the CUDA it was built with
    gpu: str | None = None  # the GPU model of the node (None where GPUs are emulated)
    arch: str | None = None  # its architecture, sm_XY
    device: str | None = None  # what the step trained on: gpu or cpu-emulated
    seconds: float | None = None  # how long the check took on the node
    # Why `decode: gpu` cannot run here (PyTorch without an importable torchvision), None where it can or the
    # framework has no GPU decode (sweep/spec.py refuses the setting for those).
    no_gpu_decode: str | None = None
    zoos: tuple[str, ...] | None = None  # the model zoos that import here (zoo.ZOOS), None where the check did not say
    # The sweep's models named outside the engine's zoo that this framework cannot train here, each as
    # {"model", "message" (one line), "known" (an unknown zoo name: the zoo's names, for the close ones)}.
    model_problems: tuple[dict, ...] = ()
    keras_backend: str | None = None  # framework keras: the backend it was checked on (its version is in `version`)

    @property
    def runs_as(self) -> str:
        """What the check stands for: the name its trials' environment goes by (trainables.config.runs_as)."""
        return runs_as(self.framework, self.keras_backend or "")

    @classmethod
    def failed(cls, node_id: str, name: str, reason: str, **more: object) -> FrameworkCheck:
        """A check of `name` (a framework, or keras with its backend: runs_as) that failed before its probe said a word."""
        framework, _, backend = name.partition("/")
        return cls(node_id, framework, ok=False, reason=reason, keras_backend=backend or None, **more)


def cuda_in_name(package: str) -> str | None:
    """The CUDA version in the name of the distribution that installed `package` (mxnet-cu117: 11.7)."""
    for dist in metadata.packages_distributions().get(package, []):
        match = re.search(r"cu(\d+)(\d)$", dist)
        if match:
            return f"{match.group(1)}.{match.group(2)}"
    return None


def _cc(arch: str) -> tuple[int, int]:
    digits = re.sub(r"\D", "", arch)
    return int(digits[:-1] or 0), int(digits[-1:] or 0)


def runs_on(archs: tuple[str, ...], arch: str) -> bool:
    """Whether GPU code for `archs` runs on an `arch` GPU: machine code of the same major version and no
    newer minor one, or PTX of this or an older architecture (compiled when it loads)."""
    major, minor = _cc(arch)
    for code in archs:
        a, b = _cc(code)
        if code.startswith("sm_") and a == major and b <= minor:
            return True
        if code.startswith("compute_") and (a, b) <= (major, minor):
            return True
    return False


def _older_than(cuda: str | None, arch: str) -> bool:
    first = FIRST_CUDA.get(arch)
    if not cuda or not first:
        return False
    return tuple(int(p) for p in re.findall(r"\d+", cuda)[:2]) < first


def verdict(framework: str, build: Build, gpu: tuple[str, str] | None, error: TrialError | None) -> str | None:
    """Why the framework cannot train on this node (one line), or None when it can. gpu: (model, sm_XY)
    of a real GPU, None where GPUs are emulated; error: the training step's, if it failed."""
    name = f"{framework} {build.version}" + (f" (CUDA {build.cuda})" if build.cuda else "")
    if gpu:
        model, arch = gpu
        no_kernels = f"{name} has no kernels for {arch} ({model})"
        if not build.gpu_build:
            return f"{name} is a CPU build: no kernels for the {model}"
        if build.archs and not runs_on(build.archs, arch):
            return no_kernels
        if build.gpus == 0:
            return f"{name} sees no GPU here ({model}): its CUDA libraries did not load"
        if error and (any(w in error.message.lower() for w in NO_KERNEL_WORDS) or _older_than(build.cuda, arch)):
            return no_kernels
    if error:
        return f"one training step failed: {error}"
    return None


def interpreter_problem(command: str, ray_version: str, python_version: str, level: str = "patch",
                        timeout_s: float = 60) -> str | None:
    """What keeps an interpreter (a py_executable) from running this cluster's Ray workers, or None.

    Ray starts workers with it and, when it cannot, retries for ever in silence; a worker of another Ray
    or Python than the cluster's starts, but Ray reports a version mismatch (at Ray's own level of Python
    version, RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL: patch unless set). So it is tried first."""
    words = shlex.split(command)
    try:
        out = subprocess.run([*words, "-c", "import platform, ray; print(ray.__version__, platform.python_version())"],
                             capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return f"{words[0]}: no such interpreter on this node"
    except PermissionError:
        return f"{words[0]}: not executable on this node"
    except subprocess.TimeoutExpired:
        return f"{command}: no answer within {timeout_s:g} s"
    if out.returncode != 0:
        return f"{command} cannot run Ray workers: {first_line(_last_line(out.stderr))}"
    said = out.stdout.split()
    ray_there, python_there = said[-2:] if len(said) >= 2 else ("?", "?")
    if ray_there != ray_version:
        return f"{command} has ray {ray_there}; the cluster runs ray {ray_version} (install ray=={ray_version} there)"
    parts = 2 if level == "minor" else 3
    if python_there.split(".")[:parts] != python_version.split(".")[:parts]:
        return (f"{command} is python {python_there}; the cluster runs python {python_version}, "
                f"and Ray's workers need the same (to the {level} version)")
    return None


def _child_env(code: str | None = None) -> dict[str, str]:
    """The child imports the same trainables as this process, wherever Ray found them, and the user's models'
    code from `code` (run --code DIR, for a check outside Ray; Ray's tasks have it on PYTHONPATH already)."""
    root = str(Path(__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, code, os.environ.get("PYTHONPATH")) if p)}


def _death(code: int) -> str:
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


def check(name: str, node_id: str, emulated: bool | None, gpu_id: str | None = None,
          models: tuple[tuple[str, int], ...] = (), code: str | None = None) -> FrameworkCheck:
    """The check on this node: in a Ray task, on the GPU Ray gave it (CUDA_VISIBLE_DEVICES holds it); outside
    Ray, on gpu_id, which its process alone sees, as a Ray task's would. name: a framework, or keras with the
    backend it runs on ("keras/jax": trainables.config.runs_as). models: the sweep's (name, image side)
    named outside the engine's zoo, each built and run forward once (a zoo's or the user's own, docs/models.md);
    code: a folder of the user's models to import from (a check outside Ray)."""
    t0 = time.time()
    framework, _, backend = name.partition("/")
    ids = [gpu_id] if gpu_id is not None else _visible_gpus()
    env = _child_env(code) if gpu_id is None else {**_child_env(code), "CUDA_VISIBLE_DEVICES": gpu_id}
    if emulated is None:  # a joined cluster: each node tells for itself
        emulated = environment.real_gpu_count() == 0
    gpu = environment.gpu_architecture(int(ids[0])) if ids and not emulated else None
    base = {"node_id": node_id, "framework": framework, "keras_backend": backend or None, "hostname": platform.node(),
            "python": sys.executable,
            "gpu": gpu[0] if gpu else None, "arch": gpu[1] if gpu else None,
            "device": "cpu-emulated" if emulated else "gpu"}
    command = [sys.executable, "-m", "trainables.probe", name, ids[0] if ids else "0", "1" if emulated else "0",
               json.dumps(models)]
    kept = None if models or code else _kept_check(framework, command, env, emulated)
    if kept is not None and kept.exists():
        said, died = json.loads(kept.read_text()), None
    else:
        said, died = _probe(command, env)
        if kept is not None and died is None and said.get("step") == "ok":  # only a passing check is kept
            _keep(kept, said)
    build = Build(**{**said["build"], "archs": tuple(said["build"]["archs"] or ()) or None}) if "build" in said else None
    reason: str | None
    if died and died.startswith(NO_ANSWER):  # whatever it said so far: it was not done
        reason = died
    elif build is None:
        if "import_error" in said:
            kind, message, _ = said["import_error"]
            reason = (f"{said['missing']} is not installed for {sys.executable}" if said.get("missing") else
                      f"{framework} fails at import: {kind}: {message}")
        else:
            reason = f"{framework} ended its process at import ({died or 'without a word'})"
    else:
        error = TrialError(*said["step_error"]) if "step_error" in said else (
            TrialError("ProcessDied", died, "") if died else None)
        if "keras_backend" in said:  # "3.15.0 on jax 0.10.2": Keras's version and the backend's it ran on
            build = replace(build, version=f"{build.version} on {' '.join(said['keras_backend'])}")
        reason = verdict(framework, build, gpu, error)
        if reason is None and backend and said.get("keras_backend", [backend])[0] != backend:
            reason = f"keras {build.version}: asked for the {backend} backend (KERAS_BACKEND) and got another"
    return FrameworkCheck(**base, ok=reason is None, reason=reason, version=build.version if build else None,
                          cuda=build.cuda if build else None, seconds=round(time.time() - t0, 1),
                          no_gpu_decode=said.get("no_gpu_decode"),
                          zoos=tuple(said["zoos"]) if "zoos" in said else None,
                          model_problems=tuple(said.get("model_problems", ())))


def _probe(command: list[str], env: dict[str, str]) -> tuple[dict[str, object], str | None]:
    """The child's run: what it said (its PREFIX lines), and how it died, None where it exited 0."""
    said: dict[str, object] = {}
    timeout_s = step_timeout_s()
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
        for line in out.stdout.splitlines():
            if line.startswith(PREFIX):
                said.update(json.loads(line[len(PREFIX):]))
        died = None if out.returncode == 0 else f"{_death(out.returncode)}: {_last_line(out.stderr)}"
    except subprocess.TimeoutExpired:
        died = f"{NO_ANSWER} {timeout_s:g} s ({TIMEOUT_ENV} gives a busy node longer)"
    return said, died


# A folder where passing checks are kept for the rest of a test run: the test suite sets it (tests/conftest.py), so
# that its hundreds of engine runs do not check the same framework build in the same interpreter again each time
# (2.4 s each). A run outside the tests checks every time.
KEPT_CHECKS = "SWEEP_KEPT_CHECKS"
MODULES = {"pytorch": "torch"}  # each framework's top-level module, where its name is not the framework's
# Environment variables that differ between two runs of the same check: Ray's, pytest's, and the tag the test suite
# gives the processes each of its workers starts (tests/conftest.py).
_VARYING = ("RAY_", "PYTEST_", "SWEEP_TEST_PROCESS")
# What no check's verdict reads, yet differs between the processes that start the same check: where a shell stands,
# how much a process logs and how many threads it takes (a Ray task's environment against the driver's), caches and
# the network. Left in, a suite's run checked one framework build again and again (issue 46).
_NOT_READ = {"_", "PWD", "OLDPWD", "SHLVL",
             "PYTHONWARNINGS", "PYTHONBREAKPOINT", "SPT_NOENV", "GRPC_VERBOSITY", "TF_CPP_MIN_LOG_LEVEL", "OMP_NUM_THREADS",
             "TORCHINDUCTOR_CACHE_DIR", "no_proxy", "NO_PROXY", "SWEEP_CIFAR10_URL", "SWEEP_CIFAR10_CHECKSUM"}
# Search paths, each folder once in its first place: Ray's workers and the check's own child add the project's folder
# again at each level, the same path read the same way.
_PATHS = {"PATH", "PYTHONPATH", "LD_LIBRARY_PATH"}


def _kept_check(framework: str, command: list[str], env: dict[str, str], emulated: bool) -> Path | None:
    """Where a passing check's result is kept under KEPT_CHECKS, None where that is not set. Its name holds all
    that could change the result: this host, the interpreter and the child's arguments (the command), the
    framework's installed files (where its package is, and when that was written: a reinstall is another build),
    and the child's environment (a test breaks a framework through it). Found without importing the framework.
    An emulated check's GPU number names no device (its step runs on the CPU): left out, the checks that Ray ran on
    fake GPU 0 and on fake GPU 3 are one."""
    folder = os.environ.get(KEPT_CHECKS)
    if not folder:
        return None
    if emulated:
        command = [*command[:4], "emulated", *command[5:]]
        env = {k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"}
    try:
        spec = importlib.util.find_spec(MODULES.get(framework, framework))
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not os.path.exists(spec.origin):
        return None
    environ = sorted((k, os.pathsep.join(dict.fromkeys(v.split(os.pathsep))) if k in _PATHS else v)
                     for k, v in env.items() if not k.startswith(_VARYING) and k not in _NOT_READ)
    key = json.dumps([platform.node(), command, spec.origin, os.stat(spec.origin).st_mtime_ns, environ])
    return Path(folder) / f"{hashlib.sha256(key.encode()).hexdigest()}.json"


def _keep(kept: Path, said: dict[str, object]) -> None:
    """Written whole (checks of several nodes may end at once); a folder that cannot take it keeps nothing."""
    part = kept.with_name(f"{kept.name}.{os.getpid()}-{time.time_ns()}.part")
    try:
        part.write_text(json.dumps(said))
        part.replace(kept)
    except OSError:
        part.unlink(missing_ok=True)


def _visible_gpus() -> list[str]:
    return [i for i in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if i]


def first_gpu() -> str | None:
    """The GPU a check outside Ray trains its step on, as a Ray task would on one GPU: the first visible."""
    visible = _visible_gpus()
    return visible[0] if visible else ("0" if environment.real_gpu_count() else None)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def _say(**what: object) -> None:
    print(PREFIX + json.dumps(what), flush=True)


def main(argv: list[str]) -> int:
    """The child: import the framework, say its build, train one step (`python -m trainables.probe FRAMEWORK GPU EMULATED`).
    `python -m trainables.probe --check FRAMEWORK`: the whole check on this machine, in this interpreter,
    as one JSON line (`python -m sweep env list`, without Ray)."""
    from trainables.config import TrialConfig
    from trainables.loop import Devices, TrialLoop, backend_module

    if argv[0] == "--check":
        print(json.dumps(asdict(check(argv[1], "local", None, first_gpu()))), flush=True)
        return 0
    framework, _, keras_backend = argv[0].partition("/")
    gpu_id, emulated = argv[1], argv[2] == "1"
    models = [tuple(m) for m in json.loads(argv[3])] if len(argv) > 3 else []
    devices = Devices.of([gpu_id], emulated)  # before the framework loads: it reads CUDA_VISIBLE_DEVICES once
    cfg = TrialConfig(framework=framework, model="resnet8_cifar", num_gpus=1, batch_per_gpu=2, epochs=1, lr=0.01,
                      data="synthetic", steps_per_epoch=1, warmup_steps=0, seed=0,
                      **({"keras_backend": keras_backend} if keras_backend else {}))
    try:
        if keras_backend and importlib.util.find_spec(keras_backend) is None:  # said as missing, not as Keras's error
            raise ModuleNotFoundError(f"No module named '{keras_backend}'", name=keras_backend)
        backend = backend_module(cfg, devices)  # Keras's backend chosen from the config, as a trial's
    except Exception as e:  # noqa: BLE001 - the framework's own failure is the answer
        error = trial_error(e)
        module = (e.name or "").split(".")[0] if isinstance(e, ModuleNotFoundError) else None
        missing = module if module in (MODULES.get(framework, framework), keras_backend) else None
        _say(import_error=[error.error_type, error.message, error.error_class], missing=missing)
        return 0
    _say(build=asdict(backend.build()))
    if keras_backend:
        _say(keras_backend=keras_backend_version())
    try:
        TrialLoop(cfg, devices, None).run_epoch(0)
    except Exception as e:  # noqa: BLE001
        error = trial_error(e)
        _say(step_error=[error.error_type, error.message, error.error_class])
        return 0
    _say(step="ok")
    check_models(framework, models)
    if framework == "pytorch":
        _say(no_gpu_decode=gpu_decode_problem())
    return 0


def keras_backend_version() -> list[str]:
    """The backend Keras runs on in this process and that framework's version: ["jax", "0.10.2"]. Keras is loaded
    already (trainables/keras/backend.py, by backend_module): taken from sys.modules, as this module, which the driver
    imports, names no framework."""
    name = sys.modules["keras"].backend.backend()
    return [name, str(importlib.import_module(name).__version__)]


def check_models(framework: str, models: list[tuple[str, int, int]]) -> None:
    """Say the zoos this framework has here, and each named model's problem: one that does not build or give one
    logit per class is refused before any trial (sweep/checks.py: model_refusal)."""
    from trainables import zoo

    module = importlib.import_module(f"trainables.{framework}.models")
    _say(zoos=module.zoos())
    problems = []
    for name, image_size, classes in models:  # as the trials build them: their input side and class count
        try:
            module.check_named(name, image_size, classes)
        except zoo.ModelError as e:
            problems.append({"model": name, "message": str(e), "known": e.known})
        except Exception as e:  # noqa: BLE001 - what the framework raised about the model, in one line
            error = trial_error(e)
            problems.append({"model": name, "message": f"model {name}: {error}", "known": None})
    _say(model_problems=problems)


def gpu_decode_problem() -> str | None:
    """Why this interpreter cannot decode JPEGs on the GPU as `decode: gpu` does (torchvision.io.decode_jpeg), or None."""
    try:
        importlib.import_module("torchvision.io").decode_jpeg  # by name: the engine's modules import no framework
    except Exception as e:  # noqa: BLE001 - not installed, or built for another torch ("operator torchvision::nms does not exist")
        return f"torchvision cannot be imported here ({type(e).__name__}: {first_line(str(e))})"
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
