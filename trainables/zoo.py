"""The model zoo's names and shapes, known without importing a framework.

Both framework folders build every model listed here, layer for layer the same, so one name means
one architecture (and one parameter count) whichever framework trains it.
"""
from __future__ import annotations

import re

# name -> default input side (pixels). CIFAR ResNets are written resnet<depth>_cifar (v1, as
# tf_cnn_benchmarks' resnet<depth>) or resnet<depth>_cifar_v2 (pre-activation, as MXNet's
# train_cifar10.py --network resnet, seed 001), depth = 6n+2 (v2: below 164, where MXNet's symbol
# switches to bottleneck units).
FIXED_MODELS: dict[str, int] = {
    "resnet50_v1": 224,   # ImageNet-style ResNet-50 v1 (seeds 000, 004)
    "inception_v3": 299,  # seeds 000 (CIFAR-10 resized to 299x299), 004
    "cifar10_conv": 32,   # Neon's examples/cifar10_conv.py convnet (seed 002)
    "alexnet": 224,       # seed 003
}
# Models whose source initialises every weight Uniform(-a, a): name -> a. The others start from He
# et al.'s gaussian (std sqrt(2 / fan_in)), as MXNet's and tf_cnn_benchmarks' scripts do. Neon's
# cifar10_conv example uses Uniform(-0.1, 0.1) (with lr 0.01, momentum 0.9 at batch 128); this bias-free
# ReLU net under He's init at the seed's lr 0.05-0.1 dies (every ReLU off: loss ln 10, uniform
# predictions; benchmarks/cifar10_conv_collapse.py measures it).
UNIFORM_INIT: dict[str, float] = {"cifar10_conv": 0.1}
CIFAR_RESNET = re.compile(r"^resnet(\d+)_cifar(_v2)?$")

NUM_CLASSES = 10


def cifar_resnet_units(name: str) -> int | None:
    """Residual units per stage of resnet<depth>_cifar[_v2] (depth = 6n+2), None if not such a name."""
    match = CIFAR_RESNET.match(name)
    if not match:
        return None
    depth = int(match.group(1))
    if depth < 8 or (depth - 2) % 6 or (match.group(2) and depth >= 164):
        return None
    return (depth - 2) // 6


def is_preact(name: str) -> bool:
    """A pre-activation (v2) CIFAR ResNet."""
    return cifar_resnet_units(name) is not None and name.endswith("_v2")


def is_model(name: str) -> bool:
    return name in FIXED_MODELS or cifar_resnet_units(name) is not None


def default_image_size(name: str) -> int:
    return FIXED_MODELS.get(name, 32)


def model_names_help() -> str:
    return ", ".join(sorted(FIXED_MODELS)) + ", resnet<6n+2>_cifar (resnet20_cifar, resnet110_cifar, ...), resnet<6n+2>_cifar_v2 (depth < 164)"
