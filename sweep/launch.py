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
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sweep import checks, environments, estimates, gcs, limits, max_batch, overrides, spec, store
from sweep.batch_search import Search
from sweep.environments import Environment
from sweep.errors import UsageError, read_or_refuse
from sweep.location import Location
from sweep.plan import (Plan, Target, build, check_emulation, emulated_refusals, emulated_shape, last_run, stand_in,
                        started_target, with_host_cpus)
from sweep.runs import RunState, latest_unfinished, reach, read_run, results_location, resume_command, run_by_id
from sweep.schema import Status
from sweep.spec import Sweep
from sweep.store import RunMeta, RunStore, Session
from sweep.version import engine_version, git_commit
from trainables.config import TrialConfig, ddp_timeout_s
from trainables.probe import FrameworkCheck, step_timeout_s


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
    environments: dict[str, Environment]  # framework -> where its trials run (sweep file, then --env)
    run_id: str  # the resumed run's, or the new run's (its folder is made only once every check passed)
    searches: list[Search] = field(default_factory=list)  # batch_per_gpu: max, one per configuration (sweep/max_batch.py)
    capacity_mib: float | None = None  # --emulate-gpu-memory: each emulated device's memory; None: not limited
    code: str | None = None  # --code DIR: the folder of the models' code, shipped to every node (Ray's working_dir)
    refused: dict[str, str] = field(default_factory=dict)  # trial_id -> why emulated devices cannot run it (skipped)


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from sweep import cluster as ray_cluster

    launch = prepare(args)
    import ray  # after the checks: bad input costs no Ray import

    gcs.outlast_ray(joined=launch.address is not None)
    # An embedded Ray runs on this machine: its frameworks' checks need no Ray, and run while it starts.
    here = checks.start_here(sorted({t.runs_as for t in launch.trials}), launch.environments,
                             bool(launch.emulated), checks.named_models(launch.trials, launch.data_dir),
                             launch.code) if launch.address is None else {}
    cluster = ray_cluster.start(launch.address, launch.gpus_per_node, args.dashboard_host if args.dashboard == "on" else None,
                                job_name=launch.sweep.name, nodes=launch.nodes, emulated=bool(launch.emulated),
                                code=launch.code)
    opened = threading.Event()  # set once the run's folder exists: then a loss has a run to resume
    # A joined cluster's GCS may come back within Ray's own minute (fault tolerance); an embedded one never does.
    gone, silent = (gcs.joined_grace(),) * 2 if launch.address else (gcs.EMBEDDED_GONE_S, gcs.EMBEDDED_SILENT_S)
    try:
        with gcs.Watchdog(ray.get_runtime_context().gcs_address, gone, silent, lambda why: _lost(args, launch, opened, why),
                          exited=gcs.own_gcs_exited):
            return _run(args, launch, cluster, shlex.join(["python", "-m", "sweep", *argv]), opened, here)
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
                      "resume with: " + resume_command(args.sweep, launch.run_id, launch.sweep.overrides, args.results,
                                                       launch.code))
    gcs.exit_lost(f"lost the Ray cluster before the run started ({where}: {why}); nothing was written", None)


