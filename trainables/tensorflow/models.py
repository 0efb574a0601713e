"""The zoo in Keras (channels last); layer for layer the models of trainables/mxnet/models.py."""
from __future__ import annotations

import keras
from keras import layers

from trainables import zoo

# Same initialisation as the MXNet side: gaussian, std sqrt(2 / fan_in); BN as MXNet's defaults.
INIT = keras.initializers.VarianceScaling(scale=2.0, mode="fan_in", distribution="untruncated_normal")
BN = {"momentum": 0.9, "epsilon": 1e-5}


def _conv(x, channels: int, kernel: int, stride: int, pad: int | None = None):
    # Explicit symmetric padding, as MXNet pads: Keras' "same" pads stride-2 convs asymmetrically.
    pad = kernel // 2 if pad is None else pad
    if pad:
        x = layers.ZeroPadding2D(pad)(x)
    return layers.Conv2D(channels, kernel, stride, padding="valid", use_bias=False, kernel_initializer=INIT)(x)


def _basic_block(x, channels: int, stride: int, project: bool):
    y = _conv(x, channels, 3, stride)
    y = layers.Activation("relu")(layers.BatchNormalization(**BN)(y))
    y = layers.BatchNormalization(**BN)(_conv(y, channels, 3, 1))
    skip = layers.BatchNormalization(**BN)(_conv(x, channels, 1, stride)) if project else x
    return layers.Activation("relu")(layers.Add()([y, skip]))


def resnet_cifar(units: int, image_size: int) -> keras.Model:
    inputs = keras.Input((image_size, image_size, 3))
    x = layers.Activation("relu")(layers.BatchNormalization(**BN)(_conv(inputs, 16, 3, 1)))
    in_channels = 16
    for stage, channels in enumerate((16, 32, 64)):
        for unit in range(units):
            stride = 2 if stage > 0 and unit == 0 else 1
            x = _basic_block(x, channels, stride, project=channels != in_channels)
            in_channels = channels
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(zoo.NUM_CLASSES, kernel_initializer=INIT)(x)
    return keras.Model(inputs, outputs)


def build(name: str, image_size: int) -> keras.Model:
    units = zoo.cifar_resnet_units(name)
    if units is not None:
        return resnet_cifar(units, image_size)
    raise ValueError(f"model {name} has no Keras builder")
