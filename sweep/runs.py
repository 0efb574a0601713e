"""Runs in the store as the commands see them: where results live, a run's state, `status`. Driver-side.

`run` (sweep/launch.py) resumes from here, `status` prints from here, and `report` finds its runs
through `results_location`.
"""
from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass

from sweep import limits, location, max_batch, spec, store
from sweep.errors import UsageError
from sweep.limits import MAX_PATH_SHOWN, shown
from sweep.location import Location
from sweep.schema import Status
from sweep.store import RunMeta, RunStore


@dataclass(frozen=True)
class RunState:
    """What the store says of a run: its run.json and the final status of every trial that ended."""

    run_dir: Location
    meta: RunMeta
    finished: dict[str, Status]

    def pending(self, retry_failed: bool) -> list[str]:
        """The trials a resume runs: those without a summary row (and with retry_failed, the retryable ones)."""
        return [t for t in self.meta.trials
                if t not in self.finished or (retry_failed and self.finished[t].retryable)]

    @property
    def unfinished(self) -> bool:
        """Trials without a summary row, or largest-batch searches not ended (their next probes are not listed yet)."""
        return bool(self.pending(retry_failed=False)) or self.meta.searches_done is False

    @property
    def driver(self) -> int | None:
        """The pid of a driver on this host that is running the run now; None if none is (or it runs elsewhere)."""
        import psutil

        last = self.meta.sessions[-1] if self.meta.sessions else None
        if last is None or last.host != socket.gethostname() or last.pid == os.getpid():
            return None
        try:
            process = psutil.Process(last.pid)
            # Not a later process that got the pid again: started before the session, and ours.
            ours = process.create_time() <= last.started_at and any("sweep" in a for a in process.cmdline())
            return last.pid if ours and process.status() != psutil.STATUS_ZOMBIE else None
        except psutil.Error:
            return None


def read_run(run_dir: Location) -> RunState:
    run = RunStore(run_dir)
    return RunState(run_dir, run.meta, run.finished())


def trial_counts(state: RunState) -> dict[str, int]:
    """A run's trials by state: done, running or interrupted (started, no summary row), failed, pending."""
    run = RunStore(state.run_dir)
    counts = {"done": 0, "running or interrupted": 0, "failed": 0, "pending": 0}
    for tid in state.meta.trials:
        status = state.finished.get(tid)
        if status is not None:
            counts["done" if status.done else "failed"] += 1
        elif run.attempts(tid):
            counts["running or interrupted"] += 1
        else:
            counts["pending"] += 1
    return counts


def sweep_name(text: str, max_trials: int = limits.MAX_TRIALS) -> str:
    """The sweep a command names: a sweep file's name (by name or path), or a folder of runs whose file is gone."""
    if text.endswith((".yaml", ".yml")) or "/" in text or (spec.SPEC_DIR / f"{text}.yaml").exists():
        return spec.load(text, max_trials).name
    if limits.name_problem(text):
        raise UsageError(f"{text!r}: not a sweep name or a path to a .yaml file")
    return text


def run_by_id(results: Location, name: str, run_id: str) -> Location:
    """The folder of run RUN_ID of a sweep; an id that is not one (a path, '..') is refused like a missing run."""
    run_dir = results / name / run_id
    if limits.name_problem(run_id) or not (run_dir / "run.json").is_file():
        raise UsageError(f"no run {run_id} of {name} under {results} (python -m sweep runs {name} lists them)")
    return run_dir


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
    reach(results, text, write=False)
    return results


def reach(results: Location, text: str, write: bool) -> None:
    """A store the command cannot read (a run: write) fails here in one line, not in a traceback later."""
    try:
        location.check(results, write)
    except OSError as e:
        doing = "write" if write else "read"
        raise UsageError(f"--results {shown(text, MAX_PATH_SHOWN)}: cannot {doing} results there "
                         f"({location.reason(e)})") from None


def resume_command(sweep: str, run_id: str, set_values: dict, results: str, code: str | None = None) -> str:
    """The command that continues a run (what `run` and `status` print), with the --set values it was started with,
    and the --code folder of its models where `run` knows it."""
    import shlex

    from sweep import overrides

    where = f" --results {results}" if results != "results" else ""
    given = f" {overrides.options(set_values)}" if set_values else ""
    folder = f" --code {shlex.quote(code)}" if code else ""
    return f"python -m sweep {sweep} --resume {run_id}{given}{where}{folder}"


def cmd_status(args: argparse.Namespace) -> int:
    """`python -m sweep status NAME [--run RUN_ID]`: a run's trials by state (the latest run's by default),
    its GPU-hours, and how to continue it."""
    name = sweep_name(args.sweep, args.max_trials)
    results = results_location(args.results)
    if args.run:
        run_dir = run_by_id(results, name, args.run)
    elif runs := store.run_dirs(results, name):
        run_dir = runs[-1]
    else:
        raise UsageError(f"no run of {name} under {results}")
    state = read_run(run_dir)
    counts = trial_counts(state)
    meta = state.meta
    print(f"{name} run {meta.run_id} ({meta.scale} scale, {limits.count(len(meta.trials), 'trial')}): "
          + ", ".join(f"{n} {k}" for k, n in counts.items()))
    run = RunStore(run_dir)
    bounds = len(max_batch.boundary_probes(run.trial_rows()))
    if bounds:  # batch_per_gpu: max (docs/max-batch.md)
        print(f"of the failed, {limits.count(bounds, 'probe')} of largest-batch searches ran out of memory: "
              "the searches' boundaries, not faults")
    if meta.searches_done is False:
        print("largest-batch searches not ended: the next round's probes are not listed yet")
    print(f"GPU-hours used: {run.gpu_hours():.4f}")
    if state.unfinished and (pid := state.driver):
        print(f"running now: driver pid {pid} on this host")
    elif state.unfinished:
        print("resume with: " + resume_command(args.sweep, meta.run_id, meta.overrides, args.results))
    return 0
