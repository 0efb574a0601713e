"""`run`: from the command line's options to trials on a Ray cluster, for a new run or a resumed one.

It orchestrates and owns nothing the other modules need: the sweep file (sweep/spec.py), the run in
the store (sweep/runs.py, sweep/store.py), the data, the cluster (sweep/cluster.py), the trial order
(sweep/packing.py) and Tune (sweep/runner.py). Every check that needs no Ray runs before Ray starts,
so that bad input costs seconds and writes nothing.
"""
from __future__ import annotations

import argparse
import itertools
import os
import shlex
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweep import gcs, limits, spec, store
from sweep.errors import UsageError
from sweep.location import Location
from sweep.runs import RunState, latest_unfinished, reach, read_run, results_location, resume_command
from sweep.schema import Status
from sweep.spec import Sweep
from sweep.store import RunMeta, RunStore, Session
from sweep.version import engine_version
from trainables.config import TrialConfig

PROJECT_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Launch:
    """A run checked and ready to start: everything decided before Ray starts."""

    sweep: Sweep
    scale: str
    results: Location
    address: str | None  # None: an embedded Ray
    all_trials: list[TrialConfig]  # the run's whole grid
    trials: list[TrialConfig]  # the trials this session runs
    resumed: RunState | None
    data_dir: str | None  # None: synthetic data for the whole run
    emulated: bool | None  # None: a joined cluster, where each node tells for itself
    nodes: int  # Ray nodes of an embedded Ray (1 unless trials span nodes)
    gpus_per_node: int  # GPUs each of them gets: the real ones, or as many emulated
    run_id: str  # the resumed run's, or the new run's (its folder is made only once every check passed)


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from sweep import cluster as ray_cluster

    launch = prepare(args)
    import ray  # after the checks: bad input costs no Ray import

    gcs.outlast_ray(joined=launch.address is not None)
    cluster = ray_cluster.start(launch.address, launch.gpus_per_node, args.dashboard_host,
                                job_name=launch.sweep.name, nodes=launch.nodes)
    opened = threading.Event()  # set once the run's folder exists: then a loss has a run to resume
    # A joined cluster's GCS may come back within Ray's own minute (fault tolerance); an embedded one never does.
    gone, silent = (gcs.RAY_RECONNECT_S,) * 2 if launch.address else (gcs.EMBEDDED_GONE_S, gcs.EMBEDDED_SILENT_S)
    try:
        with gcs.Watchdog(ray.get_runtime_context().gcs_address, gone, silent, lambda why: _lost(args, launch, opened, why)):
            return _run(args, launch, cluster, shlex.join(["python", "-m", "sweep", *argv]), opened)
    except Exception as e:  # noqa: BLE001 - whatever Ray raised, a cluster gone is said as such
        why = str(e) if isinstance(e, gcs.ClusterLost) else gcs.cluster_lost()
        if why:  # Tune ended first (its trials died with the cluster), or a Ray call raised
            _lost(args, launch, opened, why)
        raise
    finally:
        ray_cluster.stop(cluster)


def _lost(args: argparse.Namespace, launch: Launch, opened: threading.Event, why: str) -> None:
    """The cluster went away under the run: say so in one line, with the command that continues it."""
    where = "its head node or GCS" if launch.address else "the embedded Ray's GCS"
    if opened.is_set():
        gcs.exit_lost(f"lost the Ray cluster mid-run ({where}: {why}); the rows written so far are kept",
                      "resume with: " + resume_command(args.sweep, launch.run_id, args.results))
    gcs.exit_lost(f"lost the Ray cluster before the run started ({where}: {why}); nothing was written", None)


