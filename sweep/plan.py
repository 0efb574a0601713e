"""`plan`: a sweep's trials, the nodes each fits, and how long and how many GPU-hours they will take.

`python -m sweep plan NAME|FILE` needs no data and runs nothing. The cluster it plans for is the one
`run` would use: an embedded Ray as `run` would start it here (no Ray is started for the plan), the
cluster at --address (or $RAY_ADDRESS), joined only to read its nodes, or one described by flags
(--nodes N --gpus-per-node G [--cpus-per-node C] [--gpu-model MODEL]; no Ray at all). Each trial's
duration comes from sweep/estimates.py, which says where from and how uncertain; the makespan is Tune's
in-order dispatch simulated in the order the trials will be handed to it (sweep/packing.py), its range
the same with every estimate at its low and high end. `run` prints the same plan before its trials
start and records it in run.json (store.Estimate), and the next plan says how far off it was.
`--json` prints the Plan dataclass below as JSON (docs/plans.md).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from sweep import cluster as ray_cluster
from sweep import environments, estimates, limits, overrides, packing, spec, store
from sweep.batch_search import Search, worst_probes
from sweep.cluster import Node
from sweep.errors import UsageError
from sweep.estimates import Comparison, Estimator, Hardware, History
from sweep.limits import count
from sweep.location import Location
from sweep.runs import results_location
from sweep.spec import Sweep
from trainables import peaks
from trainables.config import TrialConfig


@dataclass(frozen=True)
class Target:
    """The cluster a plan is for: its nodes, the hardware its trials would train on, and how it was found."""

    nodes: list[Node]
    hardware: Hardware
    description: str
    memory_mib: float | None = None  # each node's host memory, where known (this machine's, for the embedded Ray)


@dataclass(frozen=True)
class NodePlan:
    name: str
    gpus: float
    cpus: float | None  # None: not given (a described cluster without --cpus-per-node)
    fits: int  # trials whose bundle fits this node


@dataclass(frozen=True)
class TrialPlan:
    trial_id: str
    label: str  # framework, model, GPUs, batch, lr and the other settings the sweep varies
    num_gpus: int
    nodes: int  # nodes the trial spans
    cpus: int  # CPUs it reserves on each (TrialConfig.cpus)
    fits_nodes: int  # nodes of the cluster its bundle fits on
    infeasible: str | None  # why it fits no node (the run stops, or records it with --skip-infeasible)
    seconds: float | None  # estimated wall time; None: no estimate
    source: str  # "measured", "model", "scaled", "prior" or "none" (sweep/estimates.py Guess)
    runs: int  # earlier measurements behind the estimate
    uncertainty: float | None  # relative: 0.1 is +-10%; None: not known
    basis: str  # where the estimate came from, in words


@dataclass(frozen=True)
class SearchPlan:
    """A largest-batch search (batch_per_gpu: max): the most probes it can take, and what they would cost."""

    config_id: str
    label: str  # its first probe's settings, batch aside
    lo: int
    hi: int
    step: int
    most_probes: int  # its longest search: every doubling, then a bisection of the widest gap
    seconds: float | None  # that search's probes' estimated wall time, Tune's start-up per round included; None: unknown


@dataclass(frozen=True)
class Plan:
    """What `plan` prints, as data (`--json`). Times in seconds; ranges are [low, high]."""

    sweep: str
    scale: str
    overrides: dict[str, Any]  # the --set settings
    cluster: str  # which cluster, and how it was found
    hardware: str  # what the estimates are for
    nodes: list[NodePlan]
    order: str  # how the trial order was found
    trials: list[TrialPlan]  # in the order they are handed to Tune; those that fit no node last
    max_concurrent: int | None
    makespan_s: float | None  # None: no estimate for some trial
    makespan_range_s: list[float] | None
    lower_bound_s: float | None  # max(GPU-seconds / cluster GPUs, longest trial)
    gpu_hours: float | None
    gpu_hours_range: list[float] | None
    history: str  # what the estimates stand on
    model_error: float | None  # the model-cost estimate's median error on the measured trials (each from the other runs')
    last_run: Comparison | None  # the latest run's estimates against what its trials took
    notes: list[str] = dataclasses.field(default_factory=list)  # what the plan cannot show in its table
    environments: dict[str, str] = dataclasses.field(default_factory=dict)  # runs_as (keras/jax) -> where its trials run
    searches: list[SearchPlan] = dataclasses.field(default_factory=list)  # batch_per_gpu: max, one per configuration

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    def record(self) -> store.Estimate:
        """What run.json keeps of the plan: the trials handed to Tune, their estimates, the cluster."""
        planned = [store.PlannedTrial(t.trial_id, t.seconds, t.source) for t in self.trials if t.infeasible is None]
        return store.Estimate(self.hardware, planned, self.makespan_s, [n.gpus for n in self.nodes],
                              [n.cpus if n.cpus is not None else math.inf for n in self.nodes], self.max_concurrent)

    def lines(self) -> list[str]:
        head = f"plan: {self.sweep} at scale {self.scale}, {count(len(self.trials), 'trial')}"
        out = [head + (f" ({overrides.options(self.overrides)})" if self.overrides else ""),
               f"cluster: {self.cluster}; estimates for {self.hardware}"]
        out += ["  " + line for line in table(
            ["node", "GPUs", "CPUs", "fits"],
            [[n.name, f"{n.gpus:g}", "-" if n.cpus is None else f"{n.cpus:g}", f"{n.fits} of {len(self.trials)} trials"]
             for n in self.nodes], right={1, 2})]
        out.append(f"trials, in the order they are handed to Tune ({self.order}):")
        out += ["  " + line for line in table(
            ["trial_id", "trial", "CPUs", "fits", "estimate", "from"],
            [[t.trial_id, t.label, str(t.cpus), f"{t.fits_nodes} node{'s' if t.fits_nodes != 1 else ''}", _estimate(t), t.basis]
             for t in self.trials])]
        reasons: dict[str, list[str]] = {}
        for t in self.trials:
            if t.infeasible:
                reasons.setdefault(t.infeasible, []).append(t.trial_id)
        for reason, ids in reasons.items():  # one line per reason, not per trial
            who = ids[0] if len(ids) == 1 else f"{len(ids)} trials ({', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''})"
            out.append(f"fits no node: {who} {reason}")
        out += self.notes
        out += [f"max batch search {s.config_id}: {s.label}: at most {s.most_probes} probes (batch {s.lo} to {s.hi}, "
                f"step {s.step}), " + (f"about {_duration(s.seconds)} in all, one after the other" if s.seconds is not None
                                       else "their time unknown (no earlier run on this hardware)")
                for s in self.searches]
        if self.searches:
            out.append("the trials above are the searches' first probes; the makespan counts them only")
        out.append(self._totals())
        out += [f"{fw} trials run in {where}" for fw, where in self.environments.items()]
        out.append(self.history)
        if self.last_run:
            out.append("last " + self.last_run.line())
        return out

    def _totals(self) -> str:
        limit = f", at most {self.max_concurrent} at once" if self.max_concurrent else ""
        if self.makespan_s is None:
            return f"estimated makespan and GPU-hours: unknown (no earlier run on this hardware to time the trials){limit}"
        spread = lambda r, f: f" ({f(r[0])} to {f(r[1])})" if r and r[0] != r[1] else ""  # noqa: E731
        hours = lambda h: f"{h:.4g}"  # noqa: E731
        return (f"estimated makespan {_duration(self.makespan_s)}{spread(self.makespan_range_s, _duration)}{limit}, "
                f"{self.makespan_s / self.lower_bound_s:.2f} x the lower bound; "
                f"{hours(self.gpu_hours)} GPU-hours{spread(self.gpu_hours_range, hours)}")


def table(head: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    """Columns padded to their widest cell (those in `right` aligned right)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.rjust(w) if i in right else c.ljust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return [line(head)] + [line(r) for r in rows]


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d} min"


