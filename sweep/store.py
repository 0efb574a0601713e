"""The results store: Parquet written by the engine, atomically, one row per (run, trial, epoch).

Layout of a run, under --results:
  NAME/RUN_ID/run.json          what ran: sweep, scale, spec hash, command line, trial ids, engine
  NAME/RUN_ID/sweep.yaml        the sweep file as it was when the run started
  NAME/RUN_ID/epochs/TRIAL.parquet  a running trial's epoch rows (rewritten whole, epoch replaces epoch)
  NAME/RUN_ID/epochs/part-*.parquet  finished trials' rows, compacted at the end of each session
  NAME/RUN_ID/trials/TRIAL.parquet  that trial's summary row
  NAME/RUN_ID/starts/TRIAL/...  one empty file per start of the trial (its attempts)
  NAME/RUN_ID/tune*/            Ray Tune's own folders (one per session of the run): checkpoints
Epoch rows are written by the trials themselves, summary rows by the driver.
Every file is written to a hidden temporary name and renamed into place, so neither a reader nor a
kill ever sees half a file; readers (and pyarrow datasets) skip hidden names. --results may also be a
pyarrow filesystem URI (s3://bucket/prefix; sweep/location.py): the same layout, each file one put,
which an object store makes visible whole or not at all.

  pandas.read_parquet("results/NAME/RUN_ID/epochs")   # every epoch row of a run
  pandas.read_parquet("results/NAME/RUN_ID/trials")   # one summary row per trial
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq

from sweep.environments import Environment
from sweep.errors import StoreError
from sweep.limits import name_problem, quote
from sweep.location import Location, RemotePath, at, remove_tree
from sweep.schema import ENV_COLUMNS, EPOCH_SCHEMA, LEGACY_COLUMNS, PRECISION_COLUMNS, TRIAL_SCHEMA, Status
from trainables.peaks import utilisation
from trainables.config import ADDED_LATER, RENAMED, TrialConfig
from trainables.probe import FrameworkCheck


def gpu_hours(num_gpus: int, seconds: float) -> float:
    """GPU-hours: the GPUs a trial holds times the time it holds them. The one definition the run's
    summary rows, its status and its live gauges all use."""
    return num_gpus * seconds / 3600.0


@dataclass(frozen=True)
class PlannedTrial:
    """One trial as a session's plan expected it (sweep/plan.py): its estimated wall time and where that came from."""

    trial_id: str
    seconds: float | None  # None: nothing to estimate it from (no earlier run on this hardware)
    source: str  # "measured" (earlier runs of this trial), "model" (its model's cost), "scaled", "prior" or "none" (estimates.Guess)


@dataclass(frozen=True)
class Estimate:
    """What a session's plan expected, recorded before its trials start, so that what they took can be compared."""

    hardware: str  # what the estimates were made for (sweep/estimates.py Hardware)
    trials: list[PlannedTrial]  # in the order they were handed to Tune
    makespan_s: float | None  # first start to last end, simulated; None without estimates
    node_gpus: list[float]  # the cluster the makespan was simulated on
    node_cpus: list[float]
    max_concurrent: int | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Estimate:
        return cls(**{**raw, "trials": [PlannedTrial(**t) for t in raw["trials"]]})


@dataclass(frozen=True)
class Session:
    """One start of a run's driver: the first run, then each --resume."""

    command: str  # the command line, as the user typed it (python -m sweep ...)
    started_at: float
    host: str
    pid: int  # the driver's process on that host
    address: str | None  # the --address given, None for an embedded Ray
    engine_version: str
    git_commit: str | None
    ray_version: str
    estimate: Estimate | None = None  # the plan of this session's trials (absent in older run.json files)
    environments: dict[str, Environment] = field(default_factory=dict)  # framework -> where its trials ran
    checks: list[FrameworkCheck] = field(default_factory=list)  # each framework on each node, before the trials

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Session:
        """A session of run.json; older ones lack the estimate, the environments and the checks."""
        raw = dict(raw)
        estimate = raw.pop("estimate", None)
        envs = {k: Environment.from_dict(e) for k, e in (raw.pop("environments", None) or {}).items()}
        checks = [FrameworkCheck(**c) for c in raw.pop("checks", None) or []]
        return cls(**raw, estimate=Estimate.from_dict(estimate) if estimate else None, environments=envs, checks=checks)


