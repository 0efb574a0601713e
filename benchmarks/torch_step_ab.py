"""Is the engine's PyTorch step slower than a plain DDP step? Both, interleaved, in the same processes.

  torchrun --standalone --nproc_per_node 2 benchmarks/torch_step_ab.py --model resnet8_cifar --batch-per-gpu 64

engine_vs_raw.py compares whole programs (the engine's trial under Ray against torch_ddp_peer.py under
torchrun), so a gap there may be the step or the process the step runs in. This takes the process out:
each rank builds the engine's Backend (trainables/pytorch/backend.py: its optimizer, its loss-flag
all-reduce hook, its per-step accuracy counts) and, beside it on the same process group, the plain program's
model, DDP, torch.optim.SGD and its step (torch_ddp_peer.step), and runs blocks of steps of each in turn, the order
flipping every block, so that load and clock drift hit both alike. Rank 0 prints the median step time of
each and plain/ours (>= 1: ours is as fast or faster).
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
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    cfg = TrialConfig.from_dict({"framework": "pytorch", "model": args.model, "num_gpus": world,
                                 "batch_per_gpu": args.batch_per_gpu, "epochs": 1, "lr": 0.05, "data": "synthetic",
                                 "cpus_per_trial": 1, "image_size": args.image_size})
    ours = Backend(cfg, Devices.of(["0"], emulated=True), args.image_size)  # one thread, gloo when world > 1
    batch = ours.synthetic()

    torch.manual_seed(0)
    net = build(args.model, args.image_size).train()
    model = torch.nn.parallel.DistributedDataParallel(net) if world > 1 else net
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    x, y = batch

    def plain_step() -> None:
        step(model, opt, x, y)

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
        print(f"{args.model} batch {args.batch_per_gpu}, {world} rank(s), {len(times['ours'])} timed steps each: "
              f"median step ours {o * 1e3:.2f} ms, plain {p * 1e3:.2f} ms; plain/ours {p / o:.3f}", flush=True)
    if world > 1:
        os._exit(0)  # gloo's threads abort a normal exit at times (torch_ddp_peer.py)
    return 0


if __name__ == "__main__":
    sys.exit(main())
