"""GPU yardsticks: tf_cnn_benchmarks and our engine on one GPU grid, side by side, with ratios ours/theirs.

Grid (issue 17): ResNet-50 v1, synthetic 224x224 images, 1 GPU, batch 64 and 256, each of fp32, fp16,
XLA and fp16 + XLA. "fp32" is TensorFlow's default on the GPU (TF32 tensor cores allowed on Ampere and
later), which is what tf_cnn_benchmarks runs without --use_fp16 and what our default precision `tf32`
runs. fp16 is mixed precision with dynamic loss scaling on both sides.

  theirs  tf_cnn_benchmarks (github.com/tensorflow/benchmarks, scripts/tf_cnn_benchmarks; not shipped
          here: clone it and give the folder), on TF 2.21 with tf-keras and TF_USE_LEGACY_KERAS=1:
            python tf_cnn_benchmarks.py --model=resnet50 --num_gpus=1 --batch_size=B
              --num_warmup_batches=W --num_batches=N [--use_fp16] [--xla]
          (their defaults otherwise: NCHW on GPUs, replicated variables, synthetic data). Their
          figure: the last "total images/sec".
  ours    `python -m sweep FILE --results DIR --scale full` on a generated sweep file (real Ray, real
          Parquet): tensorflow resnet50_v1, synthetic, 1 GPU, batch B, one epoch of W + N steps
          (warmup_steps W), precision tf32 or fp16, xla false or true. Our figure: the trial's
          steady-state images/s from its summary row.

Run on a GPU machine (see benchmarks/README.md, "gpu_yardsticks.py", for the machine without network):

  python benchmarks/gpu_yardsticks.py --tf-benchmarks /tmp/tf-benchmarks/scripts/tf_cnn_benchmarks

Without a GPU it stops at once (one line, exit 2): CPU figures of this grid say nothing about GPUs.
"""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from _common import PYTHON, ROOT, child_env, load_average, machine

CELLS = {  # cell name -> (our precision, xla); theirs: --use_fp16 for fp16, --xla for xla
    "fp32": ("tf32", False),
    "fp16": ("fp16", False),
    "XLA": ("tf32", True),
    "fp16 + XLA": ("fp16", True),
}
NAME = "gpu_yardsticks"


@dataclass(frozen=True)
class Cell:
    batch: int
    cell: str  # a key of CELLS

    @property
    def label(self) -> str:
        return f"b{self.batch} {self.cell}"

    @property
    def precision(self) -> str:
        return CELLS[self.cell][0]

    @property
    def xla(self) -> bool:
        return CELLS[self.cell][1]

    @property
    def compile(self) -> bool:  # the engine's one setting for both frameworks' compilers
        return self.xla


def grid(batches: list[int], cells: list[str]) -> list[Cell]:
    return [Cell(b, c) for b in batches for c in cells]


def theirs_command(cell: Cell, warmup: int, steps: int, num_gpus: int = 1) -> list[str]:
    cmd = [PYTHON, "tf_cnn_benchmarks.py", "--model=resnet50", f"--num_gpus={num_gpus}", f"--batch_size={cell.batch}",
           f"--num_warmup_batches={warmup}", f"--num_batches={steps}"]
    if cell.precision == "fp16":
        cmd.append("--use_fp16")
    if cell.xla:
        cmd.append("--xla")
    return cmd


def parse_total_images_per_sec(log: str) -> float | None:
    """tf_cnn_benchmarks' closing figure, `total images/sec: 1591.23` (the last one when printed twice)."""
    found = re.findall(r"total images/sec: ([0-9.]+)", log)
    return float(found[-1]) if found else None


def sweep_file(cells: list, warmup: int, steps: int, model: str = "resnet50_v1", num_gpus: int = 1,
               image_size: int | None = None, framework: str = "tensorflow", **fixed_settings) -> str:
    """Our side of the grid as one sweep file: an include entry per cell (anything with batch, precision and
    compile: this file's Cells, gpu_torch_yardsticks.py's)."""
    fixed = {"framework": framework, "model": model, "data": "synthetic", "num_gpus": num_gpus, "epochs": 1,
             "steps_per_epoch": warmup + steps, "warmup_steps": warmup, "lr": 0.1, **fixed_settings}
    if image_size:
        fixed["image_size"] = image_size
    include = [{"batch_per_gpu": c.batch, "precision": c.precision, "compile": c.compile} for c in cells]
    return yaml.safe_dump({"name": NAME, "description": "GPU yardsticks: our side of the tf_cnn_benchmarks grid",
                           "fixed": fixed, "include": include}, sort_keys=False)


