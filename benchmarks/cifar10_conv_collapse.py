"""Why seed 002's network (cifar10_conv, Neon's examples/cifar10_conv.py) collapses, and where it learns.

Trains cifar10_conv on a learnable set in CIFAR-10's on-disk format (tests/cifar_files.py: each class
a colour and a stripe pattern under noise; the CIFAR ResNets score > 0.93 on it) through the real
loader and loop, over lr x batch x initialisation x framework x seed, and prints which runs learned
(final val_acc > 0.5) and which died (train loss stuck at ln 10 = 2.303: every ReLU off, uniform
predictions) or diverged.

  .venv/bin/python benchmarks/cifar10_conv_collapse.py                 # the default grid, ~15 min here
  .venv/bin/python benchmarks/cifar10_conv_collapse.py --seeds 1 --frameworks mxnet

Initialisations: `neon` = Uniform(-0.1, 0.1), Neon's example (zoo.UNIFORM_INIT, the zoo's default now);
`he` = gaussian with std sqrt(2 / fan_in), what both frameworks' CIFAR scripts use (and the zoo used).
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._common import child_env, write_cifar_like  # noqa: E402

# (lr, batch): the issue's runs (0.05 and 0.01 at 32), seed 002's MXNet command (0.1 at 128), Neon's
# example (0.01 at 128), and Neon's rate at 32 by the linear rule (0.0025).
SETTINGS = ((0.05, 32), (0.01, 32), (0.0025, 32), (0.1, 128), (0.01, 128))
INITS = ("he", "neon")
LEARNED = 0.5  # final val_acc above this: learned (chance is 0.1)


def child(spec: dict, data_dir: str) -> None:
    """One run in this process: the zoo's initialisation set as asked, then the real loop."""
    from trainables import zoo
    from trainables.config import TrialConfig
    from trainables.loop import Devices, run_trial

    if spec.pop("init") == "he":
        zoo.UNIFORM_INIT.pop("cifar10_conv", None)
    else:
        zoo.UNIFORM_INIT["cifar10_conv"] = 0.1
    cfg = TrialConfig.from_dict({"model": "cifar10_conv", "num_gpus": 1, "weight_decay": 0.0, "momentum": 0.9,
                                 "val_examples": 500, "warmup_steps": 0, **spec})
    run_trial(cfg, Devices.of(["0"], emulated=True), data_dir, lambda m, c: print(json.dumps(m), flush=True))


def one(spec: dict, data_dir: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec), "--data-dir", str(data_dir)],
                         cwd=ROOT, capture_output=True, text=True, env=child_env(OMP_NUM_THREADS="1"), timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"run {spec} failed:\n{out.stderr[-2000:]}")
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    last = rows[-1]
    if last["diverged"]:
        verdict = "diverged"
    elif (last["val_acc"] or 0) > LEARNED:
        verdict = "learned"
    elif last["train_loss"] is not None and abs(last["train_loss"] - math.log(10)) < 0.01:
        verdict = "died (ln 10)"
    else:
        verdict = "no"
    return {**spec, "train_loss": [r["train_loss"] for r in rows], "val_acc": last["val_acc"], "verdict": verdict}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frameworks", default="mxnet,tensorflow")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60, help="steps per epoch (the issue's runs: 2 x 60)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child), args.data_dir)
        return
    frameworks = args.frameworks.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = write_cifar_like(Path(tmp), train_images=max(b for _, b in SETTINGS) * args.steps, test_images=500)
        print(f"cifar10_conv, {args.epochs} epochs x {args.steps} steps, momentum 0.9, no weight decay, "
              f"1 CPU device, val 500 images; learned: val_acc > {LEARNED}")
        print("| framework | init | lr | batch | learned | runs: final train loss / val_acc (verdict) |")
        print("|---|---|---|---|---|---|")
        for framework in frameworks:
            for init in INITS:
                for lr, batch in SETTINGS:
                    runs = [one({"framework": framework, "init": init, "lr": lr, "batch_per_gpu": batch, "seed": seed,
                                 "epochs": args.epochs, "steps_per_epoch": args.steps}, data_dir)
                            for seed in range(args.seeds)]
                    learned = sum(r["verdict"] == "learned" for r in runs)
                    detail = "; ".join(f"{r['train_loss'][-1]:.3f} / {r['val_acc'] if r['val_acc'] is None else round(r['val_acc'], 3)} ({r['verdict']})"
                                       for r in runs)
                    print(f"| {framework} | {init} | {lr:g} | {batch} | {learned}/{len(runs)} | {detail} |", flush=True)
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")


if __name__ == "__main__":
    main()
