"""Shared test helpers: the CLI as a real subprocess, small CIFAR-format data sets."""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

from sweep.cluster import NO_IDLE_WORKERS

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = Path(__file__).resolve().parent / "sweeps"
TINY = str(SWEEPS / "tiny_mxnet.yaml")
SETS = ["--set", "epochs=1", "--set", "batch_per_gpu=8"]
# How long a test waits on an engine run before calling it hung: no bound on its speed. A one-trial run takes
# about 20 s on an idle two-core machine and minutes at a load of 30-60, which a fixed 400 s could not promise.
HANG_S = 1800
# A framework check's bound (trainables/probe.py, SWEEP_CHECK_TIMEOUT_S) is likewise a hang's, not a speed's: beside CI's
# first lane (load 17 on two cores) keras on jax's check took 272 s for 17 CPU-s, and lane 2 failed at the default
# 300 s (stop 60). The suite's checks get the suite's hang bound; a test of the bound itself sets its own.
os.environ.setdefault("SWEEP_CHECK_TIMEOUT_S", str(HANG_S))
# Ray writes an object that overflows its object store to disk, and refuses (OutOfDiskError) once the disk
# is over local_fs_capacity_threshold, 95% of its size counting every tenant's files. A shared CI disk
# stood at 94.5% by that measure, and a two-node test's AlexNet checkpoint failed on it (stop 32). The
# suite tests the engine, not its host's free space: every Ray it starts refuses only past 99.5%.
os.environ.setdefault("RAY_local_fs_capacity_threshold", "0.995")
# A machine whose environment says PYTHONDONTWRITEBYTECODE=1 (this project's containers do) made each of the suite's
# hundreds of processes (drivers, trials, ranks, checks) compile the engine's sources again: ~1.2 CPU-s a driver, and
# each xdist worker rewrote every test module (issue 46). The suite's processes keep their bytecode (__pycache__/).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# The embedded Rays of this test session's runs start no dashboard (`--dashboard off`): its processes took ~3 CPU-s a
# start and ~8% of the suite's CPU, for tests that never read it (issue 46). The dashboard's own tests ask for it.
os.environ.setdefault("SWEEP_DASHBOARD", "off")
# The framework checks of every run this test session makes (and the Rays it starts) keep their passing results
# here (trainables/probe.py: KEPT_CHECKS): a check of the same framework build, interpreter, host and environment
# is not run again, 2.4 s each time it was (issue 46). Outside the tests every run checks every time, and so does
# a test session started with SWEEP_KEPT_CHECKS= (empty: to measure what the kept checks save).
if "SWEEP_KEPT_CHECKS" not in os.environ:
    KEPT_CHECKS = tempfile.mkdtemp(prefix="sweep-kept-checks-")
    os.environ["SWEEP_KEPT_CHECKS"] = KEPT_CHECKS
    atexit.register(shutil.rmtree, KEPT_CHECKS, ignore_errors=True)


# The suite runs its files on several processes at once (pytest-xdist, README: `-n`). Each such worker's Rays keep
# their sessions and their note of the last started head (ray_current_cluster, read by `--address auto`) in a folder
# of their own, as Ray's RAY_TMPDIR lets them; a test that sets it for itself (test_lost_cluster.py) still may.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if WORKER and "RAY_TMPDIR" not in os.environ:
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix=f"ray-{WORKER}-")  # short: Ray's sockets live under it
    atexit.register(shutil.rmtree, os.environ["RAY_TMPDIR"], ignore_errors=True)
# Every process a test starts, and all they start in turn (a cluster's raylets, its workers, their servers), inherit
# this tag: a test that looks for its own trials' processes on the machine tells them from another worker's by it,
# even once one outlived its parent (a leaked server is then init's child, no longer a descendant of the test).
TEST_PROCESS_TAG = f"SWEEP_TEST_PROCESS={os.getpid()}"
os.environ["SWEEP_TEST_PROCESS"] = str(os.getpid())


def started_here(pid: int) -> bool:
    """Whether process pid was started by this test process or what it started (its environment holds the tag)."""
    try:
        return TEST_PROCESS_TAG.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def run_folder(config: pytest.Config) -> Path:
    """A folder of this test run's, the same for all its pytest-xdist workers (without -n, this process's own)."""
    base = config._tmp_path_factory.getbasetemp()  # pytest's own TempPathFactory, as the tmp_path fixtures use it
    return base.parent if WORKER else base


