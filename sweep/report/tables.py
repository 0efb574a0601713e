"""The studies' tables, each a function of the per-trial figures (sweep/report/figures.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sweep.limits import count
from sweep.report.figures import (FALLBACK, GROUP_KEY, SPEED_KEY, USABLE, key_part, batch_label, group_labels,
                                  in_speed_order, provenance, status_label)
from sweep.report.seeds import as_in
from trainables.config import PRECISIONS, runs_as

NO_TRIAL = "-"
RATIO_AXES = ("data_kind", "batch_per_gpu", "framework", "keras_backend", "model")

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
    # Each number's standard error where it is known (same index and columns as frame, NaN elsewhere):
    # what tells a difference between two runs from their noise (compare.py).
    stderr: pd.DataFrame | None = None
    # Words shown after a cell's number (same index and columns; "" for none): compare.py's noise verdicts.
    marks: pd.DataFrame | None = None

    def unit(self, row: Any, column: Any) -> str:
        first = row[0] if isinstance(row, tuple) else row
        return self.units.get(str(first)) or self.units.get(str(column)) or self.default_unit


def throughput_table(long: pd.DataFrame, source: str = "") -> Table:
    """Study 004's layout: rows images/s, speedup, efficiency for each GPU count; a column per speed group, the
    groups in one order (figures.ORDER) whatever order the rows came in. Each number's stderr kept beside."""
    gpus = gpu_rows(long)
    groups = list(dict.fromkeys(in_speed_order(long, then=["num_gpus", "nodes"])["speed_group"]))
    with_mfu = "mfu" in long and long["mfu"].notna().any()  # real GPUs with a published peak: MFU beside images/s
    metrics = ("images/s", "MFU", "speedup", "efficiency") if with_mfu else ("images/s", "speedup", "efficiency")
    index = pd.MultiIndex.from_tuples([(m, n) for m in metrics for n in gpus], names=["", "GPUs"])
    frame = pd.DataFrame(NO_TRIAL, index=index, columns=groups, dtype=object)
    stderr = pd.DataFrame(math.nan, index=index, columns=groups, dtype=float)
    for _, cell in long.iterrows():
        group, gpus_row = cell["speed_group"], cell["gpus"]
        frame.loc[("images/s", gpus_row), group] = cell["images_per_sec"] if cell["trials"] else cell["status"]
        stderr.loc[("images/s", gpus_row), group] = cell.get("images_per_sec_stderr", math.nan)
        if with_mfu:
            frame.loc[("MFU", gpus_row), group] = (cell["mfu"] if pd.notna(cell["mfu"]) else f"n/a ({cell['mfu_note']})"
                                                   if cell["trials"] else cell["status"])
        for metric in ("speedup", "efficiency"):
            if not cell["trials"]:
                value = cell["status"]
            elif cell["baseline"] != "ok":
                value = f"n/a ({cell['baseline']})"
            else:
                value = cell[metric]
                stderr.loc[(metric, gpus_row), group] = cell.get(f"{metric}_stderr", math.nan)
            frame.loc[(metric, gpus_row), group] = value
    notes = ["images/s: steady state (tf_cnn_benchmarks style: warm-up steps excluded), all GPUs of a trial together; "
             "speedup(n) = images/s(n) / images/s(1) of the same framework, model, batch per GPU and data; "
             "efficiency = speedup / n."]
    if with_mfu:
        notes.append("MFU: model FLOPs utilisation, the training FLOPs the images/s took (3x the network's forward "
                     "FLOPs per image) over the GPUs' published dense peak at the precision computed in "
                     "(trainables/peaks.py).")
    elif "mfu_note" in long and long["mfu_note"].notna().any():
        notes.append(f"No MFU: {'; '.join(sorted(set(long['mfu_note'].dropna())))}.")
    for group, baseline in long.groupby("speed_group", sort=False)["baseline"].first().items():
        if baseline != "ok":
            notes.append(f"{group}: {baseline}, so no speedup or efficiency (no baseline is invented).")
    for pooled, cells in long[long["trials"] > 1].groupby("pooled", sort=False):
        notes.append(f"In {len(cells)} cell(s) several trials differ only in {pooled or 'nothing recorded'}: "
                     "images/s is their mean.")
    whole_epoch = long[long["images_per_sec_source"].fillna("").str.contains("epoch")]
    for row in whole_epoch.itertuples():
        notes.append(f"{row.speed_group}, {row.gpus} GPUs: no step after warm-up, images/s is the whole-epoch rate.")
    if any(isinstance(g, str) for g in gpus):
        notes.append("N on K nodes: N GPUs spread over K nodes, a cell of its own (the all-reduce crosses the network).")
    return Table("throughput", f"Throughput, speedup and efficiency ({as_in('004')})", frame,
                 units={"images/s": "img/s", "MFU": "%", "speedup": "x", "efficiency": "%"}, notes=notes, source=source,
                 stderr=stderr)


