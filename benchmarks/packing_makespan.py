"""Makespan of a mixed-GPU-count sweep on a simulated cluster: Tune's default order vs the engine's.

A Ray cluster of two nodes with 8 fake GPUs each is started on this machine (ray.cluster_utils).
The grid has trials of 1, 2, 4 and 8 GPUs whose trainable sleeps a known time per GPU count, so
the lower bound max(sum(GPUs x duration) / 16, longest trial) is exact. The same trials run twice
through Ray Tune with the engine's resource request (one STRICT_PACK bundle per trial): once in the
grid's own order (what Tune does by default), once in the order sweep.packing chooses. Each trial
records its start and end; makespan = last end - first start.

    .venv/bin/python benchmarks/packing_makespan.py [--scale 1.0]

--scale multiplies every sleep (a larger scale makes Ray's per-trial start-up cost matter less).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")

import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from sweep import packing  # noqa: E402
from sweep.runner import trial_resources  # noqa: E402
from trainables.config import TrialConfig  # noqa: E402

NODES = 2
GPUS_PER_NODE = 8
# GPU count -> (trials of that size, seconds each): a scaling study's mix, small trials first in
# grid order as a sweep file lists them, and the widest trials among the longest.
MIX = {1: (6, 6.0), 2: (5, 5.0), 4: (4, 6.0), 8: (3, 8.0)}


def make_trials(scale: float) -> tuple[list[TrialConfig], dict[str, float]]:
    trials, seconds = [], {}
    for gpus, (count, duration) in MIX.items():
        for i in range(count):
            trial = TrialConfig("mxnet", "resnet20_cifar", num_gpus=gpus, batch_per_gpu=64, epochs=1, lr=0.1, seed=i)
            trials.append(trial)
            seconds[trial.trial_id] = duration * scale
    return trials, seconds


def sleeper(config: dict) -> None:
    start = time.time()
    time.sleep(MIX[config["trial"]["num_gpus"]][1] * config["scale"])
    tune.report({"start": start, "end": time.time()})


def makespan_of(order: list[TrialConfig], scale: float, storage: str) -> float:
    tuner = tune.Tuner(
        tune.with_resources(sleeper, trial_resources),
        param_space={"trial": tune.grid_search([t.to_dict() for t in order]), "scale": scale},
        tune_config=tune.TuneConfig(reuse_actors=False),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    )
    frame = tuner.fit().get_dataframe()
    return float(frame.end.max() - frame.start.min())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    trials, seconds = make_trials(args.scale)
    total = NODES * GPUS_PER_NODE
    bound = packing.lower_bound(trials, seconds, total)
    ours, how, simulated = packing.order(trials, seconds, [GPUS_PER_NODE] * NODES, [64] * NODES)

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 64, "num_gpus": GPUS_PER_NODE})
    for _ in range(NODES - 1):
        cluster.add_node(num_cpus=64, num_gpus=GPUS_PER_NODE)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory() as storage:
            default = makespan_of(trials, args.scale, storage)
            engine = makespan_of(ours, args.scale, storage)
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(f"cluster: {NODES} nodes x {GPUS_PER_NODE} fake GPUs; trials (GPUs: count x seconds): "
          + ", ".join(f"{g}: {n} x {d * args.scale:g}" for g, (n, d) in MIX.items()))
    print(f"lower bound max(GPU-seconds / {total}, longest trial): {bound:.1f} s")
    print(f"{'order':<32}{'makespan s':>12}{'/ lower bound':>16}")
    print(f"{'Tune default (grid order)':<32}{default:>12.1f}{default / bound:>16.2f}")
    print(f"{'engine (' + how + ')':<32}{engine:>12.1f}{engine / bound:>16.2f}")
    print(f"(the engine's simulation predicted {simulated / bound:.2f} x the bound for its order)")


if __name__ == "__main__":
    main()
