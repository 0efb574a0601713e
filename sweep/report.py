"""Reports on a run of the store: the seeds' tables (Markdown and CSV), PNG plots, and run-vs-run ratios.

  python -m sweep report NAME|RUN_DIR [--out DIR] [--against RUN_B] [--target-acc X] [--results DIR]

Every table and plot is a function of the store's DataFrames, so a notebook can use them one by one:

  run = load_run(Path("results/NAME/RUN_ID"))
  figures = trial_figures(run.trials, run.epochs)     # one row per trial, the figures the tables use
  long = scaling(figures)                             # images/s, speedup, efficiency per group and GPUs
  print(render_text(throughput_table(long, provenance(figures, run.label))))

The tables follow the seeds: throughput, speedup and efficiency per GPU count (seed 004, with its
ratio tables), one table per trial group with a column per GPU count (seed 000), one row per trial
of the LR-scaling grid (seed 001), and time to accuracy (seed 003, DAWNBench's rule).
This module never imports a training framework.
"""
from __future__ import annotations

import argparse
import json
import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from sweep import location
from sweep.location import Location, RemotePath
from sweep.store import DONE, RunStore, StoreError, run_dirs

# Statuses whose measurements count in the tables (store.DONE); the others are shown by name.
USABLE = DONE
STATUS_LABELS = {"oom": "OOM", "stopped_early": "stopped early", "infeasible": "infeasible",
                 "diverged": "diverged", "failed": "failed", "completed": "completed"}
EMULATED_NOTE = "CPU-emulated devices: not a speed result"
NO_TRIAL = "-"

# A throughput cell: trials that differ in nothing that changes the speed of a step (lr and its
# schedule do not). Speedup and efficiency compare against the 1-GPU cell of the same key.
SPEED_KEY = ["framework", "model", "batch_per_gpu", "data_kind", "image_size", "kvstore", "variable_update", "cpus_per_trial"]
# A trial group: trials that differ in the GPU count only (the linear rule's lr follows the GPUs).
GROUP_KEY = SPEED_KEY + ["lr_setting", "warmup_epochs", "epochs", "steps_per_epoch", "val_examples",
                         "warmup_steps", "lr_decay", "momentum", "weight_decay", "seed"]
# Shown in a label always; the rest of a key only where the run varies it.
ALWAYS_SHOWN = ("framework", "model", "batch_per_gpu", "data_kind", "lr_setting")
RATIO_AXES = ("data_kind", "batch_per_gpu", "framework", "model")

HARDWARE = (("device", "device_kind"), ("GPU", "gpu_model"), ("driver", "gpu_driver"), ("CUDA", "cuda_version"),
            ("CPU", "cpu_model"), ("CPUs", "cpu_count"), ("host", "hostname"))
SOFTWARE = (("framework", "framework_version"), ("Python", "python_version"), ("numpy", "numpy_version"),
            ("Ray", "ray_version"), ("OS", "os"), ("engine", "engine_version"), ("commit", "git_commit"))


# --- loading ---------------------------------------------------------------------------------------

@dataclass
class Run:
    dir: Location
    meta: dict[str, Any]
    trials: pd.DataFrame  # the store's summary rows, one per finished trial
    epochs: pd.DataFrame  # the store's epoch rows
    spec_target_acc: float | None  # target_acc of the sweep file stored with the run

    @property
    def label(self) -> str:
        return f"{self.meta.get('sweep', self.dir.parent.name)}/{self.meta.get('run_id', self.dir.name)}"

    @property
    def run_id(self) -> str:
        return str(self.meta.get("run_id", self.dir.name))

    @property
    def emulated(self) -> bool:
        kinds = set(self.trials["device_kind"].dropna()) | set(self.epochs["device_kind"].dropna())
        return "cpu-emulated" in kinds or bool(self.meta.get("emulated"))


def find_run(target: str, results: Location) -> Location:
    """A run folder given as a path or URI, a sweep's folder (its latest run), or a sweep name under results."""
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
    if "/" not in target and run_dirs(results, target):
        return run_dirs(results, target)[-1]
    if path.is_dir():
        raise StoreError(f"{path}: not a run folder (no run.json) and no runs under it")
    if "/" in target:
        raise StoreError(f"{path}: no such run folder")
    raise StoreError(f"no runs of sweep '{target}' under {results} (give a run folder or --results DIR)")


def load_run(run_dir: Location) -> Run:
    """The run's rows; a missing or unreadable file, or a run with no finished trial, is a StoreError."""
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except FileNotFoundError:
        raise StoreError(f"{run_dir}: not a run folder (no run.json)") from None
    except (OSError, ValueError) as e:
        raise StoreError(f"{run_dir / 'run.json'}: unreadable ({str(e).splitlines()[0]})") from None
    if not isinstance(meta, dict):
        raise StoreError(f"{run_dir / 'run.json'}: expected a JSON object")
    store = RunStore(run_dir)
    trials, epochs = store.trials(), store.epochs()
    if trials.empty:
        raise StoreError(f"{run_dir}: empty run: no trial summary rows under trials/ (nothing finished yet?)")
    return Run(run_dir, meta, trials, epochs, _spec_target(run_dir / "sweep.yaml"))