def gpu_rows(cells: pd.DataFrame) -> list[Any]:
    """The GPU labels of the cells (figures.scaling's `gpus`), once each, by GPU count and then node count."""
    order = cells.drop_duplicates(["num_gpus", "nodes"]).sort_values(["num_gpus", "nodes"])
    return list(order["gpus"])


def ratio_tables(long: pd.DataFrame, source: str = "") -> list[Table]:
    """Study 004's lower half: images/s of one value of an axis over another's, other keys equal, per GPUs.

    Axes: data (synthetic vs real), batch per GPU (each vs the smallest), framework, Keras's backend and model
    (each vs the first in name order). A median column as in the study.
    """
    usable = long[long["images_per_sec"].notna()].copy()
    tables = []
    for axis in RATIO_AXES:
        values = sorted(usable[axis].dropna().unique())
        if len(values) < 2:
            continue
        usable["other"] = group_labels(usable, SPEED_KEY, exclude=(axis,))
        base = values[0]  # real before synthetic, the smallest batch, the first name
        cell = ["num_gpus", "nodes", "other"]
        denominator = usable[usable[axis] == base].set_index(cell)["images_per_sec"]
        for value in values[1:]:
            numerator = usable[usable[axis] == value].set_index(cell)["images_per_sec"]
            ratio = (numerator / denominator).dropna()
            title = f"Speedup from {_axis_value(axis, value)} vs. {_axis_value(axis, base)}"
            if ratio.empty:
                frame = pd.DataFrame(columns=["median"], dtype=object)
                notes = ["no pair of cells with both values and every other key equal"]
            else:
                frame = ratio.unstack("other").astype(object)
                frame["median"] = ratio.groupby(level=["num_gpus", "nodes"]).median()
                labels = usable.drop_duplicates(["num_gpus", "nodes"]).set_index(["num_gpus", "nodes"])["gpus"]
                frame.index = pd.Index([labels[i] for i in frame.index], name="GPUs", dtype=object)
                notes = [f"images/s of {_axis_value(axis, value)} / images/s of {_axis_value(axis, base)}, "
                         "same GPU count and every other key equal."]
            # A file name: a model named MODULE:FUNCTION or zoo:NAME (docs/models.md) has a colon, which Windows and
            # some object stores refuse in a name.
            name = f"ratio_{axis}_{value}_vs_{base}".replace("/", "-").replace(" ", "_").replace(":", "-")
            tables.append(Table(name, title, frame, default_unit="x", notes=notes, source=source))
    return tables


def precision_setting(precision: Any, compiled: Any) -> str:
    """A trial's arithmetic in one name: its precision, and "+ compiled" when its framework's graph compiler
    ran (`compile`: TensorFlow's XLA, torch.compile), so that one column holds both frameworks' compiled trials."""
    return f"{precision}{' + compiled' if bool(compiled) else ''}"


def setting_rank(setting: str) -> tuple[bool, int]:
    """A precision setting's place among the columns: as PRECISIONS lists them, each compiled one after them all."""
    precision, _, compiled = setting.partition(" + ")
    return bool(compiled), PRECISIONS.index(precision) if precision in PRECISIONS else len(PRECISIONS)


PRECISION_BASES = ("fp32", "tf32")  # what a row's settings are divided by: fp32, else the frameworks' default


