"""`run` and `status`: from the command line's options to a plan on a Ray cluster, new or resumed."""
from __future__ import annotations

import argparse
import itertools
import os
import shlex
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweep import location, spec, store
from sweep.location import Location
from sweep.spec import Sweep

PROJECT_DIR = Path(__file__).resolve().parent.parent
RETRYABLE = ("failed", "oom", "infeasible")  # diverged is not: the same seed diverges the same way


class UsageError(Exception):
    """Bad input the user can fix; the message is the one line they see."""


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(PROJECT_DIR), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(PROJECT_DIR), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() + ("-dirty" if dirty else "")) if out.returncode == 0 else None


def engine_columns() -> dict[str, Any]:
    """Columns every row of a run shares: the engine that wrote it."""
    from importlib.metadata import version

    import ray

    return {"engine_version": version("sweep"), "git_commit": _git_commit(), "ray_version": ray.__version__}


@dataclass(frozen=True)
class RunState:
    """What the store says of a run: every trial of its grid and the final status of those that ended."""

    run_dir: Location
    meta: dict[str, Any]
    finished: dict[str, str]

    @property
    def trial_ids(self) -> list[str]:
        return self.meta["trials"]

    def pending(self, retry_failed: bool) -> list[str]:
        again = RETRYABLE if retry_failed else ()
        return [t for t in self.trial_ids if self.finished.get(t) in (None, *again)]

    @property
    def unfinished(self) -> bool:
        return bool(self.pending(retry_failed=False))

    @property
    def driver(self) -> int | None:
        """The pid of a driver on this host that is running the run now; None if none is (or it runs elsewhere)."""
        import psutil

        sessions = self.meta.get("sessions") or []
        last = sessions[-1] if sessions else {}
        if last.get("host") != socket.gethostname() or last.get("pid") in (None, os.getpid()):
            return None
        try:
            process = psutil.Process(last["pid"])
            # Not a later process that got the pid again: started before the session, and ours.
            ours = process.create_time() <= last["started_at"] and any("sweep" in a for a in process.cmdline())
            return last["pid"] if ours and process.status() != psutil.STATUS_ZOMBIE else None
        except psutil.Error:
            return None


def read_run(run_dir: Location) -> RunState:
    run = store.RunStore(run_dir)
    return RunState(run_dir, run.meta, run.finished())


def latest_unfinished(results: Location, sweep_name: str) -> RunState | None:
    for run_dir in reversed(store.run_dirs(results, sweep_name)):
        state = read_run(run_dir)
        if state.unfinished:
            return state
    return None


def results_location(text: str) -> Location:
    """--results: a folder, or a pyarrow filesystem URI every node reaches (s3://bucket/prefix)."""
    try:
        results = location.at(text)
    except ValueError as e:
        raise UsageError(f"--results {e}") from None
    _reach(results, text, write=False)
    return results


def _reach(results: Location, text: str, write: bool) -> None:
    """A store the command cannot read (a run: write) fails here in one line, not in a traceback later."""
    try:
        location.check(results, write)
    except OSError as e:
        doing = "write" if write else "read"
        raise UsageError(f"--results {text}: cannot {doing} results there ({location.reason(e)})") from None


def _first_difference(old: str, new: str) -> str:
    pairs = itertools.zip_longest(old.splitlines(), new.splitlines())
    for number, (was, now) in enumerate(pairs, 1):
        if was != now:
            return f"line {number}: {was!r} -> {now!r}"
    return "line endings only"


def _resume_command(args: argparse.Namespace, run_id: str) -> str:
    results = f" --results {args.results}" if args.results != "results" else ""
    return f"python -m sweep {args.sweep} --resume {run_id}{results}"