def prepare(args: argparse.Namespace) -> Launch:
    """Every check of a run that needs no Ray, in the order a user would fix them."""
    from trainables import environment

    sweep = overrides.apply(spec.load(args.sweep, args.max_trials), overrides.parse(args.set))
    code = environments.code_folder(args.code)
    results = results_location(args.results)
    address = args.address or os.environ.get("RAY_ADDRESS")
    if address and args.emulate_gpus:
        raise UsageError("--emulate-gpus applies to the embedded Ray only; a joined cluster brings its own GPUs")
    if (args.force or args.retry_failed) and not args.resume:
        raise UsageError("--force and --retry-failed go with --resume")
    read_or_refuse(step_timeout_s)  # every framework check's process reads it
    read_or_refuse(ddp_timeout_s)  # every PyTorch rank and its trial's coordinator read it
    if address:  # seconds; before the run's state and the data are looked at
        gcs.check_address(address, "--address" if args.address else "RAY_ADDRESS")
    resumed = _resume_target(args, sweep, results) if args.resume else None
    if resumed:
        sweep = _as_started(args, sweep, resumed)
        code = _code_as_started(args, code, resumed)
    else:
        _note_unfinished(args, sweep, results)
    envs = environments.chosen(sweep.environments, args.env)

    real_gpus = 0 if address else environment.real_gpu_count()
    emulated: bool | None = None if address else (bool(args.emulate_gpus) or real_gpus == 0)
    scale = resumed.meta.scale if resumed else args.scale or ("smoke" if emulated else "full")
    given = overrides.trials(sweep, scale)  # first: a problem the --set values made is named after them
    searches = sweep.searches(scale)
    capacity = _capacity(args, emulated, resumed)
    # Every trial under the devices' capacity, and each search's first probe: what the checks below see.
    all_trials = [replace(t, memory_capacity_mib=capacity) for t in given]
    all_trials += [s.probe(s.lo, capacity) for s in searches]
    if not address:  # an embedded Ray starts every trial on this machine
        _check_interpreters(args, sweep, envs, all_trials)
    pending = set(resumed.pending(args.retry_failed)) if resumed else None
    trials = [t for t in all_trials if pending is None or t.trial_id in pending]
    if resumed and searches:  # the searches' next round, as the store's rows say
        listed = {t.trial_id for t in trials}
        trials += [t for t in max_batch.next_trials(searches, RunStore(resumed.run_dir).trial_rows(), capacity)
                   if t.trial_id not in listed]
    nodes, gpus_per_node = 1, real_gpus
    refused: dict[str, str] = {}
    if emulated:
        check_emulation(all_trials)
        # Recorded as infeasible under --skip-infeasible, as a trial too big for every node is; a search's probe is
        # not (its next probes would be refused in turn): the run stops.
        refused = emulated_refusals(trials)
        probes = any(t.max_batch_probe for t in trials if t.trial_id in refused)
        if refused and (probes or not args.skip_infeasible):
            raise UsageError(next(iter(refused.values())) + (
                "" if probes else "; --skip-infeasible records such trials as infeasible and runs the rest"))
        nodes, gpus_per_node = emulated_shape(all_trials, args.emulate_gpus)
        why = "GPU emulation asked for" if args.emulate_gpus else "no GPU found"
        where = (f"{nodes} Ray nodes on this machine with {limits.count(gpus_per_node, 'GPU')} each" if nodes > 1
                 else f"{limits.count(gpus_per_node, 'GPU')} in Ray")
        print(f"{why}: emulating {where}, each trial on as many CPU devices "
              f"(results are marked cpu-emulated: not a speed result); scale {scale}")
    if note := stand_in(sweep, scale):  # before the data's line: the two say what this scale trains
        print(note)
    # The searches' training trials read the data the sweep names (their probes train on synthetic data).
    training = [t for s in searches if (t := s.training(s.lo, capacity)) is not None]
    data_dir = _data_dir(args, sweep, trials + training, scale, resumed)
    reach(results, args.results, write=True)  # after every other check, before Ray starts
    run_id = resumed.meta.run_id if resumed else store.new_run_id()
    if refused:
        print(f"{limits.count(len(refused), 'trial')} skipped as infeasible (--skip-infeasible): "
              f"{next(iter(refused.values()))}" + (" (and the like)" if len(refused) > 1 else ""))
    return Launch(sweep, scale, results, address, all_trials, trials, resumed, data_dir, emulated, nodes, gpus_per_node,
                  envs, run_id, searches, capacity, code, refused)


def _capacity(args: argparse.Namespace, emulated: bool | None, resumed: RunState | None) -> float | None:
    """--emulate-gpu-memory in MiB: a new run's, or the resumed run's (its probes' identities depend on it)."""
    given = max_batch.memory_size_mib(args.emulate_gpu_memory) if args.emulate_gpu_memory else None
    if resumed:
        kept = resumed.meta.memory_capacity_mib
        if given is not None and given != kept:
            raise UsageError(f"run {resumed.meta.run_id} was started with "
                             f"{f'--emulate-gpu-memory {kept:g}MiB' if kept else 'no --emulate-gpu-memory'}: "
                             "resume it without the option, or start a new run")
        return kept
    if given is not None and not emulated:
        raise UsageError("--emulate-gpu-memory applies to emulated GPUs (the embedded Ray without real GPUs, or "
                         "with --emulate-gpus): real GPUs have their own memory")
    return given


