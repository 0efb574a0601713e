"""The zoo in Gluon; trainables/tensorflow/models.py builds the same layers in Keras."""
from __future__ import annotations

from mxnet.gluon import nn

from trainables import zoo

BN = {"momentum": 0.9, "epsilon": 1e-5}


class BasicBlock(nn.HybridBlock):
    """ResNet v1 basic block; a 1x1 projection shortcut where the shape changes."""

    def __init__(self, channels: int, stride: int, project: bool) -> None:
        super().__init__()
        self.body = nn.HybridSequential()
        self.body.add(nn.Conv2D(channels, 3, stride, 1, use_bias=False), nn.BatchNorm(**BN), nn.Activation("relu"),
                      nn.Conv2D(channels, 3, 1, 1, use_bias=False), nn.BatchNorm(**BN))
        self.shortcut = None
        if project:
            self.shortcut = nn.HybridSequential()
            self.shortcut.add(nn.Conv2D(channels, 1, stride, use_bias=False), nn.BatchNorm(**BN))

    def hybrid_forward(self, F, x):
        skip = self.shortcut(x) if self.shortcut is not None else x
        return F.relu(self.body(x) + skip)


def resnet_cifar(units: int) -> nn.HybridBlock:
    """He et al. 2016's CIFAR ResNet (depth 6n+2): 16-32-64 channels, n basic blocks per stage."""
    net = nn.HybridSequential()
    net.add(nn.Conv2D(16, 3, 1, 1, use_bias=False), nn.BatchNorm(**BN), nn.Activation("relu"))
    in_channels = 16
    for stage, channels in enumerate((16, 32, 64)):
        for unit in range(units):
            stride = 2 if stage > 0 and unit == 0 else 1
            net.add(BasicBlock(channels, stride, project=channels != in_channels))
            in_channels = channels
    net.add(nn.GlobalAvgPool2D(), nn.Flatten(), nn.Dense(zoo.NUM_CLASSES))
    return net


def build(name: str) -> nn.HybridBlock:
    units = zoo.cifar_resnet_units(name)
    if units is not None:
        return resnet_cifar(units)
    raise ValueError(f"model {name} has no MXNet builder")
