"""A network of your own for MXNet trials: `model: gluon_net:build` (docs/models.md).

The engine calls build(num_classes=..., image_size=...) in each trial's process and trains what it returns: a
Gluon HybridBlock that maps a batch of images (N, 3, image_size, image_size), float32, to logits
(N, num_classes). Leave it uninitialised: the engine initialises it on the trial's devices and hybridizes it.
"""
from mxnet.gluon import nn


def build(num_classes: int, image_size: int) -> nn.HybridBlock:
    net = nn.HybridSequential()
    net.add(nn.Conv2D(16, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
            nn.MaxPool2D(2),
            nn.Conv2D(32, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
            nn.GlobalAvgPool2D(), nn.Flatten(),
            nn.Dense(num_classes))
    return net
