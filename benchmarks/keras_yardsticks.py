"""The Keras/JAX yardsticks on the CPU (issue 43): a Keras 3 JAX-backend trial of the engine against two
programs written apart from it, on 1 and 2 emulated devices:

  engine      python -m sweep ONE_TRIAL.yaml --results DIR --scale full   (framework keras, keras_backend jax)
              the real CLI: embedded Ray, Tune, the trial in its environment (`env create keras`), its Parquet rows
  plain JAX   benchmarks/jax_peer.py: the same network in jax.numpy / jax.lax, SGD with momentum, the batch
              sharded over the devices
  plain Keras benchmarks/keras_peer.py: keras.Model + compile + train_on_batch, keras.distribution.DataParallel

Same model, batch per device, timed steps (epochs x steps_per_epoch - warm-up), warm-up and threads per
device on all three sides; synthetic data. Each figure is steady images/s as the engine's loop measures it
(warm-up dropped, mean of per-step rates; the engine's from the Parquet it wrote). The order of the sides
turns every round, so a drift in load hits all alike. Reported: medians over rounds, spread, and
ours/plain = median(engine) / median(peer) per peer and device count. Goal: >= 0.98.

With --beside-ray each round also runs each plain program beside an idle embedded Ray, started as a sweep starts
one (its dashboard, agents and monitors; _common.idle_ray): on 2 emulated devices the step takes both cores, and
Ray's own processes, which the engine's trial shares them with, come out of it. ours/(plain beside Ray) says how
much of a gap is the trial itself.

Run (from the repository root, after `python -m sweep env create keras` where the driver has numpy 1):
  .venv/bin/python benchmarks/keras_yardsticks.py                       # 1 and 2 devices, 3 rounds
  .venv/bin/python benchmarks/keras_yardsticks.py --devices 1 --repeats 5 --model resnet20_cifar
  .venv/bin/python benchmarks/keras_yardsticks.py --devices 2 --beside-ray
The peers run in --peer-python (default: the environment `env create keras` made, else this Python).
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (PYTHON, ROOT, Run, child_env, idle_ray, load_average, machine, median, run_engine, spread, sweep_yaml,
                     table)

GOAL = 0.98
PEERS = ("jax_peer", "keras_peer")
BESIDE = " beside Ray"  # the side of a plain program run beside an idle embedded Ray (--beside-ray)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet8_cifar")
    p.add_argument("--devices", default="1,2", help="emulated device counts, comma-separated")
    p.add_argument("--batch-per-gpu", type=int, default=32)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps-per-epoch", type=int, default=30)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--cpus-per-trial", type=int, default=2, help="the trial's CPUs; each device gets its share")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--peer-python", help="the interpreter of the plain programs (JAX and Keras 3)")
    p.add_argument("--beside-ray", action="store_true",
                   help="also run each plain program beside an idle embedded Ray, as a sweep starts one")
    args = p.parse_args(argv)
    try:
        args.device_counts = [int(d) for d in args.devices.split(",")]
    except ValueError:
        p.error(f"--devices {args.devices}: expected counts like 1,2")
    if min(args.device_counts + [args.batch_per_gpu, args.epochs, args.steps_per_epoch, args.cpus_per_trial, args.repeats]) < 1:
        p.error("device counts, batch, epochs, steps, CPUs and repeats must be >= 1")
    if args.epochs * args.steps_per_epoch <= args.warmup_steps:
        p.error("epochs x steps-per-epoch must exceed the warm-up steps")
    return args


def trial_config(args: argparse.Namespace, devices: int) -> dict:
    return {"framework": "keras", "keras_backend": "jax", "model": args.model, "num_gpus": devices,
            "batch_per_gpu": args.batch_per_gpu, "epochs": args.epochs, "steps_per_epoch": args.steps_per_epoch,
            "warmup_steps": args.warmup_steps, "lr": 0.05, "data": "synthetic", "val_examples": 128,
            "cpus_per_trial": args.cpus_per_trial, "seed": 0}


def peer_python(args: argparse.Namespace) -> str:
    if args.peer_python:
        return args.peer_python
    from sweep import environments

    made = environments.made_environment("keras")
    return str(made.value) if made else PYTHON


def run_peer(python: str, peer: str, args: argparse.Namespace, devices: int) -> Run:
    """One plain program for the trial: the same steps timed, the trial's CPUs shared by its devices."""
    threads = max(1, args.cpus_per_trial // devices)
    cmd = [python, str(ROOT / "benchmarks" / f"{peer}.py"), "--model", args.model, "--devices", str(devices),
           "--batch-per-gpu", str(args.batch_per_gpu), "--warmup-steps", str(args.warmup_steps),
           "--steps", str(args.epochs * args.steps_per_epoch - args.warmup_steps), "--threads", str(threads)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(lines) != 1:
        raise RuntimeError(f"{peer} failed (rc {proc.returncode}): {shlex.join(cmd)}\n{proc.stderr[-3000:]}")
    return Run(lines[0]["steady_images_per_sec"], lines, wall, shlex.join(cmd))


def check_same(peer: Run, engine: Run, label: str) -> None:
    """The same steps timed on both sides."""
    ours = sum(e["steady_steps"] for e in engine.epochs)
    if ours != peer.epochs[0]["timed_steps"]:
        raise SystemExit(f"{label}: the engine timed {ours} steps, the plain program {peer.epochs[0]['timed_steps']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    python = peer_python(args)
    started = time.time()
    print(f"keras yardsticks: {args.model}, batch {args.batch_per_gpu}/device, {args.epochs} epochs x "
          f"{args.steps_per_epoch} steps, {args.warmup_steps} warm-up, {args.cpus_per_trial} CPUs a trial, "
          f"{args.repeats} rounds; peers in {python}")
    print(f"machine: {machine()}; load average at start: {load_average()}")
    print("reproduce: " + shlex.join([".venv/bin/python", "benchmarks/keras_yardsticks.py", *(argv if argv is not None else sys.argv[1:])]))
    tmp = Path(tempfile.mkdtemp(prefix="keras_yardsticks-"))
    plains = [*PEERS, *(f"{peer}{BESIDE}" for peer in PEERS if args.beside_ray)]
    sides = ("engine", *plains)
    results = {d: {s: [] for s in sides} for d in args.device_counts}
    params: dict[tuple[int, str], object] = {}
    for rnd in range(args.repeats):
        for i, devices in enumerate(args.device_counts):
            turn = (rnd + i) % len(sides)
            order = sides[turn:] + sides[:turn]
            runs = {}
            for side in order:
                if side == "engine":
                    runs[side] = run_engine(trial_config(args, devices), None, tmp / f"engine-{devices}-{rnd}",
                                            name="keras_yardsticks")
                elif side.endswith(BESIDE):
                    with idle_ray(devices):
                        runs[side] = run_peer(python, side.removesuffix(BESIDE), args, devices)
                else:
                    runs[side] = run_peer(python, side, args, devices)
                results[devices][side].append(runs[side].steady)
            for peer in plains:
                check_same(runs[peer], runs["engine"], f"{peer} {devices} dev")
                params[(devices, peer)] = runs[peer].epochs[0]["params"]
            params[(devices, "engine")] = runs["engine"].epochs[0].get("param_count")
            print(f"  round {rnd + 1}/{args.repeats} {devices} dev  " +
                  "  ".join(f"{s} {runs[s].steady:7.1f}" for s in sides) +
                  f" img/s  (order {'/'.join(order)}, load {load_average()})", flush=True)
    rows, worst = [], 1e9
    for devices, r in results.items():
        for peer in plains:
            ratio = median(r["engine"]) / median(r[peer])
            if peer in PEERS:  # the goal is against the plain programs alone
                worst = min(worst, ratio)
            rows.append([peer, str(devices), f"{median(r[peer]):.1f}", spread(r[peer]), f"{median(r['engine']):.1f}",
                         spread(r["engine"]), f"{ratio:.3f}", f"{params[(devices, peer)]} / {params[(devices, 'engine')]}"])
    print()
    print(table(["plain program", "devices", "plain img/s", "spread", "ours img/s", "spread", "ours/plain",
                 "params plain / ours"], rows))
    print(f"\n(img/s: median over rounds of steady images/s; spread: (max-min)/median; ours/plain: ratio of medians; "
          f"params: trainable parameters of the plain program / the engine's param_count)")
    print(f"worst ours/plain {worst:.3f} -> {'meets' if worst >= GOAL else 'BELOW'} the goal {GOAL}")
    print(f"elapsed {time.time() - started:.0f} s; load average at end: {load_average()}")
    print("the engine's one-trial sweep file (1 device):")
    print("    " + sweep_yaml("keras_yardsticks", trial_config(args, args.device_counts[0])).rstrip().replace("\n", "\n    "))
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
