"""Engine vs raw loop: what running a trial through the sweep engine (Ray Tune) costs in images/s.

For each configuration (framework x GPU count x data kind, same model, batch and threads on both
sides) it runs, alternately, several times:

  raw     python -m trainables.local CONFIG_JSON [--data-dir DIR]
          trainables.loop.run_trial in one plain process, no Ray; OMP_NUM_THREADS = cpus_per_trial
  engine  python -m sweep ONE_TRIAL.yaml --results DIR --data-dir DIR --scale full
          the real CLI: embedded Ray, Tune, a placement group, the trial writing its Parquet rows

  raw     (pytorch) torchrun --nproc_per_node N benchmarks/torch_ddp_peer.py ...
          a PyTorch trial on N devices runs as N processes under DDP, which our loop does only inside
          the engine's worker group: PyTorch's raw side is the plain DDP program instead (same model,
          batch, threads per process and timed steps; synthetic data only)

With --beside-ray each round also runs the raw side once more beside an idle embedded Ray, started as a
sweep starts one (its dashboard, agents and monitors; _common.idle_ray): the share of the gap that is Ray's
processes taking the cores from the ranks, not the engine's loop or its trial (see benchmarks/README.md,
"PyTorch on 2 devices").

It compares steady-state images/s (the loop's own step timer: warm-up steps dropped, mean of
per-step rates; per trial the step-weighted mean over epochs, as the store's summary row has it).
Raw figures come from the loop's JSON lines, engine figures from the Parquet the engine wrote
(RUN_DIR/trials, checked against RUN_DIR/epochs). The order of the two sides flips every round,
so a drift in machine load hits both. Reported: medians over rounds, spread (max-min over median)
and ratio = median(engine) / median(raw); per framework the geometric mean of its configurations'
ratios. Goal: >= 0.98 for both frameworks.

"Real" data is CIFAR-10 in its on-disk format (cifar-10-batches-py/), written to a temp folder by
tests/cifar_files.py's writer (no download), so the real input pipeline (unpickle, augment,
prefetch thread, host->device copy) runs. Without GPUs, GPU counts are emulated CPU devices on both
sides (device_kind cpu-emulated): a test of the engine's overhead, not of GPU speed.

Run (from the repository root):

  .venv/bin/python benchmarks/engine_vs_raw.py          # 1 device, synthetic, both frameworks, 3 rounds: ~4-5 min
  .venv/bin/python benchmarks/engine_vs_raw.py --configs 1:synthetic,2:synthetic,1:real,2:real   # ~15-20 min
  .venv/bin/python benchmarks/engine_vs_raw.py --frameworks mxnet --model resnet20_cifar
  .venv/bin/python benchmarks/engine_vs_raw.py --frameworks pytorch --configs 1:synthetic,2:synthetic
  .venv/bin/python benchmarks/engine_vs_raw.py --frameworks pytorch --configs 2:synthetic --beside-ray --repeats 6

Each engine run starts and stops its own embedded Ray (~15 s of the wall time on 2 cores, outside
the timed steps), which is why the default matrix is small; --configs gives the full one.

Other processes loading the CPU while it runs widen the spread: look at the spread column, and
repeat (--repeats) when it is wide.
"""
from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from pathlib import Path

from _common import (PYTHON, ROOT, Run, geomean, idle_ray, load_average, machine, median, run_engine, run_raw,
                     run_torch_peer, spread, sweep_yaml, table, write_cifar_like)

GOAL = 0.98


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frameworks", default="mxnet,tensorflow",
                   help="comma-separated, of mxnet, tensorflow, pytorch (default: mxnet,tensorflow)")
    p.add_argument("--configs", default="1:synthetic",
                   help="comma-separated NUM_GPUS:DATA, DATA synthetic or real (default: 1:synthetic; "
                        "the full matrix: 1:synthetic,2:synthetic,1:real,2:real)")
    p.add_argument("--model", default="resnet8_cifar")
    p.add_argument("--batch-per-gpu", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps-per-epoch", type=int, default=30)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--cpus-per-trial", type=int, default=1, help="threads on both sides (default 1)")
    p.add_argument("--repeats", type=int, default=3, help="rounds; each runs every config once on each side")
    p.add_argument("--beside-ray", action="store_true",
                   help="also run the raw side beside an idle embedded Ray, as a sweep starts one (a third side)")
    p.add_argument("--keep", action="store_true", help="keep the temp folder (sweep files, Parquet)")
    return p.parse_args(argv)


