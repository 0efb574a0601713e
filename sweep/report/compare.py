"""Two runs side by side: every number as B/A, whether each is within the runs' noise, and what differs in
their settings and their environment."""
from __future__ import annotations

import dataclasses
import math
import numbers
from pathlib import Path
from typing import Any

import pandas as pd

from sweep.report.build import Report, summary_line
from sweep.report.figures import HARDWARE, SOFTWARE
from sweep.report.load import Run
from sweep.report.plots import EMULATED_NOTE
from sweep.report.render import format_cell, render_markdown
from sweep.report.tables import Table
from trainables.config import TrialConfig

# A ratio is within noise where each side's 95% interval (its mean +- Z standard errors) overlaps the other's.
Z = 1.96
WITHIN, BEYOND, NO_STDERR = "within noise", "beyond noise", "noise unknown"


def ratio_of_tables(a: Table, b: Table, label_a: str = "A", label_b: str = "B") -> Table:
    """The same table with each number replaced by B/A; where either side has no number, both are named."""
    rows = list(dict.fromkeys([*a.frame.index, *b.frame.index]))
    columns = list(dict.fromkeys([*a.frame.columns, *b.frame.columns]))
    index = pd.MultiIndex.from_tuples(rows, names=a.frame.index.names) if isinstance(a.frame.index, pd.MultiIndex) \
        else pd.Index(rows, name=a.frame.index.name)
    def cell(row: Any, column: Any) -> Any:
        (in_a, va), (in_b, vb) = _at(a, row, column), _at(b, row, column)
        if not in_a or not in_b:
            return f"only in {label_a if in_a else label_b}"
        if _is_number(va) and _is_number(vb) and va != 0:
            return vb / va
        if _is_missing(va) and _is_missing(vb):
            return math.nan
        if _is_number(va) or _is_number(vb) or va != vb:
            unit = a.unit(row, column)
            return f"{label_a}: {format_cell(va, unit)} / {label_b}: {format_cell(vb, unit)}"
        return va

    def mark(row: Any, column: Any) -> str:  # a verdict for each ratio cell() computes
        (_, va), (_, vb) = _at(a, row, column), _at(b, row, column)
        if not (_is_number(va) and _is_number(vb) and va != 0):
            return ""
        return noise_verdict(va, _stderr(a, row, column), vb, _stderr(b, row, column))

    # Built whole: cell by cell assignment into an unsorted MultiIndex makes pandas warn of its speed.
    frame = pd.DataFrame([[cell(row, column) for column in columns] for row in rows], index=index,
                         columns=columns, dtype=object)
    notes = [f"Each number is {label_b} / {label_a}."]
    marks = None
    if a.stderr is not None and b.stderr is not None:
        marks = pd.DataFrame([[mark(row, column) for column in columns] for row in rows], index=index,
                             columns=columns, dtype=object)
        notes.append(f"{WITHIN}: the two runs' 95% intervals (each figure +- {Z} standard errors, from its trials' "
                     f"timed steps) overlap, so the ratio says no more than their noise; {BEYOND}: they do not; "
                     f"{NO_STDERR}: a side has no standard error (fewer than two timed steps).")
    return Table(f"compare_{a.name}", f"{a.title}: {label_b} / {label_a}", frame, default_unit="x",
                 notes=notes, source=f"{label_a}: {a.source}\n{label_b}: {b.source}", marks=marks)


def noise_verdict(a: float, stderr_a: float, b: float, stderr_b: float) -> str:
    """Whether b / a is within the two figures' noise: their 95% intervals overlap."""
    if math.isnan(stderr_a) or math.isnan(stderr_b):
        return NO_STDERR
    return WITHIN if abs(b - a) <= Z * (stderr_a + stderr_b) else BEYOND


def _at(table: Table, row: Any, column: Any) -> tuple[bool, Any]:
    """Whether the table has that cell, and its value (None where it has not)."""
    if row in table.frame.index and column in table.frame.columns:
        return True, table.frame.loc[row, column]
    return False, None


def _stderr(table: Table, row: Any, column: Any) -> float:
    value = table.stderr.loc[row, column] if table.stderr is not None else math.nan
    return float(value) if _is_number(value) else math.nan


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