def _resume_target(args: argparse.Namespace, sweep: Sweep, results: Location) -> RunState:
    if args.resume == "latest":
        state = latest_unfinished(results, sweep.name)
        if state is None:
            raise UsageError(f"no unfinished run of {sweep.name} under {results}: nothing to resume")
        return state
    run_dir = results / sweep.name / args.resume
    if not (run_dir / "run.json").is_file():
        raise UsageError(f"no run {args.resume} of {sweep.name} under {results}")
    state = read_run(run_dir)
    if not state.pending(args.retry_failed):
        raise UsageError(f"run {args.resume} of {sweep.name} is finished: nothing to resume"
                         + ("" if args.retry_failed else " (failed trials are retried with --retry-failed)"))
    return state


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from sweep import cluster as ray_cluster
    from trainables import data, environment

    sweep = spec.load(args.sweep)
    results = results_location(args.results)
    address = args.address or os.environ.get("RAY_ADDRESS")
    if address and args.emulate_gpus:
        raise UsageError("--emulate-gpus applies to the embedded Ray only; a joined cluster brings its own GPUs")
    if (args.force or args.retry_failed) and not args.resume:
        raise UsageError("--force and --retry-failed go with --resume")
    resumed = _resume_target(args, sweep, results) if args.resume else None
    if resumed and (pid := resumed.driver):
        raise UsageError(f"run {resumed.meta['run_id']} is running now (driver pid {pid} on this host): "
                         f"stop it first (Ctrl-C there, or kill {pid}), then resume")
    if resumed:
        stored = (resumed.run_dir / "sweep.yaml").read_text()
        if stored != sweep.text and not args.force:
            raise UsageError(f"{sweep.path} changed since run {resumed.meta['run_id']} started "
                             f"({_first_difference(stored, sweep.text)}); --force resumes it as it was started")
        sweep = spec.parse(stored, sweep.path)  # a resume continues the run as it was started
        if args.scale and args.scale != resumed.meta["scale"]:
            raise UsageError(f"run {resumed.meta['run_id']} is at scale {resumed.meta['scale']}, not {args.scale}")
    else:
        earlier = latest_unfinished(results, sweep.name)
        if earlier:
            done, pid = len(earlier.trial_ids) - len(earlier.pending(False)), earlier.driver
            print(f"note: run {earlier.meta['run_id']} of {sweep.name} is unfinished ({done} of "
                  f"{len(earlier.trial_ids)} trials ended); "
                  + (f"its driver (pid {pid}) is running it now: this new run shares the cluster with it" if pid
                     else "continue it with: " + _resume_command(args, earlier.meta["run_id"])))

    real_gpus = 0 if address else environment.real_gpu_count()
    emulated: bool | None = None if address else (bool(args.emulate_gpus) or real_gpus == 0)
    scale = resumed.meta["scale"] if resumed else args.scale or ("smoke" if emulated else "full")
    all_trials = sweep.trials(scale)
    if resumed:
        pending = set(resumed.pending(args.retry_failed))
        trials = [t for t in all_trials if t.trial_id in pending]
    else:
        trials = all_trials
    num_gpus, nodes = real_gpus, 1
    if emulated:
        # Trials spanning nodes get as many emulated nodes, each with the GPUs of one.
        nodes = max(t.config["nodes"] for t in all_trials)
        num_gpus = args.emulate_gpus or 2 * max(t.config["gpus_per_node"] for t in all_trials)
        why = "GPU emulation asked for" if args.emulate_gpus else "no GPU found"
        where = f"{nodes} Ray nodes on this machine with {num_gpus} GPUs each" if nodes > 1 else f"{num_gpus} GPUs in Ray"
        print(f"{why}: emulating {where}, each trial on as many CPU devices "
              f"(results are marked cpu-emulated: not a speed result); scale {scale}")

    data_dir = _data_dir(args, sweep, trials, scale, resumed)
    _reach(results, args.results, write=True)  # after every other check, before Ray starts
    cluster = ray_cluster.start(address, num_gpus, args.dashboard_host, job_name=sweep.name, nodes=nodes)
    try:
        return _run_on_cluster(args, argv, cluster, sweep, scale, all_trials, trials, results, data_dir,
                               emulated, resumed)
    finally:
        ray_cluster.stop(cluster)


def _data_dir(args: argparse.Namespace, sweep: Sweep, trials: list[spec.Trial], scale: str,
              resumed: RunState | None) -> str | None:
    """The CIFAR-10 folder, checked once before any trial starts; None: synthetic data for the run."""
    from trainables import data

    if resumed and resumed.meta.get("data_dir") is None:
        return None  # the run started on synthetic data: it continues on it
    data_dir = str(Path(args.data_dir).resolve()) if args.data_dir else (
        resumed.meta["data_dir"] if resumed else str(Path("data").resolve()))
    if not any(t.config["data"] == "cifar10" for t in trials):
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


