"""`batch_per_gpu: max`: the search for the largest per-GPU batch that trains, one configuration at a time.

A configuration is a trial with every setting but its batch (framework, model, precision, compile, GPUs,
image size ...). Its search is a sequence of probes, each a short real trial at one batch (Search.probe),
whose summary rows in the store are the search's whole state: `next_probe` reads the outcomes so far and
says which batch to try next, so an interrupted search resumes from the store without repeating a probe.

The search, as Lightning's BatchSizeFinder (`power`, then `binsearch`) does it for one job:
  1. doubling from lo (lo, 2lo, 4lo, ..., capped at hi) until a probe runs out of memory or hi fits;
  2. bisection between the largest batch that fitted and the smallest that did not, on multiples of
     `step`, until the two are at most `step` apart.
A probe that fails for another reason than memory ends its configuration's search: it is reported as
failed, never taken for a boundary. Driver-side and pure: no Ray, no framework.
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from trainables.config import TrialConfig

# The sweep-file settings of a search (in fixed, or --set), beside `batch_per_gpu: max`.
DEFAULTS: dict[str, Any] = {
    "max_batch_range": [8, 4096],  # [lo, hi]: the first probe, and the largest batch tried
    "max_batch_step": 8,  # the resolution: the boundary is found to within this many images per GPU
    "max_batch_margin": 1.0,  # epochs > 0: train at boundary x margin, rounded down to a multiple of the step
    "max_batch_steps": 4,  # training steps of a probe (its first is warm-up: tracing, compiling, allocating)
}

FIT, OOM, FAILED = "fit", "oom", "failed"  # a probe's outcome


def next_probe(outcomes: dict[int, str], lo: int, hi: int, step: int) -> int | None:
    """The next batch to probe given the outcomes so far (batch -> fit | oom | failed); None when done."""
    if FAILED in outcomes.values():
        return None
    if lo not in outcomes:
        return lo
    fail = min((b for b, o in outcomes.items() if o == OOM), default=None)
    fits = [b for b, o in outcomes.items() if o == FIT and (fail is None or b < fail)]
    if not fits:
        return None  # lo ran out of memory: nothing in the range fits
    fit = max(fits)
    if fail is None:
        return None if fit >= hi else min(2 * fit, hi)
    if fail - fit <= step:
        return None
    middle = (fit + fail) // 2 // step * step
    return middle if middle > fit else fit + step  # fail - fit > step: fit + step < fail


@dataclass(frozen=True)
class Boundary:
    """What a configuration's search found: its state, the largest batch that fitted, the smallest that did not."""

    state: str  # "searching", "found", "all fit" (up to hi), "none fit" (lo too big), "failed" (a non-memory error)
    fit: int | None
    fail: int | None
    probes: int


def boundary(outcomes: dict[int, str], lo: int, hi: int, step: int) -> Boundary:
    fail = min((b for b, o in outcomes.items() if o == OOM), default=None)
    fit = max((b for b, o in outcomes.items() if o == FIT and (fail is None or b < fail)), default=None)
    if FAILED in outcomes.values():
        state = "failed"
    elif next_probe(outcomes, lo, hi, step) is not None:
        state = "searching"
    elif fit is None:
        state = "none fit"
    else:
        state = "all fit" if fail is None else "found"
    return Boundary(state, fit, fail, len(outcomes))


def _longest(*sequences: tuple[int, ...]) -> tuple[int, ...]:
    return max(sequences, key=lambda s: (len(s), sum(s)))  # the most probes; the largest batches among equals


@functools.lru_cache(maxsize=64)
def worst_probes(lo: int, hi: int, step: int) -> tuple[int, ...]:
    """The batches of the longest search (what `plan` budgets), the largest batches among equals.

    The doubling probes lo, 2 lo, ..., hi are each the first to run out of memory in turn (or none does);
    from then on the bisection's probes depend on the last fit and the first failure alone, so the longest
    bisection of each gap is found once per (fit, fail) pair: about (hi - lo) / step pairs at most."""
    @functools.cache
    def bisection(fit: int, fail: int) -> tuple[int, ...]:
        middle = next_probe({lo: FIT, fit: FIT, fail: OOM}, lo, hi, step)
        if middle is None:
            return ()
        return (middle, *_longest(bisection(middle, fail), bisection(fit, middle)))

    doublings = [lo]
    while doublings[-1] < hi:
        doublings.append(min(2 * doublings[-1], hi))
    every_fit = tuple(doublings)
    first_oom = [(*doublings[:j + 1], *bisection(doublings[j - 1], doublings[j])) for j in range(1, len(doublings))]
    return _longest((lo,), every_fit, *first_oom)


def most_probes(lo: int, hi: int, step: int) -> int:
    """The most probes a search can take."""
    return len(worst_probes(lo, hi, step))


def training_batch(fit: int, margin: float, step: int) -> int:
    """The batch a configuration trains at after its search: boundary x margin, rounded down to the step
    (never below one step, nor above the boundary)."""
    return min(fit, max(int(fit * margin) // step * step, min(step, fit)))


@dataclass(frozen=True)
class Search:
    """One configuration's search: its settings (all but the batch), its bounds and how it trains after."""

    values: dict[str, Any]  # the trial's settings as the sweep gives them, batch_per_gpu and the search's left out
    lo: int
    hi: int
    step: int
    margin: float
    steps: int  # training steps of each probe
    config_id: str = field(default="")

    @classmethod
    def of(cls, values: dict[str, Any], settings: dict[str, Any]) -> Search:
        s = {**DEFAULTS, **settings}
        lo, hi = s["max_batch_range"]
        search = cls(values, lo, hi, s["max_batch_step"], s["max_batch_margin"], s["max_batch_steps"])
        blob = json.dumps({"values": values, "range": [lo, hi], "step": search.step, "steps": search.steps},
                          sort_keys=True, default=str)
        return replace(search, config_id=hashlib.sha1(blob.encode()).hexdigest()[:10])

    def probe(self, batch: int, capacity_mib: float | None = None) -> TrialConfig:
        """The probe at `batch`: one short epoch of `steps` steps (the first one warm-up), on synthetic data
        unless the sweep names its data, marked as this search's (its rows say so)."""
        values = {**self.values, "batch_per_gpu": batch, "epochs": 1, "steps_per_epoch": self.steps,
                  "warmup_steps": 1, "warmup_epochs": 0, "data": self.values.get("data", "synthetic"),
                  "max_batch_probe": self.config_id, "memory_capacity_mib": capacity_mib}
        return TrialConfig.from_dict(values)

    def training(self, fit: int, capacity_mib: float | None = None) -> TrialConfig | None:
        """The ordinary trial this configuration trains after its search; None for the search alone (epochs 0)."""
        if self.values["epochs"] == 0:
            return None
        return TrialConfig.from_dict({**self.values, "batch_per_gpu": training_batch(fit, self.margin, self.step),
                                      "memory_capacity_mib": capacity_mib})

    @property
    def most_probes(self) -> int:
        return most_probes(self.lo, self.hi, self.step)