def trial_time(seconds: float) -> str:
    """A trial's estimated time as the plan lists it: seconds under a minute (3 digits), else minutes."""
    return f"{seconds:.3g} s" if seconds < 60 else _duration(seconds)


def _estimate(t: TrialPlan) -> str:
    if t.seconds is None:
        return "-"
    return trial_time(t.seconds) + (f" +-{t.uncertainty:.0%}" if t.uncertainty is not None else "")


# --- the cluster ----------------------------------------------------------------------------------

def stand_in(sweep: Sweep, scale: str) -> str | None:
    """A line for a scale that trains other models than the sweep's full scale (resnet50_lr_scaling's smoke scale
    trains resnet8_cifar_v2): the sweep's name names the model it studies, not the one that trains here."""
    if scale == "full" or "model" in sweep.overrides:  # (--set model=X trains X at every scale)
        return None
    as_filed = dataclasses.replace(sweep, overrides={})  # a --set checked at one scale may not fit the other

    def models(at: str) -> list[str]:
        return sorted({t.model for t in as_filed.trials(at)} | {s.probe(s.lo).model for s in as_filed.searches(at)})

    here, full = models(scale), models("full")
    if set(here) <= set(full):
        return None
    what = "a small stand-in" if len(here) == 1 else "small stand-ins"
    return (f"scale {scale} trains {', '.join(here)}, {what} for the sweep's full-scale {', '.join(full)}: "
            "a check that the sweep runs, not the study's figures")


