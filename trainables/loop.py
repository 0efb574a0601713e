"""The trainable contract and the one training loop both frameworks run under.

`run_trial(config, devices, data_dir, report)` trains one trial and calls `report(metrics,
checkpoint_dir)` after each epoch. It knows nothing of Ray: the engine's Tune trainable
(sweep/trial.py) and the raw baseline (trainables/local.py) both call it. A framework supplies a
Backend (below); timing, lr schedule, divergence, checkpoints and reporting live here, once, so the
two frameworks are measured by the same code.
"""
from __future__ import annotations

import importlib
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

from trainables import data, environment, images, zoo
from trainables.config import TrialConfig
from trainables.failure import EmulatedOutOfMemoryError
from trainables.measure import EmulatedMemory, StepTimer, host_peak_rss_mib, throughput


@dataclass(frozen=True)
class Devices:
    kind: str  # "gpu" or "cpu-emulated"
    count: int
    ray_gpu_ids: tuple[str, ...]  # what Ray assigned; fake ids when emulated

    @classmethod
    def of(cls, gpu_ids: list[str] | tuple[str, ...], emulated: bool) -> Devices:
        """The devices of a trial's process: its GPUs, or as many CPU devices when GPUs are emulated.

        The one place the emulation rule lives: fake GPU ids must never reach a real device, so an
        emulated trial's process sees no GPU at all (frameworks read CUDA_VISIBLE_DEVICES when they load).
        """
        ids = tuple(str(i) for i in gpu_ids)
        if emulated:
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
            return cls("cpu-emulated", len(ids), ids)
        return cls("gpu", len(ids), ids)


class Backend(Protocol):
    """What a framework folder provides (trainables/<framework>/backend.py: class Backend)."""

    framework_version: str
    framework_cuda_version: str | None  # the CUDA the framework was built with; None for a CPU build
    framework_cudnn_version: str | None  # the cuDNN it was built with, where it says
    layout: str  # "NCHW" or "NHWC": the layout put() expects
    put_ahead: bool  # put() may run on the prefetch thread, ahead of the step (the framework is thread-safe there)

    def __init__(self, cfg: TrialConfig, devices: Devices, image_size: int) -> None: ...
    def param_count(self) -> int: ...
    def forward_gflops(self) -> float: ...  # the network's forward GFLOPs per image, counted on it (flops.py)
    def put(self, x: np.ndarray, y: np.ndarray) -> Any: ...  # host batch (NHWC float32) -> devices
    def synthetic(self) -> Any: ...  # one random batch made on the devices, reused every step
    # The counts are of the images the devices actually scored (read off what they computed on), so
    # that an accuracy is a fraction of exactly those images however a batch was split or padded.
    def train_step(self, batch: Any, lr: float) -> tuple[float, int, int]: ...  # (loss sum, correct, images), synchronised
    def eval_step(self, batch: Any) -> tuple[int, int]: ...  # (correct, images), synchronised
    def device_peak_mib(self) -> list[float] | None: ...  # one per device; None when emulated
    def precision_columns(self) -> dict[str, Any]: ...  # layout, tf32_allowed, loss_scale (sweep/schema.py)
    def compute_dtype(self) -> str | None: ...  # what the last step's layers computed in, observed; None before one
    def save(self, path: str) -> None: ...
    def load(self, path: str) -> None: ...


HALF_PRECISIONS = {"bfloat16": "bf16", "float16": "fp16"}  # 16-bit compute dtypes, in the precision setting's names
TF32_FROM_SM = 80  # TF32 tensor cores: Ampere (sm_80) and later; a CPU or an older GPU computes fp32 in fp32


def tf32_hardware(devices: Devices) -> bool | None:
    """Whether the trial's GPUs have TF32 (Ampere and later); False on CPU devices, None where the driver cannot say."""
    if devices.kind != "gpu":
        return False
    found = environment.gpu_architecture(int(devices.ray_gpu_ids[0])) if devices.ray_gpu_ids else None
    return None if found is None else int(found[1].removeprefix("sm_")) >= TF32_FROM_SM


