"""TensorFlow backend: a custom loop under tf.distribute.MirroredStrategy over the trial's devices."""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import tensorflow as tf

from trainables.config import TrialConfig
from trainables.loop import Devices
from trainables.tensorflow import models

SUM = tf.distribute.ReduceOp.SUM


class Backend:
    layout = "NHWC"
    framework_version = f"tensorflow {tf.__version__}"
    cudnn_version = tf.sysconfig.get_build_info().get("cudnn_version")

    def __init__(self, cfg: TrialConfig, devices: Devices, image_size: int) -> None:
        n = devices.count
        if devices.kind == "gpu":
            names = [f"/gpu:{i}" for i in range(n)]
        else:  # emulated: as many logical CPU devices, set before TensorFlow initialises
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
            names = [f"/cpu:{i}" for i in range(n)]
        threads = cfg.cpus_per_trial
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        tf.keras.utils.set_random_seed(cfg.seed)
        self.devices = devices
        self.image_size = image_size
        self.batch_per_gpu = cfg.batch_per_gpu
        self.strategy = tf.distribute.MirroredStrategy(devices=names)
        with self.strategy.scope():
            self.model = models.build(cfg.model, image_size)
            self.opt = tf.keras.optimizers.SGD(learning_rate=cfg.lr, momentum=cfg.momentum)
            self.opt.build(self.model.trainable_variables)  # else the first strategy.run fails
        self._lr = cfg.lr
        global_batch = float(cfg.global_batch)
        # L2 as MXNet's wd (added to the gradient once, after aggregation): each replica adds 1/n of it.
        wd_share = cfg.weight_decay / n
        model, opt = self.model, self.opt

        def replica_train(x, y):
            x = self._resize(x)
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                per_example = tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                loss = tf.reduce_sum(per_example) / global_batch
            variables = model.trainable_variables
            grads = tape.gradient(loss, variables)
            opt.apply_gradients([(g + wd_share * v, v) for g, v in zip(grads, variables)])
            return tf.reduce_sum(per_example), self._correct(logits, y)

        def replica_eval(x, y):
            return self._correct(model(self._resize(x), training=False), y)

        self._train = tf.function(lambda x, y: [self.strategy.reduce(SUM, t, None) for t in self.strategy.run(replica_train, (x, y))])
        self._eval = tf.function(lambda x, y: self.strategy.reduce(SUM, self.strategy.run(replica_eval, (x, y)), None),
                                 reduce_retracing=True)

    def _resize(self, x: tf.Tensor) -> tf.Tensor:
        if x.shape[1] == self.image_size:
            return x
        return tf.image.resize(x, (self.image_size, self.image_size))

    @staticmethod
    def _correct(logits: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), y), tf.int32))

    def param_count(self) -> int:
        return int(self.model.count_params())

    def put(self, x: np.ndarray, y: np.ndarray) -> Any:
        parts = list(zip(np.array_split(x, self.devices.count), np.array_split(y.astype(np.int32), self.devices.count)))
        # value_fn runs under each replica's device scope, so each slice lands on its own device.
        values = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: tuple(tf.constant(a) for a in parts[ctx.replica_id_in_sync_group]))
        return values

    def synthetic(self) -> Any:
        if not hasattr(self, "_synthetic"):
            b, s = self.batch_per_gpu, self.image_size
            self._synthetic = self.strategy.experimental_distribute_values_from_function(
                lambda ctx: (tf.random.uniform((b, s, s, 3)), tf.random.uniform((b,), 0, 10, dtype=tf.int32)))
        return self._synthetic

    def train_step(self, batch: Any, lr: float) -> tuple[float, int]:
        if lr != self._lr:
            self.opt.learning_rate.assign(lr)
            self._lr = lr
        loss, correct = self._train(*batch)
        return float(loss.numpy()), int(correct.numpy())  # host reads synchronise the step

    def eval_step(self, batch: Any) -> int:
        return int(self._eval(*batch).numpy())

    def device_peak_mib(self) -> list[float] | None:
        if self.devices.kind != "gpu":
            return None
        return [tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"] / 2**20 for i in range(self.devices.count)]

    def save(self, path: str) -> None:
        np.savez(os.path.join(path, "tensorflow.npz"), *[v.numpy() for v in self.model.weights + list(self.opt.variables)])

    def load(self, path: str) -> None:
        saved = np.load(os.path.join(path, "tensorflow.npz"))
        for i, v in enumerate(self.model.weights + list(self.opt.variables)):
            v.assign(saved[f"arr_{i}"])