def check_emulation(trials: Sequence[TrialConfig]) -> None:
    """The embedded emulation starts Ray nodes and CPU devices on this one machine: a few, not a cluster's
    worth. `plan` and `run` refuse the same sweeps."""
    nodes, gpus_per_node = max(t.nodes for t in trials), max(t.gpus_per_node for t in trials)
    if nodes > limits.MAX_EMULATED_NODES:
        raise UsageError(f"trials span up to {nodes} nodes; the embedded Ray emulates at most {limits.MAX_EMULATED_NODES} "
                         "on one machine: run them on a cluster (--address)")
    if gpus_per_node > limits.MAX_EMULATED_GPUS:
        raise UsageError(f"trials need {gpus_per_node} GPUs on a node; the embedded Ray emulates at most "
                         f"{limits.MAX_EMULATED_GPUS} per node: run them on a cluster (--address)")


def emulated_refusals(trials: list[TrialConfig]) -> dict[str, str]:
    """trial_id -> why it cannot run on emulated devices. Those are CPUs: MXNet 1.9.1 has no fp16 matrix multiply
    there (its first fp16 step fails with "FP16 gemm on cpu not implemented"), so its fp16 trials need GPUs; its bf16
    needs AVX-512 in this machine's CPU (trainables/environment.py). TensorFlow and PyTorch run both on any CPU."""
    from trainables.environment import cpu_flags, mxnet_bf16_cpu_problem

    bf16_problem = mxnet_bf16_cpu_problem(cpu_flags())
    refused = {}
    for t in trials:
        if t.framework == "mxnet" and t.precision == "fp16":
            refused[t.trial_id] = (f"MXNet trial {t.trial_id} asks for fp16, which MXNet cannot run on the CPU devices "
                                   "that emulate GPUs here (no fp16 matrix multiply on CPUs): run it on GPUs, or bf16 on "
                                   "a CPU with AVX-512")
        if t.framework == "mxnet" and t.precision == "bf16" and bf16_problem:
            refused[t.trial_id] = (f"MXNet trial {t.trial_id} asks for bf16, which the CPU devices that emulate GPUs "
                                   f"here cannot run ({bf16_problem}): use another precision here, or another "
                                   "framework's bf16")
    return refused


def emulated_shape(trials: Sequence[TrialConfig], emulate_gpus: int | None) -> tuple[int, int]:
    """(Ray nodes, GPUs each) of an embedded Ray with emulated GPUs: as many nodes as the widest trial
    spans, each with --emulate-gpus GPUs or twice the GPUs per node of the largest trial."""
    needed = max(t.gpus_per_node for t in trials)
    return max(t.nodes for t in trials), emulate_gpus or min(2 * needed, max(needed, limits.MAX_EMULATED_GPUS))


