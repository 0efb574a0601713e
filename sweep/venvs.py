"""`python -m sweep env create FRAMEWORK [--gpu]` and `python -m sweep env list`.

A framework whose packages cannot share the driver's (MXNet 1.9.1 needs numpy < 2; the driver may hold
numpy 2 and pandas 3) gets a venv of the driver's very interpreter, as Ray's workers need the driver's
Python (Ray checks every worker's against the driver's, to the patch level by default). Into it go the
framework's extra and the engine's own dependencies from pyproject.toml that a trial's workers import,
with Ray's core pinned to the
driver's version; the engine's code reaches it through PYTHONPATH (sweep/environments.py,
Environment.runtime_env). Where it lives and how the driver finds it: sweep/environments.py
(env_dir, made_environment).

`create` is resumable and idempotent: the marker file is written last, so an interrupted create
continues where it stopped (venv and pip both skip what is there), and a complete environment that
matches what is asked is left alone, and said so.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from sweep import environments
from sweep.environments import MARKER, env_dir, env_python, made_marker
from sweep.errors import UsageError, read_or_refuse
from trainables.config import FRAMEWORKS
from trainables.failure import first_line
from trainables.probe import NO_ANSWER, TIMEOUT_ENV, FrameworkCheck, interpreter_problem, step_timeout_s

# The CUDA build of a framework, for --gpu: the same version, the GPU distribution's name.
GPU_BUILDS = {"mxnet": ("mxnet", "mxnet-cu117")}
# The newest Python each framework's environment can have: numpy 1.26, which MXNet needs, has no wheel
# for 3.13 (pip builds it from source, about 10 minutes, and MXNet is untested there).
NEWEST_PYTHON = {"mxnet": (3, 12)}
DRIVER_ONLY = ("matplotlib",)  # engine dependencies a trial never imports (the report draws in the driver)
PIP_TIMEOUT_S = 1800
CHECK_STARTING_S = 300  # the check's own interpreter, beyond its child's bound: a fresh environment's first imports


def project_requirements() -> tuple[list[str], dict[str, list[str]]]:
    """The engine's dependencies and extras: from the checkout's pyproject.toml where the code runs from
    one, else from the installed distribution's metadata."""
    root = environments.code_root()
    if root and (Path(root) / "pyproject.toml").is_file():
        import tomllib

        project = tomllib.loads((Path(root) / "pyproject.toml").read_text())["project"]
        return list(project["dependencies"]), {k: list(v) for k, v in project["optional-dependencies"].items()}
    base: list[str] = []
    extras: dict[str, list[str]] = {}
    for line in metadata.requires("sweep") or []:
        requirement, _, marker = line.partition(";")
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        (extras.setdefault(extra.group(1), []) if extra else base).append(requirement.strip())
    return base, extras


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def requirements(framework: str, gpu: bool) -> list[str]:
    """What the environment holds: the framework's extra (its build, numpy < 2 and the rest of its
    stack), the engine's own dependencies that a trial imports, and the driver's very Ray."""
    base, extras = project_requirements()
    # Ray's core only: the Tune trainable, the dashboard and the metrics agent run in the driver's Python;
    # the environment's processes are Ray workers and the framework servers they start.
    ray = f"ray=={metadata.version('ray')}"
    out = [ray if _name(r) == "ray" else r for r in base if _name(r) not in DRIVER_ONLY]
    for r in extras[framework]:
        cpu_name, gpu_name = GPU_BUILDS.get(framework, ("", ""))
        out.append(r.replace(cpu_name, gpu_name, 1) if gpu and _name(r) == cpu_name else r)
    return out