def precision_tables(long: pd.DataFrame, source: str = "") -> list[Table]:
    """Precision (and the compiler) beside the GPU count: for each framework, model, batch per GPU, data and GPU
    count, images/s of each setting, and each setting over fp32 in the same row (over tf32, the frameworks'
    default, in a row without an fp32 number). Columns in one order (setting_rank). Only where a run varies them."""
    if long.empty:
        return []
    cells = in_speed_order(long, then=["num_gpus", "nodes"]).copy()
    cells["setting"] = [precision_setting(p, x) for p, x in zip(cells["precision"], cells["compile"])]
    settings = sorted(cells["setting"].unique(), key=setting_rank)
    if len(settings) < 2:
        return []
    cells["other"] = group_labels(cells, SPEED_KEY, exclude=("precision", "compile"))
    first = {other: i for i, other in enumerate(dict.fromkeys(cells["other"]))}  # ORDER's, as the throughput table's
    rows = cells.drop_duplicates(["other", "num_gpus", "nodes"])
    rows = rows.assign(rank=rows["other"].map(first)).sort_values(["rank", "num_gpus", "nodes"], kind="stable")
    frame = pd.DataFrame(NO_TRIAL, dtype=object, columns=settings,
                         index=pd.MultiIndex.from_tuples(list(zip(rows["other"], rows["gpus"])), names=["", "GPUs"]))
    for row in cells.itertuples():
        frame.loc[(row.other, row.gpus), row.setting] = row.images_per_sec if row.trials else row.status
    ratios = _precision_ratios(frame, settings)
    notes = ["images/s: steady state, all GPUs of a trial together; precision tf32 is each framework's default "
             "(TF32 tensor cores allowed on GPUs that have them, plain fp32 elsewhere), fp32 turns TF32 off, "
             "fp16 and bf16 are mixed precision (fp16 with dynamic loss scaling), + compiled: the train step "
             "compiled (TensorFlow: XLA; PyTorch: torch.compile, inductor)."]
    if ratios.columns.size:
        notes.append("S / fp32: images/s of setting S over fp32's in the same row (same framework, model, batch per "
                     "GPU, data and GPUs); S / tf32: over tf32's, the frameworks' default, in a row without fp32.")
    frame = pd.concat([frame, ratios], axis=1)
    units = {c: ("x" if c in ratios.columns else "img/s") for c in frame.columns}
    title = "Throughput by precision and compiler per GPU count, and each over fp32 (tf32 where a row has no fp32)"
    return [Table("precision", title, frame, units=units, notes=notes, source=source)]


SYNTHETIC_KINDS = ("synthetic", FALLBACK)  # images made on the devices: no input pipeline at all
INPUT_BOUND_SHARE = 0.05  # the timed steps waited for their input more than this share of their time: input-bound
INPUT_BOUND = "input-bound"
# What tells the real data of one cell from another's (the rest of the speed key names the row).
SOURCE_KEY = ("data_kind", "data_format", "loader_workers", "decode")


def synth_vs_real_tables(long: pd.DataFrame, source: str = "") -> list[Table]:
    """Study 004's "speedup from using synth vs real": for each framework, model, batch per GPU, precision (and the
    other settings that change a step's speed) and GPU count, synthetic images/s beside each real data's (kind,
    format, input workers, decode) and synthetic / real. A real cell whose timed steps (those images/s is of) waited
    for their input more than 5% of their time is marked input-bound. Only where a run has both synthetic and real
    data."""
    if long.empty or "data_kind" not in long:
        return []
    cells = in_speed_order(long, then=["num_gpus", "nodes"]).copy()
    synthetic = cells["data_kind"].isin(SYNTHETIC_KINDS)
    if not synthetic.any() or synthetic.all():
        return []
    key = [c for c in SOURCE_KEY if c in cells]
    cells["other"] = group_labels(cells, SPEED_KEY, exclude=tuple(key))
    cells["real_label"] = _source_labels(cells, key)
    synth = cells[synthetic & (cells["trials"] > 0)].groupby(["other", "num_gpus", "nodes"])["images_per_sec"].mean()
    # Rows by group, then GPU count, each count's real data in the speed order (as the precision table's rows).
    first = {other: i for i, other in enumerate(dict.fromkeys(cells["other"]))}
    real = cells[~synthetic]
    real = real.assign(rank=real["other"].map(first)).sort_values(["rank", "num_gpus", "nodes"], kind="stable")
    columns = ["synthetic", "real", "synthetic / real", "input wait", "pipeline alone per GPU"]
    rows, marks = [], []
    for cell in real.itertuples():
        base = synth.get((cell.other, cell.num_gpus, cell.nodes), math.nan)
        rate = cell.images_per_sec if cell.trials else cell.status
        ratio = base / rate if cell.trials and _is_rate(rate) and _is_rate(base) else NO_TRIAL
        wait, alone = getattr(cell, "input_wait_share", math.nan), getattr(cell, "input_images_per_sec", math.nan)
        rows.append(((cell.other, cell.gpus, cell.real_label),
                     [base if _is_rate(base) else NO_TRIAL, rate, ratio, wait, alone]))
        marks.append(["", INPUT_BOUND if _is_rate(wait) and wait > INPUT_BOUND_SHARE else "", "", "", ""])
    index = pd.MultiIndex.from_tuples([r[0] for r in rows], names=["", "GPUs", "real data"])
    frame = pd.DataFrame([r[1] for r in rows], index=index, columns=columns, dtype=object)
    notes = ["synthetic: images/s on images made on the devices (no input pipeline); real: images/s reading the data "
             "named (kind, format; input workers and decode where the run varies them), same framework, model, batch "
             "per GPU, precision and GPUs; synthetic / real: how much faster synthetic data trains (1.00x: the input "
             "costs nothing).",
             f"input wait: the share of the timed steps' time (warm-up steps excluded, as in images/s) that they waited "
             f"for their batch; {INPUT_BOUND}: above {INPUT_BOUND_SHARE:.0%}, the input bound the step. pipeline alone "
             "per GPU: images/s of one GPU's input pipeline measured before training, with no model (decode, crop, "
             "batch)."]
    return [Table("synth_vs_real", f"Speedup from using synthetic data vs. real data ({as_in('004')}), and whether "
                  "the input bound the step", frame,
                  units={"synthetic": "img/s", "real": "img/s", "synthetic / real": "x", "input wait": "%",
                         "pipeline alone per GPU": "img/s"},
                  notes=notes, source=source, marks=pd.DataFrame(marks, index=index, columns=columns))]


