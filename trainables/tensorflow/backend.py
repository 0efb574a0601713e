"""TensorFlow backend: a custom loop under a tf.distribute strategy over the trial's devices.

MirroredStrategy on one node; across nodes MultiWorkerMirroredStrategy (variable_update replicated)
or ParameterServerStrategy with this process as the coordinator (parameter_server), the cluster read
from TF_CONFIG as TensorFlow does (sweep/workers.py writes it).
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import tensorflow as tf  # before keras: where TensorFlow is missing, the framework check names it, not keras
import keras  # noqa: E402,I001

from trainables import zoo
from trainables.config import TrialConfig
from trainables.loop import Devices
from trainables.probe import Build
from trainables.tensorflow import flops, models

SUM = tf.distribute.ReduceOp.SUM
# Keras' mixed-precision policies: fp32 variables, 16-bit compute. fp32 and tf32 compute in float32
# (tf32: TensorFlow's default, TF32 tensor cores allowed on Ampere and later GPUs; fp32: not allowed).
POLICIES = {"fp32": "float32", "tf32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}
PAD = -1  # the label of a padding image: no argmax equals it


def build() -> Build:
    """TensorFlow's build (for the framework check): its CUDA version and the GPU code it carries."""
    info = tf.sysconfig.get_build_info()
    gpu = bool(info.get("is_cuda_build"))
    return Build(version=tf.__version__, gpu_build=gpu, cuda=info.get("cuda_version") if gpu else None,
                 archs=tuple(info.get("cuda_compute_capabilities") or ()) or None,
                 gpus=len(tf.config.list_physical_devices("GPU")))



def mirrored(devices: Devices) -> tf.distribute.MirroredStrategy:
    """A MirroredStrategy over the trial's devices on this node (also Keras's on TensorFlow: trainables/keras/)."""
    n = devices.count
    if devices.kind == "gpu":
        return tf.distribute.MirroredStrategy(devices=[f"/gpu:{i}" for i in range(n)])
    # Emulated: as many logical CPU devices, set before TensorFlow initialises (a process where it
    # already ran with enough of them, or one device wanted, keeps what it has).
    cpu = tf.config.list_physical_devices("CPU")[0]
    if n > max(1, len(tf.config.get_logical_device_configuration(cpu) or ())):
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
    return tf.distribute.MirroredStrategy(devices=[f"/cpu:{i}" for i in range(n)])


def replicated(cfg: TrialConfig, devices: Devices) -> tf.distribute.Strategy:
    """Gradients all-reduced over every replica of the trial: mirrored() on one node; across nodes a
    MultiWorkerMirroredStrategy over each worker's GPUs, or its CPU, the cluster read from TF_CONFIG
    (sweep/workers.py writes it). Also Keras's on TensorFlow (trainables/keras/)."""
    if cfg.nodes == 1:
        return mirrored(devices)
    one_device_per_emulated_worker(cfg, devices)
    return tf.distribute.MultiWorkerMirroredStrategy()


def one_device_per_emulated_worker(cfg: TrialConfig, devices: Devices) -> None:
    """A ValueError where a multi-worker strategy would get several emulated GPUs per worker: it takes a worker's
    GPUs, or its one CPU device, never logical ones."""
    if devices.kind != "gpu" and cfg.gpus_per_node > 1:
        raise ValueError("TensorFlow's multi-worker strategies use one CPU device per worker: emulate "
                         f"gpus_per_node 1, not {cfg.gpus_per_node} (on GPU nodes any count works)")