@dataclass
class RunMeta:
    """run.json: what a run is (its sweep, scale and trials) and each session that worked on it."""

    sweep: str
    run_id: str
    scale: str
    spec_path: str
    spec_sha256: str
    data_dir: str | None  # None: the run trains on synthetic data (no CIFAR-10 at the smoke scale)
    emulated: bool | None  # None: a joined cluster, where each node tells for itself
    trials: list[str]  # every trial id of the run's grid, in grid order
    sessions: list[Session] = field(default_factory=list)
    overrides: dict[str, Any] = field(default_factory=dict)  # --set key=value, part of the run's identity
    # --emulate-gpu-memory, in MiB: each emulated device's capacity, part of the run's identity (None: none)
    memory_capacity_mib: float | None = None
    # batch_per_gpu: max (sweep/max_batch.py): False while its searches go on, True once every one has ended;
    # None: the run searches nothing. The searches' probes join `trials` round by round.
    searches_done: bool | None = None
    # --code DIR, absolute: the folder of the models' modules, shipped to every node; a resume uses it again.
    code: str | None = None
    code_sha256: str | None = None  # of that folder's files (environments.code_digest)

    @property
    def command(self) -> str:
        """The command that started the run."""
        return self.sessions[0].command if self.sessions else "unknown"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> RunMeta:
        try:
            raw = json.loads(text)
            sessions = [Session.from_dict(s) for s in raw.pop("sessions", [])]
            return cls(**raw, sessions=sessions)
        except (ValueError, TypeError, AttributeError, KeyError) as e:  # not JSON, or not this store's fields
            raise StoreError(f"{where}: not a run.json of this store ({str(e).splitlines()[0]})") from None

def _atomic_write_bytes(path: Location, payload: bytes) -> None:
    if isinstance(path, RemotePath):
        path.write_bytes(payload)
        return
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # Ctrl-C or a full disk mid-write: no temporary file is left beside the file
        tmp.unlink(missing_ok=True)
        raise


def _table(rows: list[dict[str, Any]], schema: pa.Schema) -> tuple[pa.Table, list[str]]:
    """The rows as a table of `schema`, and the columns that could not hold a value given for them.

    A value no column can hold (an integer past int64, a text where a number goes) makes that column
    null in these rows instead of losing the rows: an epoch row or a summary row always lands, so a
    trial is never left looking unfinished (and `status` saying "running" for ever) by one bad value.
    """
    try:
        return pa.Table.from_pylist(rows, schema=schema), []
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        pass
    arrays, bad = [], []
    for column in schema:
        try:
            arrays.append(pa.array([row.get(column.name) for row in rows], type=column.type))
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            arrays.append(pa.nulls(len(rows), column.type))
            bad.append(column.name)
    return pa.Table.from_arrays(arrays, schema=schema), bad