def trial_config(args: argparse.Namespace, framework: str, num_gpus: int, data: str) -> dict:
    return {
        "framework": framework, "model": args.model, "num_gpus": num_gpus, "batch_per_gpu": args.batch_per_gpu,
        "epochs": args.epochs, "steps_per_epoch": args.steps_per_epoch, "warmup_steps": args.warmup_steps,
        "lr": 0.05, "data": "synthetic" if data == "synthetic" else "cifar10", "val_examples": 128,
        "cpus_per_trial": args.cpus_per_trial, "seed": 0,
    }


def raw_side(framework: str, cfg: dict, data_dir: Path | None) -> Run:
    """The trial without the engine: PyTorch's plain DDP program under torchrun, the others' loop in one process."""
    return run_torch_peer(cfg) if framework == "pytorch" else run_raw(cfg, data_dir)


def check_same(raw_epochs: list[dict], engine_epochs: list[dict], label: str) -> None:
    """Both sides ran the same loop: same steps, data kind, input size, threads and parameters."""
    if len(raw_epochs) == 1 and "world_size" in raw_epochs[0]:  # PyTorch's plain program: one line for the run
        peer = raw_epochs[0]
        ours = {"threads": engine_epochs[0]["threads"], "param_count": engine_epochs[0]["param_count"],
                "image_size": engine_epochs[0]["image_size"], "steady_steps": sum(e["steady_steps"] for e in engine_epochs)}
        theirs = {key: peer[key] for key in ours}
        if ours != theirs:
            raise SystemExit(f"{label}: the plain program and the engine differ: {theirs} vs {ours}")
        return
    for key in ("steps", "data_kind", "image_size", "threads", "param_count", "steady_steps", "device_kind"):
        a, b = [e[key] for e in raw_epochs], [e[key] for e in engine_epochs]
        if a != b:
            raise SystemExit(f"{label}: raw and engine differ in {key}: {a} vs {b}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    frameworks = [f for f in args.frameworks.split(",") if f]
    configs = []
    for item in args.configs.split(","):
        gpus, data = item.split(":")
        if data not in ("synthetic", "real"):
            raise SystemExit(f"--configs: data must be synthetic or real, got {data}")
        if data == "real" and "pytorch" in frameworks:
            raise SystemExit("--configs: PyTorch's plain program trains on synthetic data only")
        configs.append((int(gpus), data))
    cases = [(f, g, d) for f in frameworks for g, d in configs]
    started = time.time()
    print(f"engine vs raw: {args.model}, batch {args.batch_per_gpu}/device, {args.epochs} epochs x "
          f"{args.steps_per_epoch} steps, {args.warmup_steps} warm-up steps, {args.cpus_per_trial} thread(s), "
          f"{args.repeats} rounds")
    print(f"machine: {machine()}; load average at start: {load_average()}")
    print("reproduce: " + shlex.join([".venv/bin/python", "benchmarks/engine_vs_raw.py", *(argv if argv is not None else sys.argv[1:])]))

    tmp = Path(tempfile.mkdtemp(prefix="engine_vs_raw-"))
    max_global = args.batch_per_gpu * max(g for g, _ in configs)
    data_dir = write_cifar_like(tmp / "cifar", train_images=max_global * args.steps_per_epoch + 5 * 16)
    sides = ("raw", "engine", "beside") if args.beside_ray else ("raw", "engine")
    results: dict[tuple, dict[str, list[float]]] = {c: {k: [] for s in sides for k in (s, s + "_wall")} for c in cases}
    commands: dict[tuple, dict[str, str]] = {}
    for rnd in range(args.repeats):
        for i, case in enumerate(cases):
            framework, gpus, data = case
            cfg = trial_config(args, framework, gpus, data)
            ddir = data_dir if data == "real" else None
            label = f"{framework} {gpus} dev {data}"
            turn = (rnd + i) % len(sides)  # each side goes first in turn, so that a drift in load hits all alike
            order = sides[turn:] + sides[:turn]
            runs = {}
            for side in order:
                if side == "raw":
                    runs[side] = raw_side(framework, cfg, ddir)
                elif side == "beside":
                    with idle_ray(gpus):
                        runs[side] = raw_side(framework, cfg, ddir)
                else:
                    runs[side] = run_engine(cfg, ddir, tmp / f"engine-{framework}-{gpus}-{data}-{rnd}")
                results[case][side].append(runs[side].steady)
                results[case][side + "_wall"].append(runs[side].wall_s)
            check_same(runs["raw"].epochs, runs["engine"].epochs, label)
            commands[case] = {s: r.command for s, r in runs.items()}
            beside = f"  raw beside Ray {runs['beside'].steady:7.1f}" if args.beside_ray else ""
            print(f"  round {rnd + 1}/{args.repeats} {label:<28} raw {runs['raw'].steady:7.1f}  "
                  f"engine {runs['engine'].steady:7.1f}{beside} img/s  (order {'/'.join(order)}, "
                  f"threads {runs['raw'].epochs[0]['threads']}, load {load_average()})", flush=True)

    rows, ratios = [], {f: [] for f in frameworks}
    for case in cases:
        framework, gpus, data = case
        r = results[case]
        ratio = median(r["engine"]) / median(r["raw"])
        ratios[framework].append(ratio)
        paired = median([e / w for e, w in zip(r["engine"], r["raw"])])
        beside = ([f"{median(r['beside']):.1f}", spread(r["beside"]), f"{median(r['beside']) / median(r['raw']):.3f}",
                   f"{median(r['engine']) / median(r['beside']):.3f}"] if args.beside_ray else [])
        rows.append([framework, str(gpus), data, f"{median(r['raw']):.1f}", spread(r["raw"]),
                     f"{median(r['engine']):.1f}", spread(r["engine"]), f"{ratio:.3f}", f"{paired:.3f}",
                     f"{median(r['raw_wall']):.0f}", f"{median(r['engine_wall']):.0f}", *beside])
    print()
    beside_head = ["raw beside Ray img/s", "spread", "beside/raw", "engine/beside"] if args.beside_ray else []
    print(table(["framework", "devices", "data", "raw img/s", "spread", "engine img/s", "spread",
                 "engine/raw", "paired", "raw wall s", "engine wall s", *beside_head], rows))
    print("\n(img/s: median over rounds of the trial's steady-state images/s; spread: (max-min)/median; "
          "engine/raw: ratio of medians; paired: median of per-round ratios; wall: whole command incl. "
          "process and Ray start-up, not part of the ratio" +
          ("; beside: the raw side beside an idle embedded Ray, as a sweep starts one)" if args.beside_ray else ")"))
    print()
    worst = 1e9
    for framework in frameworks:
        g = geomean(ratios[framework])
        worst = min(worst, g)
        print(f"{framework}: engine/raw steady images/s = {g:.3f} (geometric mean of {len(ratios[framework])} "
              f"configs) -> {'meets' if g >= GOAL else 'BELOW'} the goal {GOAL}")
    print(f"\nelapsed {time.time() - started:.0f} s; load average at end: {load_average()}")
    print("one pair of commands per config (last round):")
    for case, cmds in commands.items():
        print(f"  {case[0]} {case[1]} dev {case[2]}:\n    raw:    {cmds['raw']}\n    engine: {cmds['engine']}")
    print(f"  (python is {PYTHON}; run from {ROOT}; the temp folder {'is kept' if args.keep else 'was removed'}: {tmp})")
    first = cases[0]
    print(f"the engine's one-trial sweep file for {first[0]} {first[1]} dev {first[2]} (the others differ in those keys):")
    print("    " + sweep_yaml("engine_vs_raw", trial_config(args, *first)).rstrip().replace("\n", "\n    "))
    if not args.keep:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