def run_ours(cells: list, warmup: int, steps: int, work: Path, extra: list[str] = (),
             **sweep_args) -> tuple[dict[str, float | None], str]:
    """`python -m sweep` on the generated file; each cell's steady images/s from the Parquet it wrote."""
    import pandas as pd

    work.mkdir(parents=True, exist_ok=True)
    spec = work / f"{NAME}.yaml"
    spec.write_text(sweep_file(cells, warmup, steps, **sweep_args))
    results = work / "results"
    cmd = [PYTHON, "-m", "sweep", str(spec), "--results", str(results), "--scale", "full", *extra]
    proc = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=3600)
    if proc.returncode not in (0, 1):  # 1: some trial did not complete; its cell says so
        raise RuntimeError(f"engine failed (rc {proc.returncode}): {shlex.join(cmd)}\n{proc.stderr[-3000:]}")
    # the run this call made: a --work folder used before holds earlier runs of the same sweep
    run_dir = max((results / NAME).glob("*/run.json"), key=lambda p: p.stat().st_mtime).parent
    return ours_figures(pd.read_parquet(run_dir / "trials"), cells), shlex.join(cmd)


def ours_figures(trials, cells: list) -> dict[str, float | None]:
    """Cell label -> steady images/s of its completed trial (None: not completed)."""
    out: dict[str, float | None] = {}
    for cell in cells:
        rows = trials[(trials.batch_per_gpu == cell.batch) & (trials.precision == cell.precision)
                      & (trials.compile == cell.compile)]
        done = rows[rows.status == "completed"]
        out[cell.label] = float(done.steady_images_per_sec.iloc[0]) if len(done) else None
    return out


def table(cells: list[Cell], theirs: dict[str, float | None], ours: dict[str, float | None]) -> str:
    """The issue's table: a column per cell, rows theirs, ours, ours/theirs."""
    def fmt(v: float | None) -> str:
        return "none" if v is None else f"{v:,.0f}"

    def ratio(c: Cell) -> str:
        a, b = ours.get(c.label), theirs.get(c.label)
        return "-" if a is None or not b else f"{a / b:.2f}x"

    head = "| program | " + " | ".join(c.label for c in cells) + " |"
    rule = "|---|" + "---|" * len(cells)
    rows = [f"| tf_cnn_benchmarks | " + " | ".join(fmt(theirs.get(c.label)) for c in cells) + " |",
            f"| ours, `python -m sweep` | " + " | ".join(fmt(ours.get(c.label)) for c in cells) + " |",
            "| ours/theirs | " + " | ".join(ratio(c) for c in cells) + " |"]
    return "\n".join([head, rule, *rows])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tf-benchmarks", type=Path, required=True, help="folder holding tf_cnn_benchmarks.py")
    p.add_argument("--batches", default="64,256", help="batch sizes per GPU, comma-separated")
    p.add_argument("--cells", default=",".join(CELLS), help=f"comma-separated, of: {', '.join(CELLS)}")
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--work", type=Path, default=Path("/tmp/gpu_yardsticks"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from trainables.environment import real_gpu_count

    args = parse_args(argv)
    if real_gpu_count() == 0:
        print("gpu_yardsticks: no GPU here (nvidia-smi lists none): this benchmark measures GPUs only", file=sys.stderr)
        return 2
    folder = args.tf_benchmarks
    if not (folder / "tf_cnn_benchmarks.py").is_file():
        print(f"gpu_yardsticks: {folder} holds no tf_cnn_benchmarks.py (clone github.com/tensorflow/benchmarks "
              "and give its scripts/tf_cnn_benchmarks)", file=sys.stderr)
        return 2
    cells_named = [c.strip() for c in args.cells.split(",")]
    if unknown := [c for c in cells_named if c not in CELLS]:
        print(f"gpu_yardsticks: unknown cell {unknown[0]!r} (known: {', '.join(CELLS)})", file=sys.stderr)
        return 2
    cells = grid([int(b) for b in args.batches.split(",")], cells_named)
    print(f"gpu_yardsticks: {len(cells)} cells, {args.warmup_steps} warm-up + {args.steps} timed steps; "
          f"machine: {machine()}; load {load_average()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    theirs: dict[str, float | None] = {}
    for cell in cells:
        cmd = theirs_command(cell, args.warmup_steps, args.steps)
        proc = subprocess.run(cmd, cwd=folder, env=child_env(TF_USE_LEGACY_KERAS="1"), capture_output=True,
                              text=True, timeout=3600)
        theirs[cell.label] = parse_total_images_per_sec(proc.stdout + proc.stderr) if proc.returncode == 0 else None
        print(f"  theirs {cell.label}: {theirs[cell.label]}  (cd {shlex.quote(str(folder))} && "
              f"TF_USE_LEGACY_KERAS=1 {shlex.join(cmd)})", flush=True)
    ours, command = run_ours(cells, args.warmup_steps, args.steps, args.work)
    print(f"  ours: {command}")
    print(table(cells, theirs, ours))
    return 0


if __name__ == "__main__":
    sys.exit(main())