def _spec_target(path: Location) -> float | None:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None  # the target is optional; a run without its sweep file still reports
    value = raw.get("target_acc") if isinstance(raw, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# --- per-trial figures -----------------------------------------------------------------------------

def trial_figures(trials: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """One row per trial: its config, status, group labels and the figures every table uses.

    images_per_sec is the steady-state rate (warm-up steps excluded) from the summary row; only where a
    trial has no post-warm-up step does it fall back to the mean whole-epoch rate (images_per_sec_source
    says which). training_time_s is the sum of epoch times, time_per_epoch_s their mean (seed 000).
    """
    fig = trials.copy().reset_index(drop=True)
    fig["data_kind"] = _filled_data_kind(fig)
    fig["lr_setting"] = [_lr_setting(r) for r in fig.itertuples()]
    fig["lr_decay"] = [_lr_decay(r.lr_decay_epochs, r.lr_decay_factor) for r in fig.itertuples()]
    by_trial = epochs.groupby("trial_id")
    epoch_time_sum = by_trial["epoch_time_s"].sum(min_count=1)
    epoch_rate_mean = by_trial["images_per_sec"].mean()
    steady = fig["steady_images_per_sec"]
    fallback = fig["trial_id"].map(epoch_rate_mean)
    fig["images_per_sec"] = steady.where(steady.notna(), fallback)
    fig["images_per_sec_source"] = ["steady" if pd.notna(s) else ("epoch" if pd.notna(f) else None)
                                    for s, f in zip(steady, fallback)]
    fig["training_time_s"] = fig["trial_id"].map(epoch_time_sum)
    fig["time_per_epoch_s"] = fig["mean_epoch_time_s"]
    fig["train_acc"] = fig["final_train_acc"]
    fig["val_acc"] = fig["final_val_acc"]
    # Seed 000's "maximum memory" is nvidia-smi's, summed over the GPUs of the run.
    fig["device_mem_mib"] = [sum(m) if m is not None and len(m) else math.nan for m in fig["peak_device_mem_mib"]]
    fig = fig.sort_values(["framework", "model", "batch_per_gpu", "data_kind", "lr_setting", "num_gpus", "lr"],
                          kind="stable").reset_index(drop=True)
    fig["speed_group"] = group_labels(fig, SPEED_KEY)
    fig["trial_group"] = group_labels(fig, GROUP_KEY)
    return fig


def _filled_data_kind(trials: pd.DataFrame) -> pd.Series:
    """data_kind, which a trial with no epoch (infeasible) lacks: the run's data_kind for the same data
    setting (a smoke run without CIFAR-10 fell back to synthetic for every trial), else the setting's."""
    known = trials.dropna(subset=["data_kind"]).groupby("data")["data_kind"].first().to_dict()
    return pd.Series([kind if isinstance(kind, str) else known.get(data, "synthetic" if data == "synthetic" else "real")
                      for kind, data in zip(trials["data_kind"], trials["data"])], index=trials.index, dtype=object)


def _lr_setting(row: Any) -> str:
    if row.lr_rule == "linear":
        return f"linear lr {row.base_lr:g} x batch/{int(row.base_batch)}"
    return f"lr {row.lr:g}"


def _lr_decay(decay_epochs: Any, factor: float) -> str:
    epochs = [] if decay_epochs is None else list(decay_epochs)
    return f"x{factor:g} at {','.join(map(str, epochs))}" if epochs else "none"


def _varying(frame: pd.DataFrame, columns: list[str]) -> list[str]:
    return [c for c in columns if c in frame and frame[c].astype(str).nunique() > 1]


def group_labels(frame: pd.DataFrame, key: list[str], exclude: tuple[str, ...] = ()) -> pd.Series:
    """A readable label per row naming its key: the fixed parts always, the rest only where they vary."""
    varying = set(_varying(frame, key))
    shown = [c for c in key if c not in exclude and (c in ALWAYS_SHOWN or c in varying)]
    return frame.apply(lambda row: " ".join(_key_part(c, row[c]) for c in shown), axis=1).astype(str)


def _key_part(column: str, value: Any) -> str:
    if column in ("framework", "model", "data_kind", "lr_setting"):
        return str(value)
    if column == "batch_per_gpu":
        return f"b{int(value)}/GPU"
    if pd.isna(value):
        return f"{column}=default"
    return f"{column}={value:g}" if isinstance(value, float) else f"{column}={value}"


def batch_label(batch_per_gpu: int, num_gpus: int) -> str:
    """Seed 001's spelling of a batch: per GPU x GPUs = global."""
    return f"{batch_per_gpu}x{num_gpus}={batch_per_gpu * num_gpus}"


def status_label(status: str) -> str:
    return STATUS_LABELS.get(status, str(status))


def provenance(rows: pd.DataFrame, run_label: str) -> str:
    """Where a table's numbers come from: the run, and the hardware and software its rows name."""
    def values(column: str) -> str:
        if column not in rows:
            return ""
        seen = [str(v) for v in rows[column].dropna().unique() if str(v) != ""]
        return ", ".join(seen)

    def part(pairs: tuple[tuple[str, str], ...]) -> str:
        return "; ".join(f"{name} {values(col)}" for name, col in pairs if values(col)) or "not recorded"

    return (f"Source: run {run_label} ({len(rows)} trials). Hardware: {part(HARDWARE)}. "
            f"Software: {part(SOFTWARE)}.")


# --- tables ----------------------------------------------------------------------------------------

@dataclass
class Table:
    """A report table. Cells hold numbers, or a text saying why there is no number."""
    name: str  # file stem of its CSV
    title: str
    frame: pd.DataFrame
    units: dict[str, str] = field(default_factory=dict)  # row label (first index level) or column -> unit
    default_unit: str = ""
    notes: list[str] = field(default_factory=list)
    source: str = ""

    def unit(self, row: Any, column: Any) -> str:
        first = row[0] if isinstance(row, tuple) else row
        return self.units.get(str(first)) or self.units.get(str(column)) or self.default_unit


def scaling(figures: pd.DataFrame) -> pd.DataFrame:
    """Images/s, speedup and efficiency per speed group and GPU count (long form).

    images/s of a cell is the mean over its usable trials (several where only the lr differs);
    speedup(n) = images/s(n) / images/s(1) within the group, efficiency = speedup / n. Where the group
    has no usable 1-GPU trial, speedup and efficiency stay empty and `baseline` says why.
    """
    rows = []
    for group, trials in figures.groupby("speed_group", sort=False):
        usable = trials[trials["status"].isin(USABLE) & trials["images_per_sec"].notna()]
        one = trials[trials["num_gpus"] == 1]
        base = usable.loc[usable["num_gpus"] == 1, "images_per_sec"].mean()
        if pd.notna(base):
            baseline = "ok"
        elif one.empty:
            baseline = "no 1-GPU trial"
        else:
            baseline = "1-GPU trial " + "/".join(sorted({status_label(s) for s in one["status"]}))
        for num_gpus, cell in trials.groupby("num_gpus"):
            ok = cell[cell.index.isin(usable.index)]
            rate = ok["images_per_sec"].mean() if len(ok) else math.nan
            speedup = rate / base if pd.notna(rate) and pd.notna(base) else math.nan
            rows.append({
                "speed_group": group, **{k: cell.iloc[0][k] for k in SPEED_KEY},
                "num_gpus": int(num_gpus), "trials": len(ok),
                "status": "ok" if len(ok) else "/".join(sorted({status_label(s) for s in cell["status"]})),
                "images_per_sec": rate,
                "images_per_sec_source": "/".join(sorted(set(ok["images_per_sec_source"].dropna()))) or None,
                "speedup": speedup, "efficiency": speedup / num_gpus if pd.notna(speedup) else math.nan,
                "baseline": baseline,
            })
    return pd.DataFrame(rows)


def throughput_table(long: pd.DataFrame, source: str = "") -> Table:
    """Seed 004: rows images/s, speedup, efficiency for each GPU count; a column per speed group."""
    gpu_counts = sorted(long["num_gpus"].unique())
    groups = list(dict.fromkeys(long["speed_group"]))
    index = pd.MultiIndex.from_tuples([(m, int(n)) for m in ("images/s", "speedup", "efficiency") for n in gpu_counts],
                                      names=["", "GPUs"])
    frame = pd.DataFrame(NO_TRIAL, index=index, columns=groups, dtype=object)
    cells = long.set_index(["speed_group", "num_gpus"])
    for (group, num_gpus), cell in cells.iterrows():
        frame.loc[("images/s", num_gpus), group] = cell["images_per_sec"] if cell["trials"] else cell["status"]
        for metric in ("speedup", "efficiency"):
            if not cell["trials"]:
                value = cell["status"]
            elif cell["baseline"] != "ok":
                value = f"n/a ({cell['baseline']})"
            else:
                value = cell[metric]
            frame.loc[(metric, num_gpus), group] = value
    notes = ["images/s: steady state (tf_cnn_benchmarks style: warm-up steps excluded), all GPUs of a trial together; "
             "speedup(n) = images/s(n) / images/s(1) of the same framework, model, batch per GPU and data; "
             "efficiency = speedup / n."]
    for group, baseline in long.groupby("speed_group", sort=False)["baseline"].first().items():
        if baseline != "ok":
            notes.append(f"{group}: {baseline}, so no speedup or efficiency (no baseline is invented).")
    several = long[long["trials"] > 1]
    if not several.empty:
        notes.append(f"In {len(several)} cell(s) several trials differ only in lr or its schedule: "
                     "images/s is their mean.")
    whole_epoch = long[long["images_per_sec_source"].fillna("").str.contains("epoch")]
    for row in whole_epoch.itertuples():
        notes.append(f"{row.speed_group}, {row.num_gpus} GPUs: no step after warm-up, images/s is the whole-epoch rate.")
    return Table("throughput", "Throughput, speedup and efficiency (seed 004)", frame,
                 units={"images/s": "img/s", "speedup": "x", "efficiency": "%"}, notes=notes, source=source)


def ratio_tables(long: pd.DataFrame, source: str = "") -> list[Table]:
    """Seed 004's lower half: images/s of one value of an axis over another's, other keys equal, per GPUs.

    Axes: data (synthetic vs real), batch per GPU (each vs the smallest), framework and model (each vs
    the first in name order). A median column as in the seed.
    """
    usable = long[long["images_per_sec"].notna()].copy()
    tables = []
    for axis in RATIO_AXES:
        values = sorted(usable[axis].dropna().unique())
        if len(values) < 2:
            continue
        usable["other"] = group_labels(usable, SPEED_KEY, exclude=(axis,))
        base = values[0]  # real before synthetic, the smallest batch, the first name
        denominator = usable[usable[axis] == base].set_index(["num_gpus", "other"])["images_per_sec"]
        for value in values[1:]:
            numerator = usable[usable[axis] == value].set_index(["num_gpus", "other"])["images_per_sec"]
            ratio = (numerator / denominator).dropna()
            title = f"Speedup from {_axis_value(axis, value)} vs. {_axis_value(axis, base)}"
            if ratio.empty:
                frame = pd.DataFrame(columns=["median"], dtype=object)
                notes = ["no pair of cells with both values and every other key equal"]
            else:
                frame = ratio.unstack("other").astype(object)
                frame.index.name = "GPUs"
                frame["median"] = ratio.groupby(level="num_gpus").median()
                notes = [f"images/s of {_axis_value(axis, value)} / images/s of {_axis_value(axis, base)}, "
                         "same GPU count and every other key equal."]
            name = f"ratio_{axis}_{value}_vs_{base}".replace("/", "-").replace(" ", "_")
            tables.append(Table(name, title, frame, default_unit="x", notes=notes, source=source))
    return tables


def _axis_value(axis: str, value: Any) -> str:
    return {"data_kind": f"{value} data", "batch_per_gpu": f"batch {value}/GPU"}.get(axis, str(value))


PER_RUN_ROWS = (  # seed 000's rows: label, figures column, unit
    ("Training time (s)", "training_time_s", "s"),
    ("Average time per epoch (s)", "time_per_epoch_s", "s"),
    ("Images processed per sec", "images_per_sec", "img/s"),
    ("Training accuracy", "train_acc", "acc"),
    ("Test accuracy", "val_acc", "acc"),
    ("Maximum device memory, all GPUs (MiB)", "device_mem_mib", "MiB"),
    ("Peak host RSS (MiB)", "peak_host_rss_mib", "MiB"),
)


def per_run_tables(figures: pd.DataFrame, run_label: str) -> list[Table]:
    """Seed 000: one table per trial group, a row per measure and a column per GPU count."""
    tables = []
    for group, trials in figures.groupby("trial_group", sort=False):
        trials = trials.sort_values("num_gpus")
        repeated = trials["num_gpus"].duplicated(keep=False)  # only if a config column is unknown here
        columns = [f"GPU ({n}) {tid}" if twice else f"GPU ({n})"
                   for n, tid, twice in zip(trials["num_gpus"], trials["trial_id"], repeated)]
        frame = pd.DataFrame(index=[label for label, _, _ in PER_RUN_ROWS], columns=columns, dtype=object)
        for column, (_, trial) in zip(columns, trials.iterrows()):
            usable = trial["status"] in USABLE
            for label, key, _ in PER_RUN_ROWS:
                frame.loc[label, column] = trial[key] if usable else status_label(trial["status"])
        notes = []
        if (trials["data_kind"] == "synthetic").any():
            notes.append("Accuracy n/a: synthetic data has no labels worth scoring.")
        if trials["device_mem_mib"].isna().all():
            notes.append("Device memory n/a: no device counter (CPU-emulated devices, or none recorded).")
        notes.append("Training time: sum of epoch times (evaluation excluded); images/s: steady state.")
        tables.append(Table("per_run", group, frame, units={label: unit for label, _, unit in PER_RUN_ROWS},
                            notes=notes, source=provenance(trials, run_label)))
    return tables


LR_INDEX = ["framework", "model", "data", "batch size", "GPUs", "lr", "lr rule", "trial"]


def lr_scaling_table(figures: pd.DataFrame, source: str = "") -> Table:
    """Seed 001: one row per trial (batch per GPU x GPUs, lr); failed, diverged, OOM and infeasible named."""
    order = figures.sort_values(["framework", "model", "data_kind", "batch_per_gpu", "num_gpus", "lr"], kind="stable")
    index, rows = [], []
    for _, t in order.iterrows():
        rule = t["lr_rule"] + (f", warm-up {int(t['warmup_epochs'])} ep" if t["warmup_epochs"] else "")
        index.append((t["framework"], t["model"], t["data_kind"], batch_label(int(t["batch_per_gpu"]), int(t["num_gpus"])),
                      int(t["num_gpus"]), float(t["lr"]), rule, t["trial_id"]))
        usable = t["status"] in USABLE
        label = status_label(t["status"])

        def measured(value: Any) -> Any:
            return value if pd.notna(value) else (math.nan if usable else label)

        rows.append({
            "Accuracy (validation)": t["val_acc"] if usable else label,
            "Epochs": int(t["epochs_done"]) if pd.notna(t["epochs_done"]) else 0,
            "Training time (s/epoch)": measured(t["time_per_epoch_s"]),
            "Throughput (samples/s)": measured(t["images_per_sec"]),
            "Status": label,
        })
    frame = pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(index, names=LR_INDEX), dtype=object)
    notes = ["Accuracy: validation accuracy after the last epoch; samples/s: steady state, all GPUs together."]
    if (figures["data_kind"] == "synthetic").any():
        notes.append("n/a accuracy: synthetic data.")
    return Table("lr_scaling", "LR scaling: accuracy, time per epoch and throughput per trial (seed 001)", frame,
                 units={"Accuracy (validation)": "acc", "Epochs": "int", "Training time (s/epoch)": "s",
                        "Throughput (samples/s)": "img/s", "lr": "lr"}, notes=notes, source=source)


def time_to_accuracy(figures: pd.DataFrame, epochs: pd.DataFrame, target: float) -> pd.DataFrame:
    """DAWNBench's rule per trial: training time until val_acc first reaches the target.

    wall_time_s is the sum of epoch times up to and including that epoch; gpu_hours = wall x GPUs / 3600.
    """
    rows = []
    for _, trial in figures.iterrows():
        mine = epochs[epochs["trial_id"] == trial["trial_id"]].sort_values("epoch")
        reached = mine[mine["val_acc"] >= target]
        row = {"trial_id": trial["trial_id"], "trial_group": trial["trial_group"], "num_gpus": int(trial["num_gpus"]),
               "target_acc": target, "epoch": math.nan, "wall_time_s": math.nan, "gpu_hours": math.nan,
               "best_val_acc": mine["val_acc"].max() if len(mine) else math.nan}
        if mine.empty:
            row["note"] = f"no epochs ({status_label(trial['status'])})"
        elif mine["val_acc"].isna().all():
            row["note"] = "no val_acc (synthetic data)" if trial["data_kind"] == "synthetic" else "no val_acc"
        elif reached.empty:
            row["note"] = "not reached"
        else:
            first = int(reached["epoch"].iloc[0])
            wall = float(mine.loc[mine["epoch"] <= first, "epoch_time_s"].sum())
            row.update(epoch=first + 1, wall_time_s=wall, gpu_hours=wall * trial["num_gpus"] / 3600.0, note="reached")
        rows.append(row)
    return pd.DataFrame(rows)


def time_to_accuracy_table(tta: pd.DataFrame, target: float, source: str = "") -> Table:
    index, rows = [], []
    for _, r in tta.iterrows():
        index.append((r["trial_group"], r["num_gpus"], r["trial_id"]))
        if r["note"] == "reached":
            figures = [r["epoch"], r["wall_time_s"], r["gpu_hours"]]
        elif r["note"] == "not reached":
            figures = ["not reached"] * 3
        else:  # nothing to measure: say why once
            figures = [r["note"], NO_TRIAL, NO_TRIAL]
        rows.append({"Epochs to target": figures[0], "Wall time (s)": figures[1], "GPU-hours": figures[2],
                     "Best val acc": r["best_val_acc"]})
    frame = pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(index, names=["trial group", "GPUs", "trial"]),
                         dtype=object)
    notes = [f"Target: validation accuracy >= {target:g}. Wall time: training epochs up to the first that reaches it "
             "(evaluation excluded); GPU-hours = wall time x GPUs / 3600."]
    return Table("time_to_accuracy", f"Time to accuracy {target:g} (seed 003, DAWNBench)", frame,
                 units={"Epochs to target": "int", "Wall time (s)": "s", "GPU-hours": "h", "Best val acc": "acc"},
                 notes=notes, source=source)


