"""MXNet Gluon backend: one context per device, split_and_load, gradients reduced by a kvstore."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

import mxnet as mx  # noqa: E402  (trainables.mxnet aliases np.bool first)
from mxnet import autograd, gluon

from trainables.config import TrialConfig
from trainables.mxnet import models
from trainables.loop import Devices
from trainables.measure import NvmlPeakMemory


class Backend:
    layout = "NCHW"
    framework_version = f"mxnet {mx.__version__}"
    cudnn_version = None  # MXNet reports whether it has cuDNN, not which

    def __init__(self, cfg: TrialConfig, devices: Devices, image_size: int) -> None:
        mx.random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        on_gpu = devices.kind == "gpu"
        self.ctx = [mx.gpu(i) if on_gpu else mx.cpu(i) for i in range(devices.count)]
        self.image_size = image_size
        self.global_batch = cfg.global_batch
        self.batch_per_gpu = cfg.batch_per_gpu
        self.net = models.build(cfg.model)
        self.net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2), ctx=self.ctx)
        self.net.hybridize(static_alloc=True, static_shape=True)
        self.trainer = gluon.Trainer(self.net.collect_params(), "sgd",
                                     {"learning_rate": cfg.lr, "momentum": cfg.momentum, "wd": cfg.weight_decay},
                                     kvstore=cfg.kvstore)
        self.loss = gluon.loss.SoftmaxCrossEntropyLoss()
        # NVML numbers GPUs physically, as Ray's ids do; CUDA_VISIBLE_DEVICES renumbers them for MXNet only.
        self.memory = NvmlPeakMemory([int(i) for i in devices.ray_gpu_ids]) if on_gpu else None
        # Shapes are fixed before the first step: run one forward pass so parameters exist.
        self.net(mx.nd.zeros((1, 3, image_size, image_size), ctx=self.ctx[0]))

    def param_count(self) -> int:
        return int(sum(np.prod(p.shape) for p in self.net.collect_params().values()))

    def _resize(self, x: mx.nd.NDArray) -> mx.nd.NDArray:
        if x.shape[2] == self.image_size:
            return x
        return mx.nd.contrib.BilinearResize2D(x, height=self.image_size, width=self.image_size)

    def put(self, x: np.ndarray, y: np.ndarray) -> Any:
        xs = gluon.utils.split_and_load(x, self.ctx, even_split=False)
        ys = gluon.utils.split_and_load(y.astype(np.float32), self.ctx, even_split=False)
        return [self._resize(part) for part in xs], ys

    def synthetic(self) -> Any:
        if not hasattr(self, "_synthetic"):
            shape = (self.batch_per_gpu, 3, self.image_size, self.image_size)
            self._synthetic = ([mx.nd.random.uniform(shape=shape, ctx=c) for c in self.ctx],
                               [mx.nd.random.randint(0, 10, shape=(self.batch_per_gpu,), ctx=c).astype("float32") for c in self.ctx])
        return self._synthetic

    def train_step(self, batch: Any, lr: float) -> tuple[float, int]:
        xs, ys = batch
        self.trainer.set_learning_rate(lr)
        with autograd.record():
            outs = [self.net(x) for x in xs]
            losses = [self.loss(o, y) for o, y in zip(outs, ys)]
        autograd.backward(losses)
        self.trainer.step(self.global_batch)
        # One host read per device synchronises the step (the clock is read after it).
        stats = [mx.nd.stack(l.sum(), (o.argmax(axis=1) == y).sum()).asnumpy() for l, o, y in zip(losses, outs, ys)]
        total = np.sum(stats, axis=0)
        return float(total[0]), int(total[1])

    def eval_step(self, batch: Any) -> int:
        xs, ys = batch
        return int(sum((self.net(x).argmax(axis=1) == y).sum().asscalar() for x, y in zip(xs, ys)))

    def device_peak_mib(self) -> list[float] | None:
        return self.memory.peak_mib() if self.memory else None

    def save(self, path: str) -> None:
        self.net.save_parameters(os.path.join(path, "mxnet.params"))
        self.trainer.save_states(os.path.join(path, "mxnet.states"))

    def load(self, path: str) -> None:
        self.net.load_parameters(os.path.join(path, "mxnet.params"), ctx=self.ctx)
        self.trainer.load_states(os.path.join(path, "mxnet.states"))
