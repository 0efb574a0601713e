"""One row of figures per trial, the groups the tables key on, and where the numbers come from."""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from sweep.schema import Status
from trainables.config import PRECISIONS

# Statuses whose measurements count in the tables; the others are shown by name.
USABLE = tuple(s.value for s in Status if s.done)


# A throughput cell: trials that differ in nothing that changes the speed of a step (lr and its
# schedule do not). Speedup and efficiency compare against the 1-GPU cell of the same key.
# Precision and the compiler change a step's speed most of all: fp16 rows are never pooled with fp32 rows.
# The input pipeline's workers (data: imagenet) decide how fast images arrive: a speed setting too.
# So do what it reads (data_format: JPEG files, TFRecord, RecordIO) and where it decodes (decode: cpu or gpu). Keras's
# backend is the framework underneath a keras trial: its trials on jax, tensorflow and torch are three groups.
SPEED_KEY = ["framework", "model", "batch_per_gpu", "data_kind", "image_size", "kvstore", "variable_update", "cpus_per_trial",
             "loader_workers", "precision", "compile", "data_format", "decode", "keras_backend"]
# A trial group: trials that differ in the GPU count only (the linear rule's lr follows the GPUs).
GROUP_KEY = SPEED_KEY + ["lr_setting", "warmup_epochs", "epochs", "steps_per_epoch", "val_examples",
                         "warmup_steps", "lr_decay", "momentum", "weight_decay", "seed"]
# What may differ between the trials one throughput cell averages: nothing that changes a step's speed.
POOLED = ["lr_setting", "lr", "warmup_epochs", "lr_decay", "momentum", "weight_decay", "seed", "epochs",
          "steps_per_epoch", "val_examples", "warmup_steps"]
# Shown in a label always; the rest of a key only where the run varies it. A keras trial's backend is part of what
# it runs (a study 000 table per backend says which); other frameworks' trials have none (trial_figures).
ALWAYS_SHOWN = ("framework", "model", "batch_per_gpu", "data_kind", "lr_setting", "keras_backend")

HARDWARE = (("device", "device_kind"), ("GPU", "gpu_model"), ("driver", "gpu_driver"),
            ("driver's CUDA", "driver_cuda_version"), ("CPU", "cpu_model"), ("CPUs", "cpu_count"), ("host", "hostname"))
SOFTWARE = (("framework", "framework_version"), ("framework's CUDA", "framework_cuda_version"),
            ("framework's cuDNN", "framework_cudnn_version"), ("cuDNN loaded", "cudnn_loaded_version"),
            ("Python", "python_version"), ("numpy", "numpy_version"),
            ("Ray", "ray_version"), ("OS", "os"), ("engine", "engine_version"), ("commit", "git_commit"))


