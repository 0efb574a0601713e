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

import hashlib
import json
import os
import secrets
import time
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq

from sweep.location import Location, RemotePath, at
from trainables.config import field_names

KEY = ("run_id", "trial_id", "epoch")
CONFIG_COLUMNS: dict[str, pa.DataType] = {
    "framework": pa.string(), "model": pa.string(), "num_gpus": pa.int64(), "batch_per_gpu": pa.int64(),
    "global_batch": pa.int64(), "epochs": pa.int64(), "lr": pa.float64(), "lr_rule": pa.string(),
    "base_lr": pa.float64(), "base_batch": pa.int64(), "warmup_epochs": pa.int64(),
    "lr_decay_epochs": pa.list_(pa.int64()), "lr_decay_factor": pa.float64(), "momentum": pa.float64(),
    "weight_decay": pa.float64(), "data": pa.string(), "image_size": pa.int64(),
    "steps_per_epoch": pa.int64(), "val_examples": pa.int64(), "warmup_steps": pa.int64(), "seed": pa.int64(),
    "cpus_per_trial": pa.int64(), "kvstore": pa.string(), "nodes": pa.int64(), "gpus_per_node": pa.int64(),
    "variable_update": pa.string(),
}
assert set(CONFIG_COLUMNS) - {"global_batch"} == set(field_names()) - {"data_dir"}
ENV_COLUMNS: dict[str, pa.DataType] = {
    "hostname": pa.string(), "device_kind": pa.string(), "gpu_model": pa.string(), "gpu_count": pa.int64(),
    "gpu_driver": pa.string(), "cuda_version": pa.string(), "cudnn_version": pa.string(),
    "cpu_model": pa.string(), "cpu_count": pa.int64(),
    "framework_version": pa.string(), "python_version": pa.string(), "numpy_version": pa.string(),
    "os": pa.string(), "ray_version": pa.string(), "engine_version": pa.string(), "git_commit": pa.string(),
}
EPOCH_SCHEMA = pa.schema({
    "sweep": pa.string(), "run_id": pa.string(), "trial_id": pa.string(), "epoch": pa.int64(),
    "status": pa.string(), "scale": pa.string(),
    **CONFIG_COLUMNS,
    "data_kind": pa.string(), "lr_applied": pa.float64(), "steps": pa.int64(),
    "epoch_time_s": pa.float64(), "val_time_s": pa.float64(), "images_per_sec": pa.float64(),
    "steady_images_per_sec": pa.float64(), "steady_images_per_sec_stderr": pa.float64(),
    "steady_jitter": pa.float64(), "steady_steps": pa.int64(),
    "train_loss": pa.float64(), "train_acc": pa.float64(), "val_acc": pa.float64(),
    "peak_device_mem_mib": pa.list_(pa.float64()), "peak_host_rss_mib": pa.float64(),
    "param_count": pa.int64(), "threads": pa.int64(), "ray_gpu_ids": pa.string(), "ray_node_id": pa.string(), "pid": pa.int64(),
    "attempt": pa.int64(), "reported_at": pa.float64(),
    **ENV_COLUMNS,
})
TRIAL_SCHEMA = pa.schema({
    "sweep": pa.string(), "run_id": pa.string(), "trial_id": pa.string(), "status": pa.string(),
    "scale": pa.string(),
    **CONFIG_COLUMNS,
    "data_kind": pa.string(), "error_type": pa.string(), "error": pa.string(),
    "started_at": pa.float64(), "ended_at": pa.float64(), "wall_time_s": pa.float64(),
    "attempts": pa.int64(), "gpu_hours": pa.float64(), "epochs_done": pa.int64(),
    "best_val_acc": pa.float64(), "final_val_acc": pa.float64(), "final_train_acc": pa.float64(),
    "steady_images_per_sec": pa.float64(), "mean_epoch_time_s": pa.float64(),
    "peak_device_mem_mib": pa.list_(pa.float64()), "peak_host_rss_mib": pa.float64(),
    **ENV_COLUMNS,
})
STATUSES = ("completed", "failed", "diverged", "oom", "infeasible", "stopped_early")
DONE = ("completed", "stopped_early")  # the ended statuses that count as done; the others as failed


