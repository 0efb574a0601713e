"""Our MXNet training step on MXNet's own CIFAR ResNet-20 network, for yardsticks.py.

train_cifar10.py and our resnet20_cifar are different networks (theirs: pre-activation, v2; ours:
v1), so their program against our trial compares networks as well as loops. Here the network is
theirs, imported from the checkout given (example/image-classification/symbols/resnet.py; nothing
of it is copied here) as a Gluon SymbolBlock, and trained by trainables.mxnet.backend.Backend's
train_step, the code every MXNet trial runs per step, on synthetic data.

  OMP_NUM_THREADS=1 .venv/bin/python benchmarks/_their_network.py EXAMPLE_DIR [BATCH WARMUP STEPS]

Prints one JSON line: images/s over the timed steps (images / wall time, as their Speedometer) and
the network's parameter count.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import trainables.mxnet  # noqa: E402, F401  (the numpy alias mxnet 1.9.1 needs)
import mxnet as mx  # noqa: E402
from mxnet import gluon  # noqa: E402

from _common import print_step_rate  # noqa: E402
from trainables.config import TrialConfig  # noqa: E402
from trainables.loop import Devices  # noqa: E402
from trainables.mxnet.backend import Backend  # noqa: E402

IMAGE = 28  # their symbol builds the CIFAR network for heights <= 28 only


def main(argv: list[str]) -> None:
    example = Path(argv[0])
    batch, warmup, steps = (int(a) for a in (argv[1:4] or (64, 10, 40)))
    sys.path.insert(0, str(example))
    from symbols import resnet  # theirs, from the checkout

    logits = resnet.get_symbol(num_classes=10, num_layers=20, image_shape=f"3,{IMAGE},{IMAGE}").get_children()[0]
    cfg = TrialConfig("mxnet", "resnet20_cifar", num_gpus=1, batch_per_gpu=batch, epochs=1, lr=0.01,
                      image_size=IMAGE, data="synthetic")
    backend = Backend(cfg, Devices("cpu-emulated", 1, ("0",)), IMAGE)
    # Their network in place of ours, set up as Backend sets up its own.
    net = gluon.SymbolBlock(logits, mx.sym.var("data"))
    net.initialize(mx.init.Normal(0.05), ctx=backend.ctx)  # speed does not depend on the values
    net.hybridize(static_alloc=True, static_shape=True)
    backend.net = net
    backend.trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": cfg.lr, "momentum": cfg.momentum,
                                                                  "wd": cfg.weight_decay}, kvstore=cfg.kvstore)
    print_step_rate(backend, batch, warmup, steps, cfg.lr)


if __name__ == "__main__":
    main(sys.argv[1:])
