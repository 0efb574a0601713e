"""Our TensorFlow training step on tf_cnn_benchmarks' CIFAR ResNet-20 network, for yardsticks.py.

tf_cnn_benchmarks' resnet20 and our resnet20_cifar differ: theirs has parameter-free "option A"
shortcuts (a 1x1 average pool with the stride, then zero channels padded on both sides) and no ReLU
after the stem's batch norm; ours has 1x1 conv + BN projections and a ReLU there. Their model is TF1
variable-scope code that does not run in a Keras loop, so the network is built here in Keras from
that description (models/resnet_model.py: ResnetCifar10Model v1, residual_block; TF "SAME" padding,
no conv bias, batch norm decay 0.9 and epsilon 1e-5 on the fused kernel, spatial mean, one dense
layer), and trained by trainables.tensorflow.backend.Backend's train_step, the code every TensorFlow
trial runs per step, on synthetic data.

  OMP_NUM_THREADS=1 .venv/bin/python benchmarks/_tf_cnn_resnet20.py [BATCH WARMUP STEPS THREADS]

Prints one JSON line: images/s over the timed steps (images / wall time, as their "total images/sec")
and the network's parameter count.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import print_step_rate  # noqa: E402

IMAGE = 32


def their_resnet20(image_size: int):
    import keras
    import tensorflow as tf
    from keras import layers

    from trainables.tensorflow.models import BN, BatchNorm

    def conv_bn(x, channels: int, stride: int):
        return BatchNorm(**BN)(layers.Conv2D(channels, 3, stride, padding="same", use_bias=False)(x))

    def block(x, channels: int, stride: int):
        shortcut = x
        if x.shape[-1] != channels:  # option A: subsample, then zero channels on both sides
            pad = (channels - x.shape[-1]) // 2
            shortcut = layers.AveragePooling2D(1, stride)(x)
            shortcut = layers.Lambda(lambda t: tf.pad(t, [[0, 0], [0, 0], [0, 0], [pad, pad]]))(shortcut)
        y = layers.Activation("relu")(conv_bn(x, channels, stride))
        y = conv_bn(y, channels, 1)
        return layers.Activation("relu")(layers.Add()([shortcut, y]))

    inputs = keras.Input((image_size, image_size, 3))
    x = conv_bn(inputs, 16, 1)  # no ReLU after the stem in their v1
    for stage, channels in enumerate((16, 32, 64)):
        for unit in range(3):
            x = block(x, channels, 2 if stage > 0 and unit == 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(10)(x))


def main(argv: list[str]) -> None:
    batch, warmup, steps, threads = (int(a) for a in (argv[0:4] or (64, 10, 40, 1)))
    from trainables.config import TrialConfig
    from trainables.loop import Devices

    cfg = TrialConfig("tensorflow", "resnet20_cifar", num_gpus=1, batch_per_gpu=batch, epochs=1, lr=0.01,
                      data="synthetic", cpus_per_trial=threads)  # its intra/inter-op threads, as in a trial
    from trainables.tensorflow import backend as tf_backend
    from trainables.tensorflow import models

    models.build = lambda name, image_size: their_resnet20(image_size)  # their network where ours would go
    backend = tf_backend.Backend(cfg, Devices("cpu-emulated", 1, ("0",)), IMAGE)
    print_step_rate(backend, batch, warmup, steps, cfg.lr)


if __name__ == "__main__":
    main(sys.argv[1:])
