"""Helpers shared by the benchmark scripts: run our loop raw or through the engine, small statistics.

Nothing here times anything itself: every figure comes from the loop's own step timer
(trainables/measure.py), read from the raw loop's JSON lines or from the Parquet the engine wrote.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trainables.config import TrialConfig  # noqa: E402


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a measured child: no inherited thread count or Ray address.

    trainables.local sets OMP_NUM_THREADS to cpus_per_trial, as Ray does in a trial; an inherited
    value would override it on one side only.
    """
    drop = ("OMP_NUM_THREADS", "RAY_ADDRESS", "TF_USE_LEGACY_KERAS")  # the last: only the yardstick wants it
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2", **extra})
    return env


def write_cifar_like(root: Path, train_images: int, test_images: int = 256) -> Path:
    """root/cifar-10-batches-py/ in the real on-disk format, made by the tests' own writer."""
    from tests.cifar_files import write_cifar10

    per_file = math.ceil(train_images / 5)
    return write_cifar10(root, train_per_file=per_file, test=test_images, seed=0)


@dataclass
class Run:
    steady: float | None  # steady-state images/s of the trial (step-weighted mean of its epochs)
    epochs: list[dict[str, Any]]  # one dict per epoch (the loop's metrics)
    wall_s: float  # the whole command, process start to exit
    command: str


def trial_steady(epochs: list[dict[str, Any]]) -> float | None:
    """The trial's steady images/s exactly as the store's summary row computes it."""
    timed = [(e["steady_images_per_sec"], e["steady_steps"]) for e in epochs if e.get("steady_images_per_sec")]
    steps = sum(n for _, n in timed)
    return sum(m * n for m, n in timed) / steps if steps else None


def run_raw(config: dict[str, Any], data_dir: Path | None = None, timeout: float = 900) -> Run:
    """`python -m trainables.local CONFIG_JSON`: the loop in one plain process, no Ray."""
    cmd = [PYTHON, "-m", "trainables.local", json.dumps(config, separators=(",", ":"))]
    if data_dir is not None:
        cmd += ["--data-dir", str(data_dir)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"raw loop failed (rc {proc.returncode}): {shlex.join(cmd)}\n{proc.stderr[-3000:]}")
    epochs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return Run(trial_steady(epochs), epochs, wall, shlex.join(cmd))


IDLE_RAY_SETTLE_S = 10.0  # after its start, before a measured run beside it: the dashboard's modules and prestarted workers up

IDLE_RAY = """import sys
from sweep import cluster
ray = cluster.start(None, int(sys.argv[1]), emulated=True)
print("ready", flush=True)
sys.stdin.read()  # until the benchmark closes it
cluster.stop(ray)
"""


@contextmanager
def idle_ray(num_gpus: int) -> Iterator[None]:
    """An embedded Ray started as a sweep starts one (sweep.cluster.start: its GCS, raylet, dashboard and its
    modules, agents, monitors), held idle in a child process while the block runs: the processes a trial's ranks
    share the machine's cores with, less the trial's own (the driver's Tune loop, the trainable)."""
    proc = subprocess.Popen([PYTHON, "-c", IDLE_RAY, str(num_gpus)], cwd=ROOT, env=child_env(), text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the idle Ray did not start (rc {proc.wait()})")
        time.sleep(IDLE_RAY_SETTLE_S)
        yield
    finally:
        proc.stdin.close()  # it stops its Ray and exits
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


TORCH_PEER = ROOT / "benchmarks" / "torch_ddp_peer.py"


def torch_peer_command(config: dict[str, Any], device: str = "cpu", layout: str = "auto") -> tuple[list[str], dict[str, str]]:
    """The plain PyTorch DDP program (benchmarks/torch_ddp_peer.py) under torchrun for the trial `config`:
    its model, input size, per-GPU batch, warm-up and timed steps (epochs x steps_per_epoch - warm-up, so
    both sides time the same steps), SGD settings, precision and compiler, and the threads each of the
    engine's PyTorch processes gets (the trial's CPUs shared by its GPUs, trainables/pytorch/backend.py).
    `layout` (auto, nhwc, nchw) overrides the memory layout, to measure our backend's choice of it."""
    from trainables import zoo

    cfg = TrialConfig.from_dict({"lr": 0.1, **config})
    if cfg.nodes != 1 or cfg.steps_per_epoch is None or cfg.data != "synthetic":
        raise ValueError("the PyTorch peer runs one node, synthetic data and a fixed steps_per_epoch")
    threads = cfg.cpus_per_process  # one node: num_gpus processes
    compiled = bool(getattr(cfg, "compile", getattr(cfg, "xla", False)))
    cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={cfg.num_gpus}", str(TORCH_PEER),
           "--model", cfg.model, "--image-size", str(cfg.image_size or zoo.default_image_size(cfg.model)),
           "--batch-per-gpu", str(cfg.batch_per_gpu), "--warmup-steps", str(cfg.warmup_steps),
           "--steps", str(cfg.epochs * cfg.steps_per_epoch - cfg.warmup_steps), "--threads", str(threads),
           "--lr", str(cfg.lr), "--momentum", str(cfg.momentum), "--weight-decay", str(cfg.weight_decay),
           "--precision", cfg.precision, "--device", device, "--seed", str(cfg.seed), "--layout", layout, *(["--compile"] if compiled else [])]
    return cmd, child_env(OMP_NUM_THREADS=str(threads))


