"""The order trials are handed to Tune in, so that trials of 1-8 GPUs pack the cluster tightly.

Tune starts pending trials in the order it was given whenever their bundle fits (a later, smaller
trial may go first when an earlier one does not fit). That greedy dispatch is simulated here for a
few candidate orders, with each trial's duration estimated from earlier runs in the store (same
trial id) or else from the model's cost; the order with the shortest simulated makespan is used.
The lower bound every order is measured against is max(sum(GPUs x duration) / cluster GPUs,
longest trial).
"""
from __future__ import annotations

import heapq
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from sweep import store
from sweep.spec import Trial
from trainables import data, zoo

# Forward-pass GFLOPs per image at the model's default input size (published figures, rounded);
# only ratios matter here. CIFAR ResNets scale with depth from resnet20's 0.041.
GFLOPS = {"resnet50_v1": 4.1, "inception_v3": 5.7, "alexnet": 0.72, "cifar10_conv": 0.006}


def model_cost(trial: Trial) -> float:
    """Estimated GPU-seconds-proportional cost of a trial (arbitrary units)."""
    c = trial.config
    name = c["model"]
    default = zoo.default_image_size(name)
    side = c["image_size"] or default
    units = zoo.cifar_resnet_units(name)
    per_image = 0.041 * (6 * units + 2) / 20 if units is not None else GFLOPS[name]
    per_image *= (side / default) ** 2
    images = (c["steps_per_epoch"] * c["batch_per_gpu"] * c["num_gpus"] if c["steps_per_epoch"]
              else data.CIFAR10_TRAIN_SIZE)
    return c["epochs"] * images * per_image / c["num_gpus"] + 1e-3  # the GPUs share an epoch's images


def measured_seconds(results: Path, sweep_name: str) -> dict[str, float]:
    """Median wall time of each trial id that completed in earlier runs of the sweep."""
    frames = []
    for run_dir in store.run_dirs(results, sweep_name):
        try:
            frames.append(store.RunStore(run_dir).trials()[["trial_id", "status", "wall_time_s"]])
        except store.StoreError:
            continue  # a damaged earlier run only costs its estimates
    if not frames:
        return {}
    done = pd.concat(frames)
    done = done[done.status == "completed"].dropna(subset=["wall_time_s"])
    return done.groupby("trial_id").wall_time_s.median().to_dict()


def estimate(trials: Sequence[Trial], measured: dict[str, float]) -> dict[str, float]:
    """Seconds per trial: measured where the store has it, else the model cost scaled by measured ones."""
    costs = {t.trial_id: model_cost(t) for t in trials}
    known = [(measured[t.trial_id], costs[t.trial_id]) for t in trials if t.trial_id in measured]
    scale = sum(s for s, _ in known) / sum(c for _, c in known) if known else 1.0
    return {tid: measured.get(tid, cost * scale) for tid, cost in costs.items()}


def simulate(order: Sequence[Trial], seconds: dict[str, float], node_gpus: Sequence[float],
             node_cpus: Sequence[float]) -> float:
    """Makespan of greedy in-order dispatch with backfill (what Tune does), on the given nodes."""
    free_gpus, free_cpus = list(node_gpus), list(node_cpus)
    pending = list(order)
    running: list[tuple[float, int, int, Trial]] = []  # (end time, tiebreak, node, trial)
    now, tiebreak = 0.0, 0
    while pending or running:
        for trial in list(pending):
            g, c = trial.config["num_gpus"], trial.config["cpus_per_trial"]
            node = next((i for i in range(len(free_gpus)) if free_gpus[i] >= g and free_cpus[i] >= c), None)
            if node is not None:
                free_gpus[node] -= g
                free_cpus[node] -= c
                heapq.heappush(running, (now + seconds[trial.trial_id], tiebreak, node, trial))
                tiebreak += 1
                pending.remove(trial)
        if not running:
            break  # what is left fits no node: the feasibility check reports it
        now, _, node, trial = heapq.heappop(running)
        free_gpus[node] += trial.config["num_gpus"]
        free_cpus[node] += trial.config["cpus_per_trial"]
    return now


def lower_bound(trials: Sequence[Trial], seconds: dict[str, float], total_gpus: float) -> float:
    area = sum(t.config["num_gpus"] * seconds[t.trial_id] for t in trials)
    return max(area / total_gpus, max(seconds[t.trial_id] for t in trials))


CANDIDATES: dict[str, Callable[[Trial, dict[str, float]], tuple]] = {
    "longest first": lambda t, s: (-s[t.trial_id],),
    "most GPU-time first": lambda t, s: (-t.config["num_gpus"] * s[t.trial_id],),
    "widest first": lambda t, s: (-t.config["num_gpus"], -s[t.trial_id]),
}


def order(trials: Sequence[Trial], seconds: dict[str, float], node_gpus: Sequence[float],
          node_cpus: Sequence[float]) -> tuple[list[Trial], str, float]:
    """The candidate order with the shortest simulated makespan: (order, its name, makespan)."""
    best: tuple[float, str, list[Trial]] | None = None
    for name, key in [("grid order", None), *CANDIDATES.items()]:
        candidate = list(trials) if key is None else sorted(trials, key=lambda t: key(t, seconds))
        makespan = simulate(candidate, seconds, node_gpus, node_cpus)
        if best is None or makespan < best[0] - 1e-9:
            best = (makespan, name, candidate)
    assert best is not None
    return best[2], best[1], best[0]