class Backend:
    layout = "NHWC"
    put_ahead = True  # TensorFlow's eager ops may run on any thread: batches go to the devices on the prefetch thread
    framework_version = f"tensorflow {tf.__version__}"
    framework_cuda_version = tf.sysconfig.get_build_info().get("cuda_version")  # absent from a CPU build
    framework_cudnn_version = tf.sysconfig.get_build_info().get("cudnn_version")

    def __init__(self, cfg: TrialConfig, devices: Devices, image_size: int, num_classes: int = zoo.NUM_CLASSES) -> None:
        self.parameter_server = cfg.variable_update == "parameter_server"
        if cfg.nodes > 1 or self.parameter_server:
            one_device_per_emulated_worker(cfg, devices)
        threads = cfg.cpus
        if (tf.config.threading.get_intra_op_parallelism_threads(),
                tf.config.threading.get_inter_op_parallelism_threads()) != (threads, threads):
            try:
                tf.config.threading.set_intra_op_parallelism_threads(threads)
                tf.config.threading.set_inter_op_parallelism_threads(threads)
            except RuntimeError:  # TensorFlow already ran in this process (a reused Ray worker, a test):
                pass  # its thread pools are fixed until the process ends; the rows' `threads` says what Ray gave
        tf.keras.utils.set_random_seed(cfg.seed)
        # Process-wide switches, set by every trial (a process may have run another trial before).
        tf.config.experimental.enable_tensor_float_32_execution(cfg.precision != "fp32")
        keras.mixed_precision.set_global_policy(POLICIES[cfg.precision])
        self.precision = cfg.precision
        self.computed: str | None = None  # the dtype the training step's model produced (compute_dtype)
        self.devices = devices
        self.image_size = image_size
        self.batch_per_gpu = cfg.batch_per_gpu
        self.nodes = cfg.nodes
        self.strategy = self._strategy(cfg, devices)
        with self.strategy.scope():
            self.model = models.build(cfg.model, image_size, num_classes)
            self.sgd = keras.optimizers.SGD(learning_rate=cfg.lr, momentum=cfg.momentum)
            # fp16: dynamic loss scaling (Keras' default: from 2^15, halved on a non-finite gradient, which
            # skips that update, doubled after 2,000 finite steps).
            self.opt = keras.optimizers.LossScaleOptimizer(self.sgd) if cfg.loss_scaling else self.sgd
            self.opt.build(self.model.trainable_variables)  # else the first strategy.run fails
        self._lr = cfg.lr
        # Each update's gradients are the mean over the batch it sums: all replicas of all workers
        # (all-reduce), or, with parameter servers, one worker's replicas (each worker updates on its own).
        update_batch = float(cfg.batch_per_gpu * cfg.gpus_per_node if self.parameter_server else cfg.global_batch)
        # L2 as MXNet's wd (added to the gradient once, after aggregation): each replica adds its share.
        wd_share = cfg.weight_decay / self.strategy.num_replicas_in_sync
        model, opt, strategy = self.model, self.opt, self.strategy
        scaled = cfg.loss_scaling

        def gradients(x, y):
            """Forward and backward of one replica: what XLA compiles when `compile` is on. The gradient
            all-reduce and the update stay outside it, in the strategy's cross-replica code."""
            with tf.GradientTape() as tape:
                computed = model(x, training=True)
                # The dtype the layers handed on, as this step's graph computes it (read as the step is traced:
                # a graph's dtypes are fixed): the rows' computed_precision, observed rather than the policy's.
                self.computed = computed.dtype.name
                logits = tf.cast(computed, tf.float32)  # the loss in fp32 under every policy
                per_example = tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                loss = tf.reduce_sum(per_example) / update_batch
                if scaled:
                    loss = opt.scale_loss(loss)
            return tape.gradient(loss, model.trainable_variables), tf.reduce_sum(per_example), self._correct(logits, y)

        gradients = tf.function(gradients, jit_compile=True) if cfg.compile else gradients

        def replica_train(x, y):
            if self.parameter_server:  # one worker's batch reaches each of its replicas: take this one's slice
                context = tf.distribute.get_replica_context()
                share = tf.shape(x)[0] // context.num_replicas_in_sync
                start = context.replica_id_in_sync_group * share
                x, y = x[start:start + share], y[start:start + share]
            grads, loss_sum, correct = gradients(self._resize(x), y)
            variables = model.trainable_variables
            # The loss-scale optimizer divides the gradients by the scale: the decay term is scaled with them.
            decay = wd_share * (tf.cast(opt.dynamic_scale, tf.float32) if scaled else 1.0)
            opt.apply_gradients([(g + decay * v, v) for g, v in zip(grads, variables)])
            return loss_sum, correct, tf.shape(y)[0]

        def replica_eval(x, y):  # a padding image (label PAD, see put) is neither right nor counted
            logits = model(self._resize(x), training=False)
            return self._correct(logits, y), tf.reduce_sum(tf.cast(y != PAD, tf.int32))

        if self.parameter_server:
            # A step is one scheduled call per worker; the coordinator waits for the round.
            worker_step = lambda x, y: [strategy.reduce(SUM, t, None) for t in strategy.run(replica_train, (x, y))]  # noqa: E731
            self._worker_step = tf.function(worker_step)
            self._worker_step_synthetic = tf.function(lambda it: worker_step(*next(it)))
            self._eval = tf.function(lambda x, y: replica_eval(x, y), reduce_retracing=True)
        else:
            # Per-replica sums, added up here: under MultiWorkerMirroredStrategy, only this worker's replicas.
            self._train = tf.function(lambda x, y: strategy.run(replica_train, (x, y)))
            # No cross-worker reduction: only the first worker validates, the others would never join it.
            self._eval = tf.function(lambda x, y: strategy.run(replica_eval, (x, y)), reduce_retracing=True)

    def _strategy(self, cfg: TrialConfig, devices: Devices) -> tf.distribute.Strategy:
        """Mirrored over this node's devices; across nodes, the cluster in TF_CONFIG (sweep/workers.py)."""
        if self.parameter_server:
            strategy = tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())
            self.coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
            return strategy
        return replicated(cfg, devices)

    def compute_dtype(self) -> str | None:
        """The dtype of the model's output in the training step as built (see `gradients`); None before the first."""
        return self.computed

    def precision_columns(self) -> dict[str, Any]:
        """How the trial's arithmetic ran: the layout, whether TF32 was allowed on a GPU, the loss scale now."""
        return {
            "layout": self.layout,
            "tf32_allowed": self.devices.kind == "gpu" and tf.config.experimental.tensor_float_32_execution_enabled(),
            "loss_scale": float(self.opt.dynamic_scale.numpy()) if self.precision == "fp16" else None,
        }

    def _resize(self, x: tf.Tensor) -> tf.Tensor:
        if x.shape[1] == self.image_size:
            return x
        return tf.image.resize(x, (self.image_size, self.image_size))

    @staticmethod
    def _correct(logits: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), y), tf.int32))

    def param_count(self) -> int:
        return int(self.model.count_params())

    def forward_gflops(self) -> float:
        """Forward GFLOPs of one image, from the model's layer list (trainables/tensorflow/flops.py)."""
        return flops.forward_gflops_per_image(self.model)

    def put(self, x: np.ndarray, y: np.ndarray) -> Any:
        y = y.astype(np.int32)
        if self.parameter_server:  # one part per worker, sent with its scheduled step
            return [(tf.constant(a), tf.constant(b)) for a, b in zip(np.array_split(x, self.nodes), np.array_split(y, self.nodes))]
        n = self.strategy.num_replicas_in_sync // self.nodes  # this worker's replicas
        # A last validation batch of fewer images than replicas leaves some without one: they get one
        # padding image each (a convolution on an empty batch fails on CPU), labelled PAD, never scored.
        parts = [(a, b) if len(a) else (np.zeros_like(x[:1]), np.full(1, PAD, np.int32))
                 for a, b in zip(np.array_split(x, n), np.array_split(y, n))]
        # value_fn runs under each replica's device scope, so each slice lands on its own device.
        return self.strategy.experimental_distribute_values_from_function(
            lambda ctx: self._on_replica(ctx, lambda i: tuple(tf.constant(a) for a in parts[i])))

    def put_loaded(self, x: tf.Tensor, y: tf.Tensor) -> Any:
        """A batch of TensorFlow's input pipeline (trainables/tensorflow/input.py: NHWC float32 images and int32
        labels, host tensors that tf.data prefetched) over this worker's replicas, as put() splits a numpy batch."""
        return self.put(x.numpy(), y.numpy())

    def _on_replica(self, ctx: tf.distribute.experimental.ValueContext, make: Any) -> Any:
        """make(i) on this worker's i-th device. value_fn runs under no device scope of its own: without
        this every replica's values land on the first device (measured: both on CPU:0 of two), and each
        step copies them to the others."""
        devices = self.strategy.extended.worker_devices
        i = ctx.replica_id_in_sync_group % len(devices)
        with tf.device(devices[i]):
            return make(i)

    def synthetic(self) -> Any:
        if not hasattr(self, "_synthetic"):
            b, s = self.batch_per_gpu, self.image_size
            if self.parameter_server:  # made on each worker, from its own dataset
                per_worker = b * self.strategy.num_replicas_in_sync
                dataset = lambda: tf.data.Dataset.from_tensors(  # noqa: E731
                    (tf.random.uniform((per_worker, s, s, 3)), tf.random.uniform((per_worker,), 0, 10, dtype=tf.int32))).repeat()
                self._synthetic = [iter(self.coordinator.create_per_worker_dataset(dataset))] * self.nodes
            else:
                self._synthetic = self.strategy.experimental_distribute_values_from_function(
                    lambda ctx: self._on_replica(ctx, lambda _: (tf.random.uniform((b, s, s, 3)),
                                                                 tf.random.uniform((b,), 0, 10, dtype=tf.int32))))
        return self._synthetic

    def train_step(self, batch: Any, lr: float) -> tuple[float, int, int]:
        if lr != self._lr:
            self.sgd.learning_rate.assign(lr)
            self._lr = lr
        if self.parameter_server:
            step = self._worker_step_synthetic if batch is getattr(self, "_synthetic", None) else self._worker_step
            rounds = [self.coordinator.schedule(step, args=part if isinstance(part, tuple) else (part,)) for part in batch]
            self.coordinator.join()
            values = [r.fetch() for r in rounds]
            return float(sum(v[0] for v in values)), int(sum(v[1] for v in values)), int(sum(v[2] for v in values))
        loss, correct, images = self._train(*batch)
        # Host reads synchronise the step.
        return float(self._local_sum(loss)), int(self._local_sum(correct)), int(self._local_sum(images))

    def eval_step(self, batch: Any) -> tuple[int, int]:
        if self.parameter_server:  # the coordinator evaluates inline, reading the parameter servers
            # (a worker's part of a last batch of fewer images than workers is empty: nothing to score)
            values = [self._eval(x, y) for x, y in batch if x.shape[0]]
            return int(sum(v[0].numpy() for v in values)), int(sum(v[1].numpy() for v in values))
        correct, images = self._eval(*batch)
        return int(self._local_sum(correct)), int(self._local_sum(images))

    def _local_sum(self, value: Any) -> Any:
        """The sum of this worker's replicas' values."""
        return sum(t.numpy() for t in self.strategy.experimental_local_results(value))

    def logits(self, x: np.ndarray) -> np.ndarray:
        """The model's outputs for host images (NHWC), on the first device: the tests' reference for
        the accuracies the loop counts."""
        return self.model(self._resize(tf.constant(x)), training=False).numpy()

    def device_peak_mib(self) -> list[float] | None:
        if self.devices.kind != "gpu" or self.parameter_server:  # the workers' allocators are not this process's
            return None
        return [tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"] / 2**20 for i in range(self.devices.count)]

    def save(self, path: str) -> None:
        np.savez(os.path.join(path, "tensorflow.npz"), *[v.numpy() for v in self.model.weights + list(self.opt.variables)])

    def load(self, path: str) -> None:
        with np.load(os.path.join(path, "tensorflow.npz")) as saved:
            arrays = [saved[f"arr_{i}"] for i in range(len(saved.files))]  # each read (unzipped) once
        variables = self.model.weights + list(self.opt.variables)
        if [a.shape for a in arrays] != [tuple(v.shape) for v in variables]:  # e.g. another version of the model
            raise ValueError(f"checkpoint {path} does not fit this model: {len(arrays)} arrays, "
                             f"the model and optimizer have {len(variables)} (or their shapes differ)")
        for array, v in zip(arrays, variables):
            v.assign(array)