def _check_interpreters(args: argparse.Namespace, sweep: Sweep, envs: dict[str, Environment],
                        trials: list[TrialConfig]) -> None:
    """An interpreter that this machine lacks is refused here, before Ray starts, in one line that names where it
    was given; Ray would start, and its framework checks would fail it on every node as trials that fit none. So is
    a Keras backend that would run in the driver's Python, which lacks it (environments.backend_refusal)."""
    names = sorted({t.runs_as for t in trials})
    for name in names:
        env = environments.of(envs, name)
        program = environments.missing_here(env) if env else None
        if program is None:
            continue
        framework = name.partition("/")[0]
        options = [text for text in args.env if text.partition("=")[0].strip() == framework]
        if options:  # the last --env of a framework is the one that holds
            given = f"--env {options[-1]}"
        elif framework in sweep.environments:
            given = f"{sweep.path}: environments: {framework}"
        else:
            given = f"the environment `python -m sweep env create {environments.made_by(name)}` made"
        raise UsageError(f"{given}: no interpreter {program} on this machine, where the embedded Ray runs the trials")
    if refusal := environments.backend_refusal(names, envs):  # the check would find the same, once Ray started
        raise UsageError(refusal)


def _resume_target(args: argparse.Namespace, sweep: Sweep, results: Location) -> RunState:
    if args.resume == "latest":
        state = latest_unfinished(results, sweep.name)
        if state is None:
            raise UsageError(f"no unfinished run of {sweep.name} under {results}: nothing to resume")
    else:
        state = read_run(run_by_id(results, sweep.name, args.resume))
        if not state.pending(args.retry_failed) and state.meta.searches_done is not False:
            raise UsageError(f"run {args.resume} of {sweep.name} is finished: nothing to resume"
                             + ("" if args.retry_failed else " (failed trials are retried with --retry-failed)"))
    if pid := state.driver:
        raise UsageError(f"run {state.meta.run_id} is running now (driver pid {pid} on this host): "
                         f"stop it first (Ctrl-C there, or kill {pid}), then resume")
    return state


def _as_started(args: argparse.Namespace, sweep: Sweep, resumed: RunState) -> Sweep:
    """A resume continues the run as it was started: its stored sweep file, its --set values, its scale."""
    stored, meta = RunStore(resumed.run_dir).spec_text, resumed.meta
    if stored != sweep.text and not args.force:
        raise UsageError(f"{sweep.path} changed since run {meta.run_id} started "
                         f"({_first_difference(stored, sweep.text)}); --force resumes it as it was started")
    if meta.overrides != sweep.overrides and not args.force:
        was, now = (overrides.options(o) or "no --set" for o in (meta.overrides, sweep.overrides))
        raise UsageError(f"run {meta.run_id} was started with {was}, this command gives {now}; "
                         "give the same to resume it, or --force to resume it as it was started")
    if args.scale and args.scale != meta.scale:
        raise UsageError(f"run {meta.run_id} is at scale {meta.scale}, not {args.scale}")
    return overrides.apply(spec.parse(stored, sweep.path, args.max_trials), meta.overrides)


