"""How long each trial will take, before it runs, and how wrong that turned out to be.

An estimate comes from the store's earlier runs on the same hardware (every sweep under --results):
  measured  the same trial (its id hashes its whole config) completed before on this hardware: the
            median of those wall times; uncertainty: the least +-u (median / (1 + u) to median x (1 + u))
            that held each of its runs against the median of its other runs, at least the one that held
            for 9 in 10 of the runs repeated on this hardware (with one run, that one; with no repeat on
            this hardware yet, the model's range below, over every class).
  model     otherwise its model's cost (FLOPs x images / GPUs, `model_cost`) at the rate the earlier
            trials on this hardware trained with its arithmetic (framework, precision, compiler: an fp16
            trial is not timed like its tf32 twin) on one node or across nodes as it runs (across nodes,
            gradients cross the network) on its number of GPUs (they share a node's cores and links; where
            none such was measured, a wider class's rate, and the basis says so), plus the time such trials
            (framework, compiled or not, one node or several, its GPUs) took beyond training at that rate
            (start-up, warm-up, compiling the step, validation, checkpoints: a fixed cost per trial, not one
            per image); uncertainty: the +-u within which that
            model predicted 9 in 10 of those trials, each from the trials of the other runs (a run's own
            trials share its load, its order and their seeds' twins: from those, the model looked exact while
            the next run took 1.5x as long; from its own run's others only where no other run measured its
            class), of its rate class (arithmetic, GPUs, nodes) where that has CLASS_ERRORS such errors, else
            of every class.
  none      no earlier run on this hardware: no time; trials are still ordered by relative cost.
A measured trial's training is its images at its steady rate (the rows' steady_images_per_sec, warm-up
steps left out), so that a compiled trial's compile time, ~30 s of a short trial's first epoch here, is
its overhead and not a slower rate per image.
Hardware is the device kind and model: the GPU model for GPUs (`NVIDIA H100 80GB HBM3` and Ray's `H100`
name the same), the CPU model for emulated GPUs. Only trials that completed in one attempt count; one that
ran more processes on a node than it had cores (`oversubscribed`) counts for trials of its GPU count only.
A trial's wall time starts when Tune starts it; between one trial's end and the next one's start Tune
takes its own time (placement groups, actors: seconds on a loaded machine). That gap per trial is learnt
from the earlier sessions on the same hardware (`session_gaps`) and lengthens each trial in the
simulated dispatch that gives the makespan.

A session records its plan in run.json (store.Estimate) before its trials start; `compare` then sets
each estimate against the wall time the trial took, and the session's makespan against its own.
"""
from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from sweep import packing, store
from sweep.errors import StoreError
from sweep.limits import count
from sweep.location import Location
from sweep.schema import Status
from sweep.store import RunMeta
from trainables import data, peaks, zoo
from trainables.config import TrialConfig, field_names

# Forward-pass GFLOPs per image at the model's default input size (published figures, rounded);
# only ratios matter here. CIFAR ResNets scale with depth from resnet20's 0.041.
GFLOPS = {"resnet50_v1": 4.1, "inception_v3": 5.7, "alexnet": 0.72, "cifar10_conv": 0.006}
# A model named outside the engine's zoo (a zoo's, or the user's own) has no figure here: ResNet-50's, the
# zoos' common size, until runs of it teach the estimates its own rate.
UNKNOWN_GFLOPS = GFLOPS["resnet50_v1"]


def model_cost(c: TrialConfig) -> float:
    """A trial's training work per GPU (forward GFLOPs x images / GPUs: proportional to GPU-seconds)."""
    return c.epochs * epoch_images(c) * forward_gflops(c) / c.num_gpus + 1e-3  # the GPUs share an epoch's images


def epoch_images(c: TrialConfig) -> int:
    """The images a trial trains on per epoch, as the cost counts them."""
    return c.steps_per_epoch * c.global_batch if c.steps_per_epoch else data.CIFAR10_TRAIN_SIZE


# --- hardware --------------------------------------------------------------------------------------

VENDOR_WORDS = {"nvidia", "tesla", "geforce"}


