"""The zoo in Gluon; trainables/tensorflow/models.py builds the same layers in Keras."""
from __future__ import annotations

from mxnet.gluon import nn
from mxnet.gluon.contrib.nn import HybridConcurrent

from trainables import zoo
from trainables.failure import first_line

BN = {"momentum": 0.9, "epsilon": 1e-5}
BN_V2 = {"momentum": 0.9, "epsilon": 2e-5}  # MXNet's symbols/resnet.py


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


class GlobalAvgPool(nn.HybridBlock):
    """Mean over height and width, to (batch, channels): Gluon's GlobalAvgPool2D + Flatten, minus a
    MKLDNN fault measured here (MXNet 1.9.1, 7x7 maps): that pooling's backward runs on oneDNN's
    reference kernel (~14 ms a step for resnet20 at 28x28) and hands back a gradient in a layout that
    sends every batch norm it reaches back to the reference kernel too (~18 ms each)."""

    def hybrid_forward(self, F, x):
        return F.mean(x, axis=(2, 3))


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's "SAME" padding (before, after) of one side: output ceil(size / stride)."""
    total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class BasicBlock(nn.HybridBlock):
    """ResNet v1 basic block of He et al. 2016's CIFAR net, as tf_cnn_benchmarks builds it: convs
    padded as TensorFlow's "SAME" (at stride 2 on an even side: 0 before, 1 after); where the shape
    changes, their "option A" shortcut: subsampled by the stride, zero channels added on both sides,
    no weights."""

    def __init__(self, channels: int, stride: int, pad_channels: int, in_size: int) -> None:
        super().__init__()
        self.pad = same_padding(in_size, 3, stride)
        symmetric = self.pad[0] == self.pad[1]
        self.body = nn.HybridSequential()
        self.body.add(nn.Conv2D(channels, 3, stride, self.pad[0] if symmetric else 0, use_bias=False),
                      nn.BatchNorm(**BN), nn.Activation("relu"),
                      nn.Conv2D(channels, 3, 1, 1, use_bias=False), nn.BatchNorm(**BN))
        self.stride, self.pad_channels = stride, pad_channels

    def hybrid_forward(self, F, x):
        skip = x
        if self.stride > 1:
            # A 1x1 pooling would do, but MXNet 1.9.1's MKLDNN pooling backward dies of SIGFPE on it.
            skip = F.slice(skip, begin=(None,) * 4, end=(None,) * 4, step=(1, 1, self.stride, self.stride))
        if self.pad_channels:
            zeros = F.zeros_like(F.slice_axis(skip, axis=1, begin=0, end=self.pad_channels))
            skip = F.concat(zeros, skip, zeros, dim=1)
        if self.pad[0] != self.pad[1]:  # Convolution pads symmetrically only
            x = F.pad(x, mode="constant", pad_width=(0, 0, 0, 0, *self.pad, *self.pad))
        return F.Activation(self.body(x) + skip, act_type="relu")


class PreActBlock(nn.HybridBlock):
    """ResNet v2 (pre-activation) basic unit as MXNet's symbols/resnet.py builds it: BN-ReLU-conv twice;
    the first unit of every stage has a 1x1 conv shortcut on the activated input, even where the
    shape stays (their dim_match=False)."""

    def __init__(self, channels: int, stride: int, project: bool) -> None:
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm(**BN_V2), nn.Conv2D(channels, 3, stride, 1, use_bias=False)
        self.bn2, self.conv2 = nn.BatchNorm(**BN_V2), nn.Conv2D(channels, 3, 1, 1, use_bias=False)
        self.shortcut = nn.Conv2D(channels, 1, stride, use_bias=False) if project else None

    def hybrid_forward(self, F, x):
        act1 = F.Activation(self.bn1(x), act_type="relu")
        y = self.conv2(F.Activation(self.bn2(self.conv1(act1)), act_type="relu"))
        return y + (self.shortcut(act1) if self.shortcut is not None else x)