def machine_hardware(emulated: bool) -> Hardware:
    """The hardware trials of an embedded Ray train on here: its GPU model, or its CPU's when emulated."""
    from trainables import environment

    kind = "cpu-emulated" if emulated else "gpu"
    found = environment.capture(kind, 1)
    return Hardware(kind, found["cpu_model"] if emulated else found["gpu_model"])


def cluster_hardware(nodes: Sequence[Node]) -> tuple[Hardware, str]:
    """A joined cluster's hardware as Ray names its GPUs (the model with the most GPUs), and a note."""
    models: Counter[str] = Counter()
    for node in nodes:
        if node.gpus and node.accelerator:
            models[node.accelerator] += node.gpus
    if not models:  # fake GPUs (ray start --num-gpus on CPU nodes): trials emulate them
        return Hardware("cpu-emulated", None), "its nodes name no GPU model (emulated GPUs)"
    model = models.most_common(1)[0][0]
    mixed = f" (mixed: {', '.join(f'{int(n)} {m}' for m, n in models.items())}; estimates for the most)" if len(models) > 1 else ""
    return Hardware("gpu", model), f"{sum(models.values()):g} {model} GPUs{mixed}"


def _shape(nodes: Sequence[Node], emulated: bool) -> str:
    gpus = {n.gpus for n in nodes}
    each = f"{next(iter(gpus)):g}" if len(gpus) == 1 else "/".join(f"{n.gpus:g}" for n in nodes)
    kind = f"{'emulated ' if emulated else ''}GPU{'' if gpus == {1} else 's'}"
    return (f"{count(len(nodes), 'node')} with {each} {kind}"
            f"{' each' if len(nodes) > 1 else ''} and {count(nodes[0].cpus, 'CPU')}")