def made_once(config: pytest.Config, name: str, make: Callable[[Path], None]) -> Path:
    """The test run's folder `name`, made by `make` once for all its workers: by the first that asks, while the others
    wait for it. One whose making failed is made again by the next that asks."""
    folder = run_folder(config) / name
    with open(folder.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not folder.with_suffix(".made").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            folder.with_suffix(".made").touch()
    return folder


# The files whose tests take longest, longest first (lane 1's wall per file in a fresh clone's `.ci/run`, 2026-11-28,
# `--durations=120`). Under -n each worker takes whole files (pyproject.toml: --dist loadfile) in the order collected,
# and --no-loadscope-reorder keeps this order. xdist's own, by number of tests, hands out last the files of a few long
# tests (test_distributed.py 5 tests in 6 minutes, test_remote_results.py 4 in 4, test_pytorch_sweep.py 3 in 4): replayed
# with the measured durations, one worker ran 5 minutes after the others had ended (issue 46; benchmarks/README.md,
# "twenty-fourth session"). test_keras_sweep.py is lane 2's longest (its study smoke, 5 minutes), a few seconds in
# lane 1. The rest follow in their own order. Only the order changes, never which tests run.
LONGEST_FIRST = ("test_docs.py", "test_keras_sweep.py", "test_distributed.py", "test_cluster.py",
                 "test_tensorflow_input.py", "test_keras.py", "test_benchmarks.py", "test_report.py", "test_resume.py",
                 "test_pytorch_sweep.py", "test_remote_results.py", "test_frameworks.py", "test_env_create.py",
                 "test_images.py", "test_trainables.py", "test_synth_vs_real.py", "test_max_batch.py",
                 "test_pytorch_input.py", "test_newcomer.py", "test_failures.py", "test_report_runs.py")


def reads_engine_runs(item: pytest.Item) -> bool:
    return "engine_runs" in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)  # after -m's deselection: the order of what runs
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """LONGEST_FIRST; and last, the files whose selected tests are all fast and read engine_runs: those runs are made
    beside the other files' tests (pytest_collection_finish), so no worker waits for them with other files to run. In
    the fast lane beside two busy processes four workers waited 108-205 s for them, and the lane took 5 min 26 s."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    reads_runs = {item.path for item in items if reads_engine_runs(item)}
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (item.path in reads_runs - slow, rank.get(item.path.name, len(rank))))  # stable


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The folders made_once made (a venv of ~300 MB among them) go with the test run where no test failed, as
    tmp_path_retention_policy has the tests' own go: by the run's one process, or by the workers' controller."""
    if not WORKER and session.testsfailed == 0:
        for made in run_folder(session.config).glob("*.made"):
            shutil.rmtree(made.with_suffix(""), ignore_errors=True)