def _code_as_started(args: argparse.Namespace, code: str | None, resumed: RunState) -> str | None:
    """The --code folder of a resumed run: the one it was started with (run.json), unless --force takes another."""
    meta = resumed.meta
    if code is None and meta.code is not None:
        if not Path(meta.code).is_dir():
            raise UsageError(f"run {meta.run_id} was started with --code {limits.quote(meta.code)}, which is no longer a "
                             "folder: give --code DIR with its models' modules")
        code = meta.code
    if code != meta.code and not args.force:
        was, now = (f"--code {limits.quote(c)}" if c else "no --code" for c in (meta.code, code))
        raise UsageError(f"run {meta.run_id} was started with {was}, this command gives {now}; "
                         "give the same to resume it, or --force to resume it with this one")
    if code is not None and meta.code_sha256 and not args.force and environments.code_digest(code) != meta.code_sha256:
        raise UsageError(f"--code {limits.quote(code)} changed since run {meta.run_id} started (its files differ); "
                         "--force resumes it with the folder as it is now")
    return code


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
          + ((f"its driver (pid {pid}) is running it now: this new run shares the cluster with it" if args.address
              or os.environ.get("RAY_ADDRESS") else f"its driver (pid {pid}) is running it now, in its own embedded Ray: "
              "the two runs share this machine's CPUs and GPUs, each unaware of the other's trials") if pid
             else "continue it with: " + resume_command(args.sweep, earlier.meta.run_id, earlier.meta.overrides, args.results)))


def _data_dir(args: argparse.Namespace, sweep: Sweep, trials: list[TrialConfig], scale: str,
              resumed: RunState | None) -> str | None:
    """The CIFAR-10 folder, checked once before any trial starts; None: synthetic data for the run."""
    from trainables import data

    if resumed and resumed.meta.data_dir is None:
        return None  # the run started on synthetic data: it continues on it
    data_dir = str(Path(args.data_dir).resolve()) if args.data_dir else (
        resumed.meta.data_dir if resumed else str(Path("data").resolve()))
    if any(t.data == "imagenet" for t in trials):
        from trainables import images
        folder = images.scan(data_dir)  # a missing or unusable image folder fails the run here, in one line, not every trial
        for fmt in sorted({images.READS_PACKED[t.framework] for t in trials
                           if t.data == "imagenet" and t.framework in images.READS_PACKED}):
            images.require_packed(folder, fmt)  # a framework that reads a packed form only: packed, of these classes
    if not any(t.data == "cifar10" for t in trials):
        return data_dir
    if data.has_cifar10(data_dir):
        data.load_cifar10(data_dir)  # a bad file fails the run here, not every trial
        return data_dir
    if scale == "smoke" and not args.fetch_data:
        print(f"no CIFAR-10 under {data_dir}: the smoke scale trains on synthetic data (accuracy columns null)")
        if sweep.early_stopping:
            print("early stopping ranks trials by val_acc, which synthetic data lacks: it is off for this run")
        return None
    from sweep import datasets  # asks on a terminal, fetches with --fetch-data, else names the command

    datasets.fetch_for_run(data_dir, ask=not args.fetch_data)
    return data_dir


def _session(command: str, address: str | None, estimate: store.Estimate | None, envs: dict[str, Environment],
             found: list[FrameworkCheck]) -> Session:
    """This start of the driver, with the engine that runs it (every row of the session names it too) and its plan."""
    import ray

    return Session(command=command, started_at=time.time(), host=socket.gethostname(), pid=os.getpid(),
                   address=address, engine_version=engine_version(), git_commit=git_commit(),
                   ray_version=ray.__version__, estimate=estimate, environments=envs, checks=found)


def _open_run(launch: Launch, session: Session) -> RunStore:
    """The run's folder in the store, with this session recorded in its run.json."""
    if launch.resumed:
        run = RunStore(launch.resumed.run_dir)
        meta = run.meta
        print(f"resuming run {meta.run_id} of {launch.sweep.name}: {len(launch.trials)} of "
              f"{len(launch.all_trials)} trials to run")
        meta.sessions.append(session)
        meta.code, meta.code_sha256 = launch.code, environments.code_digest(launch.code)  # as --force may change it
        run.write_meta(meta)
    else:  # run.json is written once, whole, with its first session: a start stopped before it leaves nothing
        meta = RunMeta(sweep=launch.sweep.name, run_id=launch.run_id, scale=launch.scale,
                       spec_path=str(launch.sweep.path), spec_sha256=store.sha256(launch.sweep.text),
                       data_dir=launch.data_dir, emulated=launch.emulated,
                       trials=[t.trial_id for t in launch.all_trials], sessions=[session],
                       overrides=dict(launch.sweep.overrides), memory_capacity_mib=launch.capacity_mib,
                       searches_done=False if launch.searches else None, code=launch.code,
                       code_sha256=environments.code_digest(launch.code))
        run = RunStore.create(launch.results, meta, launch.sweep.text)
        print(f"sweep {launch.sweep.name}: {limits.count(len(launch.trials), 'trial')} at scale {launch.scale}, run {meta.run_id}")
    print(f"results: {run.dir}")
    return run


