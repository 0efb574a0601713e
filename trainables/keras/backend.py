"""Keras 3 backend (framework: keras): the zoo's Keras networks (trainables/keras/models.py) trained by Keras's own
compiled step (train_on_batch's), on the backend the trial names: keras_backend jax, tensorflow or torch.

KERAS_BACKEND (and on JAX the number of host devices) is set from the trial's config before this module is imported
(trainables/keras/__init__.py: prepare, called by trainables/loop.py). Data parallel as Keras documents it
for each backend:
- JAX: keras.distribution.DataParallel over the trial's devices (emulated GPUs: XLA host devices); jit always on.
  put() lays the batch out as the step computes on it, each device its share of the images (_placed). Across nodes
  a worker per node (sweep/workers.py), the processes of one JAX program (Keras's multi-host start: _join_processes),
  the DataParallel over all their devices, each process feeding its slice of the global batch (train_on_batch lays
  it out: jax.make_array_from_process_local_data).
- TensorFlow: a MirroredStrategy over them (emulated: logical CPU devices), each replica given its slice of the
  batch, as model.fit's distributed dataset gives it (train_on_batch would give every replica the whole batch).
  Across nodes a worker per node under a MultiWorkerMirroredStrategy (TF_CONFIG, as TensorFlow's trials).
- torch: one process per device (a rank), as the engine's PyTorch trials run (sweep/workers.py starts them, on one
  node or several, with torch's env:// rendezvous): the process group as trainables/pytorch/backend.py makes it, the
  Keras model (a torch.nn.Module on this backend) wrapped in DistributedDataParallel as Keras's multi-GPU guide for
  torch does, each rank training its slice of the batch by an explicit step (_rank_step). Each rank reports its own
  sums; sweep/workers.py totals the ranks' rows, as for PyTorch. So does each worker of JAX and TensorFlow across
  nodes (_sums), and the first worker validates alone (eval_step).

The optimizer is the other frameworks' SGD: momentum, and weight decay added to the gradient (L2, once, to the
all-reduced gradient; Keras's own weight_decay is decoupled and would take other steps).
"""
from __future__ import annotations

import contextlib
import os
from typing import Any

import keras
import numpy as np
from keras import ops

from trainables import environment, zoo
from trainables.config import TrialConfig
from trainables.keras import models
from trainables.loop import Devices
from trainables.probe import Build
from trainables.tensorflow import flops  # counts a Keras 3 model's layers: imports keras only, no TensorFlow

