"""The runs at hand: `runs` lists them, `rm` deletes one. Driver-side, on a local store or an s3:// one.

    python -m sweep runs [NAME] [--results DIR]    every run (of one sweep, or of all) with its state
    python -m sweep rm NAME RUN_ID [--yes]         delete a run: asks first, refuses a running one
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from sweep import location, max_batch, store
from sweep.errors import StoreError, UsageError
from sweep.estimates import sweep_names
from sweep.location import Location
from sweep.plan import table
from sweep.runs import RunState, read_run, results_location, run_by_id, sweep_name, trial_counts


@dataclass(frozen=True)
class RunLine:
    """One run as `runs` lists it."""

    sweep: str
    run_id: str
    scale: str
    started_at: float | None  # its first session's start; None: no session recorded
    counts: dict[str, int]  # trials by state (sweep/runs.py trial_counts), largest-batch probes out of memory apart
    gpu_hours: float
    state: str  # finished, unfinished, or running (its driver alive on this host)
    command: str  # the command that started it


def describe(state: RunState) -> RunLine:
    meta = state.meta
    pid = state.driver if state.unfinished else None
    status = f"running (pid {pid})" if pid else "unfinished" if state.unfinished else "finished"
    started = meta.sessions[0].started_at if meta.sessions else None
    run = store.RunStore(state.run_dir)
    return RunLine(meta.sweep, meta.run_id, meta.scale, started, _counts(state, run), run.gpu_hours(), status, meta.command)


def _counts(state: RunState, run: store.RunStore) -> dict[str, int]:
    """The run's trials by state, where a largest-batch probe that ran out of memory is an `oom probe`, not a
    failure: its search's result (docs/max-batch.md)."""
    counts = trial_counts(state)
    probes = len(max_batch.boundary_probes(run.trial_rows()) & set(state.meta.trials))
    counts["failed"] -= probes
    counts["oom probes"] = probes
    return counts


def _date(seconds: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds)) if seconds is not None else "-"


def cmd_runs(args: argparse.Namespace) -> int:
    """Every run under --results (of one sweep, or of all), oldest first; a damaged run is a line saying so."""
    results = results_location(args.results)
    names = [sweep_name(args.sweep)] if args.sweep else sweep_names(results)
    folders = [run_dir for name in names for run_dir in store.run_dirs(results, name)]
    half_made = [run_dir for name in names for run_dir in store.half_made_run_dirs(results, name)]
    if not folders and not half_made:
        if args.sweep:
            raise UsageError(f"no run of {names[0]} under {results}")
        print(f"no runs under {results}")
        return 0
    rows, damaged = [], []
    for run_dir in folders:
        try:
            line = describe(read_run(run_dir))
        except StoreError as e:
            damaged.append(f"{run_dir.parent.name} {run_dir.name}: unreadable: {e}")
            continue
        c = line.counts
        rows.append([line.sweep, line.run_id, line.scale, _date(line.started_at), str(sum(c.values())), str(c["done"]),
                     str(c["failed"]), str(c["oom probes"]), str(c["running or interrupted"]), str(c["pending"]),
                     f"{line.gpu_hours:.4f}", line.state, line.command])
    head = ["sweep", "run", "scale", "started", "trials", "done", "failed", "oom probes", "interrupted", "pending",
            "GPU-hours", "state", "command"]
    damaged += [f"{d.parent.name} {d.name}: incomplete: {store.HALF_MADE}; python -m sweep rm {d.parent.name} {d.name} "
                "deletes it" for d in half_made]  # listed, so that nothing in the store is out of sight
    for text in (table(head, rows, right={4, 5, 6, 7, 8, 9, 10}) if rows else []) + damaged:
        print(text)
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    """Delete one run's folder (rows, sweep file, Tune's checkpoints), after asking; never a running one."""
    name = sweep_name(args.sweep)
    results = results_location(args.results)
    half_made = {d.name: d for d in store.half_made_run_dirs(results, name)}
    run_dir = half_made.get(args.run_id) or run_by_id(results, name, args.run_id)
    what = f"run {args.run_id} of {name}"
    summary, elsewhere = f"{what}: incomplete ({store.HALF_MADE})", None
    if args.run_id not in half_made:
        try:
            line = describe(read_run(run_dir))
            counts = ", ".join(f"{n} {k}" for k, n in line.counts.items() if n)
            summary = f"{what}: {line.state}, {counts}; {line.gpu_hours:.4f} GPU-hours; started {_date(line.started_at)}"
            if line.state.startswith("running"):
                raise UsageError(f"{what} is {line.state} on this host: stop it first (Ctrl-C there), then delete it")
            elsewhere = _driver_elsewhere(run_dir) if line.state == "unfinished" else None
        except StoreError as e:  # a damaged run can still go
            summary = f"{what}: unreadable ({e})"
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(f"rm asks before deleting and the input is not a terminal: give --yes to delete {what}")
        print(summary)
        if elsewhere:
            print(f"its last session ran on {elsewhere}, where this command cannot see whether it still runs")
        if not _confirmed(f"delete {run_dir} and everything in it? [y/N] "):
            print("not deleted")
            return 0
    try:
        location.remove_tree(run_dir)
    except OSError as e:
        raise UsageError(f"{run_dir}: cannot delete it ({location.reason(e)})") from None
    print(f"deleted {what} ({run_dir})")
    return 0


def _driver_elsewhere(run_dir: Location) -> str | None:
    """The host of an unfinished run's last session when it is not this one (its driver cannot be checked)."""
    import socket

    sessions = store.RunStore(run_dir).meta.sessions
    host = sessions[-1].host if sessions else None
    return host if host and host != socket.gethostname() else None


def _confirmed(question: str) -> bool:
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False