def computed_precision(dtype: str | None, tf32_allowed: bool, tf32_hardware: bool | None) -> str | None:
    """What a trial's steps computed in, in the `precision` setting's names: the 16-bit dtype its layers computed
    in; else tf32 where TF32 was allowed on GPUs that have it, fp32 where it was not or they have none (a CPU:
    the setting `tf32` computes fp32 there). None where that is not known (a GPU the driver does not name)."""
    if dtype in HALF_PRECISIONS:
        return HALF_PRECISIONS[dtype]
    if dtype != "float32" or (tf32_allowed and tf32_hardware is None):
        return None
    return "tf32" if tf32_allowed and tf32_hardware else "fp32"


def model_gflops(backend: Any) -> float | None:
    """The network's forward GFLOPs per image, as its framework's counter reads the built network (training: 3x,
    trainables/peaks.py); None where the counter cannot read it (a Keras model that is not functional, say): the
    rows' MFU is then null, and mfu_note says why."""
    try:
        return backend.forward_gflops()
    except Exception:  # noqa: BLE001 - a count is a measurement of the network, never a reason to fail its trial
        return None

def lr_at(cfg: TrialConfig, epoch: int) -> float:
    """Gradual warm-up (linear over warmup_epochs), then step decay at lr_decay_epochs."""
    if epoch < cfg.warmup_epochs:
        return cfg.lr * (epoch + 1) / (cfg.warmup_epochs + 1)
    drops = sum(1 for e in cfg.lr_decay_epochs if epoch >= e)
    return cfg.lr * cfg.lr_decay_factor ** drops


def backend_module(cfg: TrialConfig, devices: Devices) -> Any:
    """trainables/<framework>/backend.py, imported. A framework that reads the process's environment once, when it is
    first imported, has it set from the trial first, by its package's prepare(cfg, devices): Keras its backend, JAX its
    host devices (trainables/keras/__init__.py)."""
    package = importlib.import_module(f"trainables.{cfg.framework}")
    if hasattr(package, "prepare"):
        package.prepare(cfg, devices)
    return importlib.import_module(f"trainables.{cfg.framework}.backend")


def load_backend(cfg: TrialConfig, devices: Devices, image_size: int, num_classes: int | None = None) -> Backend:
    """The framework's Backend; num_classes: an image folder's (data: imagenet), else the zoo's 10."""
    module = backend_module(cfg, devices)
    if num_classes is None:
        return module.Backend(cfg, devices, image_size)
    return module.Backend(cfg, devices, image_size, num_classes=num_classes)


def open_rendezvous(framework: str, host: str) -> tuple[Any, int]:
    """Rank 0's rendezvous, for a framework whose ranks meet at a store rank 0 holds (PyTorch's, trainables/pytorch/
    backend.py): (the open store, its port), opened in this process on a port the kernel gives it."""
    return importlib.import_module(f"trainables.{framework}.backend").open_rendezvous(host)


def _emulated_memory(cfg: TrialConfig, devices: Devices) -> EmulatedMemory | None:
    """On emulated devices, the tracker of their memory, started once the framework is imported (so that its
    import is not counted) and before the backend builds anything."""
    if devices.kind == "gpu":
        return None
    backend_module(cfg, devices)
    return EmulatedMemory(devices.count)


def over_capacity(metrics: dict[str, Any]) -> str | None:
    """Why an epoch's memory does not fit its emulated devices' capacity (--emulate-gpu-memory); None if it does."""
    used, capacity = metrics.get("emulated_device_mem_mib"), metrics.get("memory_capacity_mib")
    if used is None or capacity is None or used <= capacity:
        return None
    return (f"emulated device out of memory: the trial took {used:,.0f} MiB per device, "
            f"more than the capacity of {capacity:,.0f} MiB")


MANIFEST = "checkpoint.json"


def _write_manifest(path: str, epoch: int) -> None:
    """After the backend's files: their sizes and the epoch, so that a copy cut short is seen as such."""
    files = {name: os.path.getsize(os.path.join(path, name)) for name in os.listdir(path)}
    with open(os.path.join(path, MANIFEST), "w") as f:
        json.dump({"epoch": epoch, "files": files}, f)


