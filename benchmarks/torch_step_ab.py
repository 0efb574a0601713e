"""Is the engine's PyTorch step slower than a plain DDP step? Both, interleaved, in the same processes.

  torchrun --standalone --nproc_per_node 2 benchmarks/torch_step_ab.py --model resnet8_cifar --batch-per-gpu 64

engine_vs_raw.py compares whole programs (the engine's trial under Ray against torch_ddp_peer.py under
torchrun), so a gap there may be the step or the process the step runs in. This takes the process out:
each rank builds the engine's Backend (trainables/pytorch/backend.py: its optimizer, its loss-flag
all-reduce hook, its per-step accuracy counts) and, beside it on the same process group, the plain program's
model, DDP, torch.optim.SGD and its step (torch_ddp_peer.step), and runs blocks of steps of each in turn, the order
flipping every block, so that load and clock drift hit both alike. Rank 0 prints the median step time of
each and plain/ours (>= 1: ours is as fast or faster).

On a GPU (`--device cuda`, one rank per GPU) both sides run as each runs there: channels_last, the trial's
precision (autocast, and GradScaler at fp16) and, with --compile, torch.compile over each network:

  torchrun --standalone --nproc_per_node 1 benchmarks/torch_step_ab.py --device cuda --model resnet50_v1 \
      --image-size 224 --batch-per-gpu 256 --precision bf16 --compile --threads 8
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch_ddp_peer import step  # noqa: E402 - the plain program's step, exactly

from trainables.config import TrialConfig  # noqa: E402
from trainables.loop import Devices  # noqa: E402
from trainables.pytorch.backend import Backend  # noqa: E402
from trainables.pytorch.models import build  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet8_cifar")
    p.add_argument("--batch-per-gpu", type=int, default=64)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--blocks", type=int, default=12, help="blocks of steps, alternating (the first two are warm-up)")
    p.add_argument("--steps", type=int, default=15, help="steps per block (the first 3 of each are not timed)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu: emulated GPUs, gloo; cuda: a GPU a rank")
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16", "fp16"), default="tf32")
    p.add_argument("--compile", action="store_true", help="torch.compile over both networks")
    p.add_argument("--threads", type=int, default=1, help="the trial's CPUs per rank (intra-op threads)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    on_gpu = args.device == "cuda"
    if on_gpu:  # the engine's process sees its one GPU as cuda:0 (Ray's CUDA_VISIBLE_DEVICES); so does each rank here
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ.get("LOCAL_RANK", "0")
    cfg = TrialConfig.from_dict({"framework": "pytorch", "model": args.model, "num_gpus": world,
                                 "batch_per_gpu": args.batch_per_gpu, "epochs": 1, "lr": 0.05, "data": "synthetic",
                                 "cpus_per_trial": args.threads * world, "image_size": args.image_size,
                                 "precision": args.precision, "compile": args.compile})
    ours = Backend(cfg, Devices.of(["0"], emulated=not on_gpu), args.image_size)  # gloo or NCCL when world > 1
    batch = ours.synthetic()

    torch.manual_seed(0)
    net = build(args.model, args.image_size).to(ours.device, memory_format=ours.memory_format).train()
    compiled = torch.compile(net) if args.compile else net
    model = torch.nn.parallel.DistributedDataParallel(compiled, device_ids=[0] if on_gpu else None) if world > 1 else compiled
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler(ours.device.type) if args.precision == "fp16" else None
    x, y = batch

    def plain_step() -> None:
        step(model, opt, x, y, ours.autocast, scaler)

    def our_step() -> None:
        ours.train_step(batch, 0.05)

    times: dict[str, list[float]] = {"ours": [], "plain": []}
    for block in range(args.blocks):
        order = (("ours", our_step), ("plain", plain_step)) if block % 2 else (("plain", plain_step), ("ours", our_step))
        for name, run_step in order:
            for i in range(args.steps):
                t0 = time.perf_counter()
                run_step()
                if block >= 2 and i >= 3:
                    times[name].append(time.perf_counter() - t0)
    if rank == 0:
        o, p = statistics.median(times["ours"]), statistics.median(times["plain"])
        print(f"{args.model} batch {args.batch_per_gpu} {args.precision}{' compiled' if args.compile else ''} on {args.device}, {world} rank(s), {len(times['ours'])} timed steps each: "
              f"median step ours {o * 1e3:.4f} ms, plain {p * 1e3:.4f} ms; plain/ours {p / o:.3f}", flush=True)
    if world > 1:
        os._exit(0)  # gloo's threads abort a normal exit at times (torch_ddp_peer.py)
    return 0


if __name__ == "__main__":
    sys.exit(main())
