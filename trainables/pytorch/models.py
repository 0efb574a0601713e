"""The zoo in torch.nn (NCHW); layer for layer the models of trainables/mxnet/models.py.

build() returns a model already initialised as the zoo says (zoo.UNIFORM_INIT or He et al.'s
gaussian), seeded by whatever seeded torch before the call. PyTorch pads convolutions and pools
symmetrically and flattens CHW, as MXNet does, so the MXNet file is followed line by line.
"""
from __future__ import annotations

import importlib
import math
import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainables import zoo
from trainables.failure import first_line

# MXNet's momentum 0.9 keeps 0.9 of the moving statistics; torch's momentum is the other 0.1.
BN = {"momentum": 0.1, "eps": 1e-5}
BN_V2 = {"momentum": 0.1, "eps": 2e-5}  # MXNet's symbols/resnet.py


class BatchNorm(nn.BatchNorm2d):
    """torch's BatchNorm2d (cuDNN's kernel where there is one) with MXNet's and Keras' moving statistics.

    - torch feeds the unbiased batch variance into running_var; MXNet and Keras the biased one. After
      torch's update the difference is taken back out: with n values per channel,
      wanted = updated - momentum x unbiased / n = updated x (1 - 1/n) + (1 - momentum) x before / n.
      Three channel-sized ops per layer and step (a copy, a multiply, an add).
    - scale=False is MXNet's fix_gamma: the forward pass uses gamma = 1 whatever the weight holds; the
      weight stays (counted, untrained), as in MXNet and in trainables/tensorflow/models.py.
    """

    def __init__(self, channels: int, momentum: float, eps: float, scale: bool = True) -> None:
        super().__init__(channels, eps=eps, momentum=momentum)
        self.scale = scale
        if not scale:
            self.weight.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight if self.scale else None,
                                self.bias, False, 0.0, self.eps)
        # torch updates a copy of running_var: the backward pass keeps the tensor it was given, and an
        # in-place change of that one after the forward pass would fail autograd's version check.
        updated = self.running_var.clone()
        y = F.batch_norm(x, self.running_mean, updated, self.weight if self.scale else None,
                         self.bias, True, self.momentum, self.eps)
        n = x.numel() // x.shape[1]
        with torch.no_grad():
            self.running_var.mul_((1 - self.momentum) / n).add_(updated, alpha=1 - 1 / n)
        return y


def count_params(net: nn.Module) -> int:
    """Weights and BN moving statistics, as MXNet's collect_params and Keras' count_params count them
    (torch's num_batches_tracked, a step counter, is not a statistic)."""
    buffers = (b for name, b in net.named_buffers() if not name.endswith("num_batches_tracked"))
    return sum(p.numel() for p in net.parameters()) + sum(b.numel() for b in buffers)


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def _conv_bn(cin: int, channels: int, kernel, stride: int = 1, pad=0, relu: bool = True) -> nn.Sequential:
    """Conv (no bias: BN follows) + BN (+ ReLU); pad 0 unless given, as Gluon's Conv2D."""
    layers = [nn.Conv2d(cin, channels, kernel, stride, pad, bias=False), BatchNorm(channels, **BN)]
    return nn.Sequential(*layers, nn.ReLU(inplace=True)) if relu else nn.Sequential(*layers)


class Concat(nn.Module):
    """Branches side by side, outputs concatenated along channels (Gluon's HybridConcurrent(axis=1))."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([branch(x) for branch in self.branches], dim=1)


class GlobalAvgPool(nn.Module):
    """Mean over height and width, to (batch, channels)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's "SAME" padding (before, after) of one side: output ceil(size / stride)."""
    total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class BasicBlock(nn.Module):
    """ResNet v1 basic block as tf_cnn_benchmarks builds it (trainables/mxnet/models.py: BasicBlock):
    convs padded as TensorFlow's "SAME"; where the shape changes, the "option A" shortcut, subsampled
    by the stride with zero channels added on both sides, no weights."""

    def __init__(self, cin: int, channels: int, stride: int, in_size: int) -> None:
        super().__init__()
        self.pad = same_padding(in_size, 3, stride)
        symmetric = self.pad[0] == self.pad[1]
        self.body = nn.Sequential(
            nn.Conv2d(cin, channels, 3, stride, self.pad[0] if symmetric else 0, bias=False),
            BatchNorm(channels, **BN), nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels, 3, 1, 1, bias=False), BatchNorm(channels, **BN))
        self.stride, self.pad_channels = stride, (channels - cin) // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x[:, :, ::self.stride, ::self.stride] if self.stride > 1 else x
        if self.pad_channels:
            skip = F.pad(skip, (0, 0, 0, 0, self.pad_channels, self.pad_channels))
        if self.pad[0] != self.pad[1]:  # Conv2d pads symmetrically only
            x = F.pad(x, (*self.pad, *self.pad))
        return F.relu(self.body(x) + skip)


