"""One trial's configuration: the contract between the sweep spec and both frameworks' trainables.

Every key a sweep file may set (in `fixed`, as a `grid` axis or in an `include` entry) is a field here.
The spec loader validates values once; trainables build a TrialConfig from the plain dict Tune hands
them and trust it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any

FRAMEWORKS = ("mxnet", "tensorflow", "pytorch", "keras")  # keras: Keras 3 on keras_backend (trainables/keras/)
DATA_KINDS = ("cifar10", "synthetic", "imagenet")  # imagenet: an image folder (trainables/images.py)
KVSTORES = ("device", "local", "dist_sync", "dist_async")  # MXNet; dist_* span processes and nodes
VARIABLE_UPDATES = ("replicated", "parameter_server")  # TensorFlow, as tf_cnn_benchmarks names them
# The arithmetic of a trial. "tf32" is each framework's default: fp32 variables and math, with TF32 tensor
# cores allowed on GPUs that have them (Ampere and later; on a CPU or an older GPU it is plain fp32).
# "fp32" turns TF32 off. "fp16" and "bf16" are mixed precision: fp32 variables, 16-bit compute; fp16
# with dynamic loss scaling.
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
# Where data: imagenet's JPEGs are decoded: by the input workers on the CPU, or batched on the trial's GPU (nvJPEG,
# through torchvision.io.decode_jpeg: PyTorch only, where torchvision imports; trainables/pytorch/input.py).
DECODES = ("cpu", "gpu")
# The framework Keras 3 runs on (framework: keras; trainables/keras/). Keras's own default is tensorflow.
KERAS_BACKENDS = ("jax", "tensorflow", "torch")
# Fields added after runs were stored, with the value those runs had: left out of the trial id while
# they hold it, so that the id of every older trial stays what it was (resumes still match).
ADDED_LATER = {"precision": "tf32", "xla": False, "max_batch_probe": None, "memory_capacity_mib": None,
               "loader_workers": None, "decode": "cpu",
               "keras_backend": "tensorflow"}
# Settings renamed after runs were stored: old name -> new. Sweep files, --set and stored configs may use
# the old name; a trial id hashes the setting under its old name, so that the ids of older runs hold.
RENAMED = {"xla": "compile"}
# The compiler `compile` turns on, by framework (MXNet has none: hybridize fuses every MXNet graph).
# By what a trial runs as (runs_as: keras on its backend): Keras's jit_compile is XLA on JAX and TensorFlow (on
# torch it is torch.compile, which sweep/spec.py refuses for keras so far).
COMPILERS = {"tensorflow": "xla", "pytorch": "inductor", "keras/jax": "xla", "keras/tensorflow": "xla"}
# How long a PyTorch rank waits in a collective for its peers before it fails (torch's own default is 30
# minutes), and how long the trial's coordinator waits for a rank that its peers are not waiting for (one
# still busy after the others returned from the same call, or rank 0 alone writing a checkpoint). Rank 0
# validates between epochs while the others wait at the next step's all-reduce: the bound must exceed a
# validation pass. Read from the driver's environment, passed to every trial process (sweep/cluster.py).
DDP_TIMEOUT_ENV = "SWEEP_DDP_TIMEOUT_S"
DDP_DEFAULT_TIMEOUT_S = 1800.0


def env_seconds(variable: str, default: float, most: float) -> float:
    """Seconds from an environment variable, `default` where it is unset; ValueError naming the variable for anything
    but a number from 1 to `most` (each driver says it in one line before anything runs: sweep/gcs.py, sweep/checks.py)."""
    raw = os.environ.get(variable)
    if raw is None:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 1 <= seconds <= most:
        given = raw if len(raw) <= 40 else raw[:37] + "..."  # a line, whatever the variable holds
        raise ValueError(f"{variable}: expected seconds from 1 to {most:g}, got {given!r}")
    return seconds


def ddp_timeout_s() -> float:
    """How long a PyTorch rank waits for its peers (docs/pytorch.md); the driver refuses a bad value first (sweep/launch.py)."""
    return env_seconds(DDP_TIMEOUT_ENV, DDP_DEFAULT_TIMEOUT_S, 86400)


# Settings of one framework only, by framework: a trial of another framework neither uses nor shows them
# (tables print "-", labels leave them out). Every other setting is every framework's. A framework
# added later names its own settings here, in one entry.
FRAMEWORK_SETTINGS: dict[str, tuple[str, ...]] = {
    "mxnet": ("kvstore",),
    "tensorflow": ("variable_update", "compile"),
    "pytorch": ("compile", "decode"),
    "keras": ("keras_backend", "compile"),
}


def uses(framework: str, setting: str) -> bool:
    """Whether a trial of `framework` has this setting (FRAMEWORK_SETTINGS)."""
    owners = [fw for fw, own in FRAMEWORK_SETTINGS.items() if setting in own]
    return not owners or framework in owners


def runs_as(framework: str, keras_backend: str) -> str:
    """The name a trial's environment and framework check go by (sweep/environments.py, sweep/checks.py): its
    framework; a keras trial's with its backend ("keras/jax"), as each backend is another framework underneath,
    which may live in another environment."""
    return f"{framework}/{keras_backend}" if framework == "keras" else framework


@dataclass(frozen=True)
class TrialConfig:
    framework: str
    model: str
    num_gpus: int  # the trial's GPUs in all: nodes x gpus_per_node
    batch_per_gpu: int
    epochs: int
    lr: float | None  # the peak lr; None: base_lr x global_batch / base_batch. The schedule derives each epoch's lr from it
    lr_rule: str = "fixed"  # "linear": lr = base_lr x global_batch / base_batch (Goyal et al. 2017)
    base_lr: float | None = None
    base_batch: int | None = None
    warmup_epochs: int = 0  # gradual warm-up: lr ramps linearly up to `lr` over these epochs
    lr_decay_epochs: tuple[int, ...] = ()
    lr_decay_factor: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    data: str = "cifar10"
    image_size: int | None = None  # None: the model's own input size
    steps_per_epoch: int | None = None  # None: one full pass over the training set
    val_examples: int | None = None  # None: the full test split
    warmup_steps: int = 10  # steps excluded from steady-state throughput at the start of a trial
    seed: int = 0
    cpus_per_trial: int | None = None  # None: the engine's default, see `cpus`
    kvstore: str = "device"  # MXNet only; TensorFlow uses MirroredStrategy's all-reduce, PyTorch DDP's
    nodes: int = 1  # a trial with nodes > 1 runs one worker per node (sweep/workers.py)
    gpus_per_node: int | None = None  # None: num_gpus / nodes, filled in on construction
    variable_update: str = "replicated"  # TensorFlow only: all-reduce, or parameter servers on CPU
    precision: str = "tf32"  # PRECISIONS: the framework's default (TF32 allowed on GPUs that have it)
    # The train step compiled by the framework's graph compiler (COMPILERS): TensorFlow's XLA (jit_compile),
    # torch.compile (inductor). Named `xla` before PyTorch came: RENAMED.
    compile: bool = False
    # The node's cores per GPU, filled in by the engine for trials on real GPUs (sweep/plan.py:
    # with_host_cpus). A fact of the cluster, not of the trial: not part of its identity.
    cpus_per_gpu: int | None = None
    # Set by the engine for `batch_per_gpu: max` (sweep/batch_search.py): the id of the configuration whose
    # largest batch this trial probes (None: not a probe), and each emulated device's memory capacity
    # (--emulate-gpu-memory; None: none). A probe or trial whose measured memory exceeds it fails as out of
    # memory (trainables/loop.py). Both are part of the trial's identity: they change what it finds.
    max_batch_probe: str | None = None
    memory_capacity_mib: float | None = None
    # Worker processes of the framework's input pipeline per GPU (data: imagenet): None, the trial's CPUs per GPU.
    loader_workers: int | None = None
    decode: str = "cpu"  # DECODES: where data: imagenet's JPEGs are decoded
    keras_backend: str = "tensorflow"  # KERAS_BACKENDS: framework: keras only

    def __post_init__(self) -> None:
        if self.gpus_per_node is None:  # a config made outside the spec loader (trainables.local, tests)
            object.__setattr__(self, "gpus_per_node", self.num_gpus // self.nodes)
        if self.lr is None:  # the linear scaling rule (the spec loader checks base_lr and base_batch are set)
            object.__setattr__(self, "lr", round(self.base_lr * self.global_batch / self.base_batch, 10))
            object.__setattr__(self, "lr_rule", "linear")

    @property
    def global_batch(self) -> int:
        return self.batch_per_gpu * self.num_gpus

    @property
    def cpus(self) -> int:
        """CPUs reserved for the trial on each of its nodes, and the framework threads it uses.

        A sweep's `cpus_per_trial` where it sets one. Otherwise, on real GPUs, the node's cores per GPU
        for each GPU (tf_cnn_benchmarks uses every core: one thread per trial starves a GPU's input
        and op dispatch); on emulated GPUs 1, so that a CPU machine runs many trials at once.
        """
        if self.cpus_per_trial is not None:
            return self.cpus_per_trial
        return self.cpus_per_gpu * self.gpus_per_node if self.cpus_per_gpu else 1

    @property
    def cpus_per_process(self) -> int:
        """The trial's CPUs on a node shared by its GPUs: each GPU's process's share (PyTorch's threads)."""
        return max(1, self.cpus // self.gpus_per_node)

    @property
    def processes_per_node(self) -> int:
        """What computes at once on each of its nodes: one per GPU (a DDP process in PyTorch, a device's op threads
        in TensorFlow and MXNet). On emulated GPUs each wants a core of its own; with fewer cores they take turns,
        and the trial takes longer than its GPUs suggest (the plan warns; estimates learn nothing from it)."""
        return self.gpus_per_node

    @property
    def input_workers(self) -> int:
        """Worker processes decoding images for each GPU's process (data: imagenet): loader_workers, else the
        process's share of the node's cores, so that a GPU's share decodes its images."""
        return self.loader_workers if self.loader_workers is not None else self.cpus_per_process

    @property
    def distributed(self) -> bool:
        """Runs as separate worker (and server) processes: several nodes, a framework's cluster mode, or
        PyTorch or Keras on torch on several GPUs (DistributedDataParallel: one process per GPU)."""
        return (self.nodes > 1 or self.kvstore.startswith("dist") or self.variable_update == "parameter_server"
                or (self.process_per_gpu and self.num_gpus > 1))

    @property
    def process_per_gpu(self) -> bool:
        """Runs one process (a torch rank) per GPU, under DistributedDataParallel: PyTorch, and Keras on torch."""
        return self.runs_as in ("pytorch", "keras/torch")

    @property
    def runs_as(self) -> str:
        """What its environment and framework check go by: runs_as below."""
        return runs_as(self.framework, self.keras_backend)

    @property
    def compiler(self) -> str | None:
        """The compiler that `compile` runs for this trial's framework; None when it is off. Keras on JAX compiles
        every step (JAX has no other way to run one), whatever `compile` says."""
        always = self.runs_as == "keras/jax"
        return COMPILERS.get(self.runs_as) if self.compile or always else None

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrialConfig:
        values = {RENAMED.get(k, k): v for k, v in values.items()}  # a config stored under an old name
        if values.get("lr_decay_epochs") is not None:
            values["lr_decay_epochs"] = tuple(values["lr_decay_epochs"])
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["lr_decay_epochs"] = list(self.lr_decay_epochs)
        return out

    @cached_property
    def trial_id(self) -> str:
        """A stable id: the same trial config has the same id in every run and on every machine."""
        named = {_OLD_NAMES.get(k, k): v for k, v in self.to_dict().items()}  # hashed under their first names
        values = {k: v for k, v in named.items() if not (k in ADDED_LATER and v == ADDED_LATER[k])}
        del values["cpus_per_gpu"]  # a fact of the cluster, not of the trial
        # Runs from before the engine's default recorded it as 1: the same trial, the same id.
        values["cpus_per_trial"] = self.cpus_per_trial or 1
        blob = json.dumps(values, sort_keys=True, separators=(",", ":"))
        return hashlib.sha1(blob.encode()).hexdigest()[:10]

    @property
    def loss_scaling(self) -> bool:
        """fp16's gradients underflow without it; bf16 has fp32's range and needs none."""
        return self.precision == "fp16"

    def label(self, axes: tuple[str, ...] = ()) -> str:
        """The trial in one short phrase: framework, model, GPUs, batch and lr, then the other `axes`
        (the settings its sweep varies), so that no two trials of a sweep read the same, and its arithmetic
        (precision, compile) wherever it is not the frameworks' default. Settings of another framework never show."""
        parts = [self.framework, self.model, f"gpus={self.num_gpus}", f"batch={self.batch_per_gpu}", f"lr={self.lr:g}"]
        shown = {"framework", "model", "num_gpus", "batch_per_gpu", "lr"}
        current = {RENAMED.get(k, k): ADDED_LATER[k] for k in ("precision", "xla")}  # xla is compile today
        unusual = tuple(k for k, default in current.items() if getattr(self, k) != default and k not in axes)
        for axis in (*axes, *unusual):
            if axis not in shown and uses(self.framework, axis):
                value = getattr(self, axis)
                parts.append(f"{axis}={value:g}" if isinstance(value, float) else
                             f"{axis}={','.join(map(str, value)) or '-'}" if isinstance(value, tuple) else
                             f"{axis}=default" if value is None else f"{axis}={value}")  # image_size None: the model's
        return " ".join(parts)


_OLD_NAMES = {new: old for old, new in RENAMED.items()}


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(TrialConfig)]