def run_torch_peer(config: dict[str, Any], device: str = "cpu", timeout: float = 900, layout: str = "auto") -> Run:
    """The plain PyTorch program for the trial `config`; its one JSON line stands as the Run's one epoch row."""
    cmd, env = torch_peer_command(config, device, layout)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(lines) != 1:
        raise RuntimeError(f"PyTorch peer failed (rc {proc.returncode}): {shlex.join(cmd)}\n{proc.stderr[-3000:]}")
    return Run(lines[0]["steady_images_per_sec"], lines, wall, f"OMP_NUM_THREADS={env['OMP_NUM_THREADS']} {shlex.join(cmd)}")


def spec_settings(config: TrialConfig) -> dict[str, Any]:
    """A resolved trial config (as the spec loader makes it) as sweep-file settings giving the same trial."""
    # None is every optional setting's default, and not a value a sweep file may give.
    # gpus_per_node follows from num_gpus and nodes: a sweep file gives one of the two.
    out = {k: v for k, v in config.to_dict().items() if k not in ("lr_rule", "gpus_per_node") and v is not None}
    if out.get("base_lr") is not None:  # the engine derives lr from the linear scaling rule again
        out.pop("lr", None)
    return out


def sweep_yaml(name: str, config: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump({"name": name, "description": f"benchmark: one trial ({name})", "fixed": config},
                          sort_keys=False)


def run_engine(config: dict[str, Any], data_dir: Path | None, work: Path, name: str = "engine_vs_raw",
               timeout: float = 900) -> Run:
    """The real CLI on a one-trial sweep file; the figure is read back from the Parquet it wrote."""
    import pandas as pd

    work.mkdir(parents=True, exist_ok=True)
    spec = work / f"{name}.yaml"
    spec.write_text(sweep_yaml(name, config))
    results = work / "results"
    cmd = [PYTHON, "-m", "sweep", str(spec), "--results", str(results), "--scale", "full",
           "--data-dir", str(data_dir if data_dir is not None else work / "no-data")]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"engine failed (rc {proc.returncode}): {shlex.join(cmd)}\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    run_dirs = sorted(p.parent for p in (results / name).glob("*/run.json"))
    if len(run_dirs) != 1:
        raise RuntimeError(f"expected one run under {results / name}, found {len(run_dirs)}")
    epochs = pd.read_parquet(run_dirs[0] / "epochs").sort_values("epoch")
    trials = pd.read_parquet(run_dirs[0] / "trials")
    if len(trials) != 1 or trials.status.iloc[0] != "completed":
        raise RuntimeError(f"{run_dirs[0]}: expected one completed trial, got {trials[['trial_id', 'status']]}")
    rows = epochs.to_dict("records")
    steady = float(trials.steady_images_per_sec.iloc[0])
    assert math.isclose(steady, trial_steady(rows), rel_tol=1e-9), "summary row disagrees with its epoch rows"
    return Run(steady, rows, wall, shlex.join(cmd))


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float]) -> str:
    """min-max of repeats, as a percentage of the median."""
    if len(values) < 2:
        return "-"
    m = statistics.median(values)
    return f"{100 * (max(values) - min(values)) / m:.1f}%"


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()}: {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}"


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"


def table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def cpu_seconds() -> float:
    """This process's CPU time and that of its ended children: tf.data's and ImageRecordIter's threads are the
    process's own, a DataLoader's workers its children (counted once joined, when the loader ends)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pipeline_rates(run, *args: object) -> tuple[float, float]:  # noqa: ANN001
    """(images/s, images per CPU-second) of one side of an input-pipeline yardstick: `run(*args)` returns the images it
    delivered. A collection before and after, so that neither side pays for the other's garbage."""
    import gc

    gc.collect()
    t0, c0 = time.perf_counter(), cpu_seconds()
    seen = run(*args)
    gc.collect()
    return seen / (time.perf_counter() - t0), seen / (cpu_seconds() - c0)


def pipeline_parser(description: str, workers: str = "--workers") -> argparse.ArgumentParser:
    """The arguments every input-pipeline yardstick takes, its workers named as its framework names them
    (`--workers`: a DataLoader's processes or tf.data's threads; `--threads`: ImageRecordIter's)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(workers, type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--image-size", type=int, default=224)
    return parser

