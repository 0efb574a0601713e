"""PyTorch backend: one process per GPU, DistributedDataParallel among them.

A PyTorch trial on one GPU trains in one process; on n GPUs (on one node or several) it runs as n
processes, one per GPU, each pinned to its GPU (Ray's CUDA_VISIBLE_DEVICES holds that one), started
by sweep/workers.py with torch's env:// rendezvous in their environment: MASTER_ADDR, MASTER_PORT,
RANK, WORLD_SIZE, LOCAL_RANK (rank 0's store already open on that port: open_rendezvous). The process
group is NCCL's on GPUs, gloo's on emulated ones (one CPU process per emulated GPU), with a timeout
(SWEEP_DDP_TIMEOUT_S) so that a rank whose peer hangs fails the trial within a bounded time.

The optimizer is the other frameworks' SGD (momentum_sgd below), the loss the mean over each rank's
batch, which DDP's averaging all-reduce turns into the mean over the global batch.
"""
from __future__ import annotations

import datetime
import os
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from trainables import environment, zoo
from trainables.config import TrialConfig, ddp_timeout_s
from trainables.loop import Devices
from trainables.probe import Build
from trainables.pytorch import flops, models

AUTOCAST = {"fp16": torch.float16, "bf16": torch.bfloat16}  # mixed precision: fp32 weights, 16-bit compute


def build() -> Build:
    """PyTorch's build (for the framework check): its CUDA, the GPU code it carries, the GPUs it sees."""
    cuda = torch.version.cuda
    return Build(version=torch.__version__, gpu_build=cuda is not None, cuda=cuda,
                 archs=tuple(torch.cuda.get_arch_list()) or None, gpus=torch.cuda.device_count() if cuda else 0)


def open_rendezvous(host: str) -> tuple[dist.TCPStore, int]:
    """Rank 0's rendezvous store, listening on a port the kernel gave it: (the store, its port).

    The caller keeps the store until this process's process group is made: env:// then takes over the same
    server (torch's multi-tenant TCPStore, one per port and process), so no other process can take the port
    between its choice and the group. A port found free and let go lost that race (a 2-GPU trial failed with
    EADDRINUSE while three other trials started beside it)."""
    store = dist.TCPStore(host, 0, is_master=True, multi_tenant=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=ddp_timeout_s()))
    return store, store.port


def check_compiled() -> None:
    """After a compiled trial's first step: torch.compile did compile graphs in this process. Rows say
    `compiler: inductor`; a step that Dynamo ran eagerly, graph break after graph break, must not pass for one."""
    from torch._dynamo.utils import counters

    if not counters["stats"]["unique_graphs"]:
        raise RuntimeError("torch.compile compiled no graph of the step: it ran eagerly (TORCH_LOGS=graph_breaks says why)")


class MomentumSGD(torch.optim.Optimizer):
    """SGD with momentum as MXNet's and Keras' SGD apply it (the other two backends):

        g = grad + wd * w          (weight decay added once, to the all-reduced gradient)
        v = momentum * v - lr * g
        w = w + v

    torch.optim.SGD keeps v without the lr (w -= lr * (momentum * b + g)): the same steps while the lr is
    constant, other steps once the schedule changes it. An Optimizer, so that GradScaler can unscale
    its gradients and skip its step."""

    def __init__(self, params: Any, lr: float, momentum: float, weight_decay: float) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            velocity = [self.state[p].setdefault("velocity", torch.zeros_like(p)) for p in params]
            grads = torch._foreach_add([p.grad for p in params], params, alpha=group["weight_decay"])
            torch._foreach_mul_(velocity, group["momentum"])
            torch._foreach_add_(velocity, grads, alpha=-group["lr"])
            torch._foreach_add_(params, velocity)