def prepare(args: argparse.Namespace) -> Launch:
    """Every check of a run that needs no Ray, in the order a user would fix them."""
    from trainables import environment

    sweep = spec.load(args.sweep, args.max_trials)
    results = results_location(args.results)
    address = args.address or os.environ.get("RAY_ADDRESS")
    if address and args.emulate_gpus:
        raise UsageError("--emulate-gpus applies to the embedded Ray only; a joined cluster brings its own GPUs")
    if (args.force or args.retry_failed) and not args.resume:
        raise UsageError("--force and --retry-failed go with --resume")
    if address:  # seconds; before the run's state and the data are looked at
        gcs.check_address(address, "--address" if args.address else "RAY_ADDRESS")
    resumed = _resume_target(args, sweep, results) if args.resume else None
    if resumed:
        sweep = _as_started(args, sweep, resumed)
    else:
        _note_unfinished(args, sweep, results)

    real_gpus = 0 if address else environment.real_gpu_count()
    emulated: bool | None = None if address else (bool(args.emulate_gpus) or real_gpus == 0)
    scale = resumed.meta.scale if resumed else args.scale or ("smoke" if emulated else "full")
    all_trials = sweep.trials(scale)
    pending = set(resumed.pending(args.retry_failed)) if resumed else None
    trials = [t for t in all_trials if pending is None or t.trial_id in pending]
    nodes, gpus_per_node = 1, real_gpus
    if emulated:
        # Trials spanning nodes get as many emulated nodes, each with the GPUs of one.
        nodes, needed = max(t.nodes for t in all_trials), max(t.gpus_per_node for t in all_trials)
        _check_emulation(nodes, needed)
        gpus_per_node = args.emulate_gpus or min(2 * needed, max(needed, limits.MAX_EMULATED_GPUS))
        why = "GPU emulation asked for" if args.emulate_gpus else "no GPU found"
        where = f"{nodes} Ray nodes on this machine with {gpus_per_node} GPUs each" if nodes > 1 else f"{gpus_per_node} GPUs in Ray"
        print(f"{why}: emulating {where}, each trial on as many CPU devices "
              f"(results are marked cpu-emulated: not a speed result); scale {scale}")
    data_dir = _data_dir(args, sweep, trials, scale, resumed)
    reach(results, args.results, write=True)  # after every other check, before Ray starts
    run_id = resumed.meta.run_id if resumed else store.new_run_id()
    return Launch(sweep, scale, results, address, all_trials, trials, resumed, data_dir, emulated, nodes, gpus_per_node,
                  run_id)


def _check_emulation(nodes: int, gpus_per_node: int) -> None:
    """The embedded emulation starts Ray nodes and CPU devices on this one machine: a few, not a cluster's worth."""
    if nodes > limits.MAX_EMULATED_NODES:
        raise UsageError(f"trials span up to {nodes} nodes; the embedded Ray emulates at most {limits.MAX_EMULATED_NODES} "
                         "on one machine: run them on a cluster (--address)")
    if gpus_per_node > limits.MAX_EMULATED_GPUS:
        raise UsageError(f"trials need {gpus_per_node} GPUs on a node; the embedded Ray emulates at most "
                         f"{limits.MAX_EMULATED_GPUS} per node: run them on a cluster (--address)")


def _resume_target(args: argparse.Namespace, sweep: Sweep, results: Location) -> RunState:
    if args.resume == "latest":
        state = latest_unfinished(results, sweep.name)
        if state is None:
            raise UsageError(f"no unfinished run of {sweep.name} under {results}: nothing to resume")
    else:
        run_dir = results / sweep.name / args.resume
        if not (run_dir / "run.json").is_file():
            raise UsageError(f"no run {args.resume} of {sweep.name} under {results}")
        state = read_run(run_dir)
        if not state.pending(args.retry_failed):
            raise UsageError(f"run {args.resume} of {sweep.name} is finished: nothing to resume"
                             + ("" if args.retry_failed else " (failed trials are retried with --retry-failed)"))
    if pid := state.driver:
        raise UsageError(f"run {state.meta.run_id} is running now (driver pid {pid} on this host): "
                         f"stop it first (Ctrl-C there, or kill {pid}), then resume")
    return state


