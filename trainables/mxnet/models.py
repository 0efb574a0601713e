"""The zoo in Gluon; trainables/tensorflow/models.py builds the same layers in Keras."""
from __future__ import annotations

from mxnet.gluon import nn
from mxnet.gluon.contrib.nn import HybridConcurrent

from trainables import zoo

BN = {"momentum": 0.9, "epsilon": 1e-5}


def _conv_bn(channels: int, kernel, stride: int = 1, pad=0, relu: bool = True) -> nn.HybridSequential:
    """Conv (no bias: BN follows) + BN (+ ReLU)."""
    out = nn.HybridSequential()
    out.add(nn.Conv2D(channels, kernel, stride, pad, use_bias=False), nn.BatchNorm(**BN))
    if relu:
        out.add(nn.Activation("relu"))
    return out


def _seq(*blocks: nn.HybridBlock) -> nn.HybridSequential:
    out = nn.HybridSequential()
    out.add(*blocks)
    return out


def _concat(*branches: nn.HybridBlock) -> HybridConcurrent:
    """Branches side by side, outputs concatenated along channels."""
    out = HybridConcurrent(axis=1)
    out.add(*branches)
    return out


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


class Bottleneck(nn.HybridBlock):
    """ResNet v1 bottleneck: 1x1 (carries the stride, as in He et al. 2016), 3x3, 1x1 x4 channels."""

    def __init__(self, channels: int, stride: int, project: bool) -> None:
        super().__init__()
        self.body = _seq(_conv_bn(channels // 4, 1, stride), _conv_bn(channels // 4, 3, 1, 1),
                         _conv_bn(channels, 1, relu=False))
        self.shortcut = _conv_bn(channels, 1, stride, relu=False) if project else None

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


def resnet50_v1() -> nn.HybridBlock:
    """ImageNet ResNet-50 v1: 7x7/2 stem + 3x3/2 max pool, bottleneck stages 3-4-6-3 (256..2048 channels)."""
    net = _seq(_conv_bn(64, 7, 2, 3), nn.MaxPool2D(3, 2, 1))
    for stage, (units, channels) in enumerate(zip((3, 4, 6, 3), (256, 512, 1024, 2048))):
        for unit in range(units):  # the first block of a stage changes the shape: projection shortcut
            net.add(Bottleneck(channels, 2 if stage > 0 and unit == 0 else 1, project=unit == 0))
    net.add(nn.GlobalAvgPool2D(), nn.Flatten(), nn.Dense(zoo.NUM_CLASSES))
    return net


def _avg_branch(channels: int) -> nn.HybridSequential:
    # 3x3/1 average pool that averages real pixels only (TF's "SAME"), then a 1x1 conv.
    return _seq(nn.AvgPool2D(3, 1, 1, count_include_pad=False), _conv_bn(channels, 1))


def _inception_a(pool_channels: int) -> nn.HybridBlock:
    return _concat(_conv_bn(64, 1),
                   _seq(_conv_bn(48, 1), _conv_bn(64, 5, pad=2)),
                   _seq(_conv_bn(64, 1), _conv_bn(96, 3, pad=1), _conv_bn(96, 3, pad=1)),
                   _avg_branch(pool_channels))


def _inception_b() -> nn.HybridBlock:  # 35 -> 17
    return _concat(_conv_bn(384, 3, 2),
                   _seq(_conv_bn(64, 1), _conv_bn(96, 3, pad=1), _conv_bn(96, 3, 2)),
                   nn.MaxPool2D(3, 2))


def _inception_c(c7: int) -> nn.HybridBlock:  # factorised 7x7
    return _concat(_conv_bn(192, 1),
                   _seq(_conv_bn(c7, 1), _conv_bn(c7, (1, 7), pad=(0, 3)), _conv_bn(192, (7, 1), pad=(3, 0))),
                   _seq(_conv_bn(c7, 1), _conv_bn(c7, (7, 1), pad=(3, 0)), _conv_bn(c7, (1, 7), pad=(0, 3)),
                        _conv_bn(c7, (7, 1), pad=(3, 0)), _conv_bn(192, (1, 7), pad=(0, 3))),
                   _avg_branch(192))


def _inception_d() -> nn.HybridBlock:  # 17 -> 8
    return _concat(_seq(_conv_bn(192, 1), _conv_bn(320, 3, 2)),
                   _seq(_conv_bn(192, 1), _conv_bn(192, (1, 7), pad=(0, 3)), _conv_bn(192, (7, 1), pad=(3, 0)),
                        _conv_bn(192, 3, 2)),
                   nn.MaxPool2D(3, 2))


def _inception_e() -> nn.HybridBlock:  # expanded filter bank: 1x3 and 3x1 side by side
    def split() -> nn.HybridBlock:
        return _concat(_conv_bn(384, (1, 3), pad=(0, 1)), _conv_bn(384, (3, 1), pad=(1, 0)))
    return _concat(_conv_bn(320, 1),
                   _seq(_conv_bn(384, 1), split()),
                   _seq(_conv_bn(448, 1), _conv_bn(384, 3, pad=1), split()),
                   _avg_branch(192))


def inception_v3() -> nn.HybridBlock:
    """Szegedy et al. 2015's Inception-v3 (no auxiliary head); 299x299 in, 75x75 at least."""
    net = _seq(_conv_bn(32, 3, 2), _conv_bn(32, 3), _conv_bn(64, 3, pad=1), nn.MaxPool2D(3, 2),
               _conv_bn(80, 1), _conv_bn(192, 3), nn.MaxPool2D(3, 2),
               _inception_a(32), _inception_a(64), _inception_a(64), _inception_b(),
               _inception_c(128), _inception_c(160), _inception_c(160), _inception_c(192),
               _inception_d(), _inception_e(), _inception_e(),
               nn.GlobalAvgPool2D(), nn.Flatten(), nn.Dropout(0.5), nn.Dense(zoo.NUM_CLASSES))
    return net


def cifar10_conv() -> nn.HybridBlock:
    """Neon's examples/cifar10_conv.py: neon's Conv and Affine add a bias only when given one, and the
    example gives none, so no layer here has a bias. (Neon's later versions add batch norm; seed 002's
    version is the plain one.)"""
    net = nn.HybridSequential()
    net.add(nn.Conv2D(16, 5, use_bias=False, activation="relu"), nn.MaxPool2D(2, 2),
            nn.Conv2D(32, 5, use_bias=False, activation="relu"), nn.MaxPool2D(2, 2),
            nn.Dense(500, use_bias=False, activation="relu"), nn.Dense(zoo.NUM_CLASSES, use_bias=False))
    return net


def alexnet() -> nn.HybridBlock:
    """AlexNet as in Gluon's model zoo (Krizhevsky 2014's one-tower variant): biases, no LRN."""
    net = nn.HybridSequential()
    net.add(nn.Conv2D(64, 11, 4, 2, activation="relu"), nn.MaxPool2D(3, 2),
            nn.Conv2D(192, 5, 1, 2, activation="relu"), nn.MaxPool2D(3, 2),
            nn.Conv2D(384, 3, 1, 1, activation="relu"), nn.Conv2D(256, 3, 1, 1, activation="relu"),
            nn.Conv2D(256, 3, 1, 1, activation="relu"), nn.MaxPool2D(3, 2), nn.Flatten(),
            nn.Dense(4096, activation="relu"), nn.Dropout(0.5),
            nn.Dense(4096, activation="relu"), nn.Dropout(0.5), nn.Dense(zoo.NUM_CLASSES))
    return net


FIXED = {"resnet50_v1": resnet50_v1, "inception_v3": inception_v3, "cifar10_conv": cifar10_conv, "alexnet": alexnet}


def build(name: str) -> nn.HybridBlock:
    units = zoo.cifar_resnet_units(name)
    if units is not None:
        return resnet_cifar(units)
    if name in FIXED:
        return FIXED[name]()
    raise ValueError(f"model {name} has no MXNet builder")
