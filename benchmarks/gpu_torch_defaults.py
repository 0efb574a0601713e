"""PyTorch's defaults on a GPU, each measured against its alternative in the plain program.

Our PyTorch backend (trainables/pytorch/backend.py) chooses three things for a trial on a GPU:

  layout     channels_last (NHWC) on GPUs                   against contiguous NCHW
  threads    the trial's CPUs as intra-op threads (8 here)   against 1 (the engine's default on emulated GPUs)
  precision  `tf32`, the default: TF32 tensor cores allowed  against `fp32`: TF32 off

Each pair differs in that one setting from a base cell (ResNet-50 v1, synthetic 224x224, 1 GPU, batch 256,
eager, bf16 for the layout and threads pairs) and runs in the plain program (benchmarks/torch_ddp_peer.py
under torchrun, as gpu_torch_yardsticks.py runs it): so the figure is PyTorch's, not our loop's, and a
default stands or falls by it. Each row: both figures and default/alternative.

  python benchmarks/gpu_torch_defaults.py                        # 6 runs, ~3 min on an H100
  python benchmarks/gpu_torch_defaults.py --rehearse --batch 16 --warmup-steps 3 --steps 10   # here, no GPU

Without a GPU it stops at once (one line, exit 2); --rehearse runs the same pairs on the CPU with
resnet8_cifar at 32 px to check the script (its figures say nothing about GPUs).
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from _common import load_average, machine, run_torch_peer


@dataclass(frozen=True)
class Pair:
    name: str
    default: dict  # the peer's settings that differ from the base cell, for our default
    alternative: dict  # and for the alternative
    default_label: str
    alternative_label: str


PAIRS = (
    Pair("layout", {"layout": "nhwc"}, {"layout": "nchw"}, "channels_last (NHWC)", "NCHW"),
    Pair("threads", {"cpus_per_trial": 8}, {"cpus_per_trial": 1}, "8 threads", "1 thread"),
    Pair("tf32", {"precision": "tf32"}, {"precision": "fp32"}, "tf32 (TF32 allowed)", "fp32 (TF32 off)"),
)


def config(args: argparse.Namespace, settings: dict) -> dict:
    base = {"framework": "pytorch", "model": args.model, "data": "synthetic", "num_gpus": 1, "epochs": 1,
            "steps_per_epoch": args.warmup_steps + args.steps, "warmup_steps": args.warmup_steps, "lr": 0.1,
            "batch_per_gpu": args.batch, "precision": "bf16", "compile": False, "cpus_per_trial": 8}
    return base | ({"image_size": args.image_size} if args.image_size else {}) | {
        k: v for k, v in settings.items() if k != "layout"}


def measure(args: argparse.Namespace, settings: dict, device: str) -> float | None:
    try:
        run = run_torch_peer(config(args, settings), device=device, timeout=1200, layout=settings.get("layout", "auto"))
    except RuntimeError as failed:
        print(f"    failed: {str(failed)[-300:]}", flush=True)
        return None
    print(f"    {run.steady:,.1f} img/s  ({run.command})", flush=True)
    return run.steady


def main(argv: list[str] | None = None) -> int:
    from trainables.environment import real_gpu_count

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", default=",".join(pair.name for pair in PAIRS))
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--rehearse", action="store_true", help="no GPU needed: resnet8_cifar at 32 px on the CPU")
    args = p.parse_args(argv)
    args.model, args.image_size, device = ("resnet8_cifar", 32, "cpu") if args.rehearse else ("resnet50_v1", None, "cuda")
    if not args.rehearse and real_gpu_count() == 0:
        print("gpu_torch_defaults: no GPU here (nvidia-smi lists none): this benchmark measures GPUs only", file=sys.stderr)
        return 2
    names = args.pairs.split(",")
    if bad := [n for n in names if n not in {pair.name for pair in PAIRS}]:
        print(f"gpu_torch_defaults: unknown pair {bad[0]!r}", file=sys.stderr)
        return 2
    print(f"gpu_torch_defaults: {args.model} b{args.batch}, {args.warmup_steps} warm-up + {args.steps} timed steps; "
          f"machine: {machine()}; load {load_average()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    rows = ["| setting | our default | img/s | alternative | img/s | default/alternative |", "|---|---|---|---|---|---|"]
    for pair in (pair for pair in PAIRS if pair.name in names):
        print(f"  {pair.name}:", flush=True)
        a, b = measure(args, pair.default, device), measure(args, pair.alternative, device)
        ratio = f"{a / b:.3f}x" if a and b else "-"
        fmt = lambda v: "none" if v is None else f"{v:,.0f}"  # noqa: E731
        rows.append(f"| {pair.name} | {pair.default_label} | {fmt(a)} | {pair.alternative_label} | {fmt(b)} | {ratio} |")
        print(rows[-1], flush=True)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
