"""python -m sweep: list | show NAME | plan NAME | [run] NAME|PATH.yaml [options] | status NAME | runs [NAME] |
rm NAME RUN_ID | report NAME|RUN_DIR | data fetch cifar10 | data make imagenet-like |
data pack imagenet | env create FRAMEWORK | env list.

Exit codes: EXIT_CODES below (`--help` lists them). The driver never imports MXNet or TensorFlow.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from sweep import limits, spec
from sweep.errors import UsageError, UserError
from sweep.gcs import LOST_EXIT
from trainables.config import FRAMEWORKS, TrialConfig, uses

COMMANDS = ("list", "show", "plan", "run", "report", "status", "runs", "rm", "data", "env")
RESULTS_HELP = "results root: a folder, or a pyarrow filesystem URI such as s3://bucket/prefix (default: results/)"
CODE_HELP = ("a folder of your models' modules (model: MODULE:FUNCTION), put on the trials' import path and shipped "
             "to every node; naming a module runs it (docs/models.md)")
SET_HELP = ("override a trial setting for every trial, written as in a sweep file (--set lr=0.1 --set epochs=2); "
            "repeatable; checked like the file, recorded in run.json")
EXIT_CODES = {
    0: "every trial completed",
    1: "some trial did not complete (its rows are written)",
    2: "a usage, sweep-file, data, results-store, cluster or feasibility error, said in one line",
    LOST_EXIT: "the Ray cluster (its GCS or head node) was lost mid-run: the run is kept, --resume continues it",
    130: "interrupted by Ctrl-C (--resume continues the run)",
    143: "stopped by SIGTERM (--resume continues the run)",
}
EPILOG = "exit codes:\n" + "\n".join(f"  {code:<4} {text}" for code, text in EXIT_CODES.items())


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, instead of usage + message
        raise UsageError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m sweep", description="Parallel sweeps of data-parallel training benchmarks on Ray Tune.",
                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    max_trials = {"type": int, "default": limits.MAX_TRIALS, "metavar": "N",
                  "help": f"refuse a sweep file whose grid gives more than N trials at a scale (default {limits.MAX_TRIALS:,})"}
    sub.add_parser("list", help="every sweep in search_spaces/ with its description")
    show = sub.add_parser("show", help="the expanded trials of a sweep")
    show.add_argument("sweep", help="sweep name or path to a .yaml file")
    show.add_argument("--scale", choices=spec.SCALES, default=None, help="default: both scales' counts, the full table")
    show.add_argument("--max-trials", **max_trials)
    show.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    show.add_argument("--code", metavar="DIR", help=CODE_HELP)
    plan = sub.add_parser("plan", help="the trials, the nodes they fit, estimated makespan and GPU-hours; runs nothing")
    plan.add_argument("sweep", help="sweep name or path to a .yaml file")
    plan.add_argument("--scale", choices=spec.SCALES, help="default: as run chooses it (smoke where GPUs are emulated)")
    plan.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    plan.add_argument("--code", metavar="DIR", help=CODE_HELP)
    plan.add_argument("--address", help="plan for this Ray cluster's nodes (default: $RAY_ADDRESS, else the embedded Ray run would start)")
    plan.add_argument("--emulate-gpus", type=int, metavar="N", help="as run's: the embedded Ray's fake GPUs")
    plan.add_argument("--emulate-gpu-memory", metavar="SIZE", help="as run's: each emulated GPU's memory (2GiB)")
    plan.add_argument("--nodes", type=int, metavar="N", help="plan for a cluster of N nodes (with --gpus-per-node; no Ray needed)")
    plan.add_argument("--gpus-per-node", type=int, metavar="G", help="GPUs of each described node")
    plan.add_argument("--cpus-per-node", type=int, metavar="C", help="CPUs of each described node (default: not limited)")
    plan.add_argument("--gpu-model", metavar="MODEL",
                      help="GPU model of the described nodes, as earlier runs name it (e.g. H100); default: this machine's")
    plan.add_argument("--max-concurrent", type=int, metavar="N", help="as run's: at most N trials at once")
    plan.add_argument("--results", default="results", help="the store whose earlier runs the estimates learn from: " + RESULTS_HELP)
    plan.add_argument("--max-trials", **max_trials)
    plan.add_argument("--json", action="store_true", help="the plan as JSON (docs/plans.md)")
    run = sub.add_parser("run", help="run a sweep (also: python -m sweep NAME)", epilog=EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("sweep", help="sweep name or path to a .yaml file")
    run.add_argument("--scale", choices=spec.SCALES, help="default: full where GPUs exist, smoke where they are emulated")
    run.add_argument("--address", help="join this Ray cluster (default: $RAY_ADDRESS, else an embedded local Ray)")
    run.add_argument("--results", default="results", help="results root: a folder, or a pyarrow filesystem URI such as s3://bucket/prefix (default: results/)")
    run.add_argument("--data-dir", default=os.environ.get("SWEEP_DATA_DIR"),
                     help="folder holding cifar-10-batches-py/ or cifar-10-python.tar.gz "
                          "(default: $SWEEP_DATA_DIR, else data/; a resume keeps its run's)")
    run.add_argument("--fetch-data", action="store_true",
                     help="download CIFAR-10 into --data-dir if it is not there, without asking "
                          "(as `data fetch cifar10` does)")
    run.add_argument("--emulate-gpus", type=int, metavar="N",
                     help="fake N GPUs in the embedded Ray, each trial training on as many CPU devices")
    run.add_argument("--emulate-gpu-memory", metavar="SIZE",
                     help="give each emulated GPU this much memory (2GiB, 512MiB): a trial that takes more per device "
                          "fails as oom; batch_per_gpu: max finds the largest batch that fits it (docs/max-batch.md)")
    run.add_argument("--max-concurrent", type=int, metavar="N", help="at most N trials at once")
    run.add_argument("--dashboard-host", default="127.0.0.1", help="where the embedded Ray's dashboard listens")
    run.add_argument("--dashboard", choices=["on", "off"], default=os.environ.get("SWEEP_DASHBOARD") or "on",
                     help="the embedded Ray's dashboard (default: $SWEEP_DASHBOARD, else on); off spares the host its "
                          "processes (their start and a share of a core while the sweep runs); a joined cluster keeps its own")
    run.add_argument("--skip-infeasible", action="store_true",
                     help="record trials that fit no node as infeasible and run the rest (default: stop, exit 2)")
    run.add_argument("--env", action="append", default=[], metavar="FRAMEWORK=PYTHON",
                     help="run a framework's trials in another environment: its interpreter (mxnet=/opt/mx/bin/python), "
                          "or a YAML mapping as in a sweep file's environments: (mxnet={image_uri: IMAGE}); "
                          "overrides the sweep file's, may be given per framework")
    run.add_argument("--max-failures", type=int, default=0, metavar="N",
                     help="retry a trial whose worker or node was lost up to N times, from its last checkpoint")
    run.add_argument("--resume", nargs="?", const="latest", metavar="RUN_ID",
                     help="continue the latest unfinished run of the sweep (or RUN_ID): ended trials are not run again")
    run.add_argument("--retry-failed", action="store_true", help="with --resume: run failed and OOM trials again")
    run.add_argument("--force", action="store_true", help="with --resume: resume although the sweep file or --set changed")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    run.add_argument("--code", metavar="DIR", help=CODE_HELP)
    run.add_argument("--max-trials", **max_trials)
    status = sub.add_parser("status", help="trials done, interrupted, failed and pending in the latest run (or --run)")
    status.add_argument("sweep", help="sweep name or path to a .yaml file")
    status.add_argument("--run", metavar="RUN_ID", help="this run instead of the latest (python -m sweep runs lists them)")
    status.add_argument("--results", default="results", help=RESULTS_HELP)
    status.add_argument("--max-trials", **max_trials)
    runs = sub.add_parser("runs", help="every run (of one sweep, or all) with its trials' states, GPU-hours, date, command")
    runs.add_argument("sweep", nargs="?", help="sweep name or path to a .yaml file (default: every sweep under --results)")
    runs.add_argument("--results", default="results", help=RESULTS_HELP)
    rm = sub.add_parser("rm", help="delete a run from the store (asks first; a running run is refused)")
    rm.add_argument("sweep", help="sweep name or path to a .yaml file")
    rm.add_argument("run_id", metavar="RUN_ID")
    rm.add_argument("--yes", action="store_true", help="do not ask (needed where the input is not a terminal)")
    rm.add_argument("--results", default="results", help=RESULTS_HELP)
    report = sub.add_parser("report", help="tables (Markdown, CSV) and plots of a run")
    report.add_argument("target", help="a run folder, or a sweep name (its latest run under --results)")
    report.add_argument("--out", help="output folder (default: RUN_DIR/report)")
    report.add_argument("--against", metavar="RUN_B", help="compare with this run: every number as B/A")
    report.add_argument("--target-acc", type=float, metavar="X", help="accuracy target (default: the sweep file's)")
    report.add_argument("--results", default="results", help="results root for a sweep name: a folder or a filesystem URI (default: results/)")
    data = sub.add_parser("data", help="data sets: data fetch cifar10, data make imagenet-like, data pack imagenet")
    data_sub = data.add_subparsers(dest="data_command", required=True, parser_class=_Parser)
    fetch = data_sub.add_parser("fetch", help="download CIFAR-10, verify it and unpack it where `run` reads it")
    fetch.add_argument("dataset", choices=["cifar10"])
    fetch.add_argument("--data-dir", default=os.environ.get("SWEEP_DATA_DIR") or "data",
                       help="where cifar-10-batches-py/ goes (default: $SWEEP_DATA_DIR, else data/, as for run)")
    fetch.add_argument("--url", help="a mirror of cifar-10-python.tar.gz (default: $SWEEP_CIFAR10_URL, "
                                     "else https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz)")
    fetch.add_argument("--checksum", metavar="ALGO:HEX",
                       help="md5:HEX or sha256:HEX of another archive (default: $SWEEP_CIFAR10_CHECKSUM, "
                            "else the official archive's MD5 and SHA-256)")
    make = data_sub.add_parser("make", help="generate a small image set in ImageNet's layout (data: imagenet) here")
    make.add_argument("dataset", choices=["imagenet-like"])
    make.add_argument("--classes", type=int, required=True, metavar="N", help="class folders (2 to 1000)")
    make.add_argument("--per-class", type=int, required=True, metavar="M", help="training images per class")
    make.add_argument("--val-per-class", type=int, metavar="K", help="validation images per class (default: M / 5, at least 1)")
    make.add_argument("--seed", type=int, default=0, help="the same seed makes the same files (default 0)")
    make.add_argument("--data-dir", default=os.environ.get("SWEEP_DATA_DIR") or "data",
                      help="where imagenet/ goes (default: $SWEEP_DATA_DIR, else data/, as for run)")
    pack = data_sub.add_parser("pack", help="write an image folder's packed form once, beside it: TFRecord shards "
                                            "(TensorFlow) or RecordIO (MXNet), checked and put in place whole")
    pack.add_argument("dataset", choices=["imagenet"])
    pack.add_argument("--format", required=True, choices=["tfrecord", "recordio"],
                      help="tfrecord: tf_cnn_benchmarks' shards, read by tensorflow trials; recordio: im2rec's .rec/.idx, "
                           "read by mxnet trials (docs/data.md)")
    pack.add_argument("--data-dir", default=os.environ.get("SWEEP_DATA_DIR") or "data",
                      help="the folder holding imagenet/ (default: $SWEEP_DATA_DIR, else data/, as for run)")
    pack.add_argument("--env", metavar="FRAMEWORK=PYTHON",
                      help="pack in this interpreter of the format's framework, as run's --env names one (default: the "
                           "environment env create made, else this Python)")
    env = sub.add_parser("env", help="environments of their own for frameworks: env create mxnet [--gpu], env create keras, "
                                     "env list")
    env_sub = env.add_subparsers(dest="env_command", required=True, parser_class=_Parser)
    create = env_sub.add_parser("create", help="a venv of this Python for the framework (MXNet with numpy < 2; Keras 3 "
                                               "with JAX and numpy 2, for keras_backend jax), used by its trials from "
                                               "then on; again: changes nothing")
    create.add_argument("framework", choices=list(FRAMEWORKS))
    create.add_argument("--gpu", action="store_true", help="the framework's CUDA build (mxnet-cu117)")
    env_sub.add_parser("list", help="each framework's (and Keras backend's) environment and its check (version, CUDA, "
                                    "OK or the reason)")
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    # `python -m sweep NAME` is `python -m sweep run NAME`.
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        argv = ["run", *argv]
    args = build_parser().parse_args(argv)
    for opt, (least, most) in limits.OPTION_RANGE.items():
        value = getattr(args, opt, None)
        if value is not None and not least <= value <= most:
            raise UsageError(f"--{opt.replace('_', '-')}: expected an integer >= {least} and <= {most}, got {value}")
    if getattr(args, "dashboard", "on") not in ("on", "off"):  # argparse checks a choice given, not its default
        raise UsageError(f"$SWEEP_DASHBOARD: expected on or off, got {limits.quote(args.dashboard)}")
    if getattr(args, "resume", None) not in (None, "latest") and limits.name_problem(args.resume):
        raise UsageError(f"--resume: expected a run id (as status prints it), got {limits.quote(args.resume)}")
    return args


def cmd_list(args: argparse.Namespace) -> int:
    sweeps = spec.list_sweeps()
    width = max((len(s.name) for s in sweeps), default=0)
    for s in sweeps:
        print(f"{s.name:<{width}}  {s.description}")
    return 0


SHOWN = {"framework": "framework", "model": "model", "num_gpus": "gpus", "batch_per_gpu": "batch/gpu",
         "global_batch": "global", "lr": "lr", "lr_rule": "lr_rule", "epochs": "epochs", "data": "data"}


def trial_table(trials: list[TrialConfig]) -> list[str]:
    """One line per trial: the usual columns, then every other setting the sweep varies."""
    cols = [*SHOWN, *(axis for axis in spec.varying_axes(trials) if axis not in SHOWN)]
    rows = [[t.trial_id] + [_fmt(getattr(t, c)) if uses(t.framework, c) else "-" for c in cols] for t in trials]
    head = ["trial_id", *(SHOWN.get(c, c) for c in cols)]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(head)] + [line(r) for r in rows]


def _fmt(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def cmd_show(args: argparse.Namespace) -> int:
    from sweep import environments, overrides

    sweep = overrides.apply(spec.load(args.sweep, args.max_trials), overrides.parse(args.set))
    code = environments.code_folder(args.code)
    scales = [args.scale] if args.scale else list(spec.SCALES)
    shown = {scale: overrides.trials(sweep, scale) for scale in scales}  # every scale checked before anything is printed
    print(f"{sweep.name}: {sweep.description}")
    if sweep.study:
        print(f"reproduces: {sweep.study}")
    if sweep.overrides:
        print(f"with {overrides.options(sweep.overrides)}")
    for line in environments.model_sources([t.model for trials in shown.values() for t in trials], code):
        print(line)
    for scale, trials in shown.items():
        print(f"\nscale {scale}: {len(trials)} trial{'' if len(trials) == 1 else 's'}")
        for line in trial_table(trials) if trials else []:
            print("  " + line)
        for search in sweep.searches(scale):  # batch_per_gpu: max (docs/max-batch.md)
            first = search.probe(search.lo)
            print(f"  largest-batch search {search.config_id}: {first.framework} {first.model} gpus={first.num_gpus}"
                  f" precision={first.precision} image_size={first.image_size or 'default'}: batch {search.lo} to "
                  f"{search.hi}, step {search.step}, at most {search.most_probes} probes"
                  + (f"; then trains {search.values['epochs']} epochs at the boundary x {search.margin:g}"
                     if search.values["epochs"] else "; the search alone (epochs 0)"))
    return 0


def main(argv: list[str] | None = None) -> int:
    from trainables.data import DataError

    # gRPC (in Ray's core worker and in grpcio) logs some events at INFO whatever its tracers say: a GOAWAY from a GCS
    # going away printed "I1127 ... chttp2_transport.cc:1403] ... Got goaway" on stderr beside the driver's one line
    # for a lost cluster. ERROR is its default level in name; set, it holds for those too. A value the user set stays.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse(argv)
        if args.command == "list":
            return cmd_list(args)
        if args.command == "show":
            return cmd_show(args)
        if args.command == "data" and args.data_command == "make":  # `data make imagenet-like`
            from sweep.imagenet_like import make_imagenet_like
            val = args.val_per_class if args.val_per_class is not None else max(1, args.per_class // 5)
            make_imagenet_like(args.data_dir, args.classes, args.per_class, val, args.seed)
            return 0
        if args.command == "data" and args.data_command == "pack":  # `data pack imagenet --format ...`
            from sweep.data_pack import cmd_pack
            return cmd_pack(args.data_dir, args.format, args.env)
        if args.command == "data":  # `data fetch cifar10`, the one data set there is
            from sweep.datasets import fetch_cifar10, source
            fetch_cifar10(args.data_dir, source(args.url, args.checksum))
            return 0
        if args.command == "status":
            from sweep.runs import cmd_status
            return cmd_status(args)
        if args.command == "plan":
            from sweep.plan import cmd_plan
            return cmd_plan(args)
        if args.command in ("runs", "rm"):
            from sweep import manage
            return manage.cmd_runs(args) if args.command == "runs" else manage.cmd_rm(args)
        if args.command == "env":
            from sweep.venvs import cmd_env
            return cmd_env(args)
        if args.command == "report":
            from sweep.report import cmd_report  # pandas and matplotlib load only for a report
            return cmd_report(args)
        from sweep.launch import cmd_run
        return cmd_run(args, argv)
    except (UserError, DataError) as e:
        print(f"error: {limits.one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head and the like
        sys.stderr.close()
        return 0