def _run_on_cluster(args: argparse.Namespace, argv: list[str], cluster: Any, sweep: Sweep, scale: str,
                    all_trials: list[spec.Trial], trials: list[spec.Trial], results: Location, data_dir: str | None,
                    emulated: bool | None, resumed: RunState | None) -> int:
    from sweep import cluster as ray_cluster
    from sweep import monitor, packing, runner

    for line in monitor.banner(cluster):  # dashboard URL, where its token is, metrics endpoint
        print(line)
    requests = {t.trial_id: (t.config["cpus_per_trial"], t.config["gpus_per_node"], t.config["nodes"]) for t in trials}
    bad = ray_cluster.infeasible(requests, cluster.nodes)
    if bad:  # Ray would leave these pending for ever, without a word: say so before anything runs
        print(_infeasible_table([t for t in trials if t.trial_id in bad], cluster.nodes))
        if not args.skip_infeasible:
            raise UsageError(f"{len(bad)} of {len(trials)} trials fit no node of the cluster (table above); "
                             "--skip-infeasible records them as infeasible and runs the rest")
    command = shlex.join(["python", "-m", "sweep", *argv])
    if resumed:
        run = store.RunStore(resumed.run_dir)
        meta = run.meta
        session = len(meta.get("sessions", [])) + 1
        print(f"resuming run {meta['run_id']} of {sweep.name}: {len(trials)} of {len(all_trials)} trials to run")
    else:
        run_id = store.new_run_id()
        meta = {"sweep": sweep.name, "run_id": run_id, "scale": scale, "spec_path": str(sweep.path),
                "spec_sha256": store.sha256(sweep.text), "data_dir": data_dir, "emulated": emulated,
                "trials": [t.trial_id for t in all_trials], "sessions": []}
        run = store.RunStore.create(results, sweep.name, run_id, meta, sweep.text)
        session = 1
        print(f"sweep {sweep.name}: {len(trials)} trials at scale {scale}, run {run_id}")
    engine = engine_columns()
    meta["sessions"] = [*meta.get("sessions", []), {"command": command, "started_at": time.time(),
                                                    "address": args.address, "host": socket.gethostname(),
                                                    "pid": os.getpid(), **engine}]
    run.write_meta(meta)
    print(f"results: {run.dir}")
    row_base = {**engine, "sweep": sweep.name, "run_id": meta["run_id"], "scale": scale}
    for t in trials:
        if t.trial_id in bad:
            summary = store.summarize(t.trial_id, t.config, [], "infeasible", row_base)
            run.finish_trial({**summary, "error_type": "Infeasible", "error": bad[t.trial_id]}, [])
    trials = [t for t in trials if t.trial_id not in bad]
    if trials:
        seconds = packing.estimate(trials, packing.measured_seconds(results, sweep.name))
        trials, how, makespan = packing.order(trials, seconds, [n.gpus for n in cluster.nodes],
                                              [n.cpus for n in cluster.nodes])
        bound = packing.lower_bound(trials, seconds, cluster.total_gpus)
        print(f"trial order: {how}, estimated makespan {makespan / bound:.2f} x the lower bound")
    plan = runner.RunPlan(
        sweep=sweep, scale=scale, trials=trials, total=len(all_trials), store=run, data_dir=data_dir,
        emulated=emulated, max_concurrent=args.max_concurrent, max_failures=args.max_failures, session=session,
        row_base=row_base)
    stopped_by = runner.run(plan) if trials else None
    state = read_run(run.dir)
    not_ok = {t: s for t, s in state.finished.items() if s not in store.DONE}
    pending = state.pending(False)
    print(f"done: {len(state.finished) - len(not_ok)} completed, {len(not_ok)} failed, {len(pending)} not finished"
          f"; results in {run.dir}")
    if pending:
        print("resume with: " + _resume_command(args, meta["run_id"]))
    if stopped_by:
        return 128 + stopped_by  # the shell's code for a signal: 130 after Ctrl-C, 143 after SIGTERM
    return 1 if not_ok or pending else 0


def _infeasible_table(trials: list[spec.Trial], nodes: list[Any]) -> str:
    largest = max(((n.gpus, n.cpus) for n in nodes), default=(0, 0))
    lines = [f"{len(trials)} trials fit no node (the cluster has {len(nodes)} nodes; the largest has "
             f"{largest[0]:g} GPUs, {largest[1]:g} CPUs):",
             "  trial_id    framework   model           nodes  GPUs/node  CPUs/node"]
    lines += [f"  {t.trial_id}  {t.config['framework']:<10}  {t.config['model']:<14}  {t.config['nodes']:>5}  "
              f"{t.config['gpus_per_node']:>9}  {t.config['cpus_per_trial']:>9}" for t in trials]
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    sweep = spec.load(args.sweep)
    results = results_location(args.results)
    runs = store.run_dirs(results, sweep.name)
    if not runs:
        raise UsageError(f"no run of {sweep.name} under {results}")
    state = read_run(runs[-1])
    run = store.RunStore(state.run_dir)
    counts = {"done": 0, "running or interrupted": 0, "failed": 0, "pending": 0}
    for tid in state.trial_ids:
        status = state.finished.get(tid)
        if status in store.DONE:
            counts["done"] += 1
        elif status is not None:
            counts["failed"] += 1
        elif run.attempts(tid):
            counts["running or interrupted"] += 1
        else:
            counts["pending"] += 1
    summaries = run.trials()
    epochs = run.epochs()
    unfinished = epochs[~epochs.trial_id.isin(state.finished)]
    gpu_hours = float(summaries.gpu_hours.fillna(0).sum()) + float(
        ((unfinished.epoch_time_s.fillna(0) + unfinished.val_time_s.fillna(0)) * unfinished.num_gpus).sum() / 3600)
    print(f"{sweep.name} run {state.meta['run_id']} ({state.meta['scale']} scale, {len(state.trial_ids)} trials): "
          + ", ".join(f"{n} {k}" for k, n in counts.items()))
    print(f"GPU-hours used: {gpu_hours:.4f}")
    if state.unfinished and (pid := state.driver):
        print(f"running now: driver pid {pid} on this host")
    elif state.unfinished:
        print("resume with: " + _resume_command(args, state.meta["run_id"]))
    return 0
