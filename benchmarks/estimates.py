"""How far off are the engine's duration estimates? A stored history replayed, each run estimated from the runs before it.

    .venv/bin/python benchmarks/estimates.py [--results results] [SWEEP ...]

The runs are the engine's own (run.json and the summary rows `python -m sweep` wrote), oldest first by
their first session's start. For each run, sweep/estimates.py sees only the runs that started before it
(of every sweep in the store, as `run` and `plan` do) and estimates each of its trials that completed in
one attempt, for the hardware that trial ran on. Error = (estimate - measured) / measured.
For each session that recorded its plan (run.json), the makespan is replayed too: the session's trials
in its order on its cluster (sweep/packing.py), each lasting its replayed estimate plus the start-up gap
learnt before it, against the makespan it took; the makespan the session itself estimated is shown beside.
Prints a line per run, then the median |error| by source (measured: earlier runs of the same trial;
model: the model's cost at the measured rate) and overall, and how often the stated range held: an
estimate of s seconds +-u states s / (1 + u) to s x (1 + u), and it held when the trial's wall time lay
in it (`held`: of the trials whose estimate stated a range; those with "error unknown" state none, and
count as missed in the share of all estimates), and the median stated +-u (a range that holds everything
says nothing). Runs whose trials had no earlier run on their hardware get no estimate (source "none").

SWEEP: only these sweeps' runs are replayed (the history they learn from is still the whole store).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from typing import Any

from sweep import location, store
from sweep.estimates import (Estimator, Hardware, History, config_of, estimated_sessions, hardware_of, measurements, off_by,
                             session_gaps, simulated_makespan, sweep_names)
from sweep.store import RunMeta


@dataclass(frozen=True)
class StoredRun:
    meta: RunMeta
    rows: list[dict[str, Any]]
    started_at: float


def stored_runs(results: location.Location) -> list[StoredRun]:
    runs = []
    for name in sweep_names(results):
        for run_dir in store.run_dirs(results, name):
            run = store.RunStore(run_dir)
            try:
                meta, rows = run.meta, run.trial_rows()
            except store.StoreError as e:
                print(f"skipped {run_dir}: {e}", file=sys.stderr)
                continue
            starts = [s.started_at for s in meta.sessions] or [r["started_at"] for r in rows if r.get("started_at")]
            if starts:
                runs.append(StoredRun(meta, rows, min(starts)))
    return sorted(runs, key=lambda r: r.started_at)


def _pct(values: list[float]) -> str:
    return f"{statistics.median(values):.0%}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="results", help="the store to replay (a folder or s3:// URI)")
    parser.add_argument("sweeps", nargs="*", metavar="SWEEP", help="replay only these sweeps' runs")
    args = parser.parse_args()
    runs = stored_runs(location.at(args.results))
    if not runs:
        sys.exit(f"no runs under {args.results}")

    errors: dict[str, list[float]] = {"measured": [], "model": []}
    held: dict[str, list[bool]] = {"measured": [], "model": []}  # per trial with a stated range: did it hold
    widths: list[float] = []  # the stated +-u of each: a range that holds everything says nothing
    unranged = 0
    makespans: list[tuple[float, float, float | None]] = []  # (replayed, taken, recorded)
    print(f"{'sweep':<22} {'run':<22} {'trials':>6} {'measured':>9} {'model':>6} {'none':>5} {'|error|':>8} "
          f"{'bias':>6} {'worst':>6} {'held':>6}  makespan replayed / taken (recorded)")
    for i, run in enumerate(runs):
        if args.sweeps and run.meta.sweep not in args.sweeps:
            continue
        before = runs[:i]
        past = History([m for r in before for m in measurements(r.rows)],
                       [g for r in before for g in session_gaps(r.meta, r.rows)])
        found = measurements(run.rows)
        by_source: dict[str, list[float]] = {"measured": [], "model": [], "none": []}
        signed = []
        ranges = []
        estimators: dict[Hardware, Estimator] = {}

        def estimator_for(hardware: Hardware) -> Estimator:  # one per hardware: each fits its model once
            if hardware not in estimators:
                estimators[hardware] = Estimator(past, hardware)
            return estimators[hardware]

        for m in found:
            guess = estimator_for(m.hardware).guess(m.config)
            if guess.seconds is None or guess.source not in errors:  # nothing run on its hardware yet: a prior, or nothing
                by_source["none"].append(0.0)
                continue
            error = (guess.seconds - m.wall_s) / m.wall_s
            by_source[guess.source].append(abs(error))
            errors[guess.source].append(abs(error))
            signed.append(error)
            if guess.uncertainty is None:
                unranged += 1
            else:
                ranges.append(off_by(guess.seconds, m.wall_s) <= guess.uncertainty + 1e-9)
                widths.append(guess.uncertainty)
                held[guess.source].append(ranges[-1])
        spans = []
        for session in estimated_sessions(run.meta, run.rows):
            hardware = hardware_of(next(iter(session.rows.values()))) if session.rows else None
            if not session.complete or hardware is None:
                continue
            estimator = estimator_for(hardware)
            guesses = {tid: estimator.guess(config_of(r)).seconds for tid, r in session.rows.items()}
            if any(s is None for s in guesses.values()):
                continue
            replayed = simulated_makespan(session, {t: s + estimator.gap for t, s in guesses.items()})
            spans.append(f"{replayed:.1f} / {session.makespan_s:.1f} s ({_recorded(session.estimate.makespan_s)})")
            makespans.append((replayed, session.makespan_s, session.estimate.makespan_s))
        absolute = [abs(e) for e in signed]
        print(f"{run.meta.sweep:<22} {run.meta.run_id:<22} {len(found):>6} {len(by_source['measured']):>9} "
              f"{len(by_source['model']):>6} {len(by_source['none']):>5} {_pct(absolute):>8} "
              f"{(f'{statistics.median(signed):+.0%}' if signed else '-'):>6} {(f'{max(absolute):.0%}' if absolute else '-'):>6} {_share(ranges):>6}"
              f"  {'; '.join(spans) or '-'}")

    every = errors["measured"] + errors["model"]
    print(f"\ntrial estimates: median |error| {_pct(every)} over {len(every)} trials; measured {_pct(errors['measured'])} "
          f"(n={len(errors['measured'])}), model {_pct(errors['model'])} (n={len(errors['model'])})")
    ranged = held["measured"] + held["model"]
    print(f"stated ranges held for {_percent(ranged)} of the {len(ranged)} trials that had one (measured "
          f"{_share(held['measured'])}, model {_share(held['model'])}); median range +-{_pct(widths)}; "
          f"{unranged} estimates stated no range (error unknown): held for {_percent(ranged + [False] * unranged)} "
          f"of all {len(every)} estimates")
    if makespans:
        replay = [abs(a - b) / b for a, b, _ in makespans]
        recorded = [abs(c - b) / b for _, b, c in makespans if c is not None]
        print(f"makespans: replayed median |error| {_pct(replay)} over {len(replay)} sessions; "
              f"as the sessions estimated them {_pct(recorded)} (n={len(recorded)})")


def _share(held: list[bool]) -> str:
    return f"{sum(held)}/{len(held)}" if held else "-"


def _percent(held: list[bool]) -> str:
    return f"{sum(held) / len(held):.0%}" if held else "-"


def _recorded(seconds: float | None) -> str:
    return f"{seconds:.1f} s" if seconds is not None else "-"


if __name__ == "__main__":
    main()