class Backend:
    layout = "NCHW"  # what put() takes; on a GPU the devices compute channels_last (precision_columns says)
    put_ahead = True  # a copy to the GPU may be queued from the prefetch thread (pinned memory, non_blocking)
    framework_version = f"pytorch {torch.__version__}"
    framework_cuda_version = torch.version.cuda  # None in a CPU build
    framework_cudnn_version = (environment.cudnn_version_text(torch.backends.cudnn.version())
                               if torch.backends.cudnn.version() else None)  # None in a CPU build

    def __init__(self, cfg: TrialConfig, devices: Devices, image_size: int, num_classes: int = zoo.NUM_CLASSES) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        if self.world != cfg.num_gpus:  # one process per GPU: sweep/workers.py starts them
            raise ValueError(f"a PyTorch trial on {cfg.num_gpus} GPUs runs as {cfg.num_gpus} processes, one per GPU; "
                             f"this one is 1 of {self.world} (WORLD_SIZE)")
        if devices.count != 1:
            raise ValueError(f"a PyTorch process drives one GPU, not {devices.count}")
        self.on_gpu = devices.kind == "gpu"
        self.device = torch.device("cuda", 0) if self.on_gpu else torch.device("cpu")  # its one visible GPU
        threads = cfg.cpus_per_process  # the node's CPUs, shared by its GPUs' processes
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)  # what the rows' `threads` reads
        if self.on_gpu:
            torch.cuda.set_device(self.device)
        # TF32 on Ampere and later: allowed except at fp32, as the other two frameworks do.
        torch.backends.cuda.matmul.allow_tf32 = cfg.precision != "fp32"
        torch.backends.cudnn.allow_tf32 = cfg.precision != "fp32"
        torch.backends.cudnn.benchmark = self.on_gpu  # fixed shapes: cuDNN picks its fastest kernels once
        self.precision = cfg.precision
        self.autocast = AUTOCAST.get(cfg.precision)
        self.computed: torch.dtype | None = None  # the dtype the last forward pass produced (autocast's, or fp32)
        # channels_last on GPUs: 1.78x NCHW's images/s on an H100 (ResNet-50 bf16, benchmarks/README.md); NCHW on CPUs.
        self.memory_format = torch.channels_last if self.on_gpu else torch.contiguous_format
        self.image_size, self.batch_per_gpu = image_size, cfg.batch_per_gpu

        torch.manual_seed(cfg.seed)  # every rank builds the same weights (DDP also sends rank 0's at the start)
        self.net = models.build(cfg.model, image_size, num_classes).to(self.device, memory_format=self.memory_format)
        self.opt = MomentumSGD(self.net.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        # fp16: dynamic loss scaling (torch's defaults: from 2^16, halved on a non-finite gradient, which skips
        # that step, doubled after 2,000 finite steps).
        self.scaler = torch.amp.GradScaler(self.device.type) if cfg.loss_scaling else None
        # torch.compile over the network, and DDP around that: over the DDP module it compiled nothing (torch 2.13:
        # Dynamo breaks the graph in DDP's forward and the network ran eagerly), and PyTorch's own advice is to
        # compile the module inside a distributed wrapper. `nn.Module.compile()` compiled nothing either.
        self.model: nn.Module = torch.compile(self.net) if cfg.compile else self.net
        self._compile_unchecked = cfg.compile  # until the first step shows that graphs were compiled
        if self.world > 1:
            dist.init_process_group("nccl" if self.on_gpu else "gloo", init_method="env://",
                                    timeout=datetime.timedelta(seconds=ddp_timeout_s()))
            self.model = nn.parallel.DistributedDataParallel(self.model, device_ids=[0] if self.on_gpu else None)
            self.model.register_comm_hook(None, self._reduce_with_loss_flag)
            self._loss_finite = torch.ones((), device=self.device)  # this rank's, set in each step before backward
            self._ranks_finite = torch.full((), float(self.world), device=self.device)  # all ranks', after it
        self.net.train()

    def _reduce_with_loss_flag(self, _, bucket):  # type: ignore[no-untyped-def]
        """DDP's averaging all-reduce of a bucket of gradients; the last bucket carries this rank's loss-is-finite
        flag, summed over the ranks with it. Every rank must see a non-finite loss in the same step (a rank that
        stopped alone would leave the others in the next step's all-reduce until the timeout); a collective of
        its own for that cost 8-13% of a step on gloo, this one costs one number. Not annotated: DDP checks a hook's
        annotations as objects, and this module's are strings (`from __future__ import annotations`)."""
        grads = bucket.buffer().div_(self.world)
        if not bucket.is_last():
            return dist.all_reduce(grads, async_op=True).get_future().then(lambda fut: fut.value()[0])
        with_flag = torch.cat([grads, self._loss_finite.to(grads.dtype).view(1)])

        def split(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            reduced = fut.value()[0]
            self._ranks_finite = reduced[-1]
            return reduced[:-1]

        return dist.all_reduce(with_flag, async_op=True).get_future().then(split)

    def param_count(self) -> int:
        return models.count_params(self.net)

    def forward_gflops(self) -> float:
        """Forward GFLOPs of one image, counted on the network itself (trainables/pytorch/flops.py)."""
        return flops.forward_gflops_per_image(self.net, self.image_size)

    def _to_device(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[2] != self.image_size:  # CIFAR at a model's larger input: resized on the device
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False)
        return x.contiguous(memory_format=self.memory_format)

    def put(self, x: np.ndarray, y: np.ndarray) -> Any:
        xs, ys = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
        if self.on_gpu:  # from pinned memory, without waiting for the copy
            xs = xs.pin_memory().to(self.device, non_blocking=True)
            ys = ys.pin_memory().to(self.device, non_blocking=True)
        return self._to_device(xs), ys

    def put_loaded(self, x: torch.Tensor, y: torch.Tensor) -> Any:
        """A batch of the PyTorch input pipeline (trainables/pytorch/input.py): CPU tensors, pinned on GPUs, so the
        copy is queued without waiting for it."""
        if self.on_gpu:
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        return self._to_device(x), y

    def synthetic(self) -> Any:
        if not hasattr(self, "_synthetic"):
            shape = (self.batch_per_gpu, 3, self.image_size, self.image_size)
            self._synthetic = (torch.rand(shape, device=self.device).contiguous(memory_format=self.memory_format),
                               torch.randint(0, 10, (self.batch_per_gpu,), device=self.device))
        return self._synthetic

    def _forward(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.autocast is None:
            out = model(x)
        else:
            with torch.autocast(self.device.type, dtype=self.autocast):
                out = model(x)
        self.computed = out.dtype  # what the layers computed in, read off their output: the rows' computed_precision
        return out.float()  # the loss in fp32, as the other frameworks compute it

    def train_step(self, batch: Any, lr: float) -> tuple[float, int, int]:
        x, y = batch
        for group in self.opt.param_groups:
            group["lr"] = lr
        logits = self._forward(self.model, x)
        loss = F.cross_entropy(logits, y)  # this rank's mean; DDP averages the gradients over the ranks
        self.opt.zero_grad(set_to_none=True)
        if self.world > 1:
            self._loss_finite = torch.isfinite(loss.detach()).float()  # read by the all-reduce in backward
        if self.scaler:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)  # unscales first; skips the step on a non-finite gradient
            self.scaler.update()
        else:
            loss.backward()
            self.opt.step()
        with torch.no_grad():
            stats = torch.stack([loss.detach() * y.shape[0], (logits.argmax(1) == y).sum().float()])
            if self.world > 1:  # any rank's non-finite loss is every rank's (_reduce_with_loss_flag)
                all_finite = self._ranks_finite >= self.world - 0.5
                stats[0] = torch.where(all_finite, stats[0], torch.full_like(stats[0], float("nan")))
        loss_sum, correct = stats.tolist()  # a host read: the step is synchronised
        if self._compile_unchecked:
            self._compile_unchecked = False
            check_compiled()
        return loss_sum, int(correct), int(y.shape[0])

    @torch.no_grad()
    def eval_step(self, batch: Any) -> tuple[int, int]:
        """On this process's model alone, not through DDP (only rank 0 validates: no collective may run)."""
        x, y = batch
        self.net.eval()
        try:
            logits = self._forward(self.net, x)
        finally:
            self.net.train()
        return int((logits.argmax(1) == y).sum().item()), int(y.shape[0])

    @torch.no_grad()
    def logits(self, x: np.ndarray) -> np.ndarray:
        """The model's outputs for host images (NCHW): the tests' reference for the accuracies the loop counts."""
        self.net.eval()
        try:
            return self._forward(self.net, self._to_device(torch.from_numpy(x).to(self.device))).float().cpu().numpy()
        finally:
            self.net.train()

    def precision_columns(self) -> dict[str, Any]:
        """How the trial's arithmetic ran: the layout its convolutions computed in (channels_last is NHWC),
        whether TF32 was allowed on a GPU, GradScaler's loss scale now."""
        return {"layout": "NHWC" if self.on_gpu else "NCHW",
                "tf32_allowed": self.on_gpu and torch.backends.cuda.matmul.allow_tf32,
                "loss_scale": float(self.scaler.get_scale()) if self.scaler else None}

    def compute_dtype(self) -> str | None:
        """The dtype the last forward pass produced: autocast's where it ran, float32 where it did not; None before
        the first."""
        return str(self.computed).removeprefix("torch.") if self.computed is not None else None

    def device_peak_mib(self) -> list[float] | None:
        """This process's GPU: the peak its allocator held (a trial's rows list one per rank)."""
        return [torch.cuda.max_memory_allocated(self.device) / 2**20] if self.on_gpu else None

    def save(self, path: str) -> None:
        state = {"model": self.net.state_dict(), "optimizer": self.opt.state_dict(),
                 "scaler": self.scaler.state_dict() if self.scaler else None}
        torch.save(state, os.path.join(path, "pytorch.pt"))

    def load(self, path: str) -> None:
        state = torch.load(os.path.join(path, "pytorch.pt"), map_location=self.device, weights_only=True)
        self.net.load_state_dict(state["model"])  # a checkpoint of another model fails here, naming the keys
        self.opt.load_state_dict(state["optimizer"])
        if self.scaler and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