def checkpoint_epoch(path: str) -> int | None:
    """The epoch a checkpoint folder holds, or None when it is incomplete (a copy cut short by a kill)."""
    try:
        with open(os.path.join(path, MANIFEST)) as f:
            manifest = json.load(f)
        complete = all(os.path.getsize(os.path.join(path, n)) == size for n, size in manifest["files"].items())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return int(manifest["epoch"]) if complete else None


Report = Callable[[dict[str, Any], "str | None"], None]  # (metrics, checkpoint folder or None)
MEASURE_BATCHES = 8  # batches of the pipeline's pass alone before training (input_images_per_sec): a second or so


@dataclass(frozen=True)
class Shard:
    """This process's part of a trial that runs as several workers: its slice of every global batch."""

    rank: int = 0
    count: int = 1


class TrialLoop:
    """One trial's training loop, an epoch at a time; the distributed coordinator drives it per worker."""

    def __init__(self, cfg: TrialConfig, devices: Devices, data_dir: str | None, restore_dir: str | None = None,
                 backend: Backend | None = None, shard: Shard = Shard()) -> None:
        # data_dir is None when the run fell back to synthetic data (no CIFAR-10 at the smoke scale).
        self.cfg, self.shard = cfg, shard
        self.image_size = cfg.image_size or zoo.default_image_size(cfg.model)
        self.synthetic = cfg.data == "synthetic" or data_dir is None
        # data: imagenet: an image folder, read a batch at a time by the framework's own pipeline (below).
        self.folder = images.scan(data_dir) if cfg.data == "imagenet" and not self.synthetic else None
        self.cifar = None if self.synthetic or self.folder else data.load_cifar10(data_dir)
        self.memory = _emulated_memory(cfg, devices) if backend is None else None
        self.backend = backend or load_backend(cfg, devices, self.image_size,
                                               len(self.folder.classes) if self.folder else None)
        self.start_epoch = 0
        if restore_dir:
            self.backend.load(restore_dir)
            self.start_epoch = checkpoint_epoch(restore_dir) + 1
        train_size = (len(self.folder.train.paths) if self.folder else
                      data.CIFAR10_TRAIN_SIZE if self.cifar is None else len(self.cifar.train_x))
        self.steps = data.steps_per_epoch(train_size, cfg.global_batch, cfg.steps_per_epoch)
        self.batch = cfg.global_batch // shard.count  # what this process trains on per step
        self.timer = StepTimer(cfg.warmup_steps)
        self.fixed = {
            "device_kind": devices.kind,
            "ray_gpu_ids": ",".join(devices.ray_gpu_ids),
            "data_kind": "synthetic" if self.synthetic else self.folder.data_kind if self.folder else "real",
            "image_size": self.image_size,
            "param_count": self.backend.param_count(),
            "model_gflops_per_image": model_gflops(self.backend),
            "framework_version": self.backend.framework_version,
            "threads": int(os.environ.get("OMP_NUM_THREADS", "0") or 0),
            "pid": os.getpid(),
            **environment.capture(devices.kind, devices.count),
            # The build's facts, whatever devices the trial ran on (device_kind says which).
            "framework_cuda_version": self.backend.framework_cuda_version,
            "framework_cudnn_version": self.backend.framework_cudnn_version,
        }
        if not self.synthetic:  # the images each validation scores: val_examples, or fewer where the split is smaller
            val_size = len(self.folder.val.paths) if self.folder else len(self.cifar.test_x)
            self.fixed["val_examples"] = min(val_size, cfg.val_examples or val_size)
        self.pipeline = None  # the framework's input pipeline of an image folder: trainables/<framework>/input.py
        if self.folder:
            self.pipeline = importlib.import_module(f"trainables.{cfg.framework}.input").Pipeline(
                cfg, self.folder, self.image_size, shard.rank, shard.count, self.batch, self.steps, devices.kind == "gpu")
        # What was read, and how fast the pipeline alone delivers it, measured once before training (not in an
        # epoch's time): a reader compares it with the steps' images/s per GPU to see whether the input kept up.
        self.fixed["data_format"] = self.pipeline.data_format if self.pipeline else None
        self.fixed["input_images_per_sec"] = (self.pipeline.measure(min(self.steps, MEASURE_BATCHES))
                                              if self.pipeline else None)
        self.on_gpu = devices.kind == "gpu"
        self.tf32_hardware = tf32_hardware(devices)

    def _real_batches(self, epoch: int) -> Any:
        """The epoch's batches on the devices. Read and shuffled on a background thread; copied to the
        devices there too where the backend allows it (put_ahead), so the step does not wait for the copy."""
        cfg, backend, cifar = self.cfg, self.backend, self.cifar
        if self.pipeline:  # an image folder: the framework's pipeline decodes and prefetches in its workers
            return self.pipeline.train(epoch, backend.put_loaded)
        host = data.train_batches(cifar.train_x, cifar.train_y, cfg.global_batch, self.steps, cfg.seed, epoch,
                                  backend.layout, self.shard.rank, self.shard.count)
        if backend.put_ahead:
            return data.prefetch(backend.put(x, y) for x, y in host)
        return (backend.put(x, y) for x, y in data.prefetch(host))

    def run_epoch(self, epoch: int) -> dict[str, Any]:
        """Train one epoch (and validate it on the first worker); the epoch's row."""
        cfg, backend, timer = self.cfg, self.backend, self.timer
        lr = lr_at(cfg, epoch)
        loss_sum, correct, seen = 0.0, 0, 0
        timer.start_epoch()
        t0 = time.perf_counter()
        batches = iter(lambda: backend.synthetic(), None) if self.synthetic else self._waited(self._real_batches(epoch))
        self.input_wait, self.waits = 0.0, []
        timer.start()
        for step, batch in zip(range(self.steps), batches):
            step_loss, step_correct, step_images = backend.train_step(batch, lr)
            timer.stop()
            timer.start()
            loss_sum, correct, seen = loss_sum + step_loss, correct + step_correct, seen + step_images
            if not math.isfinite(step_loss):
                break
        epoch_time = time.perf_counter() - t0
        diverged = not math.isfinite(loss_sum)

        # Taken before validation, which counts its own undecodable images (self.val_skipped).
        skipped = self.pipeline.take_skipped() if self.pipeline else None
        val_acc, t1 = None, time.perf_counter()
        self.val_skipped, self.val_scored = 0, self.fixed.get("val_examples")
        if not self.synthetic and not diverged and self.shard.rank == 0:
            val_acc = self.validate()

        steady = throughput(timer.epoch_times(), self.batch)
        arithmetic = backend.precision_columns()
        return {
            **self.fixed,
            "epoch": epoch,
            "lr_applied": lr,
            "steps": self.steps,
            "epoch_time_s": epoch_time,  # training only; validation is timed apart, as MXNet's fit does
            "val_time_s": time.perf_counter() - t1,
            "images_per_sec": seen / epoch_time,
            "steady_images_per_sec": steady.mean,
            "steady_images_per_sec_stderr": steady.stderr,
            "steady_jitter": steady.jitter,
            "steady_steps": steady.steps,
            "train_loss": loss_sum / seen if seen else None,
            "train_acc": None if self.synthetic else correct / seen,
            "input_wait_s": None if self.synthetic else self.input_wait,
            "steady_input_wait_share": self._steady_wait_share(timer.epoch_times()),
            # Training's and validation's undecodable images.
            "images_skipped": None if skipped is None else skipped + self.val_skipped,
            "val_acc": val_acc,
            # The images validation scored (an undecodable one is not); synthetic data has no validation.
            **({"val_examples": self.val_scored} if self.val_scored is not None else {}),
            "peak_device_mem_mib": backend.device_peak_mib(),
            "peak_host_rss_mib": host_peak_rss_mib(),
            "emulated_device_mem_mib": self.memory.per_device_mib() if self.memory else None,
            "memory_capacity_mib": cfg.memory_capacity_mib,
            **arithmetic,
            # What the steps computed in (the setting `precision` says what was asked for: tf32 is fp32 on a CPU).
            "computed_precision": computed_precision(backend.compute_dtype(), arithmetic["tf32_allowed"],
                                                     self.tf32_hardware),
            "compiler": self.cfg.compiler,  # the graph compiler that ran the step (config.COMPILERS), if any
            "diverged": diverged,
            # Read after the epoch's steps: frameworks load cuDNN at their first convolution on a GPU.
            "cudnn_loaded_version": environment.loaded_cudnn_version() if self.on_gpu else None,
        }

    def _waited(self, batches: Any) -> Any:
        """The batches, the time the loop waited for each added to self.input_wait (input_wait_s) and kept, a step's
        wait each, in self.waits."""
        batches = iter(batches)
        while True:
            t0 = time.perf_counter()
            batch = next(batches, None)
            waited = time.perf_counter() - t0
            self.input_wait += waited
            if batch is None:
                return
            self.waits.append(waited)
            yield batch

    def _steady_wait_share(self, timed: list[float]) -> float | None:
        """The share of the timed steps' time (those steady images/s is of: warm-up steps excluded) that they waited
        for their batch: what says whether the input bound the step, as the step's own rate is measured."""
        if self.synthetic or not timed:
            return None
        return sum(self.waits[len(self.waits) - len(timed):]) / sum(timed)

    def _validate_folder(self) -> float:
        """validate() over an image folder's val split, through the framework's pipeline: each of the first
        val_examples images scored once, but those that cannot be decoded, which are counted (images_skipped)."""
        hits, scored = 0, 0
        limit = self.fixed["val_examples"]
        for batch in self.pipeline.val(limit, self.backend.put_loaded):
            batch_hits, batch_scored = self.backend.eval_step(batch)
            hits, scored = hits + batch_hits, scored + batch_scored
        self.val_skipped = self.pipeline.take_skipped()
        expected = limit - self.val_skipped
        if scored != expected:
            raise RuntimeError(f"validation scored {scored} images, not the {expected} decodable of the {limit} it is for")
        if scored == 0:
            raise images.ImageFolderError(f"none of the first {limit} validation images can be decoded")
        self.val_scored = scored
        return hits / scored

    def validate(self) -> float:
        """The fraction of the validation images (the test split, or its first val_examples) predicted
        right, each image scored exactly once: the devices' own count must be the images asked for."""
        if self.pipeline:
            return self._validate_folder()
        cifar, backend = self.cifar, self.backend
        hits, scored = 0, 0
        for x, y in data.eval_batches(cifar.test_x, cifar.test_y, self.batch, self.cfg.val_examples, backend.layout):
            batch_hits, batch_scored = backend.eval_step(backend.put(x, y))
            hits, scored = hits + batch_hits, scored + batch_scored
        expected = min(len(cifar.test_x), self.cfg.val_examples or len(cifar.test_x))
        if scored != expected:
            raise RuntimeError(f"validation scored {scored} images, not the {expected} it is for")
        return hits / scored