def _source_labels(cells: pd.DataFrame, key: list[str]) -> list[str]:
    """Each cell's real data in a few words: its kind and format always, its input workers and decode where the run
    varies them among its real cells."""
    real = cells[~cells["data_kind"].isin(SYNTHETIC_KINDS)]
    varied = [c for c in key if c not in ("data_kind", "data_format") and real[c].astype(str).nunique() > 1]
    labels = []
    for _, cell in cells.iterrows():
        form = cell.get("data_format")
        parts = [str(cell["data_kind"]), *([form] if isinstance(form, str) else [])]
        labels.append(" ".join(filter(None, parts + [key_part(c, cell[c]) for c in varied])))
    return labels


def _precision_ratios(frame: pd.DataFrame, settings: list[str]) -> pd.DataFrame:
    """Each row's settings over its base (the first of PRECISION_BASES with a number in the row): a column
    "S / BASE" for each setting and base that some row has; NO_TRIAL where the row's base is another."""
    rows = [row for _, row in frame.iterrows()]
    bases = [next((b for b in PRECISION_BASES if b in frame and _is_rate(row[b])), None) for row in rows]
    columns: dict[str, list[Any]] = {}
    for base in PRECISION_BASES:
        for setting in settings:
            values = [row[setting] / row[base] if mine == base and _is_rate(row[setting]) else NO_TRIAL
                      for row, mine in zip(rows, bases)]
            if setting != base and any(v != NO_TRIAL for v in values):
                columns[f"{setting} / {base}"] = values
    return pd.DataFrame(columns, index=frame.index, dtype=object)


