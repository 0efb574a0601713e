"""Trial order: the dispatch simulation and an order never worse than the grid's (estimates: test_estimates.py)."""
from __future__ import annotations

from sweep import packing
from trainables.config import TrialConfig

NAMED: dict[str, TrialConfig] = {}  # a test's name for a trial -> the trial


def trial(name: str, gpus: int, **config) -> TrialConfig:
    """A trial the test calls by name (its seed makes its id unique)."""
    nodes = config.pop("nodes", 1)
    values = {"framework": "mxnet", "model": "resnet20_cifar", "num_gpus": gpus, "batch_per_gpu": 32, "epochs": 1,
              "lr": 0.1, "steps_per_epoch": 10, "nodes": nodes, "seed": sum(map(ord, name)) * 1000 + len(NAMED)}
    NAMED[name] = TrialConfig.from_dict({**values, **config})
    return NAMED[name]


def secs(**by_name: float) -> dict[str, float]:
    """Seconds by trial id, given by the trials' names."""
    return {NAMED[name].trial_id: value for name, value in by_name.items()}


def test_in_order_dispatch_waits_for_a_trial_that_does_not_fit() -> None:
    trials = [trial("a", 8), trial("b", 8), trial("c", 1)]
    seconds = secs(a=10.0, b=10.0, c=1.0)
    # One 8-GPU node: a runs, b waits for it, and c waits behind b (Tune dispatches in order).
    assert packing.simulate(trials, seconds, [8], [64]) == 21.0
    assert packing.simulate([trials[2], trials[0], trials[1]], seconds, [8], [64]) == 21.0
    assert packing.simulate(trials, seconds, [8, 8], [64, 64]) == 11.0  # two nodes: c waits for a free one
    assert packing.lower_bound(trials, seconds, 16) == (8 * 10 + 8 * 10 + 1) / 16


def test_order_is_never_worse_than_the_grid_and_beats_it_on_a_mixed_grid() -> None:
    trials, seconds = [], {}
    for gpus, count, duration in [(1, 6, 6.0), (2, 5, 5.0), (4, 4, 6.0), (8, 3, 8.0)]:
        for i in range(count):
            trials.append(trial(f"g{gpus}-{i}", gpus))
            seconds[trials[-1].trial_id] = duration
    grid = packing.simulate(trials, seconds, [8, 8], [64, 64])
    ordered, how, makespan = packing.order(trials, seconds, [8, 8], [64, 64])
    assert sorted(t.trial_id for t in ordered) == sorted(seconds)
    assert makespan == packing.simulate(ordered, seconds, [8, 8], [64, 64]) < grid
    # 24 s (1.027 x the bound): the best that 200 random restarts of 2,000 swaps each found too.
    assert makespan == 24.0 and makespan / packing.lower_bound(trials, seconds, 16) < 1.03
    assert packing.order(trials, seconds, [8, 8], [64, 64])[0] == ordered  # deterministic


def test_max_concurrent_holds_back_trials_that_would_fit() -> None:
    trials = [trial("p", 1), trial("q", 1), trial("r", 1)]
    seconds = secs(p=10.0, q=10.0, r=10.0)
    assert packing.simulate(trials, seconds, [8], [64]) == 10.0  # all three at once
    assert packing.simulate(trials, seconds, [8], [64], max_concurrent=2) == 20.0  # --max-concurrent 2
    ordered, _, makespan = packing.order(trials, seconds, [8], [64], max_concurrent=1)
    assert makespan == 30.0 and len(ordered) == 3


def test_a_trial_spanning_nodes_waits_for_free_gpus_on_that_many_nodes() -> None:
    wide = trial("wide", 2, nodes=2)  # one GPU on each of two nodes
    local = [trial("a", 1), trial("b", 1)]
    seconds = secs(wide=10.0, a=10.0, b=10.0)
    # Two nodes of one GPU: the two one-GPU trials fill both, so the spread trial runs after them.
    assert packing.simulate(local + [wide], seconds, [1, 1], [4, 4]) == 20.0
    # Two GPUs on one node are not two nodes: the spread trial never starts there.
    assert packing.simulate([wide], seconds, [2], [4]) == 0.0
    # Two nodes of two GPUs: a one-GPU trial leaves room on both, so both run at once.
    assert packing.simulate(local[:1] + [wide], seconds, [2, 2], [4, 4]) == 10.0