def create(framework: str, gpu: bool) -> int:
    """Make (or finish, or leave alone) the framework's environment for this interpreter."""
    if framework not in environments.CREATABLE:
        raise UsageError(f"env create: no environment recipe for {framework} (only {', '.join(environments.CREATABLE)}); "
                         f"{framework} runs in the driver's Python: pip install -e '.[{framework}]'")
    if gpu and framework not in GPU_BUILDS:  # a GPU machine's image brings its own CUDA JAX (docs/install.md)
        raise UsageError(f"env create: --gpu is for {', '.join(GPU_BUILDS)} only; {framework}'s environment is CPU-only")
    if sys.version_info[:2] > NEWEST_PYTHON.get(framework, sys.version_info[:2]):
        newest = ".".join(map(str, NEWEST_PYTHON[framework]))
        raise UsageError(f"env create: {framework} runs on Python {newest} at the newest (numpy 1.26 has no wheel for "
                         f"{platform.python_version()}): run the driver on Python {newest} or older")
    folder = env_dir(framework)
    wanted = {"framework": framework, "gpu": gpu, "requirements": requirements(framework, gpu),
              "python": platform.python_version(), "interpreter": environments.interpreter()}
    done = made_marker(folder)
    if (folder / MARKER).exists() and done is None:
        raise UsageError(f"{folder}: its {MARKER} cannot be read: remove the folder and run env create again")
    if done == wanted:
        _must_run(folder)
        print(f"{framework} environment is up to date, nothing changed: {folder}")
        return 0
    if folder.is_dir() and any(folder.iterdir()) and not (folder / "pyvenv.cfg").is_file():
        raise UsageError(f"{folder} is not a venv (no pyvenv.cfg): remove it or set ${environments.ROOT_VAR} to another folder")
    t0 = time.time()
    python = env_python(folder)
    if not python.exists():
        print(f"making a venv of {environments.interpreter()} (python {platform.python_version()}) in {folder}", flush=True)
        _run([sys.executable, "-m", "venv", str(folder)], "making the venv", 300)
    (folder / MARKER).unlink(missing_ok=True)  # incomplete until the install below has finished
    if done and done.get("gpu") != gpu:  # the other build's files would shadow the new one's
        _run([str(python), "-m", "pip", "uninstall", "-y", "-q", GPU_BUILDS[framework][0 if gpu else 1]],
             "removing the other build", PIP_TIMEOUT_S)
    print(f"installing into it: {' '.join(wanted['requirements'])}", flush=True)
    _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *wanted["requirements"]],
         "pip install", PIP_TIMEOUT_S)
    _must_run(folder)
    (folder / MARKER).write_text(json.dumps(wanted, indent=1) + "\n")
    print(f"{framework} environment ready in {time.time() - t0:.0f} s: {folder}")
    name = environments.MADE_FOR[framework][0]  # what runs in it: keras's holds JAX alone
    print(table([local_check(name, str(python))], {name: str(folder)}))
    return 0


def _run(command: list[str], what: str, timeout_s: float) -> None:
    try:
        out = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise UsageError(f"env create: {what} took over {timeout_s:g} s; run env create again to continue") from None
    if out.returncode != 0:
        errors = [line for line in out.stderr.splitlines() if line.startswith("ERROR")] or out.stderr.splitlines() or ["no output"]
        raise UsageError(f"env create: {what} failed: {first_line(errors[0])}")


def _must_run(folder: Path) -> None:
    """An environment the driver's Ray can start workers in: the same Python and Ray; else one line."""
    problem = interpreter_problem(str(env_python(folder)), metadata.version("ray"), platform.python_version())
    if problem:
        raise UsageError(f"{folder} is not a working environment ({problem}): remove it and run env create again")


def local_check(name: str, python: str) -> FrameworkCheck:
    """The framework check (trainables/probe.py) run on this machine in that interpreter: its import, its
    build, one training step. name: a framework, or keras with its backend (runs_as)."""
    env = dict(os.environ)
    root = environments.code_root()
    if root:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    timeout_s = step_timeout_s() + CHECK_STARTING_S
    try:
        out = subprocess.run([python, "-m", "trainables.probe", "--check", name], capture_output=True, text=True,
                             env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return FrameworkCheck.failed("local", name, f"{NO_ANSWER} {timeout_s:g} s ({TIMEOUT_ENV} gives a busy machine "
                                     "longer)", python=python)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        why = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return FrameworkCheck.failed("local", name, f"the check failed: {first_line(why)}", python=python)
    return FrameworkCheck(**json.loads(lines[-1]))


def list_environments() -> int:
    """Each framework: where its trials run (its made environment, or the driver's Python) and its check."""
    made = environments.made_environments()
    names = environments.every_name()  # keras once per backend: each may run in another environment
    envs = {name: environments.of(made, name) for name in names}
    where = {name: str(Path(env.value).parent.parent) if env else "driver's Python" for name, env in envs.items()}
    pythons = {name: str(env.value) if env else sys.executable for name, env in envs.items()}
    with ThreadPoolExecutor(len(FRAMEWORKS)) as pool:
        checks = list(pool.map(lambda name: local_check(name, pythons[name]), names))
    checks = [environments.with_hint(c, made) for c in checks]
    print(f"environments for python {platform.python_version()} ({environments.interpreter()}), "
          f"made ones under {environments.envs_root()}:")
    print(table(checks, where))
    return 0


def table(checks: list[FrameworkCheck], where: dict[str, str]) -> str:
    head = ["framework", "environment", "version", "CUDA", "device", "check"]
    rows = [[c.runs_as, where[c.runs_as], c.version or "-", c.cuda or "-", c.device or "-",
             "OK" if c.ok else f"FAILED: {c.reason}"] for c in checks]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head[:-1])]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths + [0])).rstrip()  # noqa: E731
    return "\n".join("  " + line(r) for r in [head] + rows)


def cmd_env(args: argparse.Namespace) -> int:
    read_or_refuse(step_timeout_s)  # both commands run the framework check
    if args.env_command == "create":
        return create(args.framework, args.gpu)
    return list_environments()