def machine_memory_mib() -> float | None:
    """This machine's physical memory: the embedded Ray's nodes all share it."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError):
        return None


def embedded_target(trials: Sequence[TrialConfig], emulate_gpus: int | None, emulated: bool) -> Target:
    """The embedded Ray `run` would start here for these trials, without starting it."""
    from trainables import environment

    if emulated:
        check_emulation(trials)
    node_count, gpus = emulated_shape(trials, emulate_gpus) if emulated else (1, environment.real_gpu_count())
    cpus = float(os.cpu_count() or 1)  # what Ray finds on this machine
    nodes = [Node(f"node-{i + 1}", "local", cpus, float(gpus)) for i in range(node_count)]
    why = " (no GPU found)" if emulated and not emulate_gpus else ""
    return Target(nodes, machine_hardware(emulated), f"an embedded Ray as `run` would start it here: {_shape(nodes, emulated)}{why}",
                  machine_memory_mib())


def started_target(cluster: ray_cluster.Cluster, emulated: bool | None) -> Target:
    """The cluster a run has started or joined, as Ray reports its nodes."""
    if cluster.embedded:
        return Target(cluster.nodes, machine_hardware(bool(emulated)), f"the embedded Ray: {_shape(cluster.nodes, bool(emulated))}",
                      machine_memory_mib())
    hardware, note = cluster_hardware(cluster.nodes)
    return Target(cluster.nodes, hardware, f"the joined Ray cluster: {count(len(cluster.nodes), 'node')}, {note}")


def described_target(args: argparse.Namespace) -> Target:
    cpus = float(args.cpus_per_node) if args.cpus_per_node else math.inf
    nodes = [Node(f"node-{i + 1}", "described", cpus, float(args.gpus_per_node)) for i in range(args.nodes)]
    if args.gpu_model:
        hardware, like = Hardware("gpu", args.gpu_model), ""
    else:
        from trainables import environment

        hardware, like = machine_hardware(environment.real_gpu_count() == 0), " like this machine's (--gpu-model names others)"
    cpu_text = f"{args.cpus_per_node} CPUs each" if args.cpus_per_node else "CPUs not given"
    return Target(nodes, hardware, f"{count(args.nodes, 'node')} of {count(args.gpus_per_node, 'GPU')}{like}, {cpu_text}")


def gpu_model_target(trials: list[TrialConfig], model: str) -> Target:
    """`plan --gpu-model MODEL` alone: nodes of that GPU, as many nodes and GPUs each as the largest trial needs, so
    that every trial fits and is timed there."""
    nodes, gpus = max((t.nodes for t in trials), default=1), max((t.gpus_per_node for t in trials), default=1)
    return Target([Node(f"node-{i + 1}", "described", math.inf, float(gpus)) for i in range(nodes)], Hardware("gpu", model),
                  f"{count(nodes, 'node')} of {count(gpus, 'GPU')} {model}, as the largest trial needs "
                  "(--nodes and --gpus-per-node describe others), CPUs not given")


def joined_target(address: str, name: str) -> Target:
    """The nodes of the cluster at `address`: joined as a driver to read them, then left."""
    cluster = ray_cluster.start(address, 0, job_name=f"plan {name}")
    try:
        nodes = cluster.nodes
    finally:
        ray_cluster.stop(cluster)
    hardware, note = cluster_hardware(nodes)
    return Target(nodes, hardware, f"the Ray cluster at {address}: {count(len(nodes), 'node')}, {note}")


# --- the plan -------------------------------------------------------------------------------------------

def with_host_cpus(trials: Sequence[TrialConfig], target: Target) -> list[TrialConfig]:
    """The trials, each knowing the CPUs it reserves by default on this target (TrialConfig.cpus).

    On real GPUs a trial that leaves cpus_per_trial unset takes the node's cores per GPU for each of its
    GPUs: the share of the GPU node with the fewest, so that a trial fits wherever its GPUs do. Emulated
    GPUs, and a described cluster without --cpus-per-node, keep one CPU per trial.
    """
    shares = [int(n.cpus // n.gpus) for n in target.nodes if n.gpus >= 1 and math.isfinite(n.cpus)]
    if target.hardware.kind != "gpu" or not shares:
        return list(trials)
    return [dataclasses.replace(t, cpus_per_gpu=max(1, min(shares))) for t in trials]


def build(sweep: Sweep, scale: str, trials: list[TrialConfig], target: Target, history: History,
          last_run: Comparison | None = None, max_concurrent: int | None = None,
          envs: dict[str, environments.Environment] | None = None, searches: Sequence[Search] = (),
          capacity_mib: float | None = None) -> tuple[Plan, list[TrialConfig]]:
    """The plan of these trials on the target, and the trials that fit in the order to hand them to Tune
    (envs: each framework's environment, to say where its trials run; searches: batch_per_gpu: max, whose
    first probes are among the trials)."""
    estimator = Estimator(history, target.hardware)
    guesses = {t.trial_id: estimator.guess(t) for t in trials}
    bad = ray_cluster.infeasible({t.trial_id: (t.cpus, t.gpus_per_node, t.nodes) for t in trials}, target.nodes)
    fitting = [t for t in trials if t.trial_id not in bad]
    timed = all(guesses[t.trial_id].seconds is not None for t in fitting)
    # Without a time for every trial, the order still follows the models' relative costs.
    seconds = {t.trial_id: guesses[t.trial_id].seconds + estimator.gap if timed else estimates.model_cost(t)
               for t in fitting}
    gpus = [n.gpus for n in target.nodes]
    cpus = [n.cpus for n in target.nodes]
    ordered, how, makespan = (packing.order(fitting, seconds, gpus, cpus, max_concurrent=max_concurrent)
                              if fitting else ([], "no trial fits", 0.0))
    axes = spec.varying_axes(trials)
    trial_plans = [_trial_plan(t, guesses[t.trial_id], target.nodes, bad.get(t.trial_id), axes)
                   for t in ordered + [t for t in trials if t.trial_id in bad]]
    nodes = [NodePlan(n.node_id[:12], n.gpus, None if math.isinf(n.cpus) else n.cpus,
                      sum(1 for t in trials if n.gpus >= t.gpus_per_node and n.cpus >= t.cpus))
             for n in target.nodes]
    plan = Plan(sweep=sweep.name, scale=scale, overrides=dict(sweep.overrides), cluster=target.description,
                hardware=str(target.hardware), nodes=nodes, order=how, trials=trial_plans, max_concurrent=max_concurrent,
                history=_history_line(estimator), model_error=estimator.model_error, last_run=last_run,
                notes=_notes(trials, target) + resource_warnings(trials, target, history),
                environments={name: environments.origin(name, environments.of(envs or {}, name))
                              for name in dict.fromkeys(t.runs_as for t in trials)},
                searches=[_search_plan(s, estimator, capacity_mib) for s in searches],
                **_totals(ordered, guesses, estimator.gap, gpus, cpus, max_concurrent, timed and bool(ordered), makespan))
    return plan, ordered


def _search_plan(search: Search, estimator: Estimator, capacity_mib: float | None) -> SearchPlan:
    """Its longest search's probes, each estimated as any trial is, plus Tune's start-up per round."""
    batches = worst_probes(search.lo, search.hi, search.step)
    guesses = [estimator.guess(search.probe(b, capacity_mib)).seconds for b in batches]
    seconds = None if None in guesses else sum(g + estimator.gap for g in guesses)
    first = search.probe(search.lo, capacity_mib)
    label = " ".join(p for p in first.label().split() if not p.startswith(("batch=", "lr=")))
    return SearchPlan(search.config_id, label, search.lo, search.hi, search.step, len(batches), seconds)


# GPUs of the Hopper architecture (sm_90), as their models' names say: no pip MXNet has kernels for them.
HOPPER = ("H100", "H200", "H800", "H20", "GH200")


def _notes(trials: list[TrialConfig], target: Target) -> list[str]:
    model = target.hardware.model or ""
    if target.hardware.kind == "gpu" and any(t.framework == "mxnet" for t in trials) \
            and any(word in HOPPER for word in model.replace("-", " ").split()):
        return [f"note: no pip build of MXNet runs on {model} (Hopper): the framework check before the trials stops "
                "the run unless MXNet gets an environment with a Hopper build (--env, environments:; docs/gpus.md), "
                "or --skip-infeasible records its trials as infeasible"]
    if target.hardware.kind == "cpu-emulated" and (refused := emulated_refusals(trials)):
        more = f" (and {count(len(refused) - 1, 'more trial')})" if len(refused) > 1 else ""
        return [f"note: {next(iter(refused.values()))}{more}; `run` stops here, or --skip-infeasible records such "
                "trials as infeasible"]
    return []


def resource_warnings(trials: Sequence[TrialConfig], target: Target, history: History) -> list[str]:
    """One line for each thing a node cannot give the trials at once, without refusing them: more processes than
    its cores (they take turns: emulated GPUs on a laptop, the usual case; estimates.oversubscribed), more host
    memory than it has (as measured per GPU by earlier runs of the model at that batch; it swaps, or is killed)."""
    cores = min((n.cpus for n in target.nodes), default=math.inf)
    out = []
    crowded = [t for t in trials if estimates.oversubscribed(t, cores)]
    if crowded:
        worst = max(crowded, key=lambda t: t.processes_per_node)
        out.append(f"warning: {_some(crowded)} run{'s' if len(crowded) == 1 else ''} up to "
                   f"{worst.processes_per_node} processes (one per GPU) on a node of {count(int(cores), 'core')}: they take "
                   "turns, far slower than GPUs would be, and their times are evidence for their own GPU counts only")
    per_gpu = _host_mib_per_gpu(history)
    needs = {t.trial_id: per_gpu[_memory_key(t)] * t.gpus_per_node for t in trials if _memory_key(t) in per_gpu}
    heavy = [t for t in trials if target.memory_mib and needs.get(t.trial_id, 0) > target.memory_mib]
    if heavy:
        most = max(needs[t.trial_id] for t in heavy)
        out.append(f"warning: {_some(heavy)} need{'s' if len(heavy) == 1 else ''} up to {most / 1024:.1f} GiB of host "
                   f"memory on a node (earlier runs' peak per GPU x its GPUs); a node has {target.memory_mib / 1024:.1f} GiB: "
                   "expect swapping or an out-of-memory kill")
    return out


def _some(trials: Sequence[TrialConfig]) -> str:
    ids = [t.trial_id for t in trials]
    return f"trial {ids[0]}" if len(ids) == 1 else f"{len(ids)} trials ({', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''})"


def _memory_key(t: TrialConfig) -> tuple:
    """What sets a GPU's share of host memory: the network, its input size and batch, its framework and precision."""
    return t.framework, t.model, t.image_size, t.batch_per_gpu, t.precision


