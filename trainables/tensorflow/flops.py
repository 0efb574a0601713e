"""FLOPs per image of a built Keras network, counted from its layer list (convolutions and dense layers).

Counted as torch.utils.flop_counter counts the PyTorch networks (2 FLOPs a multiply-add, convolutions and
matmuls only, no bias, batch norm or activations), so the same network gets the same count in each framework."""
import math

import keras


def _layer_gflops(layer) -> float:
    if isinstance(layer, keras.layers.Conv2D) and not isinstance(layer, keras.layers.DepthwiseConv2D):
        out_h, out_w, out_c = layer.output.shape[1:4]
        in_c = layer.input.shape[-1]
        kernel = math.prod(layer.kernel_size)
        return 2 * out_h * out_w * out_c * kernel * in_c / layer.groups / 1e9
    if isinstance(layer, keras.layers.Dense):
        return 2 * layer.input.shape[-1] * layer.units / 1e9
    return 0.0


def forward_gflops_per_image(model: keras.Model) -> float:
    """Forward GFLOPs of one image, from the built model's layers (nested models counted through)."""
    total = 0.0
    for layer in model.layers:
        total += forward_gflops_per_image(layer) if isinstance(layer, keras.Model) else _layer_gflops(layer)
    return total