def _is_rate(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def _axis_value(axis: str, value: Any) -> str:
    return {"data_kind": f"{value} data", "batch_per_gpu": f"batch {value}/GPU",
            "keras_backend": f"keras on {value}"}.get(axis, str(value))


PER_RUN_ROWS = (  # study 000's rows: label, figures column, unit
    ("Training time (s)", "training_time_s", "s"),
    ("Average time per epoch (s)", "time_per_epoch_s", "s"),
    ("Images processed per sec", "images_per_sec", "img/s"),
    ("Training accuracy", "train_acc", "acc"),
    ("Test accuracy", "val_acc", "acc"),
    ("Maximum device memory, all GPUs (MiB)", "device_mem_mib", "MiB"),
    ("Peak host RSS (MiB)", "peak_host_rss_mib", "MiB"),
)


def per_run_tables(figures: pd.DataFrame, run_label: str) -> list[Table]:
    """Study 000: one table per trial group, a row per measure and a column per GPU count."""
    tables = []
    for group, trials in figures.groupby("trial_group", sort=False):
        trials = trials.sort_values(["num_gpus", "nodes"])
        gpus = trials["gpus"].astype(str)  # "2 on 2 nodes" beside "2 on 1 node"
        repeated = gpus.duplicated(keep=False)  # only if a config column is unknown here
        columns = [f"GPU ({g}) {tid}" if twice else f"GPU ({g})" for g, tid, twice in zip(gpus, trials["trial_id"], repeated)]
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


def framework_tables(figures: pd.DataFrame, source: str = "") -> list[Table]:
    """Study 000 with the frameworks side by side: per trial group less its framework, study 000's measures
    in a column per GPU count and framework, and each framework's images/s over the first framework (in
    name order) that has a number at that GPU count. Only where a run has trials of two frameworks or more.
    A keras trial's framework is Keras with its backend ("keras/jax", runs_as): study 000's own comparison."""
    if figures.empty:
        return []
    cells = figures.copy()
    cells["framework"] = [runs_as(fw, backend) for fw, backend in zip(cells["framework"], cells["keras_backend"])]
    if cells["framework"].nunique() < 2:
        return []
    cells["other"] = group_labels(cells, GROUP_KEY, exclude=("framework", "keras_backend"))
    tables = []
    for other, trials in cells.groupby("other", sort=False):
        if trials["framework"].nunique() < 2:
            continue
        trials = trials.sort_values(["num_gpus", "nodes", "framework"]).drop_duplicates(["num_gpus", "nodes", "framework"])
        gpus = list(trials["gpus"])  # "2 on 2 nodes" beside "2 on 1 node": each compared with its own kind
        columns = [f"GPU ({g}) {fw}" for g, fw in zip(gpus, trials["framework"])]
        labels = [label for label, _, _ in PER_RUN_ROWS]
        frame = pd.DataFrame(NO_TRIAL, index=labels + ["Images/s over the first framework"], columns=columns, dtype=object)
        bases = {}
        for column, g, (_, trial) in zip(columns, gpus, trials.iterrows()):
            usable = trial["status"] in USABLE
            for label, key, _ in PER_RUN_ROWS:
                frame.loc[label, column] = trial[key] if usable else status_label(trial["status"])
            speed = trial["images_per_sec"] if usable else math.nan
            if pd.notna(speed) and speed > 0:
                bases.setdefault(g, (trial["framework"], speed))
        for column, g, (_, trial) in zip(columns, gpus, trials.iterrows()):
            base = bases.get(g)
            speed = trial["images_per_sec"] if trial["status"] in USABLE else math.nan
            if base and pd.notna(speed):
                frame.loc["Images/s over the first framework", column] = speed / base[1]
        named = ", ".join(f"{g if isinstance(g, str) else count(g, 'GPU')}: {fw}" for g, (fw, _) in bases.items())
        notes = [f"Images/s over the first framework: this column's images/s over that of the first framework in "
                 f"name order with a number at the same GPU count ({named or 'none'}), every other setting equal.",
                 "Training time: sum of epoch times (evaluation excluded); images/s: steady state."]
        units = {label: unit for label, _, unit in PER_RUN_ROWS} | {"Images/s over the first framework": "x"}
        tables.append(Table("frameworks", f"Frameworks side by side: {other}", frame, units=units, notes=notes,
                            source=source))
    return tables


LR_INDEX = ["framework", "model", "data", "batch size", "GPUs", "lr", "lr rule", "trial"]


def lr_scaling_table(figures: pd.DataFrame, source: str = "") -> Table:
    """Study 001: one row per trial (batch per GPU x GPUs, lr); failed, diverged, OOM and infeasible named."""
    order = figures.sort_values(["framework", "model", "data_kind", "batch_per_gpu", "num_gpus", "nodes", "lr"], kind="stable")
    index, rows = [], []
    for _, t in order.iterrows():
        rule = t["lr_rule"] + (f", warm-up {int(t['warmup_epochs'])} ep" if t["warmup_epochs"] else "")
        index.append((t["framework"], t["model"], t["data_kind"], batch_label(int(t["batch_per_gpu"]), int(t["num_gpus"])),
                      t["gpus"], float(t["lr"]), rule, t["trial_id"]))
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
    return Table("lr_scaling", f"LR scaling: accuracy, time per epoch and throughput per trial ({as_in('001')})", frame,
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
               "gpus": trial["gpus"],
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
        index.append((r["trial_group"], r["gpus"], r["trial_id"]))
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
    return Table("time_to_accuracy", f"Time to accuracy {target:g} (DAWNBench's rule, {as_in('003')})", frame,
                 units={"Epochs to target": "int", "Wall time (s)": "s", "GPU-hours": "h", "Best val acc": "acc"},
                 notes=notes, source=source)

