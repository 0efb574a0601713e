"""Every table and plot of a run, built from its rows (sweep/report/load.py) and kept in a Report."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from matplotlib.figure import Figure

from sweep import max_batch, overrides
from sweep.report import plots, seeds
from sweep.limits import count
from sweep.report.figures import FALLBACK, provenance, scaling, status_label, trial_figures
from sweep.report.load import Run
from sweep.store import RunStore
from sweep.report.tables import (Table, framework_tables, lr_scaling_table, per_run_tables, precision_tables, ratio_tables,
                                 synth_vs_real_tables, throughput_table, time_to_accuracy, time_to_accuracy_table)


@dataclass
class Report:
    run: Run
    figures: pd.DataFrame
    scaling: pd.DataFrame
    throughput: Table
    ratios: list[Table]
    per_run: list[Table]
    frameworks: list[Table]  # study 000's measures with the frameworks side by side, where a run has several
    lr_scaling: Table
    time_to_accuracy: Table | None
    target_acc: float | None
    plots: dict[str, Figure | None]  # file stem -> figure, None where there was nothing to draw
    max_batch: Table | None = None  # batch_per_gpu: max: each configuration's boundary (sweep/max_batch.py)

    @property
    def precision(self) -> Table | None:
        """The precision table (among the ratio tables), where the run varies precision or the compiler."""
        return next((t for t in self.ratios if t.name == "precision"), None)

    @property
    def synth_vs_real(self) -> Table | None:
        """Synthetic beside real data (among the ratio tables), where the run has both."""
        return next((t for t in self.ratios if t.name == "synth_vs_real"), None)

    def tables(self) -> list[Table]:
        return [self.throughput, *self.ratios, *self.per_run, *self.frameworks, self.lr_scaling,
                *([self.time_to_accuracy] if self.time_to_accuracy else []), *([self.max_batch] if self.max_batch else [])]


def build_report(run: Run, target_acc: float | None = None) -> Report:
    """Every table and plot of a run; target_acc overrides the sweep file's."""
    figures = trial_figures(run.trials, run.epochs)
    source = provenance(figures, run.label)
    long = scaling(figures)
    target = target_acc if target_acc is not None else run.target_acc
    tta = None
    # A run without any accuracy (synthetic data) gets one line instead of a table of "no val_acc".
    if target is not None and run.epochs["val_acc"].notna().any():
        tta = time_to_accuracy_table(time_to_accuracy(figures, run.epochs, target), target, source)
    drawn = {
        "throughput_vs_gpus": plots.plot_throughput(long, run.emulated),
        "efficiency_vs_gpus": plots.plot_efficiency(long, run.emulated),
        "mfu_vs_gpus": plots.plot_mfu(long, run.emulated),
        "val_acc_vs_lr": plots.plot_val_acc_vs_lr(figures, run.emulated),
        "learning_curves": plots.plot_learning_curves(figures, run.epochs, run.emulated),
    }
    # The ratio tables, precision beside the GPU count where the run varies precision or compile, and synthetic
    # beside real data where it has both.
    ratios = ratio_tables(long, source) + precision_tables(long, source) + synth_vs_real_tables(long, source)
    return Report(run, figures, long, throughput_table(long, source), ratios,
                  per_run_tables(figures, run.label), framework_tables(figures, source), lr_scaling_table(figures, source),
                  tta, target, drawn, max_batch_table(run))


STUDY_000_COLUMN = "study 000 MiB/GPU"
MAX_BATCH_UNITS = {STUDY_000_COLUMN: "MiB", "its MiB/device": "MiB", "capacity MiB": "MiB", "its images/s": "img/s", "max batch": "int",
                   "first oom": "int", "trains at": "int", "probes": "int", "image": "int", "gpus": "int"}


def max_batch_table(run: Run) -> Table | None:
    """The run's largest-batch searches, one row per configuration; None where it searched nothing."""
    if run.sweep is None:
        return None
    searches = overrides.apply(run.sweep, run.meta.overrides).searches(run.meta.scale)
    if not searches:
        return None
    rows = max_batch.boundaries(searches, RunStore(run.dir).trial_rows(), run.meta.memory_capacity_mib)
    frame = max_batch.frame(rows)
    study = [seeds.study_000_mib_per_gpu(r["framework"], r["model"], r["num_gpus"]) for r in rows]
    if any(v is not None for v in study):  # the seeds' memory rows beside the run's, where study 000 has them
        frame[STUDY_000_COLUMN] = study
    frame = frame.set_index(["framework", "model"])
    notes = ["max batch: the largest per-GPU batch that trained; first oom: the smallest that ran out of memory "
             "(within one step of max batch once the search found its boundary); state: found, all fit (up to the "
             "range's hi), none fit (its lo did not), failed (a probe failed otherwise: no boundary), searching."]
    if run.meta.memory_capacity_mib:
        notes.append(f"Emulated devices of {run.meta.memory_capacity_mib:g} MiB each (--emulate-gpu-memory): memory "
                     "is the trial process's peak resident memory above its start, per device, not a GPU's.")
    if STUDY_000_COLUMN in frame:
        notes.append(f"{STUDY_000_COLUMN}: study 000's maximum memory ({seeds.STUDY_000}, Keras 1.2.2 on K80 GPUs, "
                     f"batch {seeds.STUDY_000_BATCH}) over its GPU count, for the same framework, model and GPUs.")
    else:
        notes.append("No study rows beside it: study 000's memory figures are of ResNet-50 and Inception-v3 in MXNet "
                     "and TensorFlow on 1-16 GPUs, and no configuration here is one of those.")
    return Table("max_batch", "Largest batch per GPU that fits", frame, MAX_BATCH_UNITS, notes=notes)


def summary_line(run: Run, figures: pd.DataFrame) -> str:
    counts = figures["status"].map(status_label).value_counts()
    text = f"{run.label}: {len(figures)} trials (" + ", ".join(f"{n} {s}" for s, n in counts.items()) + ")"
    unfinished = [t for t in run.meta.trials if t not in set(figures["trial_id"])]
    if unfinished:
        text += f"; {len(unfinished)} of run.json's trials have no summary row (not run or not finished)"
    return text


def accuracy_note(figures: pd.DataFrame) -> str | None:
    """Why accuracy is null where trials asked for CIFAR-10 and, finding none, trained on synthetic data; None
    where none did. Said on the console and in report.md: a null accuracy otherwise looks like a fault."""
    fell = figures[figures["data_kind"] == FALLBACK]
    if fell.empty:
        return None
    return (f"No accuracy in {count(len(fell), 'trial')}: no CIFAR-10 was found under the data folder, so "
            f"{'it' if len(fell) == 1 else 'they'} trained on synthetic data, and val_acc and train_acc are null "
            "(`python -m sweep data fetch cifar10` fetches it; docs/data.md).")