# --- comparison of two runs ------------------------------------------------------------------------

def ratio_of_tables(a: Table, b: Table, label_a: str = "A", label_b: str = "B") -> Table:
    """The same table with each number replaced by B/A; where either side has no number, both are named."""
    rows = list(dict.fromkeys([*a.frame.index, *b.frame.index]))
    columns = list(dict.fromkeys([*a.frame.columns, *b.frame.columns]))
    index = pd.MultiIndex.from_tuples(rows, names=a.frame.index.names) if isinstance(a.frame.index, pd.MultiIndex) \
        else pd.Index(rows, name=a.frame.index.name)
    frame = pd.DataFrame(index=index, columns=columns, dtype=object)
    for row in rows:
        for column in columns:
            in_a = row in a.frame.index and column in a.frame.columns
            in_b = row in b.frame.index and column in b.frame.columns
            va = a.frame.loc[row, column] if in_a else None
            vb = b.frame.loc[row, column] if in_b else None
            if not in_a or not in_b:
                frame.loc[row, column] = f"only in {label_a if in_a else label_b}"
            elif _is_number(va) and _is_number(vb) and va != 0:
                frame.loc[row, column] = vb / va
            elif _is_missing(va) and _is_missing(vb):
                frame.loc[row, column] = math.nan
            elif _is_number(va) or _is_number(vb) or va != vb:
                unit = a.unit(row, column)
                frame.loc[row, column] = f"{label_a}: {format_cell(va, unit)} / {label_b}: {format_cell(vb, unit)}"
            else:
                frame.loc[row, column] = va
    notes = [f"Each number is {label_b} / {label_a}."]
    return Table(f"compare_{a.name}", f"{a.title}: {label_b} / {label_a}", frame, default_unit="x",
                 notes=notes, source=f"{label_a}: {a.source}\n{label_b}: {b.source}")


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def environment_differences(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """The hardware and software columns whose values differ between two runs' rows."""
    lines = []
    for name, column in (*HARDWARE, *SOFTWARE):
        if column not in a or column not in b:
            continue
        va, vb = sorted(map(str, a[column].dropna().unique())), sorted(map(str, b[column].dropna().unique()))
        if va != vb:
            lines.append(f"{name} ({column}): A {', '.join(va) or 'none'} -> B {', '.join(vb) or 'none'}")
    return lines


# --- rendering -------------------------------------------------------------------------------------

def format_cell(value: Any, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if unit == "img/s":
            return f"{value:.1f}"
        if unit == "x":
            return f"{value:.2f}x"
        if unit == "%":
            return f"{100 * value:.1f}%"
        if unit == "s":
            return f"{value:.2f}" if value >= 1 else f"{value:.3f}"
        if unit == "acc":
            return f"{value:.3f}"
        if unit == "MiB":
            return f"{value:.0f}"
        if unit == "int":
            return f"{int(value)}"
        if unit == "h":
            return f"{value:.3g}"
        return str(value) if isinstance(value, numbers.Integral) else f"{value:g}"
    return str(value)


def _cells(table: Table) -> tuple[list[str], list[list[str]]]:
    """Header and body as text; leading index values equal to the row above are blanked, as in the seeds."""
    names = [n or "" for n in table.frame.index.names]
    header = names + [str(c) for c in table.frame.columns]
    body, previous = [], []
    for row, values in table.frame.iterrows():
        keys = list(row) if isinstance(row, tuple) else [row]
        shown = [str(k) for k in keys]
        for level in range(len(keys) - 1):  # the last level always shows: it names the row
            if keys[:level + 1] != previous[:level + 1]:
                break
            shown[level] = ""
        previous = keys
        body.append(shown + [format_cell(v, table.unit(row, c)) for c, v in values.items()])
    return header, body


def render_markdown(table: Table, level: int = 3) -> str:
    header, body = _cells(table)
    lines = [f"{'#' * level} {table.title}", ""]
    if body:
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join("---" for _ in header) + "|")
        lines.extend("| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in body)
    else:
        lines.append("(no rows)")
    lines.append("")
    lines.extend(f"- {note}" for note in table.notes)
    if table.source:
        lines.extend(f"- {line}" for line in table.source.splitlines())
    return "\n".join(lines) + "\n"


def render_text(table: Table) -> str:
    """Aligned plain text; long column labels are stacked a word per line, as the seeds' headers are."""
    header, body = _cells(table)
    levels = table.frame.index.nlevels
    stacked = [[h] if i < levels else h.split() or [""] for i, h in enumerate(header)]
    height = max(len(words) for words in stacked)
    header_lines = [[words[k - height + len(words)] if k >= height - len(words) else "" for words in stacked]
                    for k in range(height)]
    widths = [max(len(r[i]) for r in [*header_lines, *body]) for i in range(len(header))]
    line = lambda cells: "  ".join(c.rjust(w) if i >= levels else c.ljust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [table.title, *(line(h) for h in header_lines), *(line(r) for r in body)] if body else [table.title, "(no rows)"]
    out.extend(f"  {note}" for note in table.notes)
    if table.source:
        out.extend(f"  {line}" for line in table.source.splitlines())
    return "\n".join(out)


# --- plots -----------------------------------------------------------------------------------------

def _title(text: str, emulated: bool) -> str:
    return f"{text}\n{EMULATED_NOTE}" if emulated else text


def _finish(fig: Figure, ax: Any, xlabel: str, ylabel: str, title: str, emulated: bool) -> Figure:
    """The labels, title and styling every single-panel plot shares."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(_title(title, emulated))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def plot_throughput(long: pd.DataFrame, emulated: bool) -> Figure:
    """Images/s vs GPUs per speed group, each with its ideal linear line from the 1-GPU rate."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for group, cells in long.groupby("speed_group", sort=False):
        cells = cells[cells["images_per_sec"].notna()].sort_values("num_gpus")
        if cells.empty:
            continue
        (line,) = ax.plot(cells["num_gpus"], cells["images_per_sec"], marker="o", label=group)
        base = cells.loc[cells["num_gpus"] == 1, "images_per_sec"]
        if len(base) and cells.iloc[0]["baseline"] == "ok":
            ax.plot(cells["num_gpus"], base.iloc[0] * cells["num_gpus"], linestyle=":", color=line.get_color())
    ax.plot([], [], linestyle=":", color="gray", label="ideal linear scaling")
    ax.set_xticks(sorted(long["num_gpus"].unique()))
    return _finish(fig, ax, "GPUs per trial", "throughput (images/s, steady state)", "Throughput vs GPUs", emulated)


def plot_efficiency(long: pd.DataFrame, emulated: bool) -> Figure:
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for group, cells in long.groupby("speed_group", sort=False):
        cells = cells[cells["efficiency"].notna()].sort_values("num_gpus")
        if not cells.empty:
            ax.plot(cells["num_gpus"], 100 * cells["efficiency"], marker="o", label=group)
    ax.axhline(100, linestyle=":", color="gray", label="ideal (100%)")
    ax.set_xticks(sorted(long["num_gpus"].unique()))
    return _finish(fig, ax, "GPUs per trial", "scaling efficiency (% of linear)", "Scaling efficiency vs GPUs", emulated)


def plot_val_acc_vs_lr(figures: pd.DataFrame, emulated: bool) -> Figure | None:
    """Final validation accuracy vs lr, a line per global batch (as batch per GPU x GPUs, per framework, model
    and warm-up); None without accuracy."""
    scored = figures[figures["status"].isin(USABLE) & figures["val_acc"].notna()]
    if scored.empty:
        return None
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    keys = ["framework", "model", "global_batch", "batch_per_gpu", "num_gpus", "warmup_epochs"]
    for (framework, model, _, batch, gpus, warmup), trials in scored.groupby(keys):
        trials = trials.sort_values("lr")
        warm = f", warm-up {warmup} ep" if warmup else ""
        ax.plot(trials["lr"], trials["val_acc"], marker="o",
                label=f"{framework} {model} batch {batch_label(int(batch), int(gpus))}{warm}")
    ax.set_xscale("log")
    return _finish(fig, ax, "learning rate (peak, log scale)", "validation accuracy (final epoch, fraction)",
                   "Validation accuracy vs learning rate", emulated)


def plot_learning_curves(figures: pd.DataFrame, epochs: pd.DataFrame, emulated: bool) -> Figure | None:
    """val_acc per epoch, a panel per trial group and a line per trial; None without accuracy."""
    scored = epochs[epochs["val_acc"].notna()]
    groups = [g for g, trials in figures.groupby("trial_group", sort=False)
              if scored["trial_id"].isin(trials["trial_id"]).any()]
    if not groups:
        return None
    columns = min(3, len(groups))
    rows = math.ceil(len(groups) / columns)
    fig = Figure(figsize=(5.5 * columns, 3.8 * rows + 0.6))
    for i, group in enumerate(groups):
        ax = fig.add_subplot(rows, columns, i + 1)
        for _, trial in figures[figures["trial_group"] == group].iterrows():
            curve = scored[scored["trial_id"] == trial["trial_id"]].sort_values("epoch")
            if not curve.empty:
                ax.plot(curve["epoch"] + 1, curve["val_acc"], marker=".",
                        label=f"{trial['num_gpus']} GPU(s), lr {trial['lr']:g} ({status_label(trial['status'])})")
        ax.set_title(group, fontsize="small")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_ylabel("validation accuracy (fraction)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    fig.suptitle(_title("Learning curves", emulated))
    fig.tight_layout()
    return fig


# --- the report ------------------------------------------------------------------------------------

@dataclass
class Report:
    run: Run
    figures: pd.DataFrame
    scaling: pd.DataFrame
    throughput: Table
    ratios: list[Table]
    per_run: list[Table]
    lr_scaling: Table
    time_to_accuracy: Table | None
    target_acc: float | None
    plots: dict[str, Figure | None]  # file stem -> figure, None where there was nothing to draw

    def tables(self) -> list[Table]:
        return [self.throughput, *self.ratios, *self.per_run, self.lr_scaling,
                *([self.time_to_accuracy] if self.time_to_accuracy else [])]


def build_report(run: Run, target_acc: float | None = None) -> Report:
    """Every table and plot of a run; target_acc overrides the sweep file's."""
    figures = trial_figures(run.trials, run.epochs)
    source = provenance(figures, run.label)
    long = scaling(figures)
    target = target_acc if target_acc is not None else run.spec_target_acc
    tta = None
    # A run without any accuracy (synthetic data) gets one line instead of a table of "no val_acc".
    if target is not None and run.epochs["val_acc"].notna().any():
        tta = time_to_accuracy_table(time_to_accuracy(figures, run.epochs, target), target, source)
    plots = {
        "throughput_vs_gpus": plot_throughput(long, run.emulated),
        "efficiency_vs_gpus": plot_efficiency(long, run.emulated),
        "val_acc_vs_lr": plot_val_acc_vs_lr(figures, run.emulated),
        "learning_curves": plot_learning_curves(figures, run.epochs, run.emulated),
    }
    return Report(run, figures, long, throughput_table(long, source), ratio_tables(long, source),
                  per_run_tables(figures, run.label), lr_scaling_table(figures, source), tta, target, plots)


def _summary_line(run: Run, figures: pd.DataFrame) -> str:
    counts = figures["status"].map(status_label).value_counts()
    text = f"{run.label}: {len(figures)} trials (" + ", ".join(f"{n} {s}" for s, n in counts.items()) + ")"
    unfinished = [t for t in run.meta.get("trials", []) if t not in set(figures["trial_id"])]
    if unfinished:
        text += f"; {len(unfinished)} of run.json's trials have no summary row (not run or not finished)"
    return text


def write_report(report: Report, out: Path) -> list[Path]:
    """report.md, a CSV per table (and scaling.csv, the long form) and the PNGs, under out."""
    out.mkdir(parents=True, exist_ok=True)
    run = report.run
    written: list[Path] = []
    report.scaling.to_csv(out / "scaling.csv", index=False)
    written.append(out / "scaling.csv")
    for table in [report.throughput, *report.ratios, report.lr_scaling,
                  *([report.time_to_accuracy] if report.time_to_accuracy else [])]:
        table.frame.to_csv(out / f"{table.name}.csv")
        written.append(out / f"{table.name}.csv")
    per_run = pd.concat({t.title: t.frame for t in report.per_run}, names=["trial group", "measure"])
    per_run.to_csv(out / "per_run.csv")
    written.append(out / "per_run.csv")
    for name, fig in report.plots.items():
        if fig is not None:
            fig.savefig(out / f"{name}.png", dpi=100)
            written.append(out / f"{name}.png")

    md = [f"# Report: {run.label}", "",
          f"- {_summary_line(run, report.figures)}",
          f"- Run folder: {run.dir}",
          f"- Command: `{run.meta.get('command', 'unknown')}`; scale {run.meta.get('scale', 'unknown')}"]
    if run.emulated:
        md.append(f"- **{EMULATED_NOTE}**: GPU counts are emulated on CPU devices, to test function only.")
    md += ["", "## Throughput", "", render_markdown(report.throughput)]
    md += [render_markdown(t) for t in report.ratios]
    md += ["## Per trial group (seed 000)", ""] + [render_markdown(t) for t in report.per_run]
    md += ["## LR scaling", "", render_markdown(report.lr_scaling)]
    md += ["## Time to accuracy", ""]
    if report.time_to_accuracy:
        md.append(render_markdown(report.time_to_accuracy))
    elif report.target_acc is None:
        md.append("Not computed: no target (give target_acc in the sweep file, or --target-acc).\n")
    else:
        md.append(f"Not computed for target {report.target_acc:g}: no epoch has a validation accuracy "
                  "(synthetic data, or no epoch finished).\n")
    md += ["## Plots", ""]
    for name, fig in report.plots.items():
        md.append(f"![{name}]({name}.png)\n" if fig is not None else f"- {name}: not drawn, no validation accuracy "
                  "in this run (synthetic data, or no trial completed).\n")
    failed = report.figures[~report.figures["status"].isin(USABLE)]
    if not failed.empty:
        md += ["## Trials that did not complete", ""]
        for _, t in failed.iterrows():
            why = f": {t['error_type']}: {t['error']}" if pd.notna(t.get("error_type")) else ""
            md.append(f"- {t['trial_id']} ({t['speed_group']}, {t['num_gpus']} GPUs, lr {t['lr']:g}): "
                      f"{status_label(t['status'])}{why}")
        md.append("")
    (out / "report.md").write_text("\n".join(md))
    return [out / "report.md", *written]


def write_comparison(a: Report, b: Report, out: Path) -> tuple[list[Path], Table]:
    """compare.md and a CSV per table: B/A for every number. Returns the files and the throughput table."""
    out.mkdir(parents=True, exist_ok=True)
    tables = [ratio_of_tables(a.throughput, b.throughput, "A", "B"),
              ratio_of_tables(a.lr_scaling, b.lr_scaling, "A", "B")]
    if a.time_to_accuracy and b.time_to_accuracy:
        tables.append(ratio_of_tables(a.time_to_accuracy, b.time_to_accuracy, "A", "B"))
    per_run_b = {t.title: t for t in b.per_run}
    per_run = [ratio_of_tables(t, per_run_b[t.title], "A", "B") for t in a.per_run if t.title in per_run_b]
    only = sorted(set(per_run_b) ^ {t.title for t in a.per_run})
    written = []
    for table in tables:
        table.frame.to_csv(out / f"{table.name}.csv")
        written.append(out / f"{table.name}.csv")
    if per_run:
        pd.concat({t.title: t.frame for t in per_run}, names=["trial group", "measure"]).to_csv(out / "compare_per_run.csv")
        written.append(out / "compare_per_run.csv")
    differences = environment_differences(a.figures, b.figures)
    md = ["# Comparison: B / A", "", f"- A: {_summary_line(a.run, a.figures)}", f"- B: {_summary_line(b.run, b.figures)}"]
    if a.run.emulated or b.run.emulated:
        md.append(f"- **{EMULATED_NOTE}**")
    md += ["", "## What differs in the environment", ""]
    md += [f"- {d}" for d in differences] or ["- nothing recorded differs (hardware and software columns equal)"]
    md += ["", render_markdown(tables[0], 2), render_markdown(tables[1], 2)]
    if len(tables) > 2:
        md.append(render_markdown(tables[2], 2))
    md += ["## Per trial group", ""] + [render_markdown(t) for t in per_run]
    if only:
        md.append("Trial groups in one run only: " + "; ".join(only) + "\n")
    (out / "compare.md").write_text("\n".join(md))
    return [out / "compare.md", *written], tables[0]


def cmd_report(args: argparse.Namespace) -> int:
    """`python -m sweep report`: write the report, print its main table; bad input is a StoreError."""
    from sweep.launch import UsageError, results_location

    if args.target_acc is not None and not 0 < args.target_acc <= 1:
        raise UsageError(f"--target-acc: expected a number in (0, 1], got {args.target_acc:g}")
    results = results_location(args.results)
    run = load_run(find_run(args.target, results))
    # A report is a local set of files: one of a run on remote storage goes under ./report/SWEEP/RUN_ID.
    home = Path("report") / run.dir.parent.name / run.dir.name if isinstance(run.dir, RemotePath) else run.dir / "report"
    report = build_report(run, args.target_acc)
    other = build_report(load_run(find_run(args.against, results)), args.target_acc) if args.against else None
    out = Path(args.out) if args.out else home / f"vs-{other.run.run_id}" if other else home
    try:
        location.check(out, write=True)
    except OSError as e:
        raise UsageError(f"{out}: cannot write the report there ({location.reason(e)}; give another with --out)") from None
    if other:
        files, main_table = write_comparison(report, other, out)
        print(f"A: {_summary_line(run, report.figures)}\nB: {_summary_line(other.run, other.figures)}")
    else:
        files, main_table = write_report(report, out), report.throughput
        print(_summary_line(run, report.figures))
    if run.emulated:
        print(EMULATED_NOTE)
    print()
    print(render_text(main_table))
    print()
    print(f"wrote {len(files)} files to {out}: " + ", ".join(p.name for p in files))
    return 0