def _as_started(args: argparse.Namespace, sweep: Sweep, resumed: RunState) -> Sweep:
    """A resume continues the run as it was started: its stored sweep file, its scale."""
    stored = RunStore(resumed.run_dir).spec_text
    if stored != sweep.text and not args.force:
        raise UsageError(f"{sweep.path} changed since run {resumed.meta.run_id} started "
                         f"({_first_difference(stored, sweep.text)}); --force resumes it as it was started")
    if args.scale and args.scale != resumed.meta.scale:
        raise UsageError(f"run {resumed.meta.run_id} is at scale {resumed.meta.scale}, not {args.scale}")
    return spec.parse(stored, sweep.path, args.max_trials)


def _first_difference(old: str, new: str) -> str:
    pairs = itertools.zip_longest(old.splitlines(), new.splitlines())
    for number, (was, now) in enumerate(pairs, 1):
        if was != now:
            return f"line {number}: {limits.quote(was)} -> {limits.quote(now)}"
    return "line endings only"


def _note_unfinished(args: argparse.Namespace, sweep: Sweep, results: Location) -> None:
    """A new run says so when an earlier one is unfinished, and how to continue that one instead."""
    earlier = latest_unfinished(results, sweep.name)
    if earlier is None:
        return
    done, pid = len(earlier.meta.trials) - len(earlier.pending(False)), earlier.driver
    print(f"note: run {earlier.meta.run_id} of {sweep.name} is unfinished ({done} of "
          f"{len(earlier.meta.trials)} trials ended); "
          + (f"its driver (pid {pid}) is running it now: this new run shares the cluster with it" if pid
             else "continue it with: " + resume_command(args.sweep, earlier.meta.run_id, args.results)))


def _data_dir(args: argparse.Namespace, sweep: Sweep, trials: list[TrialConfig], scale: str,
              resumed: RunState | None) -> str | None:
    """The CIFAR-10 folder, checked once before any trial starts; None: synthetic data for the run."""
    from trainables import data

    if resumed and resumed.meta.data_dir is None:
        return None  # the run started on synthetic data: it continues on it
    data_dir = str(Path(args.data_dir).resolve()) if args.data_dir else (
        resumed.meta.data_dir if resumed else str(Path("data").resolve()))
    if not any(t.data == "cifar10" for t in trials):
        return data_dir
    if data.has_cifar10(data_dir):
        data.load_cifar10(data_dir)  # a bad file fails the run here, not every trial
        return data_dir
    if scale == "smoke":
        print(f"no CIFAR-10 under {data_dir}: the smoke scale trains on synthetic data (accuracy columns null)")
        if sweep.early_stopping:
            print("early stopping ranks trials by val_acc, which synthetic data lacks: it is off for this run")
        return None
    raise UsageError(f"{data_dir}: no cifar-10-batches-py/ or cifar-10-python.tar.gz "
                     "(give --data-dir, or --scale smoke to run on synthetic data)")


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(PROJECT_DIR), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(PROJECT_DIR), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() + ("-dirty" if dirty else "")) if out.returncode == 0 else None


def _session(command: str, address: str | None) -> Session:
    """This start of the driver, with the engine that runs it (every row of the session names it too)."""
    import ray

    return Session(command=command, started_at=time.time(), host=socket.gethostname(), pid=os.getpid(),
                   address=address, engine_version=engine_version(), git_commit=_git_commit(),
                   ray_version=ray.__version__)


def _open_run(launch: Launch, session: Session) -> RunStore:
    """The run's folder in the store, with this session recorded in its run.json."""
    if launch.resumed:
        run = RunStore(launch.resumed.run_dir)
        meta = run.meta
        print(f"resuming run {meta.run_id} of {launch.sweep.name}: {len(launch.trials)} of "
              f"{len(launch.all_trials)} trials to run")
    else:
        meta = RunMeta(sweep=launch.sweep.name, run_id=launch.run_id, scale=launch.scale,
                       spec_path=str(launch.sweep.path), spec_sha256=store.sha256(launch.sweep.text),
                       data_dir=launch.data_dir, emulated=launch.emulated,
                       trials=[t.trial_id for t in launch.all_trials])
        run = RunStore.create(launch.results, meta, launch.sweep.text)
        print(f"sweep {launch.sweep.name}: {len(launch.trials)} trials at scale {launch.scale}, run {meta.run_id}")
    meta.sessions.append(session)
    run.write_meta(meta)
    print(f"results: {run.dir}")
    return run