def _host_mib_per_gpu(history: History) -> dict[tuple, float]:
    """The most host memory per GPU that earlier runs of each model and batch took, on any hardware."""
    out: dict[tuple, float] = {}
    for m in history.measurements:
        if m.host_mib_per_gpu:
            key = _memory_key(m.config)
            out[key] = max(out.get(key, 0.0), m.host_mib_per_gpu)
    return out


def _trial_plan(t: TrialConfig, guess: estimates.Guess, nodes: list[Node], infeasible: str | None,
                axes: tuple[str, ...]) -> TrialPlan:
    fits = sum(1 for n in nodes if n.gpus >= t.gpus_per_node and n.cpus >= t.cpus)
    return TrialPlan(t.trial_id, t.label(axes), t.num_gpus, t.nodes, t.cpus, fits, infeasible, guess.seconds, guess.source,
                     guess.runs, guess.uncertainty, guess.basis)


def _totals(ordered: list[TrialConfig], guesses: dict[str, estimates.Guess], gap: float, gpus: list[float],
            cpus: list[float], max_concurrent: int | None, timed: bool, makespan: float) -> dict[str, Any]:
    """Makespan and GPU-hours, each with its range: every estimate at its low, then its high end. The
    makespan counts Tune's start-up gap per trial; GPU-hours, like the summary rows', the trials' wall time."""
    if not timed:
        return {"makespan_s": None, "makespan_range_s": None, "lower_bound_s": None, "gpu_hours": None,
                "gpu_hours_range": None}
    # An estimate of +-u spans seconds / (1 + u) to seconds x (1 + u): never below zero, however large u is.
    at = lambda side: {t.trial_id: guesses[t.trial_id].seconds * (1 + (guesses[t.trial_id].uncertainty or 0)) ** side  # noqa: E731
                       for t in ordered}
    low, mid, high = at(-1), at(0), at(1)
    hours = lambda s: sum(store.gpu_hours(t.num_gpus, s[t.trial_id]) for t in ordered)  # noqa: E731
    dispatch = lambda s: {tid: v + gap for tid, v in s.items()}  # noqa: E731
    return {"makespan_s": makespan,
            "makespan_range_s": [packing.simulate(ordered, dispatch(s), gpus, cpus, max_concurrent) for s in (low, high)],
            "lower_bound_s": packing.lower_bound(ordered, dispatch(mid), sum(gpus)),
            "gpu_hours": hours(mid), "gpu_hours_range": [hours(low), hours(high)]}