class StoreError(Exception):
    """A file in the store that cannot be read; the message names it."""


def _atomic_write_bytes(path: Location, payload: bytes) -> None:
    if isinstance(path, RemotePath):
        path.write_bytes(payload)
        return
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _atomic_write_table(path: Location, rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    table = pa.Table.from_pylist(rows, schema=schema)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    _atomic_write_bytes(path, sink.getvalue().to_pybytes())


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _read_table(path: Location, schema: pa.Schema) -> pa.Table:
    try:
        if isinstance(path, RemotePath):
            return pq.read_table(path.path, schema=schema, filesystem=path.fs)
        return pq.read_table(path, schema=schema)
    except (pa.ArrowException, OSError) as e:
        raise StoreError(f"{path}: not a readable Parquet file of this store ({str(e).splitlines()[0]})") from None


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
    def create(cls, results: Location, sweep: str, run_id: str, meta: dict[str, Any], spec_text: str) -> RunStore:
        store = cls(results / sweep / run_id)
        store.epochs_dir.mkdir(parents=True)
        store.trials_dir.mkdir()
        _atomic_write_bytes(store.dir / "sweep.yaml", spec_text.encode())
        store.write_meta(meta)
        return store

    @property
    def meta(self) -> dict[str, Any]:
        return json.loads((self.dir / "run.json").read_text())

    def write_meta(self, meta: dict[str, Any]) -> None:
        _atomic_write_bytes(self.dir / "run.json", json.dumps(meta, indent=1, sort_keys=True).encode())

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
        """Stamp the trial's final status on its epoch rows, then write its summary row (the commit)."""
        if epochs:
            stamped = [{**row, "status": summary["status"]} for row in epochs]
            _atomic_write_table(self.epochs_dir / f"{summary['trial_id']}.parquet", stamped, EPOCH_SCHEMA)
        _atomic_write_table(self.trials_dir / f"{summary['trial_id']}.parquet", [summary], TRIAL_SCHEMA)

    def finished(self) -> dict[str, str]:
        """trial id -> final status, for every trial with a summary row."""
        trials = self.trials()
        return dict(zip(trials.trial_id, trials.status))

    def epochs(self) -> pd.DataFrame:
        return _read_dir(self.epochs_dir, EPOCH_SCHEMA)

    def trials(self) -> pd.DataFrame:
        return _read_dir(self.trials_dir, TRIAL_SCHEMA)


def summarize(trial_id: str, config: dict[str, Any], epochs: list[dict[str, Any]], status: str,
              base: dict[str, Any]) -> dict[str, Any]:
    """The trial's summary row, computed from its epoch rows (the store's, not Tune's)."""
    row: dict[str, Any] = {**base, **config, "trial_id": trial_id, "status": status,
                           "global_batch": config["batch_per_gpu"] * config["num_gpus"]}
    if not epochs:
        return row
    last = epochs[-1]
    row.update({k: last.get(k) for k in ENV_COLUMNS if last.get(k) is not None})
    row["data_kind"] = last.get("data_kind")
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
    })
    return row


def run_dirs(results: Location, sweep: str) -> list[Location]:
    """A sweep's runs, oldest first (run ids sort by start time)."""
    folder = results / sweep
    return sorted(p for p in folder.iterdir() if (p / "run.json").exists()) if folder.is_dir() else []


def read_runs(results: Location | str, sweep: str, table: str = "epochs") -> pd.DataFrame:
    """Every run of a sweep as one frame ("epochs" or "trials"); rows carry their run_id.
    results: a folder, or a filesystem URI (s3://bucket/prefix)."""
    schema = EPOCH_SCHEMA if table == "epochs" else TRIAL_SCHEMA
    folder = at(results) if isinstance(results, str) else results
    frames = [_read_dir(run_dir / table, schema) for run_dir in run_dirs(folder, sweep)]
    return pd.concat(frames, ignore_index=True) if frames else schema.empty_table().to_pandas()
