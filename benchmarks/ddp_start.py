"""What a PyTorch DDP trial costs to start: the engine's worker group (sweep/workers.py) against Ray Train's
TorchTrainer, each inside a Ray Tune trial, on 1 and 2 emulated GPUs (gloo, one CPU process per GPU).

Each Tune trial runs a few steps of resnet8_cifar on a synthetic batch and reports the seconds from the
trial function's start to the end of training: mostly the start of the worker processes, the import of
torch there and the process group's rendezvous. The two sides train the same network, batch and steps;
the worker group runs the engine's own loop (trainables.loop), TorchTrainer a plain DDP loop.

  .venv/bin/python benchmarks/ddp_start.py                 # 1 and 2 GPUs, 3 repeats each
  .venv/bin/python benchmarks/ddp_start.py --gpus 2 --repeats 1 --steps 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BATCH = 8  # per GPU


def trial_config(gpus: int, steps: int) -> dict:
    return {"framework": "pytorch", "model": "resnet8_cifar", "num_gpus": gpus, "batch_per_gpu": BATCH, "epochs": 1,
            "lr": 0.05, "data": "synthetic", "steps_per_epoch": steps, "warmup_steps": 0}


def with_worker_group(config: dict) -> None:
    """A Tune trial of the engine: its workers, one per GPU, started by sweep/workers.py in the trial's bundles."""
    from ray import tune

    from sweep import workers
    from trainables.config import TrialConfig

    t0 = time.perf_counter()
    cfg = TrialConfig.from_dict(config["trial"])
    if cfg.distributed:
        workers.run(cfg, True, None, lambda metrics, path: None, None)
    else:  # one GPU: the trial trains in its own process, as the engine's trainable does
        import ray

        from trainables.loop import Devices, run_trial
        run_trial(cfg, Devices.of([str(i) for i in ray.get_gpu_ids()], True), None, lambda metrics, path: None)
    tune.report({"seconds": time.perf_counter() - t0})


def _torch_loop(config: dict) -> None:
    """Ray Train's worker: DDP over the process group TorchTrainer made, the same network, batch and steps."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    from trainables.pytorch import models

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = DistributedDataParallel(models.build("resnet8_cifar", 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    x, y = torch.rand(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))
    for _ in range(config["steps"]):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def with_torch_trainer(config: dict) -> None:
    """A Tune trial that calls TorchTrainer(...).fit() (Ray Train V2), as the first measurement of docs/pytorch.md did."""
    from ray import tune
    from ray.train import ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    t0 = time.perf_counter()
    gpus = config["trial"]["num_gpus"]
    TorchTrainer(_torch_loop, train_loop_config={"steps": config["trial"]["steps_per_epoch"]},
                 scaling_config=ScalingConfig(num_workers=gpus, use_gpu=False, resources_per_worker={"CPU": 0.5}),
                 torch_config=TorchConfig(backend="gloo")).fit()
    tune.report({"seconds": time.perf_counter() - t0})


def measure(launcher: str, gpus: int, steps: int) -> float:
    """Seconds of one Tune trial (its function's start to its end), on a fresh embedded Ray."""
    import ray
    from ray import tune

    from sweep.runner import trial_resources

    os.environ["PYTHONPATH"] = str(ROOT)
    ray.init(address="local", num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        config = {"trial": trial_config(gpus, steps)}
        if launcher == "worker group":
            fn = tune.with_resources(with_worker_group, trial_resources)
        else:  # the trial itself holds next to nothing (Tune refuses nothing); Ray Train's workers take their own CPUs
            fn = tune.with_resources(with_torch_trainer, {"CPU": 0.1})
        with tempfile.TemporaryDirectory() as storage:
            result = tune.Tuner(fn, param_space=config, run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()[0]
            if result.error:
                raise RuntimeError(f"{launcher}, {gpus} GPUs: {result.error}")
            return float(result.metrics["seconds"])
    finally:
        ray.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    print(f"| launcher | GPUs | seconds per trial (median of {args.repeats}) | each |")
    print("|---|---|---|---|")
    for gpus in args.gpus:
        for launcher in ("worker group", "TorchTrainer"):
            seconds = [measure(launcher, gpus, args.steps) for _ in range(args.repeats)]
            print(f"| {launcher} | {gpus} | {statistics.median(seconds):.1f} | "
                  f"{', '.join(f'{s:.1f}' for s in seconds)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