BACKEND = keras.backend.backend()  # what prepare set: the trial's keras_backend
# Keras's dtype policies: fp32 variables, 16-bit compute for fp16 and bf16. fp32 and tf32 compute in float32
# (tf32: TF32 tensor cores allowed on GPUs that have them; fp32: not allowed).
POLICIES = {"fp32": "float32", "tf32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}


def _framework() -> tuple[str, str | None, str | None]:
    """The backend framework's version, and the CUDA and cuDNN it was built with (None in a CPU build)."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        info = tf.sysconfig.get_build_info()
        return f"tensorflow {tf.__version__}", info.get("cuda_version"), info.get("cudnn_version")
    if BACKEND == "torch":
        import torch

        cudnn = torch.backends.cudnn.version()
        return f"torch {torch.__version__}", torch.version.cuda, environment.cudnn_version_text(cudnn) if cudnn else None
    import jax

    try:  # a private module of jax (None where no CUDA plugin is installed): where it moved, the rows say nothing
        from jax._src.lib import cuda_versions

        runtime = cuda_versions.cuda_runtime_get_version()  # CUDA's number: 12080 is 12.8
        cuda = f"{runtime // 1000}.{runtime % 1000 // 10}"
        cudnn = environment.cudnn_version_text(cuda_versions.cudnn_get_version())
    except Exception:  # noqa: BLE001 - a build fact, never a reason to fail the trial
        cuda = cudnn = None
    return f"jax {jax.__version__}", cuda, cudnn


def build() -> Build:
    """For the framework check: Keras's version (trainables/probe.py adds the backend's), and the backend framework's
    build: whether it carries CUDA, the CUDA it was built with, the GPU code it carries, the GPUs it sees."""
    _, cuda, _ = _framework()
    if BACKEND == "tensorflow":
        import tensorflow as tf

        info = tf.sysconfig.get_build_info()
        gpu, archs, gpus = bool(info.get("is_cuda_build")), info.get("cuda_compute_capabilities"), \
            len(tf.config.list_physical_devices("GPU"))
    elif BACKEND == "torch":
        import torch

        gpu, archs = cuda is not None, torch.cuda.get_arch_list()
        gpus = torch.cuda.device_count() if gpu else 0
    else:
        import jax

        gpu, archs, gpus = cuda is not None, None, sum(d.platform == "gpu" for d in jax.devices())
    return Build(version=keras.__version__, gpu_build=gpu, cuda=cuda, archs=tuple(archs or ()) or None, gpus=gpus)


class MomentumSGD(keras.optimizers.SGD):
    """Keras's SGD with momentum (v = momentum * v - lr * g; w += v, as MXNet's and trainables/pytorch/backend.py's
    MomentumSGD), g the gradient plus weight_decay * w: L2 added to the (all-reduced, unscaled) gradient."""

    def __init__(self, l2: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.l2 = l2

    def update_step(self, gradient, variable, learning_rate):  # type: ignore[no-untyped-def]
        gradient = ops.add(ops.cast(gradient, variable.dtype), ops.multiply(variable, self.l2))
        super().update_step(gradient, variable, learning_rate)


class StepCounts(keras.metrics.Metric):
    """What a step scored, as sums over its images: cross-entropy (in fp32), right predictions, images. A padding
    image (sample weight 0, put) is none of them. Also the dtype the network's output came in: what its layers computed in
    (read as the step is traced or run), the rows' computed_precision.

    Each sum is a vector of one entry per process that feeds the step (JAX across nodes: the step sees the global batch,
    each process's images a block of it, in process order; else 1 entry): each process reports its own images' sums, as
    every worker of a trial does (sweep/workers.py totals them). All processes run one program: the host picks the entry."""

    def __init__(self, parts: int = 1) -> None:
        super().__init__(name="step_counts")
        self.computed: str | None = None
        self.parts = parts
        self.sums = [self.add_variable((parts,), "zeros", "float32", "sum", name)
                     for name in ("loss_sum", "correct", "images")]

    def update_state(self, y_true, y_pred, sample_weight=None):  # type: ignore[no-untyped-def]
        self.computed = keras.backend.standardize_dtype(y_pred.dtype)
        logits = ops.cast(y_pred, "float32")
        labels = ops.reshape(ops.cast(y_true, "int32"), (-1,))
        scored = ops.cast(sample_weight, "float32")
        picked = ops.take_along_axis(logits, ops.expand_dims(labels, -1), axis=-1)[:, 0]
        loss = ops.logsumexp(logits, axis=-1) - picked
        right = ops.cast(ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), labels), "float32")
        for total, value in zip(self.sums, (loss * scored, right * scored, scored)):
            total.assign_add(ops.sum(ops.reshape(value, (self.parts, -1)), axis=1))

    def result(self):  # type: ignore[no-untyped-def]
        return {v.name: v.value for v in self.sums}


class Backend:
    layout = "NHWC"
    put_ahead = True  # each backend's copy to the devices may run on the prefetch thread, ahead of the step

    def __init__(self, cfg: TrialConfig, devices: Devices, image_size: int, num_classes: int = zoo.NUM_CLASSES) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1")) if BACKEND == "torch" else 1
        if BACKEND == "torch" and (devices.count > 1 or self.world != cfg.num_gpus):  # sweep/workers.py starts them
            raise ValueError(f"a keras trial on torch on {cfg.num_gpus} GPUs runs as {cfg.num_gpus} processes, one per "
                             f"GPU; this one drives {devices.count} and is 1 of {self.world} (WORLD_SIZE)")
        self.framework_version, self.framework_cuda_version, self.framework_cudnn_version = _framework()
        self.framework_version = f"keras {keras.__version__} {self.framework_version}"
        self.devices, self.image_size, self.precision = devices, image_size, cfg.precision
        self.on_gpu = devices.kind == "gpu"
        self.replicas = devices.count
        self._threads_and_tf32(cfg)
        keras.utils.set_random_seed(cfg.seed)  # every device count builds the same weights
        keras.config.set_dtype_policy(POLICIES[cfg.precision])
        # The processes (a worker per node) of one TensorFlow strategy or one JAX program (torch's ranks: self.world);
        # this one's entry of StepCounts' sums (JAX across nodes: its process index, set as it joins the others).
        self.workers, self.part = (cfg.nodes if BACKEND in ("tensorflow", "jax") else 1), 0
        self.distribution = None  # JAX's DataParallel, where the trial has several devices
        self.strategy = self._distribution(cfg, devices)
        with self.strategy.scope() if self.strategy else contextlib.nullcontext():
            self.model = models.build(cfg.model, image_size, num_classes)
            self.sgd = MomentumSGD(cfg.weight_decay, learning_rate=cfg.lr, momentum=cfg.momentum)
            # fp16: dynamic loss scaling (Keras's: from 2^15, halved on a non-finite gradient, which skips that update,
            # doubled after 2,000 finite steps).
            self.opt = keras.optimizers.LossScaleOptimizer(self.sgd) if cfg.loss_scaling else self.sgd
            self.counts = StepCounts(self.workers if BACKEND == "jax" else 1)  # TensorFlow: each replica's own copy
            # The loss: the mean over the batch (Keras's sum_over_batch_size; under the strategy each replica's share
            # is scaled by 1/replicas and the gradients summed: the mean over the global batch).
            self.model.compile(optimizer=self.opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                               weighted_metrics=[self.counts], jit_compile=cfg.compiler == "xla",
                               auto_scale_loss=False)  # the loss-scale optimizer is this one's, made above
            self.opt.build(self.model.trainable_variables)  # its state exists before a checkpoint is loaded into it
        self.ddp = self._torch_ranks() if self.world > 1 else None
        self._lr = cfg.lr
        self.batch_per_gpu = cfg.batch_per_gpu

    def _threads_and_tf32(self, cfg: TrialConfig) -> None:
        """The backend's CPU threads (the trial's CPUs, as the other frameworks'), and TF32 on GPUs that have it,
        allowed except at fp32. JAX's CPU threads are XLA's own: not set."""
        tf32 = cfg.precision != "fp32"
        if BACKEND == "tensorflow":
            import tensorflow as tf

            try:
                tf.config.threading.set_intra_op_parallelism_threads(cfg.cpus)
                tf.config.threading.set_inter_op_parallelism_threads(cfg.cpus)
            except RuntimeError:  # TensorFlow already ran in this process: its pools are fixed until it ends
                pass
            tf.config.experimental.enable_tensor_float_32_execution(tf32)
        elif BACKEND == "torch":
            import torch

            torch.set_num_threads(cfg.cpus_per_process)  # a process per GPU: its share of the node's CPUs
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        else:
            import jax

            jax.config.update("jax_default_matmul_precision", "tensorfloat32" if tf32 else "highest")

    def _distribution(self, cfg: TrialConfig, devices: Devices) -> Any:
        """TensorFlow's MirroredStrategy over the devices, across nodes a MultiWorkerMirroredStrategy (returned: the model
        is built in its scope); on JAX, Keras's DataParallel over them, set for the process (None returned); torch: one
        device (None)."""
        n = devices.count
        if BACKEND == "tensorflow":  # TensorFlow's trials' strategy (Keras runs on TensorFlow in this process already)
            from trainables.tensorflow.backend import replicated

            return replicated(cfg, devices)
        if BACKEND == "jax":
            if cfg.nodes > 1:
                self._join_processes()
                n *= cfg.nodes  # list_devices() lists every process's devices now
            found = keras.distribution.list_devices()
            if len(found) < n:
                raise ValueError(f"JAX sees {len(found)} devices, the trial has {n} (JAX started in this process "
                                 f"before the trial set its host device count)")
            self.distribution = keras.distribution.DataParallel(devices=found[:n]) if n > 1 else None
            keras.distribution.set_distribution(self.distribution)  # this thread's (Keras's state is per thread)
        return None

    def _join_processes(self) -> None:
        """JAX across nodes: this worker joins the trial's other processes, as Keras documents a multi-host start
        (keras.distribution.initialize: jax.distributed.initialize, before JAX computes anything in this process).
        The coordinator's address, the process count and this one's id are in KERAS_DISTRIBUTION_* (sweep/workers.py
        puts them there, as Keras reads them). On the CPU (emulated GPUs) the processes' collectives are gloo's."""
        import jax

        if not self.on_gpu:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        keras.distribution.initialize(job_addresses=os.environ["KERAS_DISTRIBUTION_JOB_ADDRESSES"],
                                      num_processes=int(os.environ["KERAS_DISTRIBUTION_NUM_PROCESSES"]),
                                      process_id=int(os.environ["KERAS_DISTRIBUTION_PROCESS_ID"]))
        self.part = jax.process_index()

    def _torch_ranks(self) -> Any:
        """This rank's process group (gloo on emulated GPUs, NCCL on GPUs, made as trainables/pytorch/backend.py makes
        it), and the Keras model wrapped in DistributedDataParallel (which sends rank 0's weights to the others). The
        gradients' all-reduce is trainables/pytorch/backend.py's hook, bound to this backend (it reads and writes
        world, _loss_finite and _ranks_finite): every rank learns of a non-finite loss on any rank in the same step."""
        import datetime
        import types

        import torch
        import torch.distributed as dist

        from trainables.config import ddp_timeout_s
        from trainables.pytorch.backend import Backend as TorchBackend

        dist.init_process_group("nccl" if self.on_gpu else "gloo", init_method="env://",
                                timeout=datetime.timedelta(seconds=ddp_timeout_s()))
        ddp = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=[0] if self.on_gpu else None)
        device = torch.device("cuda", 0) if self.on_gpu else torch.device("cpu")  # its one visible GPU, Keras's
        self._loss_finite = torch.ones((), device=device)  # this rank's, set in each step before backward
        self._ranks_finite = torch.full((), float(self.world), device=device)  # all ranks', after it
        ddp.register_comm_hook(None, types.MethodType(TorchBackend._reduce_with_loss_flag, self))
        return ddp

    def _rank_step(self, x: Any, y: Any, weights: Any) -> dict[str, float]:
        """One training step of this rank, whole: Keras's own torch train step (keras/src/backend/torch/trainer.py)
        with the forward pass through DDP, whose backward then all-reduces the gradients (their mean over the ranks: the
        loss is this rank's mean, so the global batch's mean). The Keras optimizer applies them (MomentumSGD's L2; the
        loss-scale optimizer unscales them and skips the update where one is not finite, alike on every rank).
        train_on_batch calls the model itself, not DDP's forward: its backward would all-reduce nothing."""
        import torch

        y_pred = self.ddp(x, training=True)
        self.model.zero_grad()
        loss = self.model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=weights, training=True)
        self._loss_finite = torch.isfinite(loss.detach()).float()  # read by the all-reduce in backward
        self.opt.scale_loss(loss).backward()
        variables = self.model.trainable_weights[:]
        with torch.no_grad():
            self.opt.apply([v.value.grad for v in variables], variables)
            self.counts.reset_state()
            self.counts.update_state(y, y_pred.detach(), sample_weight=weights)
        logs = self._sums()
        if float(self._ranks_finite) < self.world - 0.5:  # a rank's loss was not finite: every rank stops here
            logs["loss_sum"] = float("nan")
        return logs

    def param_count(self) -> int:
        return models.count_params(self.model)

    def forward_gflops(self) -> float:
        """Forward GFLOPs of one image, from the model's layer list (trainables/tensorflow/flops.py)."""
        return flops.forward_gflops_per_image(self.model)

    def put(self, x: np.ndarray, y: np.ndarray) -> Any:
        """(images, labels, weights) on the devices, resized to the model's input: on TensorFlow one slice per replica.
        A batch of fewer images than a multiple of the devices (a last validation batch) is padded so that each
        device gets a part: zero images of weight 0, which the loss and StepCounts leave out (the real ones weigh 1)."""
        weights = np.ones(len(x), np.float32)
        short = -len(x) % self.replicas
        if short:
            x = np.concatenate([x, np.zeros((short, *x.shape[1:]), x.dtype)])
            y = np.concatenate([y, np.zeros(short, y.dtype)])
            weights = np.concatenate([weights, np.zeros(short, np.float32)])
        batch = [self._placed(x), self._placed(y.astype(np.int32)), self._placed(weights)]
        if x.shape[1] != self.image_size:
            batch[0] = self._placed(ops.image.resize(batch[0], (self.image_size, self.image_size)))
        if self.strategy is None:  # JAX: laid out (_placed); torch: its one device
            return tuple(batch)
        import tensorflow as tf

        parts = [tf.split(t, self.replicas) for t in batch]
        local = self.strategy.extended.worker_devices

        def on_replica(ctx: Any) -> Any:  # each replica's slice on its own device, not all on the first
            i = ctx.replica_id_in_sync_group % len(local)  # its number among all workers' replicas: this worker's
            with tf.device(local[i]):
                return tuple(tf.identity(p[i]) for p in parts)

        return self.strategy.experimental_distribute_values_from_function(on_replica)

    def _placed(self, array: Any) -> Any:
        """A host array (or a tensor) on the devices. JAX under a DataParallel in one process: in the distribution's
        data layout, each device its share of the images, copied there from the host (Keras's step lays its input out
        so, and leaves an array already laid out as it is; one on the first device alone it would copy from there to
        the others, every step). Across nodes this process holds only its slice of the global batch: Keras's step
        makes the global array of the processes' slices (jax.make_array_from_process_local_data). Else the backend's
        device."""
        if self.distribution is None or self.workers > 1:
            return ops.convert_to_tensor(array)
        return keras.distribution.distribute_tensor(array, self.distribution.get_data_layout(array.shape))

    def synthetic(self) -> Any:
        if not hasattr(self, "_synthetic"):
            n, s = self.batch_per_gpu * self.replicas, self.image_size
            rng = np.random.default_rng(0)
            self._synthetic = self.put(rng.random((n, s, s, 3), dtype=np.float32), rng.integers(0, 10, n))
        return self._synthetic

    def _run(self, step: str, batch: Any) -> dict[str, float]:
        """Keras's compiled train or test step on the batch, its metrics reset first; its sums (_sums)."""
        model = self.model
        if self.strategy is None:
            # JAX: under the trial's DataParallel. Keras keeps it per thread, and a Ray actor's calls (sweep/workers.py)
            # run on threads other than the one that built the model: without it each step would run on the global
            # arrays but with this process's batch as the whole, and across nodes the processes' collectives part ways.
            with self.distribution.scope() if self.distribution else contextlib.nullcontext():
                (model.train_on_batch if step == "train" else model.test_on_batch)(*batch)  # each resets the metrics
            return self._sums()
        # TensorFlow: the step function train_on_batch calls, given the per-replica batch (strategy.run hands each
        # replica its own slice); its variables are built as train_on_batch builds them, from one replica's shapes.
        if not model.built or model.train_function is None:
            model._symbolic_build(data_batch=self.strategy.experimental_local_results(batch)[0])
        model.reset_metrics()
        if self.workers > 1:  # training (the first worker scores alone: eval_step)
            self._worker_train(batch)
        else:
            model.make_train_function()
            model.make_test_function()
            (model.train_function if step == "train" else model.test_function)(iter([batch]))
        return self._sums()

    def _worker_train(self, batch: Any) -> None:
        """A training step on one worker of a MultiWorkerMirroredStrategy: Keras's train step under strategy.run, the
        gradients all-reduced over every worker's replicas by the optimizer. Not Keras's train_function: its mean of
        the logs across workers fails on scalar metrics (Keras 3.15: reduce_per_replica, axis 0)."""
        import tensorflow as tf

        if not hasattr(self, "_worker_step"):
            strategy, model = self.strategy, self.model
            self._worker_step = tf.function(lambda batch: strategy.run(model.train_step, (batch,)))
        self._worker_step(batch)

    def _sums(self) -> dict[str, float]:
        """The last step's sums (StepCounts) over this process's images, as host floats: each worker of a trial reports
        its own (sweep/workers.py totals the workers' rows). Read off the metric's variables: on TensorFlow the copies
        on this worker's replicas (SyncOnRead: a read of the whole would add all workers'), on JAX across nodes this
        process's entry (the variable is replicated on every device; the step's own logs are spread over the processes)."""
        def local(variable: Any) -> float:
            copies = self.strategy.experimental_local_results(variable.value) if self.strategy else [variable.value]
            return float(sum(ops.convert_to_numpy(c)[self.part] for c in copies))

        return {v.name: local(v) for v in self.counts.sums}

    def train_step(self, batch: Any, lr: float) -> tuple[float, int, int]:
        if lr != self._lr:
            self.sgd.learning_rate.assign(lr)
            self._lr = lr
        logs = self._rank_step(*batch) if self.ddp else self._run("train", batch)  # host floats: synchronised
        return float(logs["loss_sum"]), round(logs["correct"]), round(logs["images"])

    def eval_step(self, batch: Any) -> tuple[int, int]:
        if self.workers > 1:  # the first worker scores alone (trainables/loop.py): no step the others must join
            x, y, weights = self._local(batch)
            right = (np.argmax(self.logits(x), axis=-1) == y) * weights
            return round(float(np.sum(right))), round(float(np.sum(weights)))
        logs = self._run("test", batch)
        return round(logs["correct"]), round(logs["images"])

    def _local(self, batch: Any) -> list[np.ndarray]:
        """A batch that put() made, as this process's host arrays (TensorFlow: its replicas' slices joined)."""
        if self.strategy is None:
            return [ops.convert_to_numpy(t) for t in batch]
        return [np.concatenate([t.numpy() for t in part]) for part in zip(*self.strategy.experimental_local_results(batch))]

    def logits(self, x: np.ndarray) -> np.ndarray:
        """The model's outputs for host images (NHWC), in inference mode: the tests' reference, and the first worker's
        scores across nodes."""
        if BACKEND == "jax" and self.workers > 1:
            return self._process_logits(x)
        return ops.convert_to_numpy(ops.cast(self.model(ops.convert_to_tensor(x), training=False), "float32"))

    def _process_logits(self, x: np.ndarray) -> np.ndarray:
        """JAX across nodes: the model on this process's first device alone, with its copy of the weights (replicated
        on every device). A call on the trial's global arrays is a program that every process must run."""
        import jax

        model = self.model
        copies = [[v.value.addressable_data(0) for v in variables]
                  for variables in (model.trainable_variables, model.non_trainable_variables)]
        if not hasattr(self, "_scores"):
            self._scores = jax.jit(lambda t, n, x: ops.cast(model.stateless_call(t, n, x, training=False)[0], "float32"))
        device = next(iter(copies[0][0].devices()))
        return np.asarray(self._scores(*copies, jax.device_put(np.asarray(x, np.float32), device)))

    def precision_columns(self) -> dict[str, Any]:
        """How the trial's arithmetic ran: the layout, whether TF32 was allowed on a GPU, the loss scale now."""
        return {"layout": self.layout, "tf32_allowed": self.on_gpu and self.precision != "fp32",
                "loss_scale": float(ops.convert_to_numpy(self.opt.dynamic_scale)) if self.precision == "fp16" else None}

    def compute_dtype(self) -> str | None:
        """The dtype of the network's output in the last step (StepCounts); None before the first."""
        return self.counts.computed

    def device_peak_mib(self) -> list[float] | None:
        """Each GPU's peak as its backend's allocator saw it; None on emulated devices."""
        if not self.on_gpu:
            return None
        n = self.devices.count
        if BACKEND == "tensorflow":
            import tensorflow as tf

            return [tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"] / 2**20 for i in range(n)]
        if BACKEND == "torch":
            import torch

            return [torch.cuda.max_memory_allocated(0) / 2**20]
        import jax

        return [d.memory_stats()["peak_bytes_in_use"] / 2**20 for d in jax.local_devices()[:n]]

    def _state(self) -> list[Any]:
        return self.model.weights + list(self.opt.variables)

    def save(self, path: str) -> None:
        np.savez(os.path.join(path, "keras.npz"), *[ops.convert_to_numpy(v) for v in self._state()])

    def load(self, path: str) -> None:
        with np.load(os.path.join(path, "keras.npz")) as saved:
            arrays = [saved[f"arr_{i}"] for i in range(len(saved.files))]
        variables = self._state()
        if [a.shape for a in arrays] != [tuple(v.shape) for v in variables]:  # e.g. another model's checkpoint
            raise ValueError(f"checkpoint {path} does not fit this model: {len(arrays)} arrays, "
                             f"the model and optimizer have {len(variables)} (or their shapes differ)")
        for array, v in zip(arrays, variables):
            v.assign(array)
