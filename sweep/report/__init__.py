"""Reports on a run of the store: the studies' tables (Markdown and CSV), PNG plots, and run-vs-run ratios.

  python -m sweep report NAME|RUN_DIR|RUN_ID [--out DIR] [--against RUN_B] [--target-acc X] [--results DIR]

Every table and plot is a function of the store's DataFrames, so a notebook can use them one by one:

  run = load_run(Path("results/NAME/RUN_ID"))
  figures = trial_figures(run.trials, run.epochs)     # one row per trial, the figures the tables use
  long = scaling(figures)                             # images/s, speedup, efficiency per group and GPUs
  print(render_text(throughput_table(long, provenance(figures, run.label))))

The modules, in the order data flows through them: load (a run's rows and its sweep file), figures
(one row per trial, the groups), tables (the studies' tables), plots, render (Markdown and text), build
(a whole Report), compare (two runs as B/A), write (the files, and the `report` command).
The tables follow the layouts of the studies (docs/studies.md, seeds.py): throughput, speedup and efficiency
per GPU count (as in study 004, with its ratio tables; precision, and synthetic vs real data, beside it), one table per trial group
with a column per GPU count (as in study 000), one row per trial of an LR grid (as in study 001), and time
to accuracy (DAWNBench's rule, as in study 003).
No module here imports a training framework.
"""
from sweep.report.build import Report, build_report, summary_line
from sweep.report.compare import environment_differences, ratio_of_tables, write_comparison
from sweep.report.figures import (SPEED_KEY, USABLE, batch_label, group_labels, provenance, scaling,
                                  status_label, trial_figures)
from sweep.report.load import Run, find_run, load_run
from sweep.report.plots import (EMULATED_NOTE, plot_efficiency, plot_learning_curves, plot_throughput,
                                plot_val_acc_vs_lr)
from sweep.report.render import format_cell, render_markdown, render_text
from sweep.report.tables import (NO_TRIAL, Table, lr_scaling_table, per_run_tables, precision_tables, ratio_tables,
                                 synth_vs_real_tables, throughput_table, time_to_accuracy, time_to_accuracy_table)
from sweep.report.write import cmd_report, write_report

__all__ = ["EMULATED_NOTE", "NO_TRIAL", "Report", "Run", "SPEED_KEY", "Table", "USABLE", "batch_label",
           "build_report", "cmd_report", "environment_differences", "find_run", "format_cell", "group_labels",
           "load_run", "lr_scaling_table", "per_run_tables", "plot_efficiency", "plot_learning_curves",
           "plot_throughput", "plot_val_acc_vs_lr", "precision_tables", "provenance", "ratio_of_tables", "ratio_tables",
           "render_markdown", "render_text", "scaling", "status_label", "summary_line", "synth_vs_real_tables", "throughput_table",
           "time_to_accuracy", "time_to_accuracy_table", "trial_figures", "write_comparison", "write_report"]
