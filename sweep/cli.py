"""python -m sweep: list | show NAME | [run] NAME|PATH.yaml [options].

Exit codes: 0 every trial completed; 1 some trials failed (their rows are written); 2 a usage, spec,
data or feasibility error, reported in one line. The driver never imports MXNet or TensorFlow.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from sweep import spec
from sweep.spec import SpecError

COMMANDS = ("list", "show", "run")
PROJECT_DIR = Path(__file__).resolve().parent.parent


class UsageError(Exception):
    """Bad input the user can fix; the message is the one line they see."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, instead of usage + message
        raise UsageError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m sweep", description="Parallel sweeps of data-parallel training benchmarks on Ray Tune.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("list", help="every sweep in search_spaces/ with its description")
    show = sub.add_parser("show", help="the expanded trials of a sweep")
    show.add_argument("sweep", help="sweep name or path to a .yaml file")
    show.add_argument("--scale", choices=spec.SCALES, default=None, help="default: both scales' counts, the full table")
    run = sub.add_parser("run", help="run a sweep (also: python -m sweep NAME)")
    run.add_argument("sweep", help="sweep name or path to a .yaml file")
    run.add_argument("--scale", choices=spec.SCALES, help="default: full where GPUs exist, smoke where they are emulated")
    run.add_argument("--address", help="join this Ray cluster (default: $RAY_ADDRESS, else an embedded local Ray)")
    run.add_argument("--results", default="results", help="results root (default: results/)")
    run.add_argument("--data-dir", default=os.environ.get("SWEEP_DATA_DIR", "data"),
                     help="folder holding cifar-10-batches-py/ or cifar-10-python.tar.gz (default: $SWEEP_DATA_DIR or data/)")
    run.add_argument("--emulate-gpus", type=int, metavar="N",
                     help="fake N GPUs in the embedded Ray, each trial training on as many CPU devices")
    run.add_argument("--max-concurrent", type=int, metavar="N", help="at most N trials at once")
    run.add_argument("--dashboard-host", default="127.0.0.1", help="where the embedded Ray's dashboard listens")
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    # `python -m sweep NAME` is `python -m sweep run NAME`.
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        argv = ["run", *argv]
    args = build_parser().parse_args(argv)
    for opt in ("emulate_gpus", "max_concurrent"):
        value = getattr(args, opt, None)
        if value is not None and value < 1:
            raise UsageError(f"--{opt.replace('_', '-')}: expected an integer >= 1, got {value}")
    return args


def cmd_list(args: argparse.Namespace) -> int:
    sweeps = spec.list_sweeps()
    width = max((len(s.name) for s in sweeps), default=0)
    for s in sweeps:
        print(f"{s.name:<{width}}  {s.description}")
    return 0


def trial_table(trials: list[spec.Trial]) -> list[str]:
    cols = ("framework", "model", "num_gpus", "batch_per_gpu", "global_batch", "lr", "lr_rule", "epochs", "data")
    rows = [[t.trial_id] + [_fmt(t.config.get(c, t.config["batch_per_gpu"] * t.config["num_gpus"])) for c in cols]
            for t in trials]
    head = ["trial_id", "framework", "model", "gpus", "batch/gpu", "global", "lr", "lr_rule", "epochs", "data"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(head)] + [line(r) for r in rows]


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def cmd_show(args: argparse.Namespace) -> int:
    sweep = spec.load(args.sweep)
    print(f"{sweep.name}: {sweep.description}")
    if sweep.seed_ref:
        print(f"reproduces: {sweep.seed_ref}")
    scales = [args.scale] if args.scale else list(spec.SCALES)
    for scale in scales:
        trials = sweep.trials(scale)
        print(f"\nscale {scale}: {len(trials)} trials")
        for line in trial_table(trials):
            print("  " + line)
    return 0


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(PROJECT_DIR), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(PROJECT_DIR), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() + ("-dirty" if dirty else "")) if out.returncode == 0 else None


def run_base() -> dict[str, Any]:
    """Columns every row of a run shares: the engine that wrote it."""
    from importlib.metadata import version

    import ray

    return {"engine_version": version("sweep"), "git_commit": _git_commit(), "ray_version": ray.__version__}


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from sweep import cluster as ray_cluster
    from sweep import runner, store
    from trainables import data, environment

    sweep = spec.load(args.sweep)
    address = args.address or os.environ.get("RAY_ADDRESS")
    if address and args.emulate_gpus:
        raise UsageError("--emulate-gpus applies to the embedded Ray only; a joined cluster brings its own GPUs")
    real_gpus = 0 if address else environment.real_gpu_count()
    emulated: bool | None = None if address else (bool(args.emulate_gpus) or real_gpus == 0)
    scale = args.scale or ("smoke" if emulated else "full")
    trials = sweep.trials(scale)
    num_gpus = real_gpus
    if emulated:
        num_gpus = args.emulate_gpus or 2 * max(t.config["num_gpus"] for t in trials)
        why = "GPU emulation asked for" if args.emulate_gpus else "no GPU found"
        print(f"{why}: emulating {num_gpus} GPUs in Ray, each trial on as many CPU devices "
              f"(results are marked cpu-emulated: not a speed result); scale {scale}")

    data_dir: str | None = str(Path(args.data_dir).resolve())
    if any(t.config["data"] == "cifar10" for t in trials):
        if data.has_cifar10(data_dir):
            data.load_cifar10(data_dir)  # checked once here, so a bad file fails the run, not every trial
        elif scale == "smoke":
            print(f"no CIFAR-10 under {data_dir}: the smoke scale trains on synthetic data (accuracy columns null)")
            data_dir = None
        else:
            raise UsageError(f"{data_dir}: no cifar-10-batches-py/ or cifar-10-python.tar.gz "
                             "(give --data-dir, or --scale smoke to run on synthetic data)")

    cluster = ray_cluster.start(address, num_gpus, args.dashboard_host)
    try:
        if cluster.dashboard_url:
            print(f"Ray dashboard: {cluster.dashboard_url}")
        requests = {t.trial_id: (t.config["cpus_per_trial"], t.config["num_gpus"]) for t in trials}
        bad = ray_cluster.infeasible(requests, cluster.nodes)
        if bad:
            first = next(iter(bad))
            raise UsageError(f"{len(bad)} of {len(trials)} trials fit no node of the cluster, e.g. {first}: {bad[first]}")
        plan = runner.RunPlan(
            sweep=sweep, scale=scale, trials=trials, results_root=Path(args.results).resolve(), data_dir=data_dir,
            emulated=emulated, max_concurrent=args.max_concurrent,
            command=shlex.join(["python", "-m", "sweep", *argv]), run_id=store.new_run_id())
        print(f"sweep {sweep.name}: {len(trials)} trials at scale {scale}, run {plan.run_id}")
        finished = runner.run(plan, {**run_base(), "sweep": sweep.name})
    finally:
        ray_cluster.stop(cluster)
    failed = {tid: s for tid, s in finished.items() if s != "completed"}
    missing = len(trials) - len(finished)
    print(f"done: {len(finished) - len(failed)} completed, {len(failed)} not completed"
          + (f", {missing} not run" if missing else "") + f"; results in {plan.results_root / sweep.name / plan.run_id}")
    return 1 if failed or missing else 0


def main(argv: list[str] | None = None) -> int:
    from trainables.data import DataError
    from sweep.store import StoreError

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse(argv)
        if args.command == "list":
            return cmd_list(args)
        if args.command == "show":
            return cmd_show(args)
        return cmd_run(args, argv)
    except (UsageError, SpecError, DataError, StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head and the like
        sys.stderr.close()
        return 0