class Bottleneck(nn.HybridBlock):
    """ResNet v1 bottleneck: 1x1 (carries the stride, as in He et al. 2016), 3x3, 1x1 x4 channels."""

    def __init__(self, channels: int, stride: int, project: bool) -> None:
        super().__init__()
        self.body = _seq(_conv_bn(channels // 4, 1, stride), _conv_bn(channels // 4, 3, 1, 1),
                         _conv_bn(channels, 1, relu=False))
        self.shortcut = _conv_bn(channels, 1, stride, relu=False) if project else None

    def hybrid_forward(self, F, x):
        skip = self.shortcut(x) if self.shortcut is not None else x
        return F.Activation(self.body(x) + skip, act_type="relu")


def resnet_cifar(units: int, image_size: int) -> nn.HybridBlock:
    """He et al. 2016's CIFAR ResNet (depth 6n+2) as tf_cnn_benchmarks' resnet<depth>: 16-32-64
    channels, n basic blocks per stage, option-A shortcuts, no ReLU after the stem's BN (theirs has none)."""
    net = nn.HybridSequential()
    net.add(nn.Conv2D(16, 3, 1, 1, use_bias=False), nn.BatchNorm(**BN))
    in_channels, size = 16, image_size
    for stage, channels in enumerate((16, 32, 64)):
        for unit in range(units):
            stride = 2 if stage > 0 and unit == 0 else 1
            net.add(BasicBlock(channels, stride, (channels - in_channels) // 2, size))
            in_channels, size = channels, -(-size // stride)
    net.add(GlobalAvgPool(), nn.Dense(zoo.NUM_CLASSES))
    return net


def resnet_cifar_v2(units: int) -> nn.HybridBlock:
    """The pre-activation CIFAR ResNet of MXNet's train_cifar10.py (symbols/resnet.py, depth 6n+2 < 164):
    a BN with fixed gamma on the input, a 3x3 stem, n pre-activation units per stage, BN-ReLU at the end."""
    net = nn.HybridSequential()
    net.add(nn.BatchNorm(scale=False, **BN_V2), nn.Conv2D(16, 3, 1, 1, use_bias=False))
    for stage, channels in enumerate((16, 32, 64)):
        for unit in range(units):
            net.add(PreActBlock(channels, 2 if stage > 0 and unit == 0 else 1, project=unit == 0))
    net.add(nn.BatchNorm(**BN_V2), nn.Activation("relu"), GlobalAvgPool(),
            nn.Dense(zoo.NUM_CLASSES))
    return net


def resnet50_v1() -> nn.HybridBlock:
    """ImageNet ResNet-50 v1: 7x7/2 stem + 3x3/2 max pool, bottleneck stages 3-4-6-3 (256..2048 channels)."""
    net = _seq(_conv_bn(64, 7, 2, 3), nn.MaxPool2D(3, 2, 1))
    for stage, (units, channels) in enumerate(zip((3, 4, 6, 3), (256, 512, 1024, 2048))):
        for unit in range(units):  # the first block of a stage changes the shape: projection shortcut
            net.add(Bottleneck(channels, 2 if stage > 0 and unit == 0 else 1, project=unit == 0))
    net.add(GlobalAvgPool(), nn.Dense(zoo.NUM_CLASSES))
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
               GlobalAvgPool(), nn.Dropout(0.5), nn.Dense(zoo.NUM_CLASSES))
    return net


def cifar10_conv() -> nn.HybridBlock:
    """Neon's examples/cifar10_conv.py: neon's Conv and Affine add a bias only when given one, and the
    example gives none, so no layer here has a bias. (Neon's later versions add batch norm; seed 002's
    version is the plain one.) Its weights start as Neon's, Uniform(-0.1, 0.1): zoo.UNIFORM_INIT, set
    by the backend."""
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


def _resize_output(net: nn.HybridSequential, num_classes: int) -> None:
    """Replace the network's last Dense (every zoo model ends in one) by one with num_classes outputs."""
    key, last = list(net._children.items())[-1]
    if not isinstance(last, nn.Dense):
        raise ValueError(f"expected the network to end in a Dense layer, not {type(last).__name__}")
    net.register_child(nn.Dense(num_classes, use_bias=last.bias is not None), key)


def build(name: str, image_size: int, num_classes: int = zoo.NUM_CLASSES) -> nn.HybridBlock:
    """The zoo's model `name` for image_size x image_size NCHW inputs; logits (N, num_classes)."""
    found = zoo.named(name)  # a zoo's or the user's own
    if found is not None:
        return build_named(found, image_size, num_classes)
    units = zoo.cifar_resnet_units(name)
    if units is not None:
        net = resnet_cifar_v2(units) if zoo.is_preact(name) else resnet_cifar(units, image_size)
    elif name in FIXED:
        net = FIXED[name]()
    else:
        raise ValueError(f"model {name} has no MXNet builder")
    if num_classes != zoo.NUM_CLASSES:  # an image folder's classes (data: imagenet): the output layer sized to them
        _resize_output(net, num_classes)
    return net


def zoos() -> list[str]:
    """The zoos of Gluon models in this environment (the framework check reports them): Gluon's comes with MXNet."""
    return ["gluon"]


def _model_zoo() -> list[str]:
    """gluon.model_zoo.vision's models by name: get_model lists them in the error it raises for an unknown one."""
    from mxnet.gluon.model_zoo import vision

    try:
        vision.get_model("")
    except ValueError as e:
        return sorted(line.strip() for line in str(e).split("Available options are", 1)[-1].splitlines() if line.strip())
    return []


def build_named(found: zoo.Named, image_size: int, num_classes: int) -> nn.HybridBlock:
    """A gluon.model_zoo.vision model (untrained) or the user's FUNCTION(num_classes=, image_size=): a HybridBlock,
    which the backend initialises as its own zoo's (parameters the block initialised itself keep their values)."""
    if found.zoo:
        from mxnet.gluon.model_zoo import vision

        known = _model_zoo()
        if found.name.lower() not in known:
            raise zoo.ModelError(f"model {found.text}: gluon.model_zoo.vision has no model {found.name}", known)
        net = zoo.call_builder(found, vision.get_model, name=found.name, classes=num_classes)
    else:
        net = zoo.call_builder(found, zoo.user_builder(found), num_classes=num_classes, image_size=image_size)
    if not isinstance(net, nn.HybridBlock):
        raise zoo.not_a_model(found, net, "a Gluon HybridBlock (mxnet.gluon.HybridBlock)")
    return net


def check_named(name: str, image_size: int, num_classes: int) -> None:
    """The framework check of a named model: built and initialised as a trial does, one training-mode forward pass
    of 2 images giving (2, num_classes) logits. A ModelError (one line) where it does not."""
    import mxnet as mx
    from mxnet import autograd

    found = zoo.named(name)
    net = build_named(found, image_size, num_classes)
    try:
        net.initialize(mx.init.Xavier(), ctx=mx.cpu())
        with autograd.record():
            out = net(mx.nd.zeros((2, 3, image_size, image_size)))
        shape = out.shape
    except Exception as e:  # noqa: BLE001
        raise zoo.ModelError(f"model {found.text}: its forward pass on 2 images of {image_size}x{image_size} raised "
                             f"{type(e).__name__}: {first_line(str(e))[:300]}") from None
    if not isinstance(out, mx.nd.NDArray):
        raise zoo.ModelError(f"model {found.text}: its forward pass returned {type(out).__name__}, not one array of logits")
    zoo.check_logits(found, tuple(shape), 2, num_classes, image_size)
