"""A network of your own for PyTorch trials: `model: torch_net:build` (docs/models.md).

The engine calls build(num_classes=..., image_size=...) in each trial's process and trains what it returns, an
nn.Module that maps a batch of images (N, 3, image_size, image_size), float32, to logits (N, num_classes).
"""
from torch import nn


def build(num_classes: int, image_size: int) -> nn.Module:
    # Two conv-BN-ReLU stages, then a global average pool: any image_size of 8 pixels or more works.
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(32, num_classes),
    )