def end_epoch(metrics: dict[str, Any], epoch: int, save: Callable[[str], None], report: Report) -> bool:
    """Hand an epoch's row and its checkpoint to `report`; False when the trial must stop (it diverged).

    A diverged epoch is reported without a checkpoint: the rows so far stand, and no resume ever
    starts from a broken model. `save(path)` writes the backend's state into a folder. An epoch that took
    more memory than its emulated devices hold is reported without one too, then fails the trial as out of
    memory (a GPU of that size would not have run it; a retry must run it again, not skip it).
    """
    if why := over_capacity(metrics):
        report(metrics, None)
        raise EmulatedOutOfMemoryError(why)
    if metrics["diverged"]:
        report(metrics, None)
        return False
    with tempfile.TemporaryDirectory() as path:
        save(path)
        _write_manifest(path, epoch)
        report(metrics, path)
    return True


def run_trial(cfg: TrialConfig, devices: Devices, data_dir: str | None, report: Report,
              restore_dir: str | None = None, backend: Backend | None = None) -> None:
    """The training loop of one trial, without Ray: the engine and the raw benchmark both run this."""
    loop = TrialLoop(cfg, devices, data_dir, restore_dir, backend)
    for epoch in range(loop.start_epoch, cfg.epochs):
        if not end_epoch(loop.run_epoch(epoch), epoch, loop.backend.save, report):
            return