def _history_line(estimator: Estimator) -> str:
    if not estimator.found:
        return f"estimates: no earlier run on {estimator.hardware} in the store; a first run of the sweep teaches them"
    error = (f"; the model-cost estimate's error on them +-{estimator.model_error:.0%} (median, each predicted from the other runs')"
             if estimator.model_error is not None else "")
    gap = (f"; the makespan adds Tune's start-up, {estimator.gap:.1f} s per trial in {count(estimator.gap_sessions, 'earlier session')}"
           if estimator.gap_sessions else "")
    return (f"estimates from {count(len(estimator.walls), 'trial')} measured in {count(estimator.runs, 'earlier run')} "
            f"on {estimator.hardware}{error}{gap}")


def last_run(results: Location, name: str, hardware: Hardware | None = None) -> Comparison | None:
    """How far off the latest estimated run of the sweep on this hardware was (runs from before estimates
    were recorded, and runs on other hardware, are skipped)."""
    for run_dir in reversed(store.run_dirs(results, name)):
        run = store.RunStore(run_dir)
        try:
            meta = run.meta
            if not any(s.estimate and (hardware is None or _hardware_named(s.estimate.hardware).matches(hardware))
                       for s in meta.sessions):
                continue
            found = estimates.compare(meta, run.trial_rows())
        except store.StoreError:
            continue
        if found:
            return found
    return None