def trial_figures(trials: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """One row per trial: its config, status, group labels and the figures every table uses.

    images_per_sec is the steady-state rate (warm-up steps excluded) from the summary row; only where a
    trial has no post-warm-up step does it fall back to the mean whole-epoch rate (images_per_sec_source
    says which), images_per_sec_stderr its standard error (steady_stderr). training_time_s is the sum of
    epoch times, time_per_epoch_s their mean (as study 000 measures them). Rows in ORDER, then lr and GPUs.
    """
    fig = trials.copy().reset_index(drop=True)
    fig["keras_backend"] = fig["keras_backend"].where(fig["framework"] == "keras")  # keras's own setting: null elsewhere
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
    # The standard error of the trial's steady rate, pooled from its epochs' (report --against: is a ratio noise?).
    pooled = {trial: steady_stderr(rows) for trial, rows in by_trial}
    fig["images_per_sec_stderr"] = [pooled.get(t, math.nan) if source == "steady" else math.nan
                                    for t, source in zip(fig["trial_id"], fig["images_per_sec_source"])]
    fig["training_time_s"] = fig["trial_id"].map(epoch_time_sum)
    # The input pipeline (data: imagenet): the share of the timed steps' time they waited for a batch, and the
    # pipeline's own images/s per process, measured before training (NaN where the rows have none).
    shares = {trial: input_wait_share(rows) for trial, rows in by_trial}
    fig["input_wait_share"] = [shares.get(t, math.nan) for t in fig["trial_id"]]
    fig["input_images_per_sec"] = fig["trial_id"].map(by_trial["input_images_per_sec"].mean())
    # MFU from the summary rows (trainables/peaks.py), and why it is null where it is (null in older runs' rows).
    fig["mfu"] = fig["mfu"] if "mfu" in fig else math.nan
    fig["mfu_note"] = fig["mfu_note"] if "mfu_note" in fig else None
    fig["time_per_epoch_s"] = fig["mean_epoch_time_s"]
    fig["train_acc"] = fig["final_train_acc"]
    fig["val_acc"] = fig["final_val_acc"]
    # Study 000's "maximum memory" is nvidia-smi's, summed over the GPUs of the run.
    fig["device_mem_mib"] = [sum(m) if m is not None and len(m) else math.nan for m in fig["peak_device_mem_mib"]]
    fig["nodes"] = fig["nodes"].fillna(1).astype(int) if "nodes" in fig else 1  # runs stored before `nodes`: one
    fig["gpus"] = gpu_labels(fig)  # every table's name for a trial's GPUs: "2 on 2 nodes" where the run needs it
    fig = in_speed_order(fig, then=["lr_setting", "num_gpus", "nodes", "lr", "trial_id"]).reset_index(drop=True)
    fig["speed_group"] = group_labels(fig, SPEED_KEY)
    fig["trial_group"] = group_labels(fig, GROUP_KEY)
    return fig


def input_wait_share(epochs: pd.DataFrame) -> float:
    """The share of a trial's timed steps' time that they waited for their input: its epochs' steady_input_wait_share,
    weighted by their timed steps; where no epoch has one (rows of older runs), its epochs' input_wait_s over their
    time. NaN without an input pipeline (synthetic data)."""
    if "steady_input_wait_share" in epochs:
        rows = epochs[epochs["steady_input_wait_share"].notna() & (epochs["steady_steps"].fillna(0) > 0)]
        if len(rows):
            return float((rows["steady_input_wait_share"] * rows["steady_steps"]).sum() / rows["steady_steps"].sum())
    waited = epochs["input_wait_s"].sum(min_count=1) if "input_wait_s" in epochs else math.nan
    return float(waited / epochs["epoch_time_s"].sum()) if pd.notna(waited) else math.nan


def steady_stderr(epochs: pd.DataFrame) -> float:
    """The standard error of a trial's steady images/s (the mean of its per-step rates over every timed step),
    from its epoch rows, each of which holds the mean, standard error and count of its own steps' rates: the
    steps' variance is their within-epoch variance plus the epochs' spread around the trial's mean. NaN
    where fewer than two steps were timed, or an epoch of several steps has no stderr."""
    if "steady_images_per_sec_stderr" not in epochs or "steady_steps" not in epochs:  # rows of an older store
        return math.nan
    rows = epochs[epochs["steady_images_per_sec"].notna() & (epochs["steady_steps"].fillna(0) > 0)]
    means, steps = rows["steady_images_per_sec"].to_numpy(float), rows["steady_steps"].to_numpy(float)
    stderrs = rows["steady_images_per_sec_stderr"].to_numpy(float)
    total = steps.sum()
    if total < 2 or any(math.isnan(se) for se, n in zip(stderrs, steps) if n > 1):
        return math.nan
    mean = (means * steps).sum() / total
    within = sum((n - 1) * se * se * n for se, n in zip(stderrs, steps) if n > 1)  # (n - 1) x sd^2, sd = se x sqrt(n)
    between = (steps * (means - mean) ** 2).sum()
    return math.sqrt((within + between) / (total - 1) / total)


FALLBACK = "synthetic (no CIFAR-10)"  # a trial that asked for cifar10 and ran on synthetic data


def _filled_data_kind(trials: pd.DataFrame) -> pd.Series:
    """What a trial trained on: real, synthetic, or synthetic in place of the CIFAR-10 it asked for (a
    smoke run without the data), which is never pooled with either. A trial with no epoch (infeasible)
    has no data_kind of its own: it gets the run's for the same data setting, else the setting's."""
    known = trials.dropna(subset=["data_kind"]).groupby("data")["data_kind"].first().to_dict()
    kinds = [kind if isinstance(kind, str) else known.get(data, "synthetic" if data == "synthetic" else "real")
             for kind, data in zip(trials["data_kind"], trials["data"])]
    return pd.Series([FALLBACK if kind == "synthetic" and data == "cifar10" else kind
                      for kind, data in zip(kinds, trials["data"])], index=trials.index, dtype=object)


# The order of every table's groups, whatever order the store read the rows in: the speed key's parts in
# this order, a precision as PRECISIONS lists it (fp32, tf32, fp16, bf16), the compiled ones after them all.
ORDER = ["framework", "keras_backend", "model", "batch_per_gpu", "data_kind", "compile", "precision", "image_size", "kvstore",
         "variable_update", "cpus_per_trial", "loader_workers", "data_format", "decode"]


def in_speed_order(frame: pd.DataFrame, then: list[str]) -> pd.DataFrame:
    """The rows sorted by ORDER and then by `then` (columns the frame lacks are skipped)."""
    columns = [c for c in [*ORDER, *then] if c in frame]
    return frame.sort_values(columns, key=_sort_key, kind="stable", na_position="last")


def _sort_key(column: pd.Series) -> pd.Series:
    if column.name == "precision":
        return column.map(lambda p: PRECISIONS.index(p) if p in PRECISIONS else len(PRECISIONS))
    if column.name == "compile":
        return column.fillna(False).astype(bool)
    return column


def _lr_setting(row: Any) -> str:
    if row.lr_rule == "linear":
        return f"linear lr {row.base_lr:g} x batch/{int(row.base_batch)}"
    return f"lr {row.lr:g}"


def _lr_decay(decay_epochs: Any, factor: float) -> str:
    epochs = [] if decay_epochs is None else list(decay_epochs)
    return f"x{factor:g} at {','.join(map(str, epochs))}" if epochs else "none"


def group_labels(frame: pd.DataFrame, key: list[str], exclude: tuple[str, ...] = ()) -> pd.Series:
    """A readable label per row naming its key: the always-shown parts, and each other part of the key
    only where it tells apart rows that the always-shown parts do not (a setting of one failed trial
    does not lengthen every label)."""
    key = [c for c in key if c not in exclude and c in frame]
    always = [c for c in key if c in ALWAYS_SHOWN]
    rest = [c for c in key if c not in ALWAYS_SHOWN]
    shown = pd.Series([[] for _ in range(len(frame))], index=frame.index, dtype=object)
    for _, rows in frame.groupby([frame[c].astype(str) for c in always] or [pd.Series(0, index=frame.index)]):
        extra = [c for c in rest if rows[c].astype(str).nunique() > 1]
        for i in rows.index:
            shown[i] = extra
    return pd.Series([" ".join(filter(None, (key_part(c, frame.at[i, c]) for c in [*always, *shown[i]])))
                      for i in frame.index], index=frame.index, dtype=str)


def key_part(column: str, value: Any) -> str:
    """A key's part of a label; "" for a setting the row's framework does not have (keras_backend)."""
    if column in ("framework", "model", "data_kind", "lr_setting"):
        return str(value)
    if column == "keras_backend" and pd.isna(value):
        return ""
    if column == "batch_per_gpu":
        return f"b{int(value)}/GPU"
    if pd.isna(value):
        return f"{column}=default"
    return f"{column}={value:g}" if isinstance(value, float) else f"{column}={value}"


def batch_label(batch_per_gpu: int, num_gpus: int) -> str:
    """Study 001's spelling of a batch: per GPU x GPUs = global."""
    return f"{batch_per_gpu}x{num_gpus}={batch_per_gpu * num_gpus}"


def status_label(status: str) -> str:
    return Status(status).label


def provenance(rows: pd.DataFrame, run_label: str) -> str:
    """Where a table's numbers come from: the run, and the hardware and software its rows name."""
    def values(column: str) -> str:
        if column not in rows:
            return ""
        # A whole number as one: a column of counts with a null (an infeasible trial's) reads as floats.
        seen = [str(int(v)) if isinstance(v, float) and v.is_integer() else str(v) for v in rows[column].dropna().unique()]
        return ", ".join(v for v in seen if v != "")

    def part(pairs: tuple[tuple[str, str], ...]) -> str:
        return "; ".join(f"{name} {values(col)}" for name, col in pairs if values(col)) or "not recorded"

    return (f"Source: run {run_label} ({len(rows)} trials). Hardware: {part(HARDWARE)}. "
            f"Software: {part(SOFTWARE)}.")



def scaling(figures: pd.DataFrame) -> pd.DataFrame:
    """Images/s, speedup and efficiency per speed group and GPU count (long form).

    A cell is a GPU count on a node count: 2 GPUs on one node and 2 GPUs on two nodes (one each, their
    all-reduce over the network) are two cells, never one mean; `gpus` names a cell as trial_figures named
    its trials. images/s of a cell is the mean over
    its usable trials: several where they differ only in settings that do not change a step's speed (lr,
    its schedule, the seed: `pooled` names which). speedup(n) = images/s(n) / images/s(1) within the group,
    efficiency = speedup / n. Where the group has no usable 1-GPU trial, speedup and efficiency stay empty
    and `baseline` says why. Each figure has its standard error (`images_per_sec_stderr`, `speedup_stderr`,
    `efficiency_stderr`: from the trials' timed steps; NaN where a trial timed fewer than two).
    """
    rows = []
    for group, trials in figures.groupby("speed_group", sort=False):
        usable = trials[trials["status"].isin(USABLE) & trials["images_per_sec"].notna()]
        one = trials[trials["num_gpus"] == 1]
        base_trials = usable[usable["num_gpus"] == 1]
        base, base_stderr = base_trials["images_per_sec"].mean(), _mean_stderr(base_trials)
        if pd.notna(base):
            baseline = "ok"
        elif one.empty:
            baseline = "no 1-GPU trial"
        else:
            baseline = "1-GPU trial " + "/".join(sorted({status_label(s) for s in one["status"]}))
        for (num_gpus, nodes), cell in trials.groupby(["num_gpus", "nodes"]):
            ok = cell[cell.index.isin(usable.index)]
            rate = ok["images_per_sec"].mean() if len(ok) else math.nan
            speedup = rate / base if pd.notna(rate) and pd.notna(base) else math.nan
            rate_stderr = _mean_stderr(ok)
            if pd.isna(speedup):
                speedup_stderr = math.nan
            elif ok.index.equals(base_trials.index):  # the baseline over itself: exactly 1
                speedup_stderr = 0.0
            else:  # independent measurements: relative errors add in quadrature
                speedup_stderr = speedup * math.hypot(rate_stderr / rate, base_stderr / base)
            rows.append({
                "speed_group": group, **{k: cell.iloc[0][k] for k in SPEED_KEY},
                "num_gpus": int(num_gpus), "nodes": int(nodes), "gpus": cell.iloc[0]["gpus"], "trials": len(ok),
                "status": "ok" if len(ok) else "/".join(sorted({status_label(s) for s in cell["status"]})),
                "images_per_sec": rate, "images_per_sec_stderr": rate_stderr,
                "images_per_sec_source": "/".join(sorted(set(ok["images_per_sec_source"].dropna()))) or None,
                "speedup": speedup, "efficiency": speedup / num_gpus if pd.notna(speedup) else math.nan,
                "speedup_stderr": speedup_stderr, "efficiency_stderr": speedup_stderr / num_gpus,
                "baseline": baseline,
                "input_wait_share": ok["input_wait_share"].mean(), "input_images_per_sec": ok["input_images_per_sec"].mean(),
                "mfu": ok["mfu"].mean(), "mfu_note": next(iter(ok["mfu_note"].dropna()), None),
                "pooled": ", ".join(c for c in POOLED if ok[c].astype(str).nunique() > 1),
            })
    return pd.DataFrame(rows)


def _mean_stderr(trials: pd.DataFrame) -> float:
    """The standard error of the mean images/s of these trials: their own, in quadrature, over their count;
    NaN where any has none (or there are none)."""
    stderrs = trials["images_per_sec_stderr"] if "images_per_sec_stderr" in trials else pd.Series(dtype=float)
    if stderrs.empty or stderrs.isna().any():
        return math.nan
    return math.sqrt((stderrs ** 2).sum()) / len(stderrs)


def gpu_labels(trials: pd.DataFrame) -> list[Any]:
    """Each trial's GPU count as the tables name it: the count, or "N on K node(s)" where the run has that
    count on several node counts."""
    spread = trials.groupby("num_gpus")["nodes"].transform("nunique") > 1
    return [f"{n} on {k} node{'s' if k > 1 else ''}" if several else int(n)
            for n, k, several in zip(trials["num_gpus"], trials["nodes"], spread)]

