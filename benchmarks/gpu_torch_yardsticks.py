"""GPU yardsticks for PyTorch: the plain DDP program and our engine on one GPU grid, with ratios ours/plain.

Grid (issue 26): ResNet-50 v1, synthetic 224x224 images, 1 GPU, batch 64 and 256, precision fp32 (TF32
off), tf32, bf16 (autocast) and fp16 (autocast + GradScaler), compile off and on (torch.compile).

  plain   benchmarks/torch_ddp_peer.py under torchrun --nproc_per_node 1 (_common.torch_peer_command:
          same model, batch, threads, warm-up and timed steps, SGD settings, precision, compile;
          channels_last, as our backend on a GPU). Its figure: steady images/s (warm-up dropped, mean of
          per-step rates), as our loop measures.
  ours    `python -m sweep FILE --results DIR --scale full` on a generated sweep file (real Ray, real
          Parquet; gpu_yardsticks.run_ours): pytorch resnet50_v1, synthetic, 1 GPU, one epoch of W + N
          steps (warmup_steps W). Our figure: the trial's steady images/s from its summary row.

Target: ours/plain >= 0.98 in every cell. The best cell is set beside NVIDIA DeepLearningExamples'
PyTorch ResNet-50 v1.5 figures (A100 80GB, batch 256: 938 img/s TF32, 2,470 img/s AMP): another GPU
and v1.5 (stride in the 3x3 conv), so a reading, not a ratio.

Run on a GPU machine whose Python has torch (only Ray and the project's small dependencies need adding):

  python benchmarks/gpu_torch_yardsticks.py                       # 16 cells, ~15-25 min on an H100
  python benchmarks/gpu_torch_yardsticks.py --batches 256 --precisions bf16 --compile on

Without a GPU it stops at once (one line, exit 2): CPU figures of this grid say nothing about GPUs.
--rehearse runs the same grid here instead, on emulated GPUs with resnet8_cifar at 32 px, so that a GPU session's
few minutes are not spent finding this script's faults (its figures say nothing about GPUs):

  python benchmarks/gpu_torch_yardsticks.py --rehearse --batches 16 --warmup-steps 3 --steps 10   # ~3 min here
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from _common import load_average, machine, run_torch_peer
from gpu_yardsticks import run_ours

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
COMPILE = {"off": False, "on": True}
DLE = {"tf32": 938.0, "amp": 2470.0}  # DeepLearningExamples PyTorch ResNet-50 v1.5, A100 80GB, batch 256, 1 GPU


@dataclass(frozen=True)
class Cell:
    batch: int
    precision: str
    compile: bool

    @property
    def label(self) -> str:
        return f"b{self.batch} {self.precision}{' compile' if self.compile else ''}"


def grid(batches: list[int], precisions: list[str], compiles: list[bool]) -> list[Cell]:
    return [Cell(b, p, c) for b in batches for p in precisions for c in compiles]


def peer_config(cell: Cell, warmup: int, steps: int, cpus: int, model: str = "resnet50_v1",
                image_size: int | None = None) -> dict:
    """The trial of one cell, as the sweep file gives it (the peer's flags come from it)."""
    config = {"framework": "pytorch", "model": model, "data": "synthetic", "num_gpus": 1, "epochs": 1,
              "steps_per_epoch": warmup + steps, "warmup_steps": warmup, "lr": 0.1, "batch_per_gpu": cell.batch,
              "precision": cell.precision, "compile": cell.compile, "cpus_per_trial": cpus}
    return config | ({"image_size": image_size} if image_size else {})


def table(cells: list[Cell], plain: dict[str, float | None], ours: dict[str, float | None]) -> str:
    """A row per cell: plain PyTorch, ours, ours/plain."""
    def fmt(v: float | None) -> str:
        return "none" if v is None else f"{v:,.0f}"

    lines = ["| cell | plain PyTorch img/s | ours, `python -m sweep` img/s | ours/plain |", "|---|---|---|---|"]
    for c in cells:
        a, b = ours.get(c.label), plain.get(c.label)
        ratio = "-" if a is None or not b else f"{a / b:.3f}x"
        lines.append(f"| {c.label} | {fmt(b)} | {fmt(a)} | {ratio} |")
    return "\n".join(lines)


def best_against_published(cells: list[Cell], ours: dict[str, float | None]) -> str:
    done = [(ours[c.label], c) for c in cells if ours.get(c.label)]
    if not done:
        return "no cell completed"
    value, cell = max(done, key=lambda item: item[0])
    published = DLE["tf32"] if cell.precision in ("fp32", "tf32") else DLE["amp"]
    kind = "TF32" if cell.precision in ("fp32", "tf32") else "AMP"
    return (f"best cell {cell.label}: {value:,.0f} img/s; DeepLearningExamples' PyTorch ResNet-50 v1.5 {kind} "
            f"on an A100 80GB at batch 256: {published:,.0f} img/s ({value / published:.2f}x; another GPU and v1.5)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", default="64,256", help="batch sizes per GPU, comma-separated")
    p.add_argument("--precisions", default=",".join(PRECISIONS), help=f"comma-separated, of: {', '.join(PRECISIONS)}")
    p.add_argument("--compile", default="off,on", help="comma-separated, of: off, on")
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--cpus-per-trial", type=int, default=8, help="the trial's CPUs (the peer's threads)")
    p.add_argument("--work", type=Path, default=Path("/tmp/gpu_torch_yardsticks"))
    p.add_argument("--rehearse", action="store_true",
                   help="no GPU needed: the grid on emulated GPUs with resnet8_cifar at 32 px, to check the script")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from trainables.environment import real_gpu_count

    args = parse_args(argv)
    if args.rehearse:  # an emulated GPU's trial: the engine's default, one thread on each side
        network, device, cpus = {"model": "resnet8_cifar", "image_size": 32}, "cpu", 1
    elif real_gpu_count() == 0:
        print("gpu_torch_yardsticks: no GPU here (nvidia-smi lists none): this benchmark measures GPUs only",
              file=sys.stderr)
        return 2
    else:
        network, device, cpus = {"model": "resnet50_v1"}, "cuda", args.cpus_per_trial
    precisions = [p.strip() for p in args.precisions.split(",")]
    compiles = [c.strip() for c in args.compile.split(",")]
    if bad := [p for p in precisions if p not in PRECISIONS] + [c for c in compiles if c not in COMPILE]:
        print(f"gpu_torch_yardsticks: unknown precision or compile value {bad[0]!r}", file=sys.stderr)
        return 2
    cells = grid([int(b) for b in args.batches.split(",")], precisions, [COMPILE[c] for c in compiles])
    print(f"gpu_torch_yardsticks{' (a rehearsal on emulated GPUs: its figures say nothing about GPUs)' if args.rehearse else ''}: "
          f"{network['model']}, {len(cells)} cells, {args.warmup_steps} warm-up + {args.steps} timed steps; "
          f"machine: {machine()}; load {load_average()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    plain: dict[str, float | None] = {}
    for cell in cells:
        try:
            run = run_torch_peer(peer_config(cell, args.warmup_steps, args.steps, cpus, **network),
                                 device=device, timeout=3600)
            plain[cell.label] = run.steady
            print(f"  plain {cell.label}: {run.steady:,.1f}  ({run.command})", flush=True)
        except RuntimeError as failed:  # an out-of-memory cell, say: it reads "none" in the table
            plain[cell.label] = None
            print(f"  plain {cell.label}: failed: {str(failed)[-300:]}", flush=True)
    ours, command = run_ours(cells, args.warmup_steps, args.steps, args.work, framework="pytorch",
                             cpus_per_trial=cpus, **network)
    print(f"  ours: {command}  (the sweep file: {shlex.quote(str(args.work / 'gpu_yardsticks.yaml'))})")
    print(table(cells, plain, ours))
    if args.rehearse:  # here every cell must run: a fault found now is one a GPU session does not pay for
        failed = [c.label for c in cells if plain.get(c.label) is None or ours.get(c.label) is None]
        print(f"rehearsal: {len(cells) - len(failed)} of {len(cells)} cells ran on both sides"
              + (f"; failed: {', '.join(failed)} (the rows: {args.work / 'results'})" if failed else ""))
        return 1 if failed else 0
    print(best_against_published(cells, ours))
    return 0


if __name__ == "__main__":
    sys.exit(main())
