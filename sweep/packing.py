"""The order trials are handed to Tune in, so that trials of 1-8 GPUs pack the cluster tightly.

Tune starts pending trials in the order it was given: measured on a two-node cluster, a trial whose
bundle does not fit holds back the ones behind it (benchmarks/packing_makespan.py). That in-order
dispatch is simulated here, with each trial's duration estimated by sweep/estimates.py (earlier runs
in the store, or the model's cost); a few orders are tried, the best is improved by swapping
pairs, and the order with the shortest simulated makespan is used. The lower bound every order is
measured against is max(sum(GPUs x duration) / cluster GPUs, longest trial).
"""
from __future__ import annotations

import heapq
import random
from typing import Callable, Sequence

from trainables.config import TrialConfig


def simulate(order: Sequence[TrialConfig], seconds: dict[str, float], node_gpus: Sequence[float],
             node_cpus: Sequence[float], max_concurrent: int | None = None) -> float:
    """Makespan of in-order dispatch on the given nodes: the next trial starts once it fits.

    A trial takes gpus_per_node GPUs and cpus_per_trial CPUs on each of `nodes` different nodes; at most
    max_concurrent trials run at once (--max-concurrent).
    """
    free_gpus, free_cpus = list(node_gpus), list(node_cpus)
    running: list[tuple[float, int, list[int], TrialConfig]] = []  # (end time, tiebreak, nodes, trial)
    now, position = 0.0, 0
    while position < len(order) or running:
        while position < len(order) and (max_concurrent is None or len(running) < max_concurrent):
            trial = order[position]
            g, c, n = trial.gpus_per_node, trial.cpus, trial.nodes
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
            free_cpus[i] += trial.cpus
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
          node_cpus: Sequence[float], swaps: int = 8000,
          max_concurrent: int | None = None) -> tuple[list[TrialConfig], str, float]:
    """The order with the shortest simulated makespan: (order, how it was found, makespan).

    The best of a few sorted orders is improved by random pair swaps. A swap that leaves the makespan
    as it is is kept too: most swaps do not move the last trial's end, and walking across those
    plateaus is what finds the shorter ones (on benchmarks/packing_makespan.py's grid: 1.07 x the
    lower bound when only strict improvements were kept, 1.03 with plateau moves).
    """
    makespan = lambda o: simulate(o, seconds, node_gpus, node_cpus, max_concurrent)  # noqa: E731
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