def run_cli(*args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m sweep ARGS` in a fresh process, as a user runs it."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("RAY_ADDRESS", None) if env is None or "RAY_ADDRESS" not in env else None
    return subprocess.run([sys.executable, "-m", "sweep", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def own_processes(*names: str, session: int | None = None) -> dict[int, str]:
    """pid -> command line of the live processes this test process started (or what it started did) whose command line
    holds one of `names`; only those in `session` if given (an embedded Ray keeps its processes in the session of the
    driver that started it). Another pytest-xdist worker's are never among them."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not started_here(int(entry.name)):
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if any(name in cmdline for name in names) and (session is None or os.getsid(int(entry.name)) == session):
                found[int(entry.name)] = cmdline
        except OSError:
            continue
    return found


def trial_workers(session: int | None = None) -> set[int]:
    """pids of the live TrialWorker processes (the Ray actors that run trials) this test process started."""
    return set(own_processes("ray::TrialWorker", session=session))


def run_cli_trials_at_once(*args: str, embedded: bool, others: int = 1, timeout: float = 600) -> subprocess.CompletedProcess:
    """run_cli, with the first trial's worker frozen (SIGSTOP) until `others` more trials' workers have started,
    then let go (SIGCONT). Load can serialise short trials; this way some always run at once, so a check of
    concurrent trials has something to see. For one-node trials of one worker each (MXNet, TensorFlow);
    `embedded`: the run starts its own Ray (else it joins a cluster the test made, where no other trial runs)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, "-m", "sweep", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    session = proc.pid if embedded else None
    try:
        deadline = time.time() + timeout
        while not (first := trial_workers(session)) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        frozen = min(first, default=None)
        if frozen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen, signal.SIGSTOP)
            try:
                while len(trial_workers(session) - first) < others and proc.poll() is None and time.time() < deadline:
                    time.sleep(0.1)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(frozen, signal.SIGCONT)
        out, err = proc.communicate(timeout=max(1.0, deadline - time.time()))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(autouse=True)
def _gpus_visible_as_before():
    """A test that runs a trial's loop in this process (Devices.of with emulated GPUs) hides the GPUs from
    it, as a trial's process must; the tests after it start Ray here with fake GPUs, which Ray refuses
    while CUDA_VISIBLE_DEVICES names none. So each test leaves the variable as it found it."""
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    yield
    if before is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = before


@pytest.fixture(autouse=True)
def _ctrl_c_as_a_users_process_has_it():
    """Each test starts with Python's own SIGINT handler, as a user's `python -m sweep` has it. Code run earlier in
    the same pytest-xdist worker left SIGINT ignored now and then (which code is not pinned down: libraries ignore it
    around their forks, MXNet's DataLoader for one), and an ignored signal stays ignored in every process a test
    starts: a stopped TFRecord pack then ran to its end and exited 0 (a fresh clone's CI, 2026-11-28), and a Ctrl-C
    test saw no KeyboardInterrupt (d50cb14)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    # Again after it: the module and session fixtures the next test needs are set up before this fixture, and some
    # of them start engine runs (tests/test_docs.py's `ran`, engine_runs).
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return tmp_path / "results"


@pytest.fixture(scope="session")
def mxnet_venv(pytestconfig: pytest.Config) -> Path:
    """A second interpreter holding MXNet and what a trial's worker needs (the driver's Ray), and nothing else:
    no TensorFlow, no pandas. Built once per test run (pip, from its cache after the project's install)."""
    import ray

    def make(venv: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "mxnet==1.9.1", "numpy<2",
                        f"ray=={ray.__version__}"], check=True, timeout=900, capture_output=True)

    return made_once(pytestconfig, "mxnet-venv", make) / "bin" / "python"


# What the suite's own clusters leave out, each ~2% of a core for as long as a cluster lives (issue 46): Ray's
# dashboard (no test of it joins them) and its log monitor (it streams the workers' output to drivers that print it:
# the engine's print none); and the idle workers the engine's own Ray leaves out too (sweep/cluster.py).
BARE_NODE = {"include_log_monitor": False}
BARE_HEAD = {**BARE_NODE, "include_dashboard": False, "_system_config": NO_IDLE_WORKERS}


def two_node_cluster(node: dict[str, int]):
    """A real two-node Ray cluster on this machine, each node with these resources (fake GPUs); for a
    module-scoped fixture: yields it, then shuts it down."""
    from ray.cluster_utils import Cluster

    from sweep.cluster import retried_if_timed_out

    # Started as the engine starts its own, again where Ray's 30 s for a raylet ran out on a loaded machine.
    cluster = retried_if_timed_out(lambda: Cluster(initialize_head=True, head_node_args={**node, **BARE_HEAD}))
    retried_if_timed_out(lambda: cluster.add_node(**node, **BARE_NODE))
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture(scope="session")
def shared_ray() -> list[str]:
    """One local Ray for the whole test session, four fake GPUs (the engine's default emulation for the tests'
    sweeps): the options that make `python -m sweep` join it. An engine run that starts its own Ray pays ~4-5 s to
    start it and ~1.5 s to stop it (issue 46); runs that join this one pay that once per session. For runs whose
    subject is not Ray's own start and stop, nor the emulated GPU count, nor the embedded cluster's output (its
    'emulating' line, its default smoke scale: a joined run is told `--scale smoke`). The runs join one after the
    other, as the tests run; a run never shares it with another."""
    from ray.cluster_utils import Cluster

    # Bare (BARE_HEAD): the dashboard alone took 2% of a core (4.9% against 2.9% for the cluster without it, 60 s
    # idle), for as long as the test run lasts, on each worker (issue 46).
    from sweep.cluster import retried_if_timed_out

    cluster = retried_if_timed_out(lambda: Cluster(initialize_head=True, head_node_args={
        "num_cpus": os.cpu_count(), "num_gpus": 4, **BARE_HEAD}))
    cluster.wait_for_nodes()
    # Ray notes a started head in /tmp/ray/ray_current_cluster, and the next embedded run's start says on stderr that
    # it overwrites that note: a second line beside a refusal's one. This cluster is joined by its address alone.
    from ray._private.utils import get_ray_address_file

    Path(get_ray_address_file(None)).unlink(missing_ok=True)
    try:
        yield ["--address", cluster.address, "--scale", "smoke"]
    finally:
        cluster.shutdown()


@dataclass(frozen=True)
class EngineRuns:
    """Two runs the engine made of tiny_mxnet.yaml with SETS (two trials: 1 and 2 GPUs, one epoch each, synthetic
    data): `first` on one emulated GPU with --skip-infeasible (the 1-GPU trial ran, the 2-GPU one was recorded
    infeasible), `second` on the default four (both completed). Tests that need a run's files, metadata or
    rows read them here; a test that changes them works on a copy (copy_run)."""
    results: Path
    first: subprocess.CompletedProcess
    second: subprocess.CompletedProcess
    run_ids: list[str]

    def run_dir(self, i: int) -> Path:
        return self.results / "tiny_mxnet" / self.run_ids[i]

    def meta(self, i: int):
        from sweep import store

        return store.RunStore(self.run_dir(i)).meta

    def trials(self, i: int) -> pd.DataFrame:
        return pd.read_parquet(self.run_dir(i) / "trials").set_index("trial_id")


def _make_engine_runs(folder: Path) -> None:
    """EngineRuns' two runs, into folder. They start as the test run's collection ends, beside the tests (below), so
    they carry a tag of their own and keep their Ray's notes apart: no test's look at the processes it started, nor
    a `--address auto` of a test beside them, finds theirs."""
    results = folder / "results"
    apart = {"SWEEP_TEST_PROCESS": "engine-runs", "RAY_TMPDIR": tempfile.mkdtemp(prefix="ray-runs-")}
    try:
        # The timeouts only stop a run that hangs: each takes ~20 s on an idle machine, minutes on a loaded one.
        first = run_cli(TINY, *SETS, "--emulate-gpus", "1", "--skip-infeasible", "--results", str(results),
                        timeout=HANG_S, env=apart)
        # A user who hides the GPUs (CUDA_VISIBLE_DEVICES="") gets emulated ones; Ray refuses fake GPUs
        # while that variable names none, so the engine clears it for its embedded Ray.
        second = run_cli(TINY, *SETS, "--results", str(results), timeout=HANG_S,
                         env={**apart, "CUDA_VISIBLE_DEVICES": ""})
    finally:  # a hung run's timeout too
        shutil.rmtree(apart["RAY_TMPDIR"], ignore_errors=True)
    assert first.returncode == 1 and second.returncode == 0, second.stdout[-3000:] + second.stderr[-2000:]
    (folder / "outputs.json").write_text(json.dumps([[p.args, p.returncode, p.stdout, p.stderr]
                                                     for p in (first, second)]))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Where a selected test needs engine_runs, they are made from now on, in a thread beside the tests, by the first
    worker to take made_once's lock: a worker whose test asks for them waits only for what is left of them. Made on
    the first ask instead, they kept three of the fast lane's four workers waiting up to three minutes beside two
    busy processes, each with tests of its own to run (issue 46)."""
    if session.config.option.collectonly or not any(map(reads_engine_runs, session.items)):
        return
    threading.Thread(target=made_once, args=(session.config, "engine-runs", _make_engine_runs),
                     name="engine-runs").start()  # not a daemon: a worker that ends first waits for it


@pytest.fixture(scope="session")
def engine_runs(pytestconfig: pytest.Config) -> EngineRuns:
    """Made once per test run (about a minute), for all its workers: every test that needs an engine-made run shares
    these (started as collection ends: pytest_collection_finish)."""
    from sweep import store

    folder = made_once(pytestconfig, "engine-runs", _make_engine_runs)
    first, second = (subprocess.CompletedProcess(*fields) for fields in json.loads((folder / "outputs.json").read_text()))
    ids = [p.name for p in store.run_dirs(folder / "results", "tiny_mxnet")]
    return EngineRuns(folder / "results", first, second, ids)


def copy_run(runs: EngineRuns, i: int, to: Path) -> Path:
    """A copy of run i's folder (results/tiny_mxnet/RUN_ID under `to`), to change as a test needs."""
    import shutil

    target = to / "tiny_mxnet" / runs.run_ids[i]
    shutil.copytree(runs.run_dir(i), target)
    return target