def _hardware_named(text: str) -> Hardware:
    """A Hardware back from its text, as run.json records it: "gpu (NVIDIA H100 80GB HBM3)"."""
    kind, _, model = text.partition(" (")
    model = model.removesuffix(")")
    return Hardware(kind, None if model in ("", "any model") else model)


# --- the command --------------------------------------------------------------------------------------

def _cluster_kind(args: argparse.Namespace) -> str:
    """Which cluster the options name: "described", "gpu-model", "joined" or "embedded"; options that clash are refused."""
    if args.nodes is not None or args.gpus_per_node is not None:
        if args.address or args.emulate_gpus:
            raise UsageError("--nodes and --gpus-per-node describe a cluster; --address and --emulate-gpus name a "
                             "real one: give one or the other")
        if args.nodes is None or args.gpus_per_node is None:
            raise UsageError("--nodes and --gpus-per-node go together")
        return "described"
    if args.cpus_per_node:
        raise UsageError("--cpus-per-node describes a cluster's nodes: give --nodes and --gpus-per-node too")
    if args.gpu_model:  # a GPU model alone: nodes of it, as many as the largest trial needs (gpu_model_target)
        if args.address or args.emulate_gpus:
            raise UsageError("--gpu-model describes GPUs; --address and --emulate-gpus name a real cluster: give one or the other")
        return "gpu-model"
    if args.address or os.environ.get("RAY_ADDRESS"):
        if args.emulate_gpus:
            raise UsageError("--emulate-gpus applies to the embedded Ray only; a joined cluster brings its own GPUs")
        return "joined"
    return "embedded"


def cmd_plan(args: argparse.Namespace) -> int:
    """`python -m sweep plan NAME|FILE`: the plan of a new run, printed (or as JSON); nothing is started."""
    from trainables import environment

    sweep = overrides.apply(spec.load(args.sweep, args.max_trials), overrides.parse(args.set))
    code = environments.code_folder(args.code)
    results = results_location(args.results)
    kind = _cluster_kind(args)
    target: Target | None = None
    if kind == "described":
        target = described_target(args)
        emulated: bool | None = target.hardware.kind == "cpu-emulated"
    elif kind == "gpu-model":  # its nodes follow from the trials, below
        emulated = False
    elif kind == "joined":
        target, emulated = joined_target(args.address or os.environ["RAY_ADDRESS"], sweep.name), None
    else:
        emulated = bool(args.emulate_gpus) or environment.real_gpu_count() == 0
    scale = args.scale or ("smoke" if emulated else "full")  # as `run` chooses it
    from sweep.max_batch import memory_size_mib

    capacity = memory_size_mib(args.emulate_gpu_memory) if args.emulate_gpu_memory else None
    if capacity is not None and not emulated:
        raise UsageError("--emulate-gpu-memory applies to emulated GPUs: real GPUs have their own memory")
    given = overrides.trials(sweep, scale)  # first: a problem the --set values made is named after them
    searches = sweep.searches(scale)
    trials = [dataclasses.replace(t, memory_capacity_mib=capacity) for t in given]
    trials += [s.probe(s.lo, capacity) for s in searches]
    if kind == "gpu-model":
        target = gpu_model_target(trials, args.gpu_model)
    target = target or embedded_target(trials, args.emulate_gpus, bool(emulated))
    trials = with_host_cpus(trials, target)
    history = estimates.history(results)
    if args.gpu_model and peaks.gpu_model(args.gpu_model) is None and not any(
            target.hardware.matches(m.hardware) for m in history.measurements):  # neither a peak nor a run to time it by
        raise UsageError(f"--gpu-model {args.gpu_model}: unknown GPU model, with no run on it in the store; "
                         f"{limits.known_names(args.gpu_model, peaks.PEAKS)}")
    plan, _ = build(sweep, scale, trials, target, history, last_run(results, sweep.name, target.hardware),
                    args.max_concurrent, environments.chosen(sweep.environments, []), searches, capacity)
    print(plan.to_json() if args.json else "\n".join(plan.lines() + environments.model_sources([t.model for t in trials], code)))
    return 0
