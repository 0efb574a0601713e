"""The report of a run: every table and plot built, written as report.md, CSVs and PNGs; `report`."""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from sweep import location
from sweep.errors import UsageError
from sweep.location import RemotePath
from sweep.report import seeds
from sweep.report.build import Report, accuracy_note, build_report, summary_line
from sweep.report.compare import differences, write_comparison
from sweep.report.figures import USABLE, status_label
from sweep.report.load import find_run, load_run
from sweep.report.plots import EMULATED_NOTE
from sweep.report.render import render_markdown, render_text
from sweep.runs import results_location

NO_ACCURACY = "no validation accuracy in this run (synthetic data, or no trial completed)"
NOT_DRAWN = {"throughput_vs_gpus": "one GPU count measured in this run: no scaling to draw",  # why a plot is None
             "efficiency_vs_gpus": "no speed group measured at 1 GPU and more: no scaling to draw"}


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
    if report.max_batch:
        report.max_batch.frame.to_csv(out / "max_batch.csv")
        written.append(out / "max_batch.csv")
    per_run = pd.concat({t.title: t.frame for t in report.per_run}, names=["trial group", "measure"])
    per_run.to_csv(out / "per_run.csv")
    written.append(out / "per_run.csv")
    if report.frameworks:
        sides = pd.concat({t.title: t.frame for t in report.frameworks}, names=["trial group", "measure"])
        sides.to_csv(out / "frameworks.csv")
        written.append(out / "frameworks.csv")
    for name, fig in report.plots.items():
        if fig is not None:
            fig.savefig(out / f"{name}.png", dpi=100, bbox_inches="tight")  # legends beside the axes included
            written.append(out / f"{name}.png")

    md = [f"# Report: {run.label}", "",
          f"- {summary_line(run, report.figures)}",
          f"- Run folder: {run.dir}",
          f"- Command: `{run.meta.command}`; scale {run.meta.scale}"]
    md += [f"- Resumed with: `{session.command}`" for session in run.meta.sessions[1:]]
    if run.sweep_problem:
        md.append(f"- Sweep file: {run.sweep_problem}")
    if run.emulated:
        md.append(f"- **{EMULATED_NOTE}**: GPU counts are emulated on CPU devices, to test function only.")
    if note := accuracy_note(report.figures):
        md.append(f"- {note}")
    if report.max_batch:
        md += ["", "## Largest batch that fits", "", render_markdown(report.max_batch)]
    md += ["", "## Throughput", "", render_markdown(report.throughput)]
    md += [render_markdown(t) for t in report.ratios]
    md += [f"## Per trial group ({seeds.as_in('000')})", ""] + [render_markdown(t) for t in report.per_run]
    if report.frameworks:
        md += ["## Frameworks side by side", ""] + [render_markdown(t) for t in report.frameworks]
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
        md.append(f"![{name}]({name}.png)\n" if fig is not None else f"- {name}: not drawn, {NOT_DRAWN.get(name, NO_ACCURACY)}.\n")
    failed = report.figures[~report.figures["status"].isin(USABLE)]
    if not failed.empty:
        md += ["## Trials that did not complete", ""]
        for _, t in failed.iterrows():
            said = [str(t[k]) for k in ("error_type", "error") if pd.notna(t.get(k))]  # a diverged trial has no type
            why = f": {': '.join(said)}" if said else ""
            md.append(f"- {t['trial_id']} ({t['speed_group']}, {t['num_gpus']} GPUs, lr {t['lr']:g}): "
                      f"{status_label(t['status'])}{why}")
        md.append("")
    (out / "report.md").write_text("\n".join(md))
    return [out / "report.md", *written]


def cmd_report(args: argparse.Namespace) -> int:
    """`python -m sweep report`: write the report, print its main table; bad input is a StoreError."""
    if args.target_acc is not None and not 0 < args.target_acc <= 1:
        raise UsageError(f"--target-acc: expected a number in (0, 1], got {args.target_acc:g}")
    results = results_location(args.results)
    run = load_run(find_run(args.target, results))
    # A report is a local set of files: one of a run on remote storage goes under ./report/SWEEP/RUN_ID.
    home = Path("report") / run.dir.parent.name / run.dir.name if isinstance(run.dir, RemotePath) else run.dir / "report"
    report = build_report(run, args.target_acc)
    other = build_report(load_run(find_run(args.against, results, run.meta.sweep)), args.target_acc) if args.against else None
    if other and other.run.meta.sweep != run.meta.sweep:
        print(f"warning: comparing runs of two sweeps ({run.meta.sweep} and {other.run.meta.sweep}): "
              "only the trial groups both have are compared")
    out = Path(args.out) if args.out else home / f"vs-{other.run.run_id}" if other else home
    try:
        location.check(out, write=True)
    except OSError as e:
        raise UsageError(f"{out}: cannot write the report there ({location.reason(e)}; give another with --out)") from None
    if other:
        files, main_table = write_comparison(report, other, out)
        print(f"A: {summary_line(run, report.figures)}\nB: {summary_line(other.run, other.figures)}")
        for heading, lines in differences(report, other):
            print(f"{heading}:", *(f"  {line}" for line in lines), sep="\n")
    else:
        files, main_table = write_report(report, out), report.throughput
        print(summary_line(run, report.figures))
    if run.emulated:
        print(EMULATED_NOTE)
    for side, built in [("A: ", report), ("B: ", other)] if other else [("", report)]:
        if note := accuracy_note(built.figures):
            print(side + note)
    # The main table, then the tables a run's own axes call for: precision, synthetic vs real data, the largest batch.
    for table in [main_table, *([report.precision, report.synth_vs_real, report.max_batch] if not other else [])]:
        if table is not None:
            print()
            print(render_text(table))
    print()
    print(f"wrote {len(files)} files to {out}: " + ", ".join(p.name for p in files))
    return 0