# Where a framework's trials ran (--env, a sweep file's environments:): not in every table's source line,
# but a difference between two runs all the same.
WHERE_IT_RAN = (("interpreter", "python_executable"), ("framework environment", "environment"))


def setting_differences(a: Run, b: Run) -> list[str]:
    """What differs in what the two runs were asked to do: run.json's scale, `--set` overrides, data folder
    and emulated memory, the sweep file, and each trial setting's values in the rows."""
    lines = []
    for name, va, vb in (("sweep", a.meta.sweep, b.meta.sweep), ("scale", a.meta.scale, b.meta.scale),
                         ("--set", _overrides(a), _overrides(b)), ("data folder", a.meta.data_dir, b.meta.data_dir),
                         ("--emulate-gpu-memory", a.meta.memory_capacity_mib, b.meta.memory_capacity_mib)):
        if va != vb:
            lines.append(f"{name} (run.json): A {va or 'none'} -> B {vb or 'none'}")
    if a.meta.spec_sha256 != b.meta.spec_sha256:
        lines.append("sweep file (sweep.yaml): its text differs")
    for column in [f.name for f in dataclasses.fields(TrialConfig)] + ["data_kind"]:
        if column in a.trials and column in b.trials:
            va, vb = _values(a.trials[column]), _values(b.trials[column])
            if va != vb:
                lines.append(f"{column} (trial rows): A {', '.join(va) or 'none'} -> B {', '.join(vb) or 'none'}")
    return lines


def _overrides(run: Run) -> str:
    return " ".join(f"{key}={value}" for key, value in sorted(run.meta.overrides.items()))


def _values(column: pd.Series) -> list[str]:
    """A column's distinct values as text, a whole number as one (a column with a null reads as floats)."""
    def text(v: Any) -> str:
        return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)

    def order(v: str) -> tuple[float, str]:  # numbers by value (8 before 16), then words
        try:
            return float(v), ""
        except ValueError:
            return math.inf, v
    return sorted({text(v) for v in column if not _is_missing(v)}, key=order)


def environment_differences(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """The hardware and software columns whose values differ between two runs' rows."""
    lines = []
    for name, column in (*HARDWARE, *SOFTWARE, *WHERE_IT_RAN):
        if column not in a or column not in b:
            continue
        va, vb = sorted(map(str, a[column].dropna().unique())), sorted(map(str, b[column].dropna().unique()))
        if va != vb:
            lines.append(f"{name} ({column}): A {', '.join(va) or 'none'} -> B {', '.join(vb) or 'none'}")
    return lines



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
    noise = tables[0].marks.where(tables[0].marks != "", None)  # the verdict of each images/s, speedup and efficiency ratio
    noise.to_csv(out / "compare_throughput_noise.csv")
    written.append(out / "compare_throughput_noise.csv")
    md = ["# Comparison: B / A", "", f"- A: {summary_line(a.run, a.figures)}", f"- B: {summary_line(b.run, b.figures)}"]
    if a.run.emulated or b.run.emulated:
        md.append(f"- **{EMULATED_NOTE}**")
    for heading, lines in differences(a, b):
        md += ["", f"## {heading}", ""] + [f"- {line}" for line in lines]
    md += ["", render_markdown(tables[0], 2), render_markdown(tables[1], 2)]
    if len(tables) > 2:
        md.append(render_markdown(tables[2], 2))
    md += ["## Per trial group", ""] + [render_markdown(t) for t in per_run]
    if only:
        md.append("Trial groups in one run only: " + "; ".join(only) + "\n")
    (out / "compare.md").write_text("\n".join(md))
    return [out / "compare.md", *written], tables[0]


def differences(a: Report, b: Report) -> list[tuple[str, list[str]]]:
    """What differs between the runs, under a heading each: their settings, then their environment."""
    settings = setting_differences(a.run, b.run) or ["nothing (run.json and the rows' trial settings equal)"]
    environment = environment_differences(a.figures, b.figures) or [
        "nothing recorded differs (hardware and software columns equal)"]
    return [("What differs in the settings", settings), ("What differs in the environment", environment)]