def _run(args: argparse.Namespace, launch: Launch, cluster: Any, command: str, opened: threading.Event,
         here: dict[str, Future[FrameworkCheck]]) -> int:
    from sweep import dashboard, runner
    from sweep.trial import TrialRuntime

    for line in dashboard.banner(cluster):  # dashboard URL, where its token is, metrics endpoint
        print(line)
    target = started_target(cluster, launch.emulated)
    every = with_host_cpus(launch.trials, target)  # the CPUs each reserves: a fact of this cluster
    trials = [t for t in every if t.trial_id not in launch.refused]  # refused before Ray: recorded below, not checked
    found: list[FrameworkCheck] = []
    if args.skip_infeasible or not checks.unplaceable(trials, cluster.nodes, found):  # (too big anywhere: stop now)
        # Each framework on each node, in its environment, before any trial: where it can run at all.
        started = time.time()
        found = checks.run(cluster.nodes, sorted({t.runs_as for t in trials}), launch.environments,
                           environments.code_root(), launch.emulated, here, checks.named_models(trials, launch.data_dir))
        if found:  # (a check started before Ray may have taken longer than the wait for it)
            print(checks.table(found, launch.environments, max(time.time() - started, *(c.seconds or 0 for c in found))))
    if refusal := checks.gpu_decode_refusal(trials, found):
        raise UsageError(refusal)
    if refusal := checks.model_refusal(found):  # a model the loop cannot train: before any trial
        raise UsageError(refusal)
    bad = checks.unplaceable(trials, cluster.nodes, found)
    if bad:  # Ray would leave these pending for ever, without a word: say so before anything runs
        print(_infeasible_table([t for t in trials if t.trial_id in bad], cluster.nodes, bad))
        if not args.skip_infeasible:
            raise UsageError(f"{len(bad)} of {len(trials)} trials fit no node of the cluster (table above); "
                             "--skip-infeasible records them as infeasible and runs the rest")
    planned, ordered = _plan(launch, trials, target, args.max_concurrent)
    ordered = [t for t in ordered if t.trial_id not in bad]  # the plan knows the nodes' sizes, the checks their frameworks
    session = _session(command, args.address, planned.record() if ordered else None, launch.environments, found)
    columns = {"engine_version": session.engine_version, "git_commit": session.git_commit,
               "ray_version": session.ray_version, "sweep": launch.sweep.name, "run_id": launch.run_id,
               "scale": launch.scale}
    run = _open_run(launch, session)  # the store is written only now, once every check has passed
    opened.set()
    meta = run.meta
    for t in every:
        if why := launch.refused.get(t.trial_id) or bad.get(t.trial_id):
            summary = store.summarize(t.trial_id, t, [], Status.INFEASIBLE, columns)
            run.finish_trial({**summary, "error_type": "Infeasible", "error": why}, [])
    trials = ordered  # those that fit, in the plan's order
    runtime = TrialRuntime(run_dir=str(run.dir), data_dir=launch.data_dir, emulated=launch.emulated,
                           columns=columns, label_axes=spec.label_axes(launch.all_trials),
                           environments=launch.environments, code_root=environments.code_root(),
                           placement=checks.placement(found))
    plan = runner.RunPlan(sweep=launch.sweep, trials=trials, total=len(launch.all_trials), store=run,
                          runtime=runtime, max_concurrent=args.max_concurrent, max_failures=args.max_failures,
                          session=len(meta.sessions))
    if launch.searches:
        stopped_by = _search(launch, run, plan, target)
    else:
        stopped_by = runner.run(plan) if trials else None
    state = read_run(run.dir)
    bounds = max_batch.boundary_probes(run.trial_rows())
    not_ok = [s for tid, s in state.finished.items() if not s.done and tid not in bounds]
    pending = state.pending(False)
    infeasible = sum(s == Status.INFEASIBLE for s in not_ok)  # recorded, never started: not failures of a trial
    print(f"done: {len(state.finished) - len(not_ok) - len(bounds)} completed, {len(not_ok) - infeasible} failed, "
          + (f"{infeasible} infeasible, " if infeasible else "")
          + (f"{len(bounds)} probes out of memory (the searches' boundaries), " if bounds else "")
          + f"{len(pending)} not finished; results in {run.dir}")
    if comparison := estimates.compare(run.meta, run.trial_rows()):
        print(comparison.line())
    if state.unfinished:
        print("resume with: " + resume_command(args.sweep, meta.run_id, meta.overrides, args.results, launch.code))
    if stopped_by:
        return 128 + stopped_by  # the shell's code for a signal: 130 after Ctrl-C, 143 after SIGTERM
    return 1 if not_ok or state.unfinished else 0


