"""The order trials are handed to Tune in, so that trials of 1-8 GPUs pack the cluster tightly.

Tune starts pending trials in the order it was given: measured on a two-node cluster, a trial whose
bundle does not fit holds back the ones behind it (benchmarks/packing_makespan.py). That in-order
dispatch is simulated here, with each trial's duration estimated from earlier runs in the store (same
trial id) or else from the model's cost; a few orders are tried, the best is improved by swapping
pairs, and the order with the shortest simulated makespan is used. The lower bound every order is
measured against is max(sum(GPUs x duration) / cluster GPUs, longest trial).
"""
from __future__ import annotations

import heapq
import random
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from sweep import store
from sweep.schema import Status
from trainables.config import TrialConfig
from trainables import data, zoo

# Forward-pass GFLOPs per image at the model's default input size (published figures, rounded);
# only ratios matter here. CIFAR ResNets scale with depth from resnet20's 0.041.
GFLOPS = {"resnet50_v1": 4.1, "inception_v3": 5.7, "alexnet": 0.72, "cifar10_conv": 0.006}


def model_cost(c: TrialConfig) -> float:
    """Estimated GPU-seconds-proportional cost of a trial (arbitrary units)."""
    default = zoo.default_image_size(c.model)
    side = c.image_size or default
    units = zoo.cifar_resnet_units(c.model)
    per_image = 0.041 * (6 * units + 2) / 20 if units is not None else GFLOPS[c.model]
    per_image *= (side / default) ** 2
    images = c.steps_per_epoch * c.global_batch if c.steps_per_epoch else data.CIFAR10_TRAIN_SIZE
    return c.epochs * images * per_image / c.num_gpus + 1e-3  # the GPUs share an epoch's images


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
    done = done[done.status == Status.COMPLETED].dropna(subset=["wall_time_s"])
    return done.groupby("trial_id").wall_time_s.median().to_dict()


def estimate(trials: Sequence[TrialConfig], measured: dict[str, float]) -> dict[str, float]:
    """Seconds per trial: measured where the store has it, else the model cost scaled by measured ones."""
    costs = {t.trial_id: model_cost(t) for t in trials}
    known = [(measured[t.trial_id], costs[t.trial_id]) for t in trials if t.trial_id in measured]
    scale = sum(s for s, _ in known) / sum(c for _, c in known) if known else 1.0
    return {tid: measured.get(tid, cost * scale) for tid, cost in costs.items()}


def simulate(order: Sequence[TrialConfig], seconds: dict[str, float], node_gpus: Sequence[float],
             node_cpus: Sequence[float]) -> float:
    """Makespan of in-order dispatch on the given nodes: the next trial starts once it fits.

    A trial takes gpus_per_node GPUs and cpus_per_trial CPUs on each of `nodes` different nodes.
    """
    free_gpus, free_cpus = list(node_gpus), list(node_cpus)
    running: list[tuple[float, int, list[int], TrialConfig]] = []  # (end time, tiebreak, nodes, trial)
    now, position = 0.0, 0
    while position < len(order) or running:
        while position < len(order):
            trial = order[position]
            g, c, n = trial.gpus_per_node, trial.cpus_per_trial, trial.nodes
            fits = [i for i in range(len(free_gpus)) if free_gpus[i] >= g and free_cpus[i] >= c][:n]
            if len(fits) < n:
                break
            for i in fits:
                free_gpus[i] -= g
                free_cpus[i] -= c
            heapq.heappush(running, (now + seconds[trial.trial_id], position, fits, trial))
            position += 1
        if not running:
            break  # what is left fits no node: the feasibility check reports it
        now, _, nodes, trial = heapq.heappop(running)
        for i in nodes:
            free_gpus[i] += trial.gpus_per_node
            free_cpus[i] += trial.cpus_per_trial
    return now


def lower_bound(trials: Sequence[TrialConfig], seconds: dict[str, float], total_gpus: float) -> float:
    area = sum(t.num_gpus * seconds[t.trial_id] for t in trials)
    return max(area / total_gpus, max(seconds[t.trial_id] for t in trials))


CANDIDATES: dict[str, Callable[[TrialConfig, dict[str, float]], tuple]] = {
    "longest first": lambda t, s: (-s[t.trial_id],),
    "most GPU-time first": lambda t, s: (-t.num_gpus * s[t.trial_id],),
    "widest first": lambda t, s: (-t.num_gpus, -s[t.trial_id]),
}


def order(trials: Sequence[TrialConfig], seconds: dict[str, float], node_gpus: Sequence[float],
          node_cpus: Sequence[float], swaps: int = 8000) -> tuple[list[TrialConfig], str, float]:
    """The order with the shortest simulated makespan: (order, how it was found, makespan).

    The best of a few sorted orders is improved by random pair swaps. A swap that leaves the makespan
    as it is is kept too: most swaps do not move the last trial's end, and walking across those
    plateaus is what finds the shorter ones (on benchmarks/packing_makespan.py's grid: 1.07 x the
    lower bound when only strict improvements were kept, 1.03 with plateau moves).
    """
    makespan = lambda o: simulate(o, seconds, node_gpus, node_cpus)  # noqa: E731
    best, how = list(trials), "grid order"
    best_time = makespan(best)
    for name, key in CANDIDATES.items():
        candidate = sorted(trials, key=lambda t: key(t, seconds))
        if (t := makespan(candidate)) < best_time - 1e-9:
            best, how, best_time = candidate, name, t
    rng = random.Random(0)  # the same trials give the same order in every run
    walk, walk_time, improved = list(best), best_time, False
    # Bounded work on big sweeps: a simulation costs about n log n.
    for _ in range(min(swaps, 400_000 // max(len(best), 1)) if len(best) > 1 else 0):
        i, j = rng.sample(range(len(walk)), 2)
        walk[i], walk[j] = walk[j], walk[i]
        if (t := makespan(walk)) <= walk_time + 1e-9:
            walk_time = t
            if t < best_time - 1e-9:
                best, best_time, improved = list(walk), t, True
        else:
            walk[i], walk[j] = walk[j], walk[i]
    return best, how + (", improved by swaps" if improved else ""), best_time