def _tokens(name: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", name.lower())) - VENDOR_WORDS


@dataclass(frozen=True)
class Hardware:
    """What a trial's devices are: `gpu` with its GPU model, or `cpu-emulated` with the CPU's."""

    kind: str
    model: str | None  # None: any model of that kind (a cluster that does not say)

    def __str__(self) -> str:
        return f"{self.kind} ({self.model or 'any model'})"

    def matches(self, other: Hardware) -> bool:
        """Same kind, and model names that agree: every word of the shorter is a word of the longer."""
        if self.kind != other.kind:
            return False
        if self.model is None or other.model is None:
            return True
        a, b = sorted((_tokens(self.model), _tokens(other.model)), key=len)
        return bool(a) and a <= b


def hardware_of(row: dict[str, Any]) -> Hardware | None:
    kind = row.get("device_kind")
    if not kind:
        return None
    return Hardware(kind, row.get("gpu_model") if kind == "gpu" else row.get("cpu_model"))


# --- the history -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Measurement:
    """One trial that completed in one attempt in an earlier run: what it was, where, how long."""

    config: TrialConfig
    sweep: str
    run_id: str
    started_at: float
    hardware: Hardware
    wall_s: float  # the summary row's wall_time_s: start of the trial to its end
    train_s: float | None  # its epochs' training time (mean_epoch_time_s x epochs_done)
    steady_s: float | None = None  # its images at its steady rate: training less warm-up and compiling
    host_rss_mib: float | None = None  # its process's peak resident memory (one of them for PyTorch on several GPUs)
    # More processes than its node's cores: its time is evidence for trials of its GPU count only (`oversubscribed`).
    crowded: bool = False
    mfu: float | None = None  # its summary row's MFU (real GPUs with a published peak): the prior for GPUs not run on
    gflops: float | None = None  # its network's forward GFLOPs per image, as its framework counted them (rows since issue 44)

    @property
    def host_mib_per_gpu(self) -> float | None:
        """Host memory per GPU: a DDP process each, or one process holding every GPU's replica (emulated GPUs)."""
        if not self.host_rss_mib:
            return None
        return self.host_rss_mib if self.config.distributed else self.host_rss_mib / self.config.gpus_per_node

    @property
    def training_s(self) -> float | None:
        """Training at the rate a longer trial would keep: the steady time where the rows have one."""
        return self.steady_s or self.train_s


def config_of(row: dict[str, Any]) -> TrialConfig:
    """The trial a stored row describes (its cpus_per_trial is what the trial reserved)."""
    return TrialConfig.from_dict({name: row[name] for name in field_names() if name in row})


def measurements(rows: list[dict[str, Any]]) -> list[Measurement]:
    """The summary rows of a run that can be learnt from."""
    out = []
    for row in rows:
        hardware = hardware_of(row)
        if (row.get("status") != Status.COMPLETED or row.get("attempts") != 1 or not row.get("wall_time_s")
                or hardware is None or row.get("started_at") is None):
            continue
        config = config_of(row)
        train = row["mean_epoch_time_s"] * row["epochs_done"] if row.get("mean_epoch_time_s") else None
        rate = row.get("steady_images_per_sec")
        steady = row["epochs_done"] * epoch_images(config) / rate if rate and rate > 0 and row.get("epochs_done") else None
        if steady and train and steady > train:  # epochs of fewer images than the cost counts (a CIFAR-10 subset)
            steady = None
        out.append(Measurement(config, row["sweep"], row["run_id"], row["started_at"], hardware,
                               row["wall_time_s"], train, steady, row.get("peak_host_rss_mib"),
                               oversubscribed(config, row.get("cpu_count")), _number(row.get("mfu")),
                               _number(row.get("model_gflops_per_image"))))
    return out


def _number(value: Any) -> float | None:
    """A row's float, None where it is null (NaN in a frame)."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def oversubscribed(c: TrialConfig, cores: float | None) -> bool:
    """More processes on a node than it has cores (64 emulated GPUs on 2 cores): they take turns, so the trial's
    time says how many turns, not how fast its arithmetic trains; as evidence for trials of other GPU counts, one
    such trial set the rate of every estimate after it (issue 44). It is evidence for its own GPU count only."""
    return cores is not None and c.processes_per_node > cores


def sweep_names(results: Location) -> list[str]:
    """Every sweep with a folder of runs under the store's root."""
    if not results.is_dir():
        return []
    return sorted(p.name for p in results.iterdir() if p.is_dir() and not p.name.startswith("."))


@dataclass(frozen=True)
class Gap:
    """Tune's start-up time per trial in one session: what each trial must be lengthened by for the simulated
    dispatch of the session's trials (their real wall times, its order, its cluster) to take as long as it did."""

    hardware: Hardware
    seconds: float
    started_at: float  # the session's start


@dataclass(frozen=True)
class SessionRun:
    """A session that recorded its plan, with the summary rows of its planned trials that started in it."""

    index: int  # 1 for the run's first session
    estimate: store.Estimate
    rows: dict[str, dict[str, Any]]  # trial id -> summary row, in the plan's order

    @property
    def complete(self) -> bool:
        """Every planned trial ran and ended in this session."""
        return len(self.rows) == len(self.estimate.trials)

    @property
    def makespan_s(self) -> float | None:
        """The first start to the last end of its trials, if they all ran in it."""
        rows = self.rows.values()
        return max(r["ended_at"] for r in rows) - min(r["started_at"] for r in rows) if self.complete else None


def estimated_sessions(meta: RunMeta, rows: list[dict[str, Any]]) -> list[SessionRun]:
    by_trial = {r["trial_id"]: r for r in rows}
    out = []
    for index, session in enumerate(meta.sessions):
        if session.estimate is None:
            continue
        ends = meta.sessions[index + 1].started_at if index + 1 < len(meta.sessions) else float("inf")
        ran = {t.trial_id: by_trial[t.trial_id] for t in session.estimate.trials if t.trial_id in by_trial}
        out.append(SessionRun(index + 1, session.estimate, {
            tid: r for tid, r in ran.items() if r.get("started_at") is not None and r.get("wall_time_s") is not None
            and r.get("ended_at") is not None and session.started_at <= r["started_at"] < ends}))
    return out


def simulated_makespan(session: SessionRun, seconds: dict[str, float]) -> float:
    """The session's trials dispatched in its order on its cluster, each taking `seconds`."""
    order = [config_of(r) for r in session.rows.values()]
    plan = session.estimate
    return packing.simulate(order, seconds, plan.node_gpus, plan.node_cpus, plan.max_concurrent)


def session_gaps(meta: RunMeta, rows: list[dict[str, Any]]) -> list[Gap]:
    """One Gap for each session whose planned trials (two or more: one alone has no gap) all ran in it from
    their start (a resumed trial's wall time counts its earlier epochs); found by bisection, as the makespan
    grows with the gap."""
    out = []
    for session in estimated_sessions(meta, rows):
        hardware = hardware_of(next(iter(session.rows.values()))) if session.rows else None
        if (not session.complete or len(session.rows) < 2 or hardware is None
                or any(r.get("attempts") != 1 for r in session.rows.values())):
            continue
        walls = {tid: r["wall_time_s"] for tid, r in session.rows.items()}
        taken = session.makespan_s
        makespan = lambda gap: simulated_makespan(session, {t: w + gap for t, w in walls.items()})  # noqa: E731
        low, high = 0.0, taken
        if makespan(low) < taken:
            for _ in range(30):
                middle = (low + high) / 2
                low, high = (middle, high) if makespan(middle) < taken else (low, middle)
        out.append(Gap(hardware, low, min(r["started_at"] for r in session.rows.values())))
    return out


@dataclass(frozen=True)
class History:
    """What the store has measured: every trial completed in one attempt, and every estimated session's gap."""

    measurements: list[Measurement]  # oldest first
    gaps: list[Gap]


def history(results: Location) -> History:
    """Every run of every sweep in the store. A damaged run costs only what it cannot give: its trials'
    times come from its summary rows, its sessions' gaps from its run.json."""
    found: list[Measurement] = []
    gaps: list[Gap] = []
    for name in sweep_names(results):
        for run_dir in store.run_dirs(results, name):
            run = store.RunStore(run_dir)
            try:
                rows = run.trial_rows()
                found += measurements(rows)
                gaps += session_gaps(run.meta, rows)
            except (StoreError, KeyError, TypeError, ValueError):
                continue
    return History(sorted(found, key=lambda m: m.started_at), sorted(gaps, key=lambda g: g.started_at))


# --- estimating --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Guess:
    """One trial's estimate: the seconds, where they came from, and how far off they may be."""

    seconds: float | None
    source: str  # "measured", "model", "scaled" (another GPU's, by the peaks), "prior" (an MFU) or "none"
    runs: int  # earlier measurements it stands on
    uncertainty: float | None  # relative: 0.1 is +-10%; None: not known
    basis: str  # the same in words


def arithmetic(c: TrialConfig) -> tuple[str, str, bool]:
    """What sets a trial's seconds per unit of model cost on given hardware, beyond its network and batch: its
    framework, its precision and whether its step was compiled (an fp16 ResNet-50 trains ~2.5x as fast as its
    tf32 twin on an H100: docs/gpus.md, tf_cnn_benchmarks)."""
    return c.framework, c.precision, c.compile


def rate_classes(c: TrialConfig) -> tuple[tuple, ...]:
    """The measured trials whose rate a trial's is like, closest first: its arithmetic on its number of GPUs and
    nodes (GPUs share a node's cores, its host and its links: 1, 2 and 3 GPUs do not train an image each at one
    rate), its arithmetic on one node or across nodes as it runs (a step across nodes waits on the network), its
    arithmetic, its precision and compiler in any framework, every trial."""
    full = arithmetic(c)
    return (*full, c.nodes > 1, c.num_gpus), (*full, c.nodes > 1), full, full[1:], ()


def _rate_words(key: tuple) -> str:
    """A rate's class in words: `pytorch fp16 compiled across nodes`, `bf16` (any framework), `every trial`."""
    if not key:
        return "every trial"
    if len(key) == 5:
        return f"{_rate_words(key[:4])} on {key[4]} GPU{'s' if key[4] != 1 else ''}"
    if len(key) == 4:
        return f"{_rate_words(key[:3])} {'across nodes' if key[3] else 'on one node'}"
    *framework, precision, compiled = key
    return " ".join([*framework, precision, *(["compiled"] if compiled else [])])


@dataclass(frozen=True)
class CostFit:
    """wall seconds = overhead(framework, compiled, across nodes) + rate x model_cost, fitted on the measured
    trials of one hardware.

    The rate is that of the first of `rate_classes(trial)` measured: the same arithmetic (framework, precision,
    compiler) on one node or across nodes as the trial; the same arithmetic; the same precision and compiler in
    any framework; all. The overhead is that of the first of `overhead_classes(trial)` measured: the same
    framework, compiled or not (compiling the step is a fixed cost) and across nodes or not (workers to start on
    each node) as the trial; then compiled or not; then the framework's trials."""

    rates: dict[tuple, float]  # training seconds per unit of model cost, by each of rate_classes()
    overhead: dict[tuple, float]  # by each of overhead_classes() -> median seconds of a trial beyond training
    default_overhead: float  # for a framework not measured yet

    def rate(self, trial: TrialConfig) -> tuple[float, tuple]:
        """The trial's rate and the class it was measured on (rate_classes(trial)[0], or a wider one)."""
        key = next(k for k in rate_classes(trial) if k in self.rates)
        return self.rates[key], key

    def predict(self, trial: TrialConfig) -> float:
        return sum(self.parts(trial))

    def parts(self, trial: TrialConfig) -> tuple[float, float]:
        """(seconds beyond training, training seconds) of the trial."""
        key = next((k for k in overhead_classes(trial) if k in self.overhead), None)
        return self.overhead.get(key, self.default_overhead), self.rate(trial)[0] * model_cost(trial)

    @classmethod
    def of(cls, points: Sequence[Measurement]) -> CostFit | None:
        """Medians, so that one odd trial moves nothing: the rates from training times, the overhead from the rest."""
        if not points:
            return None
        timed = [p for p in points if p.training_s] or points  # wall times only where no trial's training was timed
        only_crowded = all(p.crowded for p in timed)  # then they are all there is to go on
        by_class: dict[tuple, list[float]] = {}
        for p in timed:
            per_unit = (p.training_s or p.wall_s) / model_cost(p.config)
            for key in rate_classes(p.config)[:1] if p.crowded and not only_crowded else rate_classes(p.config):
                by_class.setdefault(key, []).append(per_unit)
        fit = cls({key: statistics.median(values) for key, values in by_class.items()}, {}, 0.0)
        only_crowded = all(p.crowded for p in points)
        beyond: dict[tuple, list[float]] = {}
        for p in points:
            seconds = max(0.0, p.wall_s - fit.rate(p.config)[0] * model_cost(p.config))
            for key in overhead_classes(p.config)[:1] if p.crowded and not only_crowded else overhead_classes(p.config):
                beyond.setdefault(key, []).append(seconds)
        overhead = {key: statistics.median(values) for key, values in beyond.items()}
        every = [v for key, values in beyond.items() if len(key) == 1 for v in values] or \
            [v for values in beyond.values() for v in values]
        return cls(fit.rates, overhead, statistics.median(every))


def overhead_classes(c: TrialConfig) -> tuple[tuple, ...]:
    """The trials whose time beyond training a trial's is like, closest first: its framework compiled or not as
    it is (XLA or torch.compile: tens of seconds before the first step) and across nodes or not (a worker, or
    servers, to start on each node) on its number of GPUs (PyTorch starts a process for each: 5 s for 1 GPU,
    15 s for 2, 28 s for 3 emulated ones on 2 cores), then the same on any number, then compiled or not, then
    its framework's."""
    return ((c.framework, c.compile, c.nodes > 1, c.num_gpus), (c.framework, c.compile, c.nodes > 1),
            (c.framework, c.compile), (c.framework,))


def _one_per_trial(found: Sequence[Measurement]) -> list[Measurement]:
    """Each trial once (its median run), so that a trial measured ten times does not weigh ten times."""
    by_trial: dict[str, list[Measurement]] = {}
    for m in found:
        by_trial.setdefault(m.config.trial_id, []).append(m)
    return [sorted(ms, key=lambda m: m.wall_s)[(len(ms) - 1) // 2] for ms in by_trial.values()]


# The share of past trials a stated range must have held: +-u is the least u that held for 9 in 10 of them.
COVERED = 0.9
# The errors a rate class needs for a range of its own (else every class's): the largest of 5 holds a sixth like them
# 5 times in 6.
CLASS_ERRORS = 5


def off_by(estimate: float, actual: float) -> float:
    """How far off an estimate was, in its range's terms: the least u for which estimate / (1 + u) to
    estimate x (1 + u) holds the actual (0.5: half again as long, or two thirds as long)."""
    return max(estimate / actual, actual / estimate) - 1


def _repeat_errors(walls: Sequence[float]) -> list[float]:
    """How far off each run of one trial was from the median of its other runs (off_by): the error a measured
    estimate (the median of the earlier runs) makes on the next run. The spread about the runs' own median
    understates it: of two runs 9 s and 11 s, each lies within +-10% of their median 10 s, but 11 s is 22% off
    9 s, the estimate the first run alone gave (issue 44: ranges from that spread held for 6 in 8 repeats)."""
    return [off_by(statistics.median([*walls[:i], *walls[i + 1:]]), w) for i, w in enumerate(walls)]


def _held(errors: Sequence[float]) -> float:
    """The least u that held for COVERED of these errors (off_by each): a range, not a typical error, so that
    the plan's ranges hold for most trials rather than for half of them."""
    ranked = sorted(errors)
    return ranked[max(0, math.ceil(COVERED * len(ranked)) - 1)]


class Estimator:
    """Estimates for one hardware from the store's history (of any hardware: it keeps its own)."""

    def __init__(self, past: History, hardware: Hardware) -> None:
        self.hardware, self.past = hardware, past
        self.others: dict[str, tuple[Estimator, float] | None] = {}  # _other_gpu's, by precision: made once
        self.found = [m for m in past.measurements if hardware.matches(m.hardware)]
        gaps = [g.seconds for g in past.gaps if hardware.matches(g.hardware)]
        self.gap = statistics.median(gaps) if gaps else 0.0  # Tune's start-up per trial, for the makespan
        self.gap_sessions = len(gaps)
        self.walls: dict[str, list[float]] = {}
        for m in self.found:
            self.walls.setdefault(m.config.trial_id, []).append(m.wall_s)
        points = _one_per_trial(self.found)
        self.fit = CostFit.of(points)
        by_class = self._held_out_errors(points)
        errors = [e for found in by_class.values() for e in found]
        self.model_error = statistics.median(errors) if errors else None  # the typical error, for the history line
        self.model_range = _held(errors) if errors else None  # the range that held for 9 in 10: a guess's uncertainty
        # A class's own range where it has errors enough (the 1-GPU trials of a 2-core machine vary more than its
        # 2-GPU ones): its class, not every trial, says how far off its estimate may be.
        self.class_ranges = {key: _held(found) for key, found in by_class.items() if len(found) >= CLASS_ERRORS}
        repeats = [e for w in self.walls.values() if len(w) > 1 for e in _repeat_errors(w)]  # one per run
        self.repeat_range = _held(repeats) if repeats else None  # a run against its trial's others, held for 9 in 10
        self.runs = len({(m.sweep, m.run_id) for m in self.found})
        self.measured_models = {(m.config.framework, m.config.model) for m in self.found}

    @staticmethod
    def _held_out_errors(points: list[Measurement]) -> dict[tuple, list[float]]:
        """The model's errors (off_by) on the measured trials, by closest rate class (arithmetic, GPUs, one node or
        across nodes), each trial predicted from the other runs' trials (from its own run's others where no other run
        measured its class): those whose class the others measured too, as a trial estimated at its own class's rate
        is (one fp16 trial predicted at the tf32 trials' rate would count an error no such estimate makes)."""
        classes = Counter(rate_classes(p.config)[0] for p in points)
        errors: dict[tuple, list[float]] = {}
        for i, p in enumerate(points):
            key = rate_classes(p.config)[0]
            if classes[key] > 1:
                others = [q for q in points if (q.sweep, q.run_id) != (p.sweep, p.run_id)]
                if not any(rate_classes(q.config)[0] == key for q in others):
                    others = points[:i] + points[i + 1:]
                errors.setdefault(key, []).append(off_by(CostFit.of(others).predict(p.config), p.wall_s))
        return errors

    def guess(self, trial: TrialConfig) -> Guess:
        walls = self.walls.get(trial.trial_id)
        if walls:
            n = len(walls)
            if n > 1:  # its own runs' errors, or wider: two runs that agreed by chance say little of the third
                spread = max(*_repeat_errors(walls), self.repeat_range or 0.0)
                how = f"median of {n} earlier runs of this trial, spread +-{spread:.0%}"
            elif self.repeat_range is not None:
                spread, how = self.repeat_range, f"1 earlier run of this trial; repeats here vary +-{self.repeat_range:.0%}"
            else:  # no trial repeated here yet: the model's range over every class (each trial against the other
                spread = self.model_range  # runs': their noise, and the fit's error, which a measured trial has none of)
                how = "1 earlier run of this trial" + (f"; no repeats here yet: the model's range, +-{spread:.0%}"
                                                       if spread is not None else "")
            return Guess(statistics.median(walls), "measured", n, spread, how)
        if self.fit is None:
            return self.elsewhere(trial)
        trials = len(self.walls)
        basis = f"model cost at the rate of {trials} measured trial{'s' if trials > 1 else ''}"
        if (trial.framework,) not in self.fit.overhead:  # its start-up is another framework's: the error above does not hold
            return Guess(self.fit.predict(trial), "model", trials, None,
                         f"{basis}, none of them {trial.framework} (its start-up taken from the others)")
        if (trial.framework, trial.model) not in self.measured_models:  # the error above was measured on other networks
            return Guess(self.fit.predict(trial), "model", trials, None,
                         f"{basis}, none of them {trial.framework} {trial.model} (error unknown)")
        _, measured_as = self.fit.rate(trial)
        closest = rate_classes(trial)[0]
        if measured_as != closest:  # its precision, compiler, GPUs or nodes ran at another speed than those measured
            # what was not measured: its GPU count, its nodes, or its arithmetic at all
            missing = closest if measured_as == closest[:4] else closest[:4] if measured_as == closest[:3] else closest[:3]
            return Guess(self.fit.predict(trial), "model", trials, None,
                         f"{basis}, none of them {_rate_words(missing)}: at the rate of "
                         f"{_rate_words(measured_as)} (error unknown)")
        held = self.class_ranges.get(closest, self.model_range)
        of = f"those {_rate_words(closest)}" if closest in self.class_ranges else "them"
        error = (f"; within +-{held:.0%} for 9 in 10 of {of}, each predicted from the other runs'"
                 if held is not None else " (error unknown: no trial of its class to predict from the others)")
        return Guess(self.fit.predict(trial), "model", trials, held, basis + error)


    def elsewhere(self, trial: TrialConfig) -> Guess:
        """A GPU not run on yet (`plan --gpu-model H100`): its peak at the trial's precision (trainables/peaks.py)
        against the best evidence the store has: trials measured on another GPU, their training scaled by the two
        peaks; else the MFU such trials reached on any GPU (a prior) over the trial's training FLOPs."""
        target = peaks.gpu_model(self.hardware.model) if self.hardware.kind == "gpu" else None
        peak = peaks.peak_tflops(target, trial.precision) if target else None
        if peak is None:
            why = ("" if self.hardware.kind != "gpu" else f", and no published {trial.precision} peak for "
                   f"{self.hardware.model}" if target else f", and {self.hardware.model} is a GPU without a published peak")
            return Guess(None, "none", 0, None, f"no earlier run on this hardware{why}")
        other = self._other_gpu(trial.precision)
        if other is not None:
            estimator, other_peak = other
            overhead, training = estimator.fit.parts(trial)
            trials = len(estimator.walls)
            return Guess(overhead + training * other_peak / peak, "scaled", trials, None,
                         f"{count(trials, 'trial')} measured on {estimator.hardware.model}, training scaled by the peaks at "
                         f"{trial.precision} ({other_peak:.0f} / {peak:.0f} TFLOP/s; error unknown)")
        mfu, learnt = self._prior_mfu(trial)
        counted = [m.gflops for m in self.past.measurements if m.gflops and (m.config.model, m.config.image_size)
                   == (trial.model, trial.image_size)]  # as a run counted them on the network, else the table's
        per_image = statistics.median(counted) if counted else forward_gflops(trial)
        flops = trial.epochs * epoch_images(trial) * peaks.training_gflops(per_image) * 1e9
        training = flops / (mfu * peak * 1e12 * trial.num_gpus)
        overheads = [m.wall_s - m.training_s for m in self.past.measurements
                     if m.config.framework == trial.framework and m.training_s and m.wall_s > m.training_s]
        overhead = statistics.median(overheads) if overheads else 0.0
        start = (f", plus {trial.framework}'s median start-up elsewhere" if overheads
                 else ", start-up not counted (none measured)")
        return Guess(overhead + training, "prior", 0, None,
                     f"MFU {mfu:.0%} ({learnt}) of {peak:.0f} TFLOP/s at {trial.precision}{start} (error unknown)")

    def _other_gpu(self, precision: str) -> tuple[Estimator, float] | None:
        """The GPU with the most measured trials whose peak at `precision` is published, and that peak; its
        Estimator (a leave-one-out fit of its trials) is made once per precision, not once per trial."""
        if precision not in self.others:
            self.others[precision] = self._find_other_gpu(precision)
        return self.others[precision]

    def _find_other_gpu(self, precision: str) -> tuple[Estimator, float] | None:
        counts = Counter(m.hardware.model for m in self.past.measurements
                         if m.hardware.kind == "gpu" and not self.hardware.matches(m.hardware))
        for model, _ in counts.most_common():
            other_peak = peaks.peak_tflops(peaks.gpu_model(model), precision) if peaks.gpu_model(model) else None
            if other_peak is not None:
                return Estimator(self.past, Hardware("gpu", model)), other_peak
        return None

    def _prior_mfu(self, trial: TrialConfig) -> tuple[float, str]:
        """The median MFU of the store's trials most like this one (framework, precision and model family; then
        framework and precision; then precision), and in words where it came from; else DEFAULT_MFU."""
        family = model_family(trial.model)
        ways = ((lambda c: (c.framework, c.precision, model_family(c.model)) == (trial.framework, trial.precision, family),
                 f"{trial.framework} {trial.precision} {family}"),
                (lambda c: (c.framework, c.precision) == (trial.framework, trial.precision),
                 f"{trial.framework} {trial.precision}"),
                (lambda c: c.precision == trial.precision, f"{trial.precision} in any framework"))
        for like, words in ways:
            found = [m.mfu for m in self.past.measurements if m.mfu is not None and like(m.config)]
            if found:
                return statistics.median(found), f"the median of {count(len(found), 'measured trial')}, {words}"
        return DEFAULT_MFU, "the default: no trial of the store has one"


# A trial's MFU where the store has none to learn from: ResNet-50 v1 in PyTorch on an H100, eager, read 0.094
# (bf16) and 0.12 (tf32) (benchmarks/README.md, "On an H100"; trainables/peaks.py's arithmetic).
DEFAULT_MFU = 0.1


def model_family(model: str) -> str:
    """The letters a model's name starts with (resnet, inception, alexnet, vit...): trials of one family reach
    like MFUs; a namespaced zoo model's name after its zoo (torchvision:resnet50 -> resnet)."""
    name = model.rsplit(":", 1)[-1]
    return re.match(r"[a-z]*", name.lower()).group() or name


def forward_gflops(c: TrialConfig) -> float:
    """The forward GFLOPs per image of a trial's network before it runs: the published multiply-adds of
    model_cost's table at 2 FLOPs each, scaled to its input size."""
    default = zoo.default_image_size(c.model)
    units = zoo.cifar_resnet_units(c.model)
    macs = 0.041 * (6 * units + 2) / 20 if units is not None else GFLOPS.get(c.model, UNKNOWN_GFLOPS)
    return 2 * macs * ((c.image_size or default) / default) ** 2


# --- estimates against what the trials took -----------------------------------------------------------

@dataclass(frozen=True)
class Comparison:
    """A session's recorded estimates set against its trials' wall times (errors relative to the actual)."""

    run_id: str
    session: int  # 1 for the run's first session
    trials: int  # trials compared: those estimated that completed in this session in one attempt
    median_error: float  # median |estimate - actual| / actual
    bias: float  # median (estimate - actual) / actual: below 0, estimates were short
    worst_error: float
    worst_trial: str
    worst_estimated_s: float
    worst_actual_s: float
    by_source: dict[str, float]  # "measured" / "model" -> median error of those estimates
    makespan_estimated_s: float | None
    makespan_actual_s: float | None  # first start to last end of the session's trials, if all ended in it

    def line(self) -> str:
        sources = ", ".join(f"{source} {error:.0%}" for source, error in sorted(self.by_source.items()))
        text = (f"run {self.run_id} (session {self.session}): estimates off by a median {self.median_error:.0%} over "
                f"{count(self.trials, 'trial')} ({sources}), {'long' if self.bias > 0 else 'short'} by a median {abs(self.bias):.0%}; "
                f"worst {self.worst_error:.0%} (trial {self.worst_trial}: {_seconds(self.worst_estimated_s)} estimated, "
                f"{_seconds(self.worst_actual_s)} taken)")
        if self.makespan_estimated_s is not None and self.makespan_actual_s:
            text += (f"; makespan {_seconds(self.makespan_estimated_s)} estimated, "
                     f"{_seconds(self.makespan_actual_s)} taken")
        return text


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def compare(meta: RunMeta, rows: list[dict[str, Any]]) -> Comparison | None:
    """The latest session of the run whose estimates can be set against finished trials; None if none can."""
    for session in reversed(estimated_sessions(meta, rows)):
        pairs = [(t, session.rows[t.trial_id]) for t in session.estimate.trials
                 if t.seconds and t.trial_id in session.rows and session.rows[t.trial_id]["status"] == Status.COMPLETED
                 and session.rows[t.trial_id]["attempts"] == 1]
        if not pairs:
            continue
        errors = [((t.seconds - r["wall_time_s"]) / r["wall_time_s"], t, r) for t, r in pairs]
        worst = max(errors, key=lambda e: abs(e[0]))
        by_source: dict[str, list[float]] = {}
        for error, t, _ in errors:
            by_source.setdefault(t.source, []).append(abs(error))
        return Comparison(meta.run_id, session.index, len(pairs), statistics.median(abs(e) for e, _, _ in errors),
                          statistics.median(e for e, _, _ in errors), abs(worst[0]), worst[1].trial_id,
                          worst[1].seconds, worst[2]["wall_time_s"],
                          {s: statistics.median(v) for s, v in by_source.items()},
                          session.estimate.makespan_s, session.makespan_s)
    return None
