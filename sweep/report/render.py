"""Tables as Markdown and as aligned text, numbers formatted by their unit."""
from __future__ import annotations

import math
import numbers
from typing import Any

from sweep.report.tables import Table

UNIT_FORMATS = {  # unit -> the text of a number in it
    "img/s": lambda v: f"{v:.1f}" if v >= 10 else f"{v:.3g}",  # a slow trial is 0.042, not 0.0
    "x": lambda v: f"{v:.2f}x",
    "%": lambda v: f"{100 * v:.1f}%",
    "s": lambda v: f"{v:.2f}" if v >= 1 else f"{v:.3f}",
    "acc": lambda v: f"{v:.3f}",
    "MiB": lambda v: f"{v:.0f}",
    "int": lambda v: f"{int(v)}",
    "h": lambda v: f"{v:.3g}",
}


def format_cell(value: Any, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if unit in UNIT_FORMATS:
            return UNIT_FORMATS[unit](value)
        return str(value) if isinstance(value, numbers.Integral) else f"{value:g}"
    return str(value)


def _cells(table: Table) -> tuple[list[str], list[list[str]]]:
    """Header and body as text; leading index values equal to the row above are blanked, as in the studies."""
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
        body.append(shown + [_with_mark(format_cell(v, table.unit(row, c)), table, row, c) for c, v in values.items()])
    return header, body


def _with_mark(text: str, table: Table, row: Any, column: Any) -> str:
    """The cell's text and its mark, where the table marks it (a comparison's "within noise")."""
    mark = table.marks.loc[row, column] if table.marks is not None else ""
    return f"{text} {mark}" if mark else text


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
    """Aligned plain text; long column labels are stacked a word per line, as the studies' headers are."""
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