class PreActBlock(nn.Module):
    """ResNet v2 (pre-activation) basic unit as MXNet's symbols/resnet.py builds it: BN-ReLU-conv twice;
    the first unit of every stage has a 1x1 conv shortcut on the activated input (dim_match=False)."""

    def __init__(self, cin: int, channels: int, stride: int, project: bool) -> None:
        super().__init__()
        self.bn1, self.conv1 = BatchNorm(cin, **BN_V2), nn.Conv2d(cin, channels, 3, stride, 1, bias=False)
        self.bn2, self.conv2 = BatchNorm(channels, **BN_V2), nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.shortcut = nn.Conv2d(cin, channels, 1, stride, bias=False) if project else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act1 = F.relu(self.bn1(x))
        y = self.conv2(F.relu(self.bn2(self.conv1(act1))))
        return y + (self.shortcut(act1) if self.shortcut is not None else x)


class Bottleneck(nn.Module):
    """ResNet v1 bottleneck: 1x1 (carries the stride, as in He et al. 2016), 3x3, 1x1 x4 channels."""

    def __init__(self, cin: int, channels: int, stride: int, project: bool) -> None:
        super().__init__()
        self.body = nn.Sequential(_conv_bn(cin, channels // 4, 1, stride),
                                  _conv_bn(channels // 4, channels // 4, 3, 1, 1),
                                  _conv_bn(channels // 4, channels, 1, relu=False))
        self.shortcut = _conv_bn(cin, channels, 1, stride, relu=False) if project else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.shortcut(x) if self.shortcut is not None else x
        return F.relu(self.body(x) + skip)


def resnet_cifar(units: int, image_size: int) -> nn.Module:
    """He et al. 2016's CIFAR ResNet (depth 6n+2) as tf_cnn_benchmarks' resnet<depth>: 16-32-64
    channels, option-A shortcuts, no ReLU after the stem's BN."""
    layers: list[nn.Module] = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), BatchNorm(16, **BN)]
    cin, size = 16, image_size
    for stage, channels in enumerate((16, 32, 64)):
        for unit in range(units):
            stride = 2 if stage > 0 and unit == 0 else 1
            layers.append(BasicBlock(cin, channels, stride, size))
            cin, size = channels, -(-size // stride)
    return nn.Sequential(*layers, GlobalAvgPool(), nn.Linear(64, zoo.NUM_CLASSES))


def resnet_cifar_v2(units: int) -> nn.Module:
    """The pre-activation CIFAR ResNet of MXNet's train_cifar10.py (depth 6n+2 < 164): a BN with fixed
    gamma on the input, a 3x3 stem, n pre-activation units per stage, BN-ReLU at the end."""
    layers: list[nn.Module] = [BatchNorm(3, scale=False, **BN_V2), nn.Conv2d(3, 16, 3, 1, 1, bias=False)]
    cin = 16
    for stage, channels in enumerate((16, 32, 64)):
        for unit in range(units):
            layers.append(PreActBlock(cin, channels, 2 if stage > 0 and unit == 0 else 1, project=unit == 0))
            cin = channels
    return nn.Sequential(*layers, BatchNorm(64, **BN_V2), nn.ReLU(inplace=True), GlobalAvgPool(),
                         nn.Linear(64, zoo.NUM_CLASSES))


def resnet50_v1() -> nn.Module:
    """ImageNet ResNet-50 v1: 7x7/2 stem + 3x3/2 max pool, bottleneck stages 3-4-6-3 (256..2048 channels)."""
    layers: list[nn.Module] = [_conv_bn(3, 64, 7, 2, 3), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, (units, channels) in enumerate(zip((3, 4, 6, 3), (256, 512, 1024, 2048))):
        for unit in range(units):  # the first block of a stage changes the shape: projection shortcut
            layers.append(Bottleneck(cin, channels, 2 if stage > 0 and unit == 0 else 1, project=unit == 0))
            cin = channels
    return nn.Sequential(*layers, GlobalAvgPool(), nn.Linear(2048, zoo.NUM_CLASSES))


def _avg_branch(cin: int, channels: int) -> nn.Sequential:
    # 3x3/1 average pool that averages real pixels only (TF's "SAME"), then a 1x1 conv.
    return nn.Sequential(nn.AvgPool2d(3, 1, 1, count_include_pad=False), _conv_bn(cin, channels, 1))


def _seq(*blocks: nn.Module) -> nn.Sequential:
    return nn.Sequential(*blocks)


def _inception_a(cin: int, pool_channels: int) -> tuple[nn.Module, int]:
    return Concat(_conv_bn(cin, 64, 1),
                  _seq(_conv_bn(cin, 48, 1), _conv_bn(48, 64, 5, pad=2)),
                  _seq(_conv_bn(cin, 64, 1), _conv_bn(64, 96, 3, pad=1), _conv_bn(96, 96, 3, pad=1)),
                  _avg_branch(cin, pool_channels)), 64 + 64 + 96 + pool_channels


def _inception_b(cin: int) -> tuple[nn.Module, int]:  # 35 -> 17
    return Concat(_conv_bn(cin, 384, 3, 2),
                  _seq(_conv_bn(cin, 64, 1), _conv_bn(64, 96, 3, pad=1), _conv_bn(96, 96, 3, 2)),
                  nn.MaxPool2d(3, 2)), 384 + 96 + cin


def _inception_c(cin: int, c7: int) -> tuple[nn.Module, int]:  # factorised 7x7
    return Concat(_conv_bn(cin, 192, 1),
                  _seq(_conv_bn(cin, c7, 1), _conv_bn(c7, c7, (1, 7), pad=(0, 3)),
                       _conv_bn(c7, 192, (7, 1), pad=(3, 0))),
                  _seq(_conv_bn(cin, c7, 1), _conv_bn(c7, c7, (7, 1), pad=(3, 0)), _conv_bn(c7, c7, (1, 7), pad=(0, 3)),
                       _conv_bn(c7, c7, (7, 1), pad=(3, 0)), _conv_bn(c7, 192, (1, 7), pad=(0, 3))),
                  _avg_branch(cin, 192)), 4 * 192


def _inception_d(cin: int) -> tuple[nn.Module, int]:  # 17 -> 8
    return Concat(_seq(_conv_bn(cin, 192, 1), _conv_bn(192, 320, 3, 2)),
                  _seq(_conv_bn(cin, 192, 1), _conv_bn(192, 192, (1, 7), pad=(0, 3)),
                       _conv_bn(192, 192, (7, 1), pad=(3, 0)), _conv_bn(192, 192, 3, 2)),
                  nn.MaxPool2d(3, 2)), 320 + 192 + cin


def _inception_e(cin: int) -> tuple[nn.Module, int]:  # expanded filter bank: 1x3 and 3x1 side by side
    def split(c: int) -> nn.Module:
        return Concat(_conv_bn(c, 384, (1, 3), pad=(0, 1)), _conv_bn(c, 384, (3, 1), pad=(1, 0)))
    return Concat(_conv_bn(cin, 320, 1),
                  _seq(_conv_bn(cin, 384, 1), split(384)),
                  _seq(_conv_bn(cin, 448, 1), _conv_bn(448, 384, 3, pad=1), split(384)),
                  _avg_branch(cin, 192)), 320 + 768 + 768 + 192


def inception_v3() -> nn.Module:
    """Szegedy et al. 2015's Inception-v3 (no auxiliary head); 299x299 in, 75x75 at least."""
    layers: list[nn.Module] = [_conv_bn(3, 32, 3, 2), _conv_bn(32, 32, 3), _conv_bn(32, 64, 3, pad=1),
                               nn.MaxPool2d(3, 2), _conv_bn(64, 80, 1), _conv_bn(80, 192, 3), nn.MaxPool2d(3, 2)]
    cin = 192
    for make, arg in ((_inception_a, 32), (_inception_a, 64), (_inception_a, 64), (_inception_b, None),
                      (_inception_c, 128), (_inception_c, 160), (_inception_c, 160), (_inception_c, 192),
                      (_inception_d, None), (_inception_e, None), (_inception_e, None)):
        block, cin = make(cin) if arg is None else make(cin, arg)
        layers.append(block)
    return nn.Sequential(*layers, GlobalAvgPool(), nn.Dropout(0.5), nn.Linear(cin, zoo.NUM_CLASSES))


def _out_side(size: int, kernel: int, stride: int, pad: int = 0) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def cifar10_conv(image_size: int) -> nn.Module:
    """Neon's examples/cifar10_conv.py (trainables/mxnet/models.py: cifar10_conv): no layer has a bias."""
    side = _out_side(_out_side(_out_side(_out_side(image_size, 5, 1), 2, 2), 5, 1), 2, 2)
    return nn.Sequential(nn.Conv2d(3, 16, 5, bias=False), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2),
                         nn.Conv2d(16, 32, 5, bias=False), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2),
                         nn.Flatten(), nn.Linear(32 * side * side, 500, bias=False), nn.ReLU(inplace=True),
                         nn.Linear(500, zoo.NUM_CLASSES, bias=False))


def alexnet(image_size: int) -> nn.Module:
    """AlexNet as in Gluon's model zoo (Krizhevsky 2014's one-tower variant): biases, no LRN."""
    side = _out_side(_out_side(image_size, 11, 4, 2), 3, 2)
    side = _out_side(_out_side(side, 5, 1, 2), 3, 2)
    side = _out_side(side, 3, 2)  # the three 3x3/1 pad-1 convs keep the side
    relu = nn.ReLU
    return nn.Sequential(nn.Conv2d(3, 64, 11, 4, 2), relu(inplace=True), nn.MaxPool2d(3, 2),
                         nn.Conv2d(64, 192, 5, 1, 2), relu(inplace=True), nn.MaxPool2d(3, 2),
                         nn.Conv2d(192, 384, 3, 1, 1), relu(inplace=True), nn.Conv2d(384, 256, 3, 1, 1), relu(inplace=True),
                         nn.Conv2d(256, 256, 3, 1, 1), relu(inplace=True), nn.MaxPool2d(3, 2), nn.Flatten(),
                         nn.Linear(256 * side * side, 4096), relu(inplace=True), nn.Dropout(0.5),
                         nn.Linear(4096, 4096), relu(inplace=True), nn.Dropout(0.5), nn.Linear(4096, zoo.NUM_CLASSES))


def initialise(net: nn.Module, name: str) -> None:
    """The zoo's initialisation: conv and dense weights Uniform(-a, a) for zoo.UNIFORM_INIT models, else
    gaussian with std sqrt(2 / fan_in) (MXNet's Xavier(gaussian, in, 2), Keras' VarianceScaling(2, fan_in));
    biases 0; BN gamma 1, beta 0 and moving statistics 0 and 1 (torch's own defaults)."""
    scale = zoo.UNIFORM_INIT.get(name)
    for module in net.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            if scale:
                nn.init.uniform_(module.weight, -scale, scale)
            else:
                fan_in = module.weight[0].numel()
                nn.init.normal_(module.weight, 0.0, math.sqrt(2.0 / fan_in))
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def _resize_output(net: nn.Module, num_classes: int) -> None:
    """Replace the network's last Linear (every zoo model ends in one) by one with num_classes outputs."""
    parent_name, _, child = [name for name, m in net.named_modules() if isinstance(m, nn.Linear)][-1].rpartition(".")
    parent = net.get_submodule(parent_name)
    last = getattr(parent, child)
    setattr(parent, child, nn.Linear(last.in_features, num_classes, bias=last.bias is not None))


FIXED = {"resnet50_v1": lambda size: resnet50_v1(), "inception_v3": lambda size: inception_v3(),
         "cifar10_conv": cifar10_conv, "alexnet": alexnet}


def build(name: str, image_size: int, num_classes: int = zoo.NUM_CLASSES) -> nn.Module:
    """The zoo's model `name` for image_size x image_size NCHW float32 inputs, initialised; logits (N, num_classes).
    A zoo's or the user's own (zoo.named): as its source builds and initialises it."""
    found = zoo.named(name)
    if found is not None:
        return build_named(found, image_size, num_classes)
    units = zoo.cifar_resnet_units(name)
    if units is not None:
        net = resnet_cifar_v2(units) if zoo.is_preact(name) else resnet_cifar(units, image_size)
    elif name in FIXED:
        net = FIXED[name](image_size)
    else:
        raise ValueError(f"model {name} has no PyTorch builder")
    if num_classes != zoo.NUM_CLASSES:  # an image folder's classes (data: imagenet): the output layer sized to them
        _resize_output(net, num_classes)
    initialise(net, name)
    return net


def zoos() -> list[str]:
    """The zoos of PyTorch models that import in this environment (the framework check reports them)."""
    return [name for name, package in (("torchvision", "torchvision.models"), ("timm", "timm")) if _imports(package)]


def _imports(package: str) -> bool:
    try:
        importlib.import_module(package)
        return True
    except Exception:  # noqa: BLE001 - absent, or built for another torch (torchvision's operators fail to load)
        return False


def _zoo_package(found: zoo.Named) -> Any:
    """torchvision.models or timm, or a ModelError saying why it is not here."""
    package = zoo.ZOO_PACKAGES[found.source]
    try:
        return importlib.import_module(package)
    except ModuleNotFoundError as e:
        if e.name and package.startswith(e.name.split(".")[0]):
            build = f", the build for torch {torch.__version__}" if found.source == "torchvision" else ""
            raise zoo.ModelError(f"model {found.text}: {found.source} is not installed for {sys.executable} "
                                 f"(pip install {found.source}{build})") from None
        raise zoo.ModelError(f"model {found.text}: {found.source} does not import here: {e}") from None
    except Exception as e:  # noqa: BLE001 - torchvision built for another torch fails as it loads its operators
        raise zoo.ModelError(f"model {found.text}: {found.source} does not import here (a build for another torch "
                             f"than {torch.__version__}?): {type(e).__name__}: {first_line(str(e))}") from None


def _from_zoo(found: zoo.Named, num_classes: int) -> Any:
    package = _zoo_package(found)
    if found.source == "timm":
        known = package.list_models()
        make = lambda: package.create_model(found.name, pretrained=False, num_classes=num_classes)  # noqa: E731
    else:
        known = package.list_models(module=package)  # the classification models, not detection's or video's
        # Inception-v3 and GoogLeNet return their auxiliary heads' logits too while training: the loop takes one tensor.
        extra = {"aux_logits": False} if found.name in ("inception_v3", "googlenet") else {}
        make = lambda: package.get_model(found.name, weights=None, num_classes=num_classes, **extra)  # noqa: E731
    if found.name not in known:
        raise zoo.ModelError(f"model {found.text}: {found.source} has no model {found.name}", known)
    return zoo.call_builder(found, make)


def build_named(found: zoo.Named, image_size: int, num_classes: int) -> nn.Module:
    """A zoo's model (its own initialisation, no pretrained weights) or the user's FUNCTION(num_classes=, image_size=)."""
    if found.zoo:
        net = _from_zoo(found, num_classes)
    else:
        net = zoo.call_builder(found, zoo.user_builder(found), num_classes=num_classes, image_size=image_size)
    if not isinstance(net, nn.Module):
        raise zoo.not_a_model(found, net, "a torch.nn.Module")
    return net


def check_named(name: str, image_size: int, num_classes: int) -> None:
    """The framework check of a named model: built as a trial builds it, one training-mode forward pass of 2 images
    giving (2, num_classes) logits. A ModelError (one line) where it does not."""
    found = zoo.named(name)
    torch.manual_seed(0)
    net = build_named(found, image_size, num_classes)
    net.train()
    try:
        out = net(torch.zeros(2, 3, image_size, image_size))
    except Exception as e:  # noqa: BLE001
        raise zoo.ModelError(f"model {found.text}: its forward pass on 2 images of {image_size}x{image_size} raised "
                             f"{type(e).__name__}: {first_line(str(e))[:300]}") from None
    if not isinstance(out, torch.Tensor):
        raise zoo.ModelError(f"model {found.text}: its forward pass returned {type(out).__name__}, not one tensor of logits")
    zoo.check_logits(found, tuple(out.shape), 2, num_classes, image_size)
