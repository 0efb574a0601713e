"""MXNet Gluon backend: one context per device, split_and_load, gradients reduced by a kvstore."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

import mxnet as mx  # noqa: E402  (trainables.mxnet aliases np.bool first)
from mxnet import autograd, gluon
from mxnet.contrib import amp

from trainables import environment, zoo
from trainables.config import TrialConfig
from trainables.mxnet import flops, models
from trainables.loop import Devices
from trainables.measure import NvmlPeakMemory
from trainables.probe import Build, cuda_in_name


AMP_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}  # mixed precision through mxnet.contrib.amp
_amp_dtype: list[str | None] = []  # the dtype amp.init was given in this process, if it was called


def _init_amp(precision: str) -> None:
    """amp.init rewrites MXNet's operators for the whole process, once, before any network is built: a
    process trains in one precision (each trial has a process of its own: sweep/runner.py reuse_actors=False)."""
    dtype = AMP_DTYPES.get(precision)
    if _amp_dtype and _amp_dtype[0] != dtype:
        raise ValueError(f"MXNet's amp holds one precision per process: this one trains {_amp_dtype[0] or 'fp32'}, "
                         f"not {precision}")
    if not _amp_dtype:
        _amp_dtype.append(dtype)
        if dtype:
            amp.init(target_dtype=dtype)


def _set_tf32(allowed: bool) -> None:
    """TF32 on Ampere and later GPUs: cuBLAS and cuDNN use it by default; NVIDIA's NVIDIA_TF32_OVERRIDE=0 turns
    it off in both, and MXNET_CUDA_ALLOW_TENSOR_CORE=0 keeps MXNet off tensor cores. Read when the CUDA
    libraries make their handles, at the first GPU operation: set before it."""
    if allowed:
        os.environ.pop("NVIDIA_TF32_OVERRIDE", None)
        os.environ.pop("MXNET_CUDA_ALLOW_TENSOR_CORE", None)
    else:
        os.environ["NVIDIA_TF32_OVERRIDE"] = "0"
        os.environ["MXNET_CUDA_ALLOW_TENSOR_CORE"] = "0"


def build() -> Build:
    """MXNet's build (for the framework check): it names no CUDA version or GPU code list; the wheel's
    name does (mxnet-cu117), a source build's does not."""
    gpu = mx.runtime.Features().is_enabled("CUDA")
    return Build(version=mx.__version__, gpu_build=gpu, cuda=cuda_in_name("mxnet") if gpu else None, archs=None,
                 gpus=mx.context.num_gpus() if gpu else 0)


def _dtype_name(dtype: Any) -> str:
    """A dtype's name as the other frameworks spell it. MXNet's bfloat16 is a numpy record of one uint16 field
    named bfloat16 (numpy has no bfloat16): its field's name."""
    found = np.dtype(dtype)
    return found.names[0] if found.names else found.name