def _search(launch: Launch, run: RunStore, plan: Any, target: Target) -> int | None:
    """The largest-batch searches round by round (the plan's trials join the first round); the boundaries
    written and printed once every search has ended. The signal that stopped a round, if one did."""
    from sweep import runner

    def run_round(trials: list[TrialConfig], number: int) -> int | None:
        if between.fired:  # Ctrl-C or SIGTERM after a round ended: the next one does not start
            return between.signal
        meta = run.meta
        meta.trials += [t.trial_id for t in trials if t.trial_id not in meta.trials]  # listed before they start
        run.write_meta(meta)
        return runner.run(replace(plan, trials=with_host_cpus(trials, target), total=len(meta.trials), round=number))

    # Each round's own handler stops its trials; this one takes a signal that comes between two rounds (Tune's
    # start and end take seconds), which would otherwise end the run without its resume line.
    with runner.Interrupt() as between:
        stopped = max_batch.run_rounds(launch.searches, plan.trials, launch.capacity_mib, run.trial_rows, run_round)
    found = max_batch.boundaries(launch.searches, run.trial_rows(), launch.capacity_mib)
    run.write_rows(max_batch.SUMMARY_FILE, found)
    if not stopped:
        meta = run.meta
        meta.searches_done = True
        run.write_meta(meta)
    print(max_batch.frame(found).to_string(index=False))
    return stopped


def _plan(launch: Launch, trials: list[TrialConfig], target: Target,
          max_concurrent: int | None) -> tuple[Plan, list[TrialConfig]]:
    """The plan of this session's trials on the cluster Ray reports, printed: it heads the run's output."""
    results = launch.results
    plan, ordered = build(launch.sweep, launch.scale, trials, target, estimates.history(results),
                          last_run(results, launch.sweep.name, target.hardware), max_concurrent, launch.environments,
                          launch.searches, launch.capacity_mib)
    for line in plan.lines():
        print(line)
    return plan, ordered


def _infeasible_table(trials: list[TrialConfig], nodes: list[Any], why: dict[str, str]) -> str:
    largest = max(((n.gpus, n.cpus) for n in nodes), default=(0, 0))
    lines = [f"{limits.count(len(trials), 'trial')} {'fits' if len(trials) == 1 else 'fit'} no node (the cluster has "
             f"{limits.count(len(nodes), 'node')}; the largest has {limits.count(largest[0], 'GPU')}, "
             f"{limits.count(largest[1], 'CPU')}):",
             "  trial_id    framework   model           nodes  GPUs/node  CPUs/node  why"]
    lines += [f"  {t.trial_id}  {t.framework:<10}  {t.model:<14}  {t.nodes:>5}  "
              f"{t.gpus_per_node:>9}  {t.cpus:>9}  {why[t.trial_id]}" for t in trials]
    return "\n".join(lines)
