"""The zoo in Keras (channels last); layer for layer the models of trainables/mxnet/models.py."""
from __future__ import annotations

import keras
import tensorflow as tf
from keras import layers

from trainables import zoo
from trainables.failure import first_line
from trainables.keras import models as agnostic
from trainables.keras.models import Networks, build_named, zoos  # noqa: F401  (zoos: the framework check's)

# The networks' definitions are trainables/keras/models.py's; TensorFlow swaps in the fused batch norm
# and the pooled shortcut below (measured faster here: benchmarks/README.md, yardsticks).


class BatchNorm(agnostic.BatchNorm):
    """Keras' BatchNormalization (channels last, the same four weights, built as the agnostic one builds them), on
    TensorFlow's fused kernel.

    Keras 3 normalises with separate moments and arithmetic ops; the fused kernel, which
    tf_cnn_benchmarks and Keras 2 use, does it in one op. Measured here: resnet20_cifar trains
    faster per step with it (benchmarks/README.md, yardsticks). Moving statistics as Keras and
    MXNet keep them: moving = momentum x moving + (1 - momentum) x batch, with the biased variance.
    scale=False fixes gamma at 1 (MXNet's fix_gamma; the weight stays, untrained, as in MXNet).
    """

    def call(self, x, training=None):
        beta = tf.convert_to_tensor(self.beta)
        gamma = tf.convert_to_tensor(self.gamma) if self.scale else tf.ones_like(beta)
        if not training:
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(
                x, gamma, beta, mean=tf.convert_to_tensor(self.moving_mean),
                variance=tf.convert_to_tensor(self.moving_variance), epsilon=self.epsilon, is_training=False)
            return y
        y, mean, variance = tf.compat.v1.nn.fused_batch_norm(x, gamma, beta, epsilon=self.epsilon, is_training=True)
        # The kernel returns the unbiased variance. n is known while tracing (the loops' batches have
        # fixed shapes), which spares each step a few ops per layer.
        n = x.shape[:-1].num_elements() or tf.cast(tf.reduce_prod(tf.shape(x)[:-1]), variance.dtype)
        biased = variance * ((n - 1) / (max(n, 2) if isinstance(n, int) else tf.maximum(n, 2)))
        self.moving_mean.assign_sub((self.moving_mean - mean) * (1 - self.momentum))
        self.moving_variance.assign_sub((self.moving_variance - biased) * (1 - self.momentum))
        return y


class OptionAShortcut(layers.Layer):
    """He et al. 2016's parameter-free shortcut: subsample by the stride, add zero channels on both sides."""

    def __init__(self, stride: int, pad_channels: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.stride, self.pad_channels = stride, pad_channels

    def call(self, x):
        # The subsampling as a 1x1 average pool, as tf_cnn_benchmarks does it: a strided slice (and its
        # gradient) costs ~9 ms of a ~180 ms resnet20 step here, the pool ~0.5 ms.
        x = tf.nn.avg_pool2d(x, 1, self.stride, "VALID") if self.stride > 1 else x
        return tf.pad(x, [[0, 0], [0, 0], [0, 0], [self.pad_channels, self.pad_channels]])


class FusedNetworks(Networks):
    """The zoo's networks on TensorFlow's fused batch norm and pooled shortcut."""

    batch_norm = BatchNorm
    shortcut = OptionAShortcut


def build(name: str, image_size: int, num_classes: int = zoo.NUM_CLASSES) -> keras.Model:
    return FusedNetworks().build(name, image_size, num_classes)


def check_named(name: str, image_size: int, num_classes: int) -> None:
    """The framework check of a named model: built as a trial builds it, one training-mode forward pass of 2 images
    giving (2, num_classes) logits. A ModelError (one line) where it does not."""
    found = zoo.named(name)
    model = build_named(found, image_size, num_classes)
    try:
        out = model(tf.zeros((2, image_size, image_size, 3)), training=True)
    except Exception as e:  # noqa: BLE001
        raise zoo.ModelError(f"model {found.text}: its forward pass on 2 images of {image_size}x{image_size} raised "
                             f"{type(e).__name__}: {first_line(str(e))[:300]}") from None
    if not tf.is_tensor(out):
        raise zoo.ModelError(f"model {found.text}: its forward pass returned {type(out).__name__}, not one tensor of logits")
    zoo.check_logits(found, tuple(out.shape), 2, num_classes, image_size)
