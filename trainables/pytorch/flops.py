"""FLOPs per image of a built PyTorch network, counted by torch.utils.flop_counter (convolutions and matmuls)."""
import torch
from torch.utils.flop_counter import FlopCounterMode


def forward_gflops_per_image(net: torch.nn.Module, image_size: int, channels: int = 3) -> float:
    """Forward GFLOPs of one image (a multiply-add counts 2), from the network object itself, so own models
    are counted the same way as the zoo's. Training is 3x this (trainables.peaks.training_gflops)."""
    was_training = net.training
    net.eval()  # one image: batch norm in training mode would refuse a batch of 1
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            # On the network's own device (a GPU's trial counts there), one image.
            net(torch.zeros(1, channels, image_size, image_size, device=next(net.parameters()).device))
    finally:
        net.train(was_training)
    return counter.get_total_flops() / 1e9
