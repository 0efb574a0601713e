"""A run of the store, loaded for reports: its run.json, its rows, and the sweep file it ran."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sweep import limits, location, spec
from sweep.errors import SpecError, StoreError
from sweep.location import Location
from sweep.store import RunMeta, RunStore, run_dirs


@dataclass
class Run:
    dir: Location
    meta: RunMeta
    trials: pd.DataFrame  # the store's summary rows, one per finished trial
    epochs: pd.DataFrame  # the store's epoch rows
    sweep: spec.Sweep | None  # the sweep file stored with the run, read by the spec loader
    sweep_problem: str | None = None  # why it could not be read, where it could not

    @property
    def label(self) -> str:
        return f"{self.meta.sweep}/{self.meta.run_id}"

    @property
    def run_id(self) -> str:
        return self.meta.run_id

    @property
    def target_acc(self) -> float | None:
        return self.sweep.target_acc if self.sweep else None

    @property
    def emulated(self) -> bool:
        kinds = set(self.trials["device_kind"].dropna()) | set(self.epochs["device_kind"].dropna())
        return "cpu-emulated" in kinds or bool(self.meta.emulated)


def find_run(target: str, results: Location, sweep: str | None = None) -> Location:
    """A run: a folder or URI, a sweep's folder (its latest run), a sweep name (its latest run under
    results), or a run id (of `sweep` if given, else of any sweep under results)."""
    path: Location = Path(target)
    if location.is_uri(target):
        try:
            path = location.at(target)
            location.check(path, write=False)
        except ValueError as e:  # a URI pyarrow cannot open
            raise StoreError(str(e)) from None
        except OSError as e:  # a store it cannot reach
            raise StoreError(f"{target}: cannot read a run there ({location.reason(e)})") from None
    if (path / "run.json").is_file():
        return path
    if path.is_dir() and run_dirs(path.parent, path.name):
        return run_dirs(path.parent, path.name)[-1]
    if "/" not in target:
        if run_dirs(results, target):
            return run_dirs(results, target)[-1]
        if found := _run_with_id(results, target, sweep):
            return found
    if path.is_dir():
        raise StoreError(f"{path}: not a run folder (no run.json) and no runs under it")
    if "/" in target:
        raise StoreError(f"{path}: no such run folder")
    if not limits.name_problem(target) and (spec.SPEC_DIR / f"{target}.yaml").is_file():  # a known sweep, never run here
        raise StoreError(f"no run of {target} under {results} (python -m sweep {target} makes one; or --results DIR)")
    raise StoreError(f"no sweep or run id '{target}' under {results} (give a run folder, or --results DIR)")


def _run_with_id(results: Location, run_id: str, sweep: str | None) -> Location | None:
    """The run folder named run_id: under `sweep` first, else under any sweep's folder in results."""
    if not results.is_dir():
        return None
    folders = ([results / sweep] if sweep else []) + [f for f in results.iterdir() if f.is_dir()]
    for folder in folders:
        if (folder / run_id / "run.json").is_file():
            return folder / run_id
    return None


def load_run(run_dir: Location) -> Run:
    """The run's rows; a missing or unreadable file, or a run with no finished trial, is a StoreError."""
    if not (run_dir / "run.json").is_file():
        raise StoreError(f"{run_dir}: not a run folder (no run.json)")
    store = RunStore(run_dir)
    meta = store.meta
    trials, epochs = store.trials(), store.epochs()
    if trials.empty:
        raise StoreError(f"{run_dir}: empty run: no trial summary rows under trials/ (nothing finished yet?)")
    try:
        return Run(run_dir, meta, trials, epochs, spec.parse(store.spec_text, Path(meta.spec_path)))
    except OSError as e:  # the report stands without it; it only loses the sweep's target accuracy
        return Run(run_dir, meta, trials, epochs, None, f"no sweep.yaml ({e.strerror or e})")
    except SpecError as e:
        return Run(run_dir, meta, trials, epochs, None, f"its sweep.yaml does not load: {e}")