def _run(args: argparse.Namespace, launch: Launch, cluster: Any, command: str, opened: threading.Event) -> int:
    from sweep import cluster as ray_cluster
    from sweep import dashboard, packing, runner
    from sweep.trial import TrialRuntime

    for line in dashboard.banner(cluster):  # dashboard URL, where its token is, metrics endpoint
        print(line)
    trials = launch.trials
    bad = ray_cluster.infeasible({t.trial_id: (t.cpus_per_trial, t.gpus_per_node, t.nodes) for t in trials},
                                 cluster.nodes)
    if bad:  # Ray would leave these pending for ever, without a word: say so before anything runs
        print(_infeasible_table([t for t in trials if t.trial_id in bad], cluster.nodes))
        if not args.skip_infeasible:
            raise UsageError(f"{len(bad)} of {len(trials)} trials fit no node of the cluster (table above); "
                             "--skip-infeasible records them as infeasible and runs the rest")
    session = _session(command, args.address)
    columns = {"engine_version": session.engine_version, "git_commit": session.git_commit,
               "ray_version": session.ray_version, "sweep": launch.sweep.name, "run_id": launch.run_id,
               "scale": launch.scale}
    runnable = [t for t in trials if t.trial_id not in bad]
    order = None
    if runnable:
        seconds = packing.estimate(runnable, packing.measured_seconds(launch.results, launch.sweep.name))
        runnable, how, makespan = packing.order(runnable, seconds, [n.gpus for n in cluster.nodes],
                                                [n.cpus for n in cluster.nodes])
        bound = packing.lower_bound(runnable, seconds, cluster.total_gpus)
        order = f"trial order: {how}, estimated makespan {makespan / bound:.2f} x the lower bound"
    run = _open_run(launch, session)  # the store is written only now, once every check has passed
    opened.set()
    meta = run.meta
    for t in trials:
        if t.trial_id in bad:
            summary = store.summarize(t.trial_id, t, [], Status.INFEASIBLE, columns)
            run.finish_trial({**summary, "error_type": "Infeasible", "error": bad[t.trial_id]}, [])
    trials = runnable
    if order:
        print(order)
    runtime = TrialRuntime(run_dir=str(run.dir), data_dir=launch.data_dir, emulated=launch.emulated,
                           columns=columns, label_axes=spec.varying_axes(launch.all_trials))
    plan = runner.RunPlan(sweep=launch.sweep, trials=trials, total=len(launch.all_trials), store=run,
                          runtime=runtime, max_concurrent=args.max_concurrent, max_failures=args.max_failures,
                          session=len(meta.sessions))
    stopped_by = runner.run(plan) if trials else None
    state = read_run(run.dir)
    not_ok = [s for s in state.finished.values() if not s.done]
    pending = state.pending(False)
    print(f"done: {len(state.finished) - len(not_ok)} completed, {len(not_ok)} failed, {len(pending)} not finished"
          f"; results in {run.dir}")
    if pending:
        print("resume with: " + resume_command(args.sweep, meta.run_id, args.results))
    if stopped_by:
        return 128 + stopped_by  # the shell's code for a signal: 130 after Ctrl-C, 143 after SIGTERM
    return 1 if not_ok or pending else 0


def _infeasible_table(trials: list[TrialConfig], nodes: list[Any]) -> str:
    largest = max(((n.gpus, n.cpus) for n in nodes), default=(0, 0))
    lines = [f"{len(trials)} trials fit no node (the cluster has {len(nodes)} nodes; the largest has "
             f"{largest[0]:g} GPUs, {largest[1]:g} CPUs):",
             "  trial_id    framework   model           nodes  GPUs/node  CPUs/node"]
    lines += [f"  {t.trial_id}  {t.framework:<10}  {t.model:<14}  {t.nodes:>5}  "
              f"{t.gpus_per_node:>9}  {t.cpus_per_trial:>9}" for t in trials]
    return "\n".join(lines)
