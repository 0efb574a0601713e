"""FLOPs per image of a built Gluon network, counted from its convolution and dense layers as they run.

Counted as torch.utils.flop_counter counts the PyTorch networks (2 FLOPs a multiply-add, convolutions and
matmuls only), so the same network gets the same count in each framework. Call before hybridize()."""
import math

import mxnet as mx
from mxnet.gluon import nn


def forward_gflops_per_image(net, image_size: int, channels: int = 3, ctx=None) -> float:  # noqa: ANN001
    """Forward GFLOPs of one image: a forward hook on every Conv2D and Dense reads its output shape."""
    flops = []

    def count(block, inputs, output):
        weight = block.weight.shape  # Conv2D: (out, in/groups, kh, kw); Dense: (units, in)
        out_positions = math.prod(output.shape[2:]) if isinstance(block, nn.Conv2D) else 1
        flops.append(2 * out_positions * math.prod(weight))

    handles = []

    def hook(block):
        if isinstance(block, (nn.Conv2D, nn.Dense)):
            handles.append(block.register_forward_hook(count))

    net.apply(hook)
    try:
        with mx.autograd.predict_mode():
            net(mx.nd.zeros((1, channels, image_size, image_size), ctx=ctx or mx.cpu()))
    finally:
        for handle in handles:
            handle.detach()
    return sum(flops) / 1e9