def _atomic_write_table(path: Location, rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(_table(rows, schema)[0], sink)  # a value no column holds: null there (finish_trial says so)
    _atomic_write_bytes(path, sink.getvalue().to_pybytes())


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _read_table(path: Location, schema: pa.Schema) -> pa.Table:
    # Read with the legacy columns too, so that an older run's values land in the columns that replaced them.
    with_legacy = pa.schema(list(schema) + [pa.field(old, schema.field(new).type) for old, new in LEGACY_COLUMNS.items()])
    try:
        if isinstance(path, RemotePath):
            table = pq.read_table(path.path, schema=with_legacy, filesystem=path.fs)
        else:
            table = pq.read_table(path, schema=with_legacy)
    except (pa.ArrowException, OSError) as e:
        raise StoreError(f"{path}: not a readable Parquet file of this store ({str(e).splitlines()[0]})") from None
    return _with_older_defaults(_from_legacy(table, schema))


def _from_legacy(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The table in `schema`: each legacy column's values where its new column has none."""
    for old, new in LEGACY_COLUMNS.items():
        index = table.schema.get_field_index(new)
        table = table.set_column(index, schema.field(new), pa.compute.coalesce(table[new], table[old]))
    return table.select(schema.names)


def _with_older_defaults(table: pa.Table) -> pa.Table:
    """Rows of runs stored before a setting existed ran at its default: say so, so that they group with
    today's rows of that default (a null precision would stand apart from "tf32" in every report)."""
    for name, value in ADDED_LATER.items():
        name = RENAMED.get(name, name)
        column = table.column(name)
        if column.null_count and value is not None:
            table = table.set_column(table.schema.get_field_index(name), name, pa.compute.fill_null(column, value))
    return table


def _files(folder: Location) -> list[Location]:
    return sorted(p for p in folder.glob("*.parquet") if not p.name.startswith((".", "_"))) if folder.is_dir() else []


def _read_tables(files: list[Location], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables([_read_table(p, schema) for p in files]) if files else schema.empty_table()


def _newest_per_epoch(table: pa.Table) -> pa.Table:
    """One row per (trial, epoch), the last reported: a replayed epoch replaces the earlier row."""
    if table.num_rows == 0:
        return table
    frame = table.to_pandas().sort_values("reported_at", kind="stable", na_position="first")
    frame = frame.drop_duplicates(["trial_id", "epoch"], keep="last").sort_values(["trial_id", "epoch"])
    return pa.Table.from_pandas(frame, schema=table.schema, preserve_index=False)


def _read_dir(folder: Location, schema: pa.Schema) -> pd.DataFrame:
    table = _read_tables(_files(folder), schema)
    return (_newest_per_epoch(table) if schema is EPOCH_SCHEMA else table).to_pandas()


class RunStore:
    """One run's folder. Each trial writes its own epoch file; the driver writes summaries."""

    def __init__(self, run_dir: Location) -> None:
        self.dir = run_dir
        self.epochs_dir = run_dir / "epochs"
        self.trials_dir = run_dir / "trials"
        self.starts_dir = run_dir / "starts"
        self._epoch_rows: dict[str, dict[int, dict[str, Any]]] = {}  # the writing trial's own rows

    @classmethod
    def create(cls, results: Location, meta: RunMeta, spec_text: str) -> RunStore:
        """The run's folder, whole or not at all: run.json, which makes it a run, is written last, and a start
        stopped before that (Ctrl-C, SIGTERM, a full disk) removes what it made. Only a SIGKILL or a power cut
        can leave a half-made folder; `runs` lists those and `rm` deletes them (half_made_run_dirs)."""
        store = cls(results / folder_name(meta.sweep) / folder_name(meta.run_id))
        made = _missing_folders(store.dir)
        try:
            store.epochs_dir.mkdir(parents=True)
            store.trials_dir.mkdir()
            _atomic_write_bytes(store.dir / "sweep.yaml", spec_text.encode())
            store.write_meta(meta)
        except BaseException:
            _remove_made(made)
            raise
        return store

    @property
    def meta(self) -> RunMeta:
        path = self.dir / "run.json"
        try:
            text = path.read_text()
        except OSError as e:
            raise StoreError(f"{path}: unreadable ({e.strerror or str(e).splitlines()[0]})") from None
        return RunMeta.from_json(text, str(path))

    def write_meta(self, meta: RunMeta) -> None:
        _atomic_write_bytes(self.dir / "run.json", meta.to_json().encode())

    @property
    def spec_text(self) -> str:
        """The sweep file as it was when the run started."""
        return (self.dir / "sweep.yaml").read_text()

    def record_start(self, trial: str) -> None:
        folder = self.starts_dir / trial
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{time.time_ns()}-{os.getpid()}").touch()

    def attempts(self, trial: str) -> int:
        folder = self.starts_dir / trial
        return sum(1 for _ in folder.iterdir()) if folder.is_dir() else 0

    def write_epoch(self, row: dict[str, Any]) -> None:
        """Add or replace one epoch row; the trial's file is rewritten whole, atomically."""
        trial = row["trial_id"]
        if trial not in self._epoch_rows:  # rows of the trial's earlier attempts stay unless replayed
            self._epoch_rows[trial] = {int(r["epoch"]): r for r in self.trial_epochs(trial)}
        rows = self._epoch_rows[trial]
        rows[int(row["epoch"])] = row
        _atomic_write_table(self.epochs_dir / f"{trial}.parquet", [rows[e] for e in sorted(rows)], EPOCH_SCHEMA)

    def trial_epochs(self, trial: str) -> list[dict[str, Any]]:
        """The trial's epoch rows as they are on disk now (its own file, and compacted parts)."""
        own = self.epochs_dir / f"{trial}.parquet"
        files = [p for p in self._part_files()] + ([own] if own.exists() else [])
        table = _read_tables(files, EPOCH_SCHEMA)
        table = table.filter(pa.compute.equal(table["trial_id"], trial))
        return _newest_per_epoch(table).to_pylist()

    def _part_files(self) -> list[Location]:
        return [p for p in _files(self.epochs_dir) if p.name.startswith("part-")]

    def compact(self, finished: set[str]) -> None:
        """Fold finished trials' epoch files and earlier parts into one part file.

        Readers then open a few files instead of one per trial (100,000 rows in 1,000 files take
        seconds to read, in one file a tenth of that). The part is renamed into place before the
        files it replaces are deleted: a kill in between leaves rows twice, which readers drop.
        """
        parts = self._part_files()
        done = [p for p in _files(self.epochs_dir) if not p.name.startswith("part-") and p.stem in finished]
        if len(parts) + len(done) <= 1:
            return
        table = _newest_per_epoch(_read_tables(parts + done, EPOCH_SCHEMA))
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        _atomic_write_bytes(self.epochs_dir / f"part-{time.time_ns()}.parquet", sink.getvalue().to_pybytes())
        for path in parts + done:
            path.unlink()

    def finish_trial(self, summary: dict[str, Any], epochs: list[dict[str, Any]]) -> None:
        """Stamp the trial's final status on its epoch rows, then write its summary row (the commit).

        A summary with a value the store cannot hold is still written: that column null, the trial
        failed, and the error naming the column."""
        _, bad = _table([summary], TRIAL_SCHEMA)
        if bad:
            why = f"values not storable in column{'s' if len(bad) > 1 else ''} {', '.join(bad)}"
            summary = {**summary, **dict.fromkeys(bad), "status": Status.FAILED.value,
                       "error_type": summary.get("error_type") or "UnstorableValue",
                       "error": f"{summary['error']}; {why}" if summary.get("error") else why}
        if epochs:
            stamped = [{**row, "status": summary["status"]} for row in epochs]
            _atomic_write_table(self.epochs_dir / f"{summary['trial_id']}.parquet", stamped, EPOCH_SCHEMA)
        _atomic_write_table(self.trials_dir / f"{summary['trial_id']}.parquet", [summary], TRIAL_SCHEMA)

    def write_rows(self, name: str, rows: list[dict[str, Any]]) -> None:
        """A table of the run's own (max_batch.parquet), its columns as the rows give them, written whole."""
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pylist(rows), sink)
        _atomic_write_bytes(self.dir / name, sink.getvalue().to_pybytes())

    def finished(self) -> dict[str, Status]:
        """trial id -> final status, for every trial with a summary row."""
        trials = self.trials()
        return {tid: Status(status) for tid, status in zip(trials.trial_id, trials.status)}

    def gpu_hours(self) -> float:
        """GPU-hours the run's trials have held: their summary rows', plus the epochs of trials not ended."""
        summaries, epochs = self.trials(), self.epochs()
        running = epochs[~epochs.trial_id.isin(summaries.trial_id)]
        seconds = running.epoch_time_s.fillna(0) + running.val_time_s.fillna(0)
        return float(summaries.gpu_hours.fillna(0).sum()) + float(gpu_hours(running.num_gpus, seconds).sum())

    def epochs(self) -> pd.DataFrame:
        return _read_dir(self.epochs_dir, EPOCH_SCHEMA)

    def trials(self) -> pd.DataFrame:
        return _read_dir(self.trials_dir, TRIAL_SCHEMA)

    def trial_rows(self) -> list[dict[str, Any]]:
        """The summary rows as plain records: nulls stay None and integers int (pandas would make both floats)."""
        return _read_tables(_files(self.trials_dir), TRIAL_SCHEMA).to_pylist()


def config_columns(config: TrialConfig) -> dict[str, Any]:
    """A trial's config as the columns of its rows: cpus_per_trial is what the trial reserved."""
    return {**config.to_dict(), "cpus_per_trial": config.cpus, "global_batch": config.global_batch}


def summarize(trial_id: str, config: TrialConfig, epochs: list[dict[str, Any]], status: Status,
              base: dict[str, Any]) -> dict[str, Any]:
    """The trial's summary row, computed from its epoch rows (the store's, not Tune's)."""
    row: dict[str, Any] = {**base, **config_columns(config), "trial_id": trial_id, "status": status.value}
    if not epochs:
        return row
    last = epochs[-1]
    row.update({k: last.get(k) for k in (*ENV_COLUMNS, *PRECISION_COLUMNS) if last.get(k) is not None})
    row["data_kind"], row["data_format"] = last.get("data_kind"), last.get("data_format")
    if last.get("val_examples") is not None:  # the images scored, as the epoch rows record them
        row["val_examples"] = last["val_examples"]
    accs = [e["val_acc"] for e in epochs if e.get("val_acc") is not None]
    timed = [(e["steady_images_per_sec"], e["steady_steps"]) for e in epochs if e.get("steady_images_per_sec")]
    steps = sum(n for _, n in timed)
    peaks = [e["peak_device_mem_mib"] for e in epochs if e.get("peak_device_mem_mib")]
    row.update({
        "epochs_done": len(epochs),
        "best_val_acc": max(accs) if accs else None,
        "final_val_acc": last.get("val_acc"),
        "final_train_acc": last.get("train_acc"),
        # The mean of per-step rates over every timed step = the step-weighted mean of epoch means.
        "steady_images_per_sec": sum(m * n for m, n in timed) / steps if steps else None,
        "mean_epoch_time_s": sum(e["epoch_time_s"] for e in epochs) / len(epochs),
        "peak_device_mem_mib": [max(col) for col in zip(*peaks)] if peaks else None,
        "peak_host_rss_mib": max(e["peak_host_rss_mib"] or 0 for e in epochs),
        "emulated_device_mem_mib": max((e["emulated_device_mem_mib"] for e in epochs
                                        if e.get("emulated_device_mem_mib") is not None), default=None),
        "model_gflops_per_image": last.get("model_gflops_per_image"),
    })
    row.update(utilisation(row))  # over the trial's steady images/s, as its epochs' rows are
    return row


def folder_name(name: str) -> str:
    """`name`, checked to be one folder right under its parent: a run's folder stays inside --results."""
    if problem := name_problem(name):
        raise StoreError(f"{quote(name)} cannot name a folder of the store (expected {problem})")
    return name


def run_dirs(results: Location, sweep: str) -> list[Location]:
    """A sweep's runs, oldest first (run ids sort by start time)."""
    folder = results / folder_name(sweep)
    return sorted(p for p in folder.iterdir() if (p / "run.json").exists()) if folder.is_dir() else []


HALF_MADE = "its start was stopped before it wrote run.json"  # how `runs` and `rm` describe such a folder


def half_made_run_dirs(results: Location, sweep: str) -> list[Location]:
    """A sweep's run folders without a run.json: what a start killed while it made its folder leaves (see
    RunStore.create), or a run's folder half deleted. Folders the store never makes are not counted."""
    folder = results / folder_name(sweep)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if not name_problem(p.name) and not (p / "run.json").exists()
                  and any((p / made).exists() for made in ("epochs", "trials", "sweep.yaml")))


def _missing_folders(folder: Location) -> list[Location]:
    """The folder and those above it that do not exist yet, deepest first (on an object store the folder alone:
    its folders are only names)."""
    if isinstance(folder, RemotePath):
        return [folder] if not folder.exists() else []
    return [p for p in (folder, *folder.parents) if not p.exists()]


def _remove_made(made: list[Location]) -> None:
    """Undo a RunStore.create stopped part way: the run's folder and all in it, then each folder above it
    that the create made, while it is empty (another run may have been made in it meanwhile)."""
    for folder in made:  # deepest first
        if not folder.exists():  # (the mkdir that would have made it failed)
            continue
        try:
            if folder == made[0]:
                remove_tree(folder)
            else:
                folder.rmdir()
        except OSError:
            return


def read_runs(results: Location | str, sweep: str, table: str = "epochs") -> pd.DataFrame:
    """Every run of a sweep as one frame ("epochs" or "trials"); rows carry their run_id.
    results: a folder, or a filesystem URI (s3://bucket/prefix)."""
    schema = EPOCH_SCHEMA if table == "epochs" else TRIAL_SCHEMA
    folder = at(results) if isinstance(results, str) else results
    frames = [_read_dir(run_dir / table, schema) for run_dir in run_dirs(folder, sweep)]
    return pd.concat(frames, ignore_index=True) if frames else schema.empty_table().to_pandas()
