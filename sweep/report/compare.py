"""Two runs side by side: every number as B/A, and what differs in their environment."""
from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any

import pandas as pd

from sweep.report.build import Report, summary_line
from sweep.report.figures import HARDWARE, SOFTWARE
from sweep.report.plots import EMULATED_NOTE
from sweep.report.render import format_cell, render_markdown
from sweep.report.tables import Table


def ratio_of_tables(a: Table, b: Table, label_a: str = "A", label_b: str = "B") -> Table:
    """The same table with each number replaced by B/A; where either side has no number, both are named."""
    rows = list(dict.fromkeys([*a.frame.index, *b.frame.index]))
    columns = list(dict.fromkeys([*a.frame.columns, *b.frame.columns]))
    index = pd.MultiIndex.from_tuples(rows, names=a.frame.index.names) if isinstance(a.frame.index, pd.MultiIndex) \
        else pd.Index(rows, name=a.frame.index.name)
    def cell(row: Any, column: Any) -> Any:
        in_a = row in a.frame.index and column in a.frame.columns
        in_b = row in b.frame.index and column in b.frame.columns
        va = a.frame.loc[row, column] if in_a else None
        vb = b.frame.loc[row, column] if in_b else None
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

    # Built whole: cell by cell assignment into an unsorted MultiIndex makes pandas warn of its speed.
    frame = pd.DataFrame([[cell(row, column) for column in columns] for row in rows], index=index,
                         columns=columns, dtype=object)
    notes = [f"Each number is {label_b} / {label_a}."]
    return Table(f"compare_{a.name}", f"{a.title}: {label_b} / {label_a}", frame, default_unit="x",
                 notes=notes, source=f"{label_a}: {a.source}\n{label_b}: {b.source}")


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


# Where a framework's trials ran (--env, a sweep file's environments:): not in every table's source line,
# but a difference between two runs all the same.
WHERE_IT_RAN = (("interpreter", "python_executable"), ("framework environment", "environment"))


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
    differences = environment_differences(a.figures, b.figures)
    md = ["# Comparison: B / A", "", f"- A: {summary_line(a.run, a.figures)}", f"- B: {summary_line(b.run, b.figures)}"]
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

