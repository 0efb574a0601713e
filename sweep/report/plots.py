"""The report's plots (PNG): throughput and efficiency vs GPUs, accuracy vs lr, learning curves."""
from __future__ import annotations

import math
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FixedFormatter, FixedLocator, MaxNLocator, NullLocator

from sweep.report.figures import USABLE, batch_label, status_label

EMULATED_NOTE = "CPU-emulated devices: not a speed result"
MAX_LR_TICKS = 12  # up to this many lrs each get a tick of their own on the accuracy-vs-lr plot

def _title(text: str, emulated: bool) -> str:
    return f"{text}\n{EMULATED_NOTE}" if emulated else text


def _finish(fig: Figure, ax: Any, xlabel: str, ylabel: str, title: str, emulated: bool) -> Figure:
    """The labels, title and styling every single-panel plot shares."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(_title(title, emulated))
    ax.grid(alpha=0.3)
    _legend_beside(ax, "small")
    return fig


def _legend_beside(ax: Any, size: str) -> None:
    """The legend right of the axes, where it covers no data point (the figure's layout makes room)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=size, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)


def _lines(long: pd.DataFrame, column: str) -> list[tuple[str, pd.DataFrame]]:
    """A line per speed group over its cells with `column` measured, by GPU count. Where the group has a GPU count
    on one node and on several, the cells across nodes get a line of their own (from the 1-GPU cell), so that no
    line runs up and down one GPU count."""
    lines = []
    for group, cells in long.groupby("speed_group", sort=False):
        cells = cells[cells[column].notna()].sort_values(["num_gpus", "nodes"])
        if cells.groupby("num_gpus")["nodes"].nunique().gt(1).any():
            across = (cells["nodes"] > 1) | (cells["num_gpus"] == 1)
            lines += [(f"{group}, one node", cells[cells["nodes"] == 1]), (f"{group}, across nodes", cells[across])]
        elif len(cells):
            lines.append((group, cells))
    return lines


def plot_throughput(long: pd.DataFrame, emulated: bool) -> Figure | None:
    """Images/s vs GPUs per speed group, each with its ideal linear line from the 1-GPU rate; None where the run
    measured one GPU count only (a largest-batch search alone): a dot per group is no scaling, the table has it."""
    if long.loc[long["images_per_sec"].notna(), "num_gpus"].nunique() < 2:
        return None
    fig = Figure(figsize=(10, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for group, cells in _lines(long, "images_per_sec"):
        (line,) = ax.plot(cells["num_gpus"], cells["images_per_sec"], marker="o", label=group)
        base = cells.loc[cells["num_gpus"] == 1, "images_per_sec"]
        if len(base) and cells.iloc[0]["baseline"] == "ok":
            ax.plot(cells["num_gpus"], base.iloc[0] * cells["num_gpus"], linestyle=":", color=line.get_color())
    ax.plot([], [], linestyle=":", color="gray", label="ideal linear scaling")
    ax.set_xticks(sorted(long["num_gpus"].unique()))
    return _finish(fig, ax, "GPUs per trial", "throughput (images/s, steady state)", "Throughput vs GPUs", emulated)


def plot_efficiency(long: pd.DataFrame, emulated: bool) -> Figure | None:
    """Efficiency vs GPUs per speed group; None where no group has one (the ideal line alone would be all of it)."""
    # A group with its 1-GPU point alone is 100% by definition: no line.
    lines = [(group, cells) for group, cells in _lines(long, "efficiency") if cells["num_gpus"].nunique() > 1]
    if not lines:
        return None
    fig, ax = _percent_vs_gpus(long, lines, "efficiency")
    ax.axhline(100, linestyle=":", color="gray", label="ideal (100%)")
    return _finish(fig, ax, "GPUs per trial", "scaling efficiency (% of linear)", "Scaling efficiency vs GPUs", emulated)


def plot_val_acc_vs_lr(figures: pd.DataFrame, emulated: bool) -> Figure | None:
    """Final validation accuracy vs lr, a line per global batch (as batch per GPU x GPUs, per framework, model
    and warm-up); None without accuracy."""
    scored = figures[figures["status"].isin(USABLE) & figures["val_acc"].notna()]
    if scored.empty:
        return None
    fig = Figure(figsize=(10.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    keys = ["framework", "model", "global_batch", "batch_per_gpu", "num_gpus", "warmup_epochs"]
    for (framework, model, _, batch, gpus, warmup), trials in scored.groupby(keys):
        trials = trials.sort_values("lr")
        warm = f", warm-up {warmup} ep" if warmup else ""
        ax.plot(trials["lr"], trials["val_acc"], marker="o",
                label=f"{framework} {model} batch {batch_label(int(batch), int(gpus))}{warm}")
    ax.set_xscale("log")
    lrs = sorted(scored["lr"].unique())
    if len(lrs) <= MAX_LR_TICKS:  # every lr of the sweep named, rather than the decades that log axes mark
        ax.xaxis.set_major_locator(FixedLocator(lrs))
        ax.xaxis.set_major_formatter(FixedFormatter([f"{lr:g}" for lr in lrs]))
        ax.xaxis.set_minor_locator(NullLocator())
    return _finish(fig, ax, "learning rate (peak, log scale)", "validation accuracy (final epoch, fraction)",
                   "Validation accuracy vs learning rate", emulated)


def plot_learning_curves(figures: pd.DataFrame, epochs: pd.DataFrame, emulated: bool) -> Figure | None:
    """val_acc per epoch, a panel per trial group and a line per trial; None without accuracy."""
    scored = epochs[epochs["val_acc"].notna()]
    groups = [g for g, trials in figures.groupby("trial_group", sort=False)
              if scored["trial_id"].isin(trials["trial_id"]).any()]
    if not groups:
        return None
    columns = min(2, len(groups))
    rows = math.ceil(len(groups) / columns)
    fig = Figure(figsize=(8.5 * columns, 3.8 * rows + 0.6), layout="constrained")
    for i, group in enumerate(groups):
        ax = fig.add_subplot(rows, columns, i + 1)
        for _, trial in figures[figures["trial_group"] == group].iterrows():
            curve = scored[scored["trial_id"] == trial["trial_id"]].sort_values("epoch")
            if not curve.empty:
                ax.plot(curve["epoch"], curve["val_acc"], marker=".",
                        label=f"{trial['num_gpus']} GPU(s), lr {trial['lr']:g} ({status_label(trial['status'])})")
        ax.set_title(group, fontsize="small")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch (from 0, as the epoch column)")
        ax.set_ylabel("validation accuracy (fraction)")
        ax.grid(alpha=0.3)
        _legend_beside(ax, "x-small")
    fig.suptitle(_title("Learning curves", emulated))
    return fig


def plot_mfu(long: pd.DataFrame, emulated: bool) -> Figure | None:
    """MFU vs GPUs per speed group: how much of the GPUs' peak the training used; None where no cell has an MFU
    (emulated devices, GPUs without a published peak)."""
    lines = _lines(long, "mfu") if "mfu" in long else []
    if not lines:
        return None
    fig, ax = _percent_vs_gpus(long, lines, "mfu")
    ax.set_ylim(bottom=0)
    return _finish(fig, ax, "GPUs per trial", "MFU (% of the GPUs' dense peak)", "Model FLOPs utilisation vs GPUs", emulated)


def _percent_vs_gpus(long: pd.DataFrame, lines: list[tuple[str, pd.DataFrame]], column: str) -> tuple[Figure, Any]:
    """A figure of a fraction `column` in percent against GPUs per trial, a line per group."""
    fig = Figure(figsize=(10, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for group, cells in lines:
        ax.plot(cells["num_gpus"], 100 * cells[column], marker="o", label=group)
    ax.set_xticks(sorted(long["num_gpus"].unique()))
    return fig, ax
