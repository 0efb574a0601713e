"""The PyTorch yardstick: a plain DistributedDataParallel training program, as a user writes one.

  torchrun --standalone --nproc_per_node N benchmarks/torch_ddp_peer.py --model resnet8_cifar \\
      --batch-per-gpu 64 --image-size 32 --warmup-steps 10 --steps 50 --threads 1

Nothing of the engine runs here: no Ray, no loop of ours, no backend of ours. The one thing it takes
from this repository is the network (trainables/pytorch/models.py), so that both sides train the
same layers by construction (the rule yardsticks.py checks with benchmarks/_same_network.py for the
other frameworks' programs). The rest is plain PyTorch:

  - one process per device, started by torchrun (env:// rendezvous); gloo on CPUs, NCCL on GPUs;
  - DDP over the model; torch.optim.SGD with momentum and weight decay; cross-entropy;
  - one synthetic batch made on the device and reused every step, as tf_cnn_benchmarks does;
  - precision fp32 (TF32 off), tf32, bf16 (autocast) or fp16 (autocast + GradScaler); --compile: torch.compile
    over the network, DDP around it (PyTorch's advice; over the DDP module torch 2.13 compiled nothing);
  - channels_last on GPUs (NVIDIA's advice for tensor cores), NCHW on CPUs; --layout sets either, to measure the choice;
  - each step ends with loss.item(), the host read a training program makes to log its loss (it also
    synchronises the device, so each step's time is the step's).

Measured as our loop measures (trainables/measure.py): the first --warmup-steps steps are thrown
away; steady images/s is the mean of per-step rates (per-process batch / step time); and, as
tf_cnn_benchmarks' figure, images / wall time of the timed steps. Rank 0 prints one JSON line with
the totals over all ranks (sums, as the engine's rows total its workers) and each rank's figures.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for trainables.pytorch.models only

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from trainables.pytorch.models import build, count_params  # noqa: E402

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet8_cifar")
    p.add_argument("--batch-per-gpu", type=int, default=64)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--steps", type=int, default=50, help="timed steps, after the warm-up")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process (and OMP_NUM_THREADS)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16", "fp16"), default="fp32")
    p.add_argument("--compile", action="store_true", help="torch.compile the network (inside DDP)")
    p.add_argument("--layout", choices=("auto", "nhwc", "nchw"), default="auto",
                   help="memory layout: nhwc (channels_last) or nchw (contiguous); auto: nhwc on GPUs, as our backend")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
         autocast: torch.dtype | None = None, scaler: torch.amp.GradScaler | None = None) -> None:
    """One training step, the whole of it: forward (under autocast to that dtype, if any), cross-entropy,
    backward (through the loss scaler, if any), SGD's update, and the loss read back as the host would."""
    with torch.autocast(x.device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
        loss = F.cross_entropy(model(x).float(), y)
    opt.zero_grad(set_to_none=True)
    if scaler:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()
    loss.item()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    on_gpu = args.device == "cuda"
    device = torch.device("cuda", local_rank) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.precision != "fp32"
    if world > 1:
        dist.init_process_group("nccl" if on_gpu else "gloo", timeout=datetime.timedelta(minutes=10))

    torch.manual_seed(args.seed)
    nhwc = args.layout == "nhwc" or (args.layout == "auto" and on_gpu)
    layout = torch.channels_last if nhwc else torch.contiguous_format
    net = build(args.model, args.image_size).to(device, memory_format=layout).train()
    model = torch.compile(net) if args.compile else net  # the network, inside DDP (torch.compile(DDP) compiled nothing)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if on_gpu else None)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    scaler = torch.amp.GradScaler(device.type) if args.precision == "fp16" else None
    x = torch.rand(args.batch_per_gpu, 3, args.image_size, args.image_size, device=device).contiguous(memory_format=layout)
    y = torch.randint(0, 10, (args.batch_per_gpu,), device=device)

    times = []
    for _ in range(args.warmup_steps + args.steps):
        t0 = time.perf_counter()
        step(model, opt, x, y, AUTOCAST.get(args.precision), scaler)
        times.append(time.perf_counter() - t0)

    timed = times[args.warmup_steps:]
    mine = {"steady_images_per_sec": statistics.fmean(args.batch_per_gpu / t for t in timed),
            "images_per_sec": args.batch_per_gpu * len(timed) / sum(timed)}
    ranks = [mine]
    if world > 1:
        ranks = [None] * world
        dist.all_gather_object(ranks, mine)
    if rank == 0:
        print(json.dumps({
            "steady_images_per_sec": sum(r["steady_images_per_sec"] for r in ranks),
            "images_per_sec": sum(r["images_per_sec"] for r in ranks),
            "ranks": ranks, "world_size": world, "threads": args.threads, "steady_steps": len(timed),
            "param_count": count_params(net), "model": args.model, "batch_per_gpu": args.batch_per_gpu,
            "image_size": args.image_size, "precision": args.precision, "compile": args.compile, "layout": "NHWC" if nhwc else "NCHW",
            "device": device.type, "torch": torch.__version__}), flush=True)
    if world > 1:  # gloo's threads abort a normal exit at times, even after destroy_process_group() (SIGABRT,
        os._exit(0)  # "terminate called without an active exception", and torchrun fails the run): end at once
    return 0


if __name__ == "__main__":
    sys.exit(main())
