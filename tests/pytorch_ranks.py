"""Run by tests/test_pytorch.py: one rank of a PyTorch trial's backend, driven step by step on fixed batches.

  python tests/pytorch_ranks.py CONFIG_JSON OUT.npz LR...

RANK and WORLD_SIZE (with torch's MASTER_ADDR, MASTER_PORT) come from the environment, as
sweep/workers.py sets them; without them the process is a 1-GPU trial. Each step trains this rank's
slice of the same global batch (fixed images, seed 7; POISON_RANK_STEP=R:S makes rank R's NaN in
step S) at the next LR; every step's (loss sum, correct,
images) is printed as one JSON line; rank 0 then writes its weights and optimizer velocities to OUT.npz.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

from trainables.config import TrialConfig
from trainables.loop import Devices


def main() -> None:
    cfg = TrialConfig.from_dict(json.loads(sys.argv[1]))
    out, lrs = sys.argv[2], [float(v) for v in sys.argv[3:]]
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    devices = Devices.of([str(rank)], emulated=True)
    from trainables.pytorch.backend import Backend

    backend = Backend(cfg, devices, 32)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(cfg.global_batch, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, size=cfg.global_batch)
    local = cfg.global_batch // world
    part = slice(rank * local, (rank + 1) * local)
    poisoned = os.environ.get("POISON_RANK_STEP")  # "RANK:STEP": that rank's images are NaN in that step
    for step, lr in enumerate(lrs):
        images = x[part].copy()
        if poisoned == f"{rank}:{step}":
            images[:] = np.nan
        print(json.dumps(backend.train_step(backend.put(images, y[part]), lr)), flush=True)
    if rank == 0:
        velocity = [backend.opt.state[p]["velocity"].numpy() for p in backend.net.parameters() if p in backend.opt.state]
        weights = [p.detach().numpy() for p in backend.net.parameters()]
        np.savez(out, *weights, *velocity)
    if world > 1:  # gloo's threads abort a normal exit at times, whether the process group was destroyed first or
        sys.stdout.flush()  # not ("terminate called without an active exception", SIGABRT); the engine's ranks
        os._exit(0)  # end with os._exit too (sweep/workers.py)


if __name__ == "__main__":
    main()