class Backend:
    layout = "NCHW"
    put_ahead = False  # MXNet's Python front end is not thread-safe: put() stays on the training thread
    framework_version = f"mxnet {mx.__version__}"
    # MXNet names no CUDA version; its wheel's name does (mxnet-cu117: 11.7). Of cuDNN it reports
    # whether it was built with it, not which: the loaded library's version says what ran.
    framework_cuda_version = cuda_in_name("mxnet") if mx.runtime.Features().is_enabled("CUDA") else None
    framework_cudnn_version = None

    def __init__(self, cfg: TrialConfig, devices: Devices, image_size: int, num_classes: int = zoo.NUM_CLASSES) -> None:
        mx.random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        on_gpu = devices.kind == "gpu"
        if cfg.precision == "bf16" and not on_gpu:  # now, not in MXNet's words at the first step, which say nothing of why
            if problem := environment.mxnet_bf16_cpu_problem(environment.cpu_flags()):
                raise RuntimeError(problem)
        _set_tf32(cfg.precision != "fp32")
        _init_amp(cfg.precision)
        self.precision, self.on_gpu = cfg.precision, on_gpu
        self.computed: str | None = None  # the dtype the last training step's network produced (compute_dtype)
        self.ctx = [mx.gpu(i) if on_gpu else mx.cpu(i) for i in range(devices.count)]
        self.image_size = image_size
        self.batch_per_gpu = cfg.batch_per_gpu
        self.net = models.build(cfg.model, image_size, num_classes)
        scale = zoo.UNIFORM_INIT.get(cfg.model)
        init = mx.init.Uniform(scale) if scale else mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2)
        self.net.initialize(init, ctx=self.ctx)
        if zoo.named(cfg.model):  # a block that initialised some parameters itself keeps them, copied to every device
            self.net.collect_params().reset_ctx(self.ctx)
        # Counted now: once hybridized, the network runs as one graph and its layers' hooks no longer fire.
        self.gflops = flops.forward_gflops_per_image(self.net, image_size, ctx=self.ctx[0])
        self.net.hybridize(static_alloc=True, static_shape=True)
        # dist_sync: the servers sum the workers' gradients and each worker updates its own copy, so the
        # optimizer state is local and a checkpoint holds it. dist_async: MXNet updates on the servers,
        # each worker's gradients as they come (unbounded staleness); its state stays there.
        self.on_servers = cfg.kvstore == "dist_async"
        self.dist_sync = cfg.kvstore == "dist_sync"
        self.distributed = cfg.kvstore.startswith("dist")
        self.trainer = gluon.Trainer(self.net.collect_params(), "sgd",
                                     {"learning_rate": cfg.lr, "momentum": cfg.momentum, "wd": cfg.weight_decay},
                                     kvstore=cfg.kvstore,
                                     update_on_kvstore={"dist_sync": False, "dist_async": True}.get(cfg.kvstore))
        self.loss_scaling = cfg.loss_scaling
        if self.loss_scaling:  # fp16: dynamic loss scaling, amp's (from 2^16, halved on overflow, doubled after 2,000 steps)
            amp.init_trainer(self.trainer)
        # Gradients are averaged over what one update sums: every worker's batch, or (async) this worker's.
        self.update_batch = cfg.batch_per_gpu * devices.count if self.on_servers else cfg.global_batch
        self.loss = gluon.loss.SoftmaxCrossEntropyLoss()
        # NVML numbers GPUs physically, as Ray's ids do; CUDA_VISIBLE_DEVICES renumbers them for MXNet only.
        self.memory = NvmlPeakMemory([int(i) for i in devices.ray_gpu_ids]) if on_gpu else None
        # Shapes are fixed before the first step: run one forward pass so parameters exist.
        self.net(mx.nd.zeros((1, 3, image_size, image_size), ctx=self.ctx[0]))

    def param_count(self) -> int:
        return int(sum(np.prod(p.shape) for p in self.net.collect_params().values()))

    def forward_gflops(self) -> float:
        """Forward GFLOPs of one image, counted as the network first ran (trainables/mxnet/flops.py)."""
        return self.gflops

    def _resize(self, x: mx.nd.NDArray) -> mx.nd.NDArray:
        if x.shape[2] == self.image_size:
            return x
        return mx.nd.contrib.BilinearResize2D(x, height=self.image_size, width=self.image_size)

    def put(self, x: np.ndarray, y: np.ndarray) -> Any:
        # A last validation batch of fewer images than devices goes to as many devices as it has images:
        # split_and_load would make empty slices, which MXNet 1.9.1 cannot copy to a device.
        ctx = self.ctx[:max(1, min(len(x), len(self.ctx)))]
        xs = gluon.utils.split_and_load(x, ctx, even_split=False)
        ys = gluon.utils.split_and_load(y.astype(np.float32), ctx, even_split=False)
        return [self._resize(part) for part in xs], ys

    def put_loaded(self, x: mx.nd.NDArray, y: mx.nd.NDArray) -> Any:
        """A batch of MXNet's input pipeline (trainables/mxnet/input.py: ImageRecordIter's NCHW float32 images and
        float32 labels, in host memory) split over the devices, as put() splits a numpy batch."""
        ctx = self.ctx[:max(1, min(x.shape[0], len(self.ctx)))]
        xs = gluon.utils.split_and_load(x, ctx, even_split=False)
        ys = gluon.utils.split_and_load(y, ctx, even_split=False)
        return [self._resize(part) for part in xs], ys

    def synthetic(self) -> Any:
        if not hasattr(self, "_synthetic"):
            shape = (self.batch_per_gpu, 3, self.image_size, self.image_size)
            self._synthetic = ([mx.nd.random.uniform(shape=shape, ctx=c) for c in self.ctx],
                               [mx.nd.random.randint(0, 10, shape=(self.batch_per_gpu,), ctx=c).astype("float32") for c in self.ctx])
        return self._synthetic

    def _start_dist_kvstore(self) -> None:
        """Start the dist kvstore: every worker gets rank 0's initial weights before any gradient is pushed.

        Done here, after the first backward, instead of in Gluon's first step(), for two MXNet 1.9.1
        faults measured here:
        - Rank 0 pushes the initial weights from the parameters' own arrays, and a weight that MKLDNN
          has reordered in place (an inference-mode forward does that to conv weights) is not sent at
          all: the push fails inside MXNet's engine without an error and the servers abort ("init N
          first"; 5 of 5 AlexNet runs). Plain copies of the weights are pushed instead (0 of 5).
        - dist_sync: step() pulls the initial weights and pushes gradients unordered, and a worker's
          pull can return the servers' gradient sum as its weights (1 in 3 to 10 runs). A barrier after
          the initial pulls keeps every gradient behind them.
        """
        trainer = self.trainer
        # dist_async sends the optimizer to the servers now, with the gradient scale step() would set.
        trainer._optimizer.rescale_grad = trainer._scale / self.update_batch
        trainer._init_kvstore()
        for param in trainer._params_to_init:
            arrays = param.list_data()
            plain = mx.nd.array(arrays[0].asnumpy(), ctx=arrays[0].context, dtype=arrays[0].dtype)
            trainer._kvstore.broadcast(trainer._param2idx[param.name], plain, arrays)
        trainer._params_to_init = []
        mx.nd.waitall()
        trainer._kvstore._barrier()

    def train_step(self, batch: Any, lr: float) -> tuple[float, int, int]:
        xs, ys = batch
        if lr != self.trainer.learning_rate:
            self.trainer.set_learning_rate(lr)
            if self.on_servers and self.trainer._kvstore:
                # The servers run their own copy of the optimizer: send the new lr (their momentum restarts).
                self.trainer._kvstore.set_optimizer(self.trainer._optimizer)
        with autograd.record():
            outs = [self.net(x) for x in xs]
            losses = [self.loss(o, y) for o, y in zip(outs, ys)]
            self.computed = _dtype_name(outs[0].dtype)  # what the layers handed on: the rows' computed_precision
            if self.loss_scaling:
                with amp.scale_loss(losses, self.trainer) as scaled:
                    losses_to_backward = scaled
            else:
                losses_to_backward = losses
        autograd.backward(losses_to_backward)
        if self.distributed and not self.trainer._kv_initialized:
            self._start_dist_kvstore()
        self.trainer.step(self.update_batch)
        # One host read per device synchronises the step (the clock is read after it).
        stats = [mx.nd.stack(l.sum(), (o.argmax(axis=1) == y).sum()).asnumpy() for l, o, y in zip(losses, outs, ys)]
        total = np.sum(stats, axis=0)
        return float(total[0]), int(total[1]), sum(o.shape[0] for o in outs)

    def eval_step(self, batch: Any) -> tuple[int, int]:
        xs, ys = batch
        outs = [self.net(x) for x in xs]
        return (int(sum((o.argmax(axis=1) == y).sum().asscalar() for o, y in zip(outs, ys))),
                sum(o.shape[0] for o in outs))

    def logits(self, x: np.ndarray) -> np.ndarray:
        """The model's outputs for host images (in this backend's layout), on the first device: the
        tests' reference for the accuracies the loop counts."""
        return self.net(self._resize(mx.nd.array(x, ctx=self.ctx[0]))).asnumpy()

    def precision_columns(self) -> dict[str, Any]:
        """How the trial's arithmetic ran: the layout, whether TF32 was allowed on a GPU, amp's loss scale now."""
        return {"layout": self.layout, "tf32_allowed": self.on_gpu and self.precision != "fp32",
                "loss_scale": float(self.trainer._amp_loss_scaler.loss_scale) if self.loss_scaling else None}

    def compute_dtype(self) -> str | None:
        """The dtype of the network's output in the last training step, as computed (amp's rewritten operators hand
        on its target dtype, else float32); None before the first step. Read off the step, not off the setting."""
        return self.computed

    def device_peak_mib(self) -> list[float] | None:
        return self.memory.peak_mib() if self.memory else None

    def save(self, path: str) -> None:
        self.net.save_parameters(os.path.join(path, "mxnet.params"))
        if not self.on_servers:  # MXNet cannot read the servers' optimizer state back: momentum restarts
            self.trainer.save_states(os.path.join(path, "mxnet.states"))

    def load(self, path: str) -> None:
        # Before the first step: the kvstore then starts from these weights on every worker and server.
        self.net.load_parameters(os.path.join(path, "mxnet.params"), ctx=self.ctx)
        states = os.path.join(path, "mxnet.states")
        if not os.path.exists(states):
            return
        if not self.dist_sync:
            self.trainer.load_states(states)
            return
        # Gluon's load_states would start the dist kvstore here, through Gluon's own initial push, which
        # MXNet drops for MKLDNN-reordered weights (the servers abort: see _start_dist_kvstore). The state
        # is this worker's own (dist_sync updates locally), so it goes straight into the local updaters;
        # the first train_step starts the kvstore.
        with open(states, "rb") as f:
            blob = f.read()
        for updater in self.trainer._updaters:
            updater.set_states(blob)
            updater.optimizer = self.trainer._updaters[0].optimizer
        self.trainer._optimizer = self.trainer._updaters[0].optimizer
        self.trainer._optimizer.param_dict = dict(enumerate(self.trainer._params))
