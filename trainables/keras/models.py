"""The zoo in Keras 3 (channels last), backend-agnostic: layer for layer the models of trainables/mxnet/models.py.

The same definitions serve framework: tensorflow (trainables/tensorflow/models.py swaps in TensorFlow's fused
batch norm and its shortcut op, Networks' two parts) and framework: keras on any Keras backend (these parts,
in keras.ops). Imports no backend: KERAS_BACKEND is set before keras is first imported (trainables/keras/backend.py).
"""
from __future__ import annotations

import math
import random

import keras
import numpy as np
from keras import layers, ops

from trainables import zoo
from trainables.failure import first_line


class JaxHeNormal(keras.initializers.Initializer):
    """_kernel_init's gaussian on JAX, drawn in blocks of one size. JAX draws random numbers with a program that XLA
    compiles for each shape drawn (about 1 CPU-s each on a CPU), and a network's kernels come in many shapes: all but
    a second of the 10 CPU-s ResNet-8's build took (issue 46). Blocks of one size are one program, each block drawn
    with its own key (the initializer's key folded with the block's number). Seeded as Keras seeds an initializer made
    without a seed: from Python's generator, which keras.utils.set_random_seed seeds."""

    BLOCK = 1 << 16

    def __init__(self) -> None:
        self.seed = random.randint(1, int(1e9))  # Keras's make_default_seed

    def __call__(self, shape, dtype=None):
        import jax

        key, size = jax.random.key(self.seed), math.prod(shape)
        blocks = [np.asarray(jax.random.normal(jax.random.fold_in(key, i), (self.BLOCK,)))
                  for i in range(-(-size // self.BLOCK))]
        std = math.sqrt(2.0 / math.prod(shape[:-1]))  # fan in: a kernel's every axis but its outputs
        return ops.convert_to_tensor(np.concatenate(blocks)[:size].reshape(shape) * std, dtype=dtype)


# Same initialisation as the MXNet side: gaussian, std sqrt(2 / fan_in); BN as MXNet's defaults.
def _kernel_init() -> keras.initializers.Initializer:
    # A new initializer per layer, made after the backend seeded Keras: one made at import would
    # carry a seed drawn then, and initialise differently in every process.
    if keras.backend.backend() == "jax":
        return JaxHeNormal()
    return keras.initializers.VarianceScaling(scale=2.0, mode="fan_in", distribution="untruncated_normal")
BN = {"momentum": 0.9, "epsilon": 1e-5}
BN_V2 = {"momentum": 0.9, "epsilon": 2e-5}  # MXNet's symbols/resnet.py

class BatchNorm(layers.Layer):
    """Batch norm with MXNet's four weights on any Keras backend. keras.layers.BatchNormalization(scale=False)
    drops gamma; MXNet's fix_gamma keeps it, untrained, so the parameter counts of the frameworks agree.
    Moving statistics as Keras and MXNet keep them: moving = momentum x moving + (1 - momentum) x batch,
    with the biased variance."""

    def __init__(self, momentum: float = 0.9, epsilon: float = 1e-5, scale: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.momentum, self.epsilon, self.scale = momentum, epsilon, scale

    def build(self, input_shape) -> None:
        shape = (input_shape[-1],)
        self.gamma = self.add_weight(shape=shape, name="gamma", initializer="ones", trainable=self.scale,
                                     autocast=False)
        self.beta = self.add_weight(shape=shape, name="beta", initializer="zeros", autocast=False)
        self.moving_mean = self.add_weight(shape=shape, name="moving_mean", initializer="zeros",
                                           trainable=False, autocast=False)
        self.moving_variance = self.add_weight(shape=shape, name="moving_variance", initializer="ones",
                                               trainable=False, autocast=False)

    def call(self, x, training=None):
        # Statistics in float32 under a mixed policy, as Keras' own BatchNormalization computes them.
        dtype = x.dtype
        x = ops.cast(x, "float32")
        if training:
            mean, variance = ops.moments(x, axes=[0, 1, 2])
            self.moving_mean.assign(self.moving_mean * self.momentum + mean * (1 - self.momentum))
            self.moving_variance.assign(self.moving_variance * self.momentum + variance * (1 - self.momentum))
        else:
            mean, variance = self.moving_mean, self.moving_variance
        # ops.ones, not ops.ones_like(self.beta): JAX 0.12 cannot take a Keras variable's dtype from it there.
        gamma = self.gamma if self.scale else ops.ones(self.beta.shape, "float32")
        y = ops.batch_normalization(x, mean, variance, axis=-1, offset=self.beta, scale=gamma, epsilon=self.epsilon)
        return ops.cast(y, dtype)


class OptionAShortcut(layers.Layer):
    """He et al. 2016's parameter-free shortcut: subsample by the stride, add zero channels on both sides."""

    def __init__(self, stride: int, pad_channels: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.stride, self.pad_channels = stride, pad_channels

    def call(self, x):
        x = x[:, ::self.stride, ::self.stride, :] if self.stride > 1 else x
        return ops.pad(x, [[0, 0], [0, 0], [0, 0], [self.pad_channels, self.pad_channels]])


class Networks:
    """The zoo's fixed networks, built from the two parts a framework may swap: batch_norm and shortcut."""

    batch_norm = BatchNorm
    shortcut = OptionAShortcut

    @staticmethod
    def _pair(v) -> tuple[int, int]:
        return (v, v) if isinstance(v, int) else tuple(v)


    def _conv(self, x, channels: int, kernel, stride: int, pad=None, bias: bool = False, activation=None, init=None):
        # Symmetric padding, as MXNet pads. At stride 1 with pad = kernel // 2 that is Keras' "same",
        # done inside the convolution; elsewhere ("same" pads stride-2 convs asymmetrically) an explicit
        # ZeroPadding2D, which costs a copy of the activations.
        kernel = self._pair(kernel)
        ph, pw = (kernel[0] // 2, kernel[1] // 2) if pad is None else self._pair(pad)
        padding = "valid"
        if stride == 1 and (ph, pw) == (kernel[0] // 2, kernel[1] // 2) and kernel[0] % 2 and kernel[1] % 2:
            padding = "same"
        elif ph or pw:
            x = layers.ZeroPadding2D(((ph, ph), (pw, pw)))(x)
        return layers.Conv2D(channels, kernel, stride, padding=padding, use_bias=bias, activation=activation,
                             kernel_initializer=(init or _kernel_init)())(x)


    def _conv_bn(self, x, channels: int, kernel, stride: int = 1, pad=0, relu: bool = True):
        """Conv (no bias: BN follows) + BN (+ ReLU); pad 0 unless given, as Gluon's Conv2D."""
        x = self.batch_norm(**BN)(self._conv(x, channels, kernel, stride, pad))
        return layers.Activation("relu")(x) if relu else x


    def _dense(self, x, units: int, bias: bool = True, activation=None, init=None):
        return layers.Dense(units, activation=activation, use_bias=bias, kernel_initializer=(init or _kernel_init)())(x)


    def _basic_block(self, x, channels: int, stride: int):
        # TensorFlow's "SAME" padding, as tf_cnn_benchmarks (trainables/mxnet/models.py: BasicBlock).
        y = layers.Conv2D(channels, 3, stride, padding="same", use_bias=False, kernel_initializer=_kernel_init())(x)
        y = layers.Activation("relu")(self.batch_norm(**BN)(y))
        y = self.batch_norm(**BN)(self._conv(y, channels, 3, 1))
        pad_channels = (channels - x.shape[-1]) // 2
        skip = self.shortcut(stride, pad_channels)(x) if stride > 1 or pad_channels else x
        return layers.Activation("relu")(layers.Add()([y, skip]))


    def _preact_block(self, x, channels: int, stride: int, project: bool):
        # Layers made in the MXNet block's order (bn1, conv1, bn2, conv2, shortcut): one creation order.
        act1 = layers.Activation("relu")(self.batch_norm(**BN_V2)(x))
        y = layers.Activation("relu")(self.batch_norm(**BN_V2)(self._conv(act1, channels, 3, stride)))
        y = self._conv(y, channels, 3, 1)
        skip = self._conv(act1, channels, 1, stride, pad=0) if project else x
        return layers.Add()([y, skip])


    def _bottleneck(self, x, channels: int, stride: int, project: bool):
        # ResNet v1 bottleneck: the first 1x1 carries the stride (He et al. 2016, Keras' ResNet50, Gluon's v1).
        y = self._conv_bn(x, channels // 4, 1, stride)
        y = self._conv_bn(y, channels // 4, 3, 1, 1)
        y = self._conv_bn(y, channels, 1, relu=False)
        skip = self._conv_bn(x, channels, 1, stride, relu=False) if project else x
        return layers.Activation("relu")(layers.Add()([y, skip]))


    def resnet_cifar(self, units: int, image_size: int) -> keras.Model:
        inputs = keras.Input((image_size, image_size, 3))
        x = self.batch_norm(**BN)(self._conv(inputs, 16, 3, 1))  # no ReLU here, as tf_cnn_benchmarks' v1
        for stage, channels in enumerate((16, 32, 64)):
            for unit in range(units):
                x = self._basic_block(x, channels, 2 if stage > 0 and unit == 0 else 1)
        x = layers.GlobalAveragePooling2D()(x)
        outputs = layers.Dense(zoo.NUM_CLASSES, kernel_initializer=_kernel_init())(x)
        return keras.Model(inputs, outputs)


    def resnet_cifar_v2(self, units: int, image_size: int) -> keras.Model:
        inputs = keras.Input((image_size, image_size, 3))
        x = self._conv(self.batch_norm(scale=False, **BN_V2)(inputs), 16, 3, 1)
        for stage, channels in enumerate((16, 32, 64)):
            for unit in range(units):
                x = self._preact_block(x, channels, 2 if stage > 0 and unit == 0 else 1, project=unit == 0)
        x = layers.GlobalAveragePooling2D()(layers.Activation("relu")(self.batch_norm(**BN_V2)(x)))
        return keras.Model(inputs, self._dense(x, zoo.NUM_CLASSES))


    def resnet50_v1(self, image_size: int) -> keras.Model:
        inputs = keras.Input((image_size, image_size, 3))
        x = self._conv_bn(inputs, 64, 7, 2, 3)
        # Zero padding before the max pool is MXNet's -inf padding here: the inputs are ReLU outputs, >= 0.
        x = layers.MaxPooling2D(3, 2)(layers.ZeroPadding2D(1)(x))
        for stage, (units, channels) in enumerate(zip((3, 4, 6, 3), (256, 512, 1024, 2048))):
            for unit in range(units):  # the first block of a stage changes the shape: projection shortcut
                x = self._bottleneck(x, channels, 2 if stage > 0 and unit == 0 else 1, project=unit == 0)
        x = layers.GlobalAveragePooling2D()(x)
        return keras.Model(inputs, self._dense(x, zoo.NUM_CLASSES))


    def _avg_branch(self, x, channels: int):
        # 3x3/1 "same" average pool: pads 1 on each side and averages real pixels only, as the MXNet side.
        return self._conv_bn(layers.AveragePooling2D(3, 1, padding="same")(x), channels, 1)


    def _inception_a(self, x, pool_channels: int):
        b1 = self._conv_bn(x, 64, 1)
        b5 = self._conv_bn(self._conv_bn(x, 48, 1), 64, 5, pad=2)
        b3 = self._conv_bn(self._conv_bn(self._conv_bn(x, 64, 1), 96, 3, pad=1), 96, 3, pad=1)
        return layers.Concatenate()([b1, b5, b3, self._avg_branch(x, pool_channels)])


    def _inception_b(self, x):  # 35 -> 17
        b3 = self._conv_bn(x, 384, 3, 2)
        b3d = self._conv_bn(self._conv_bn(self._conv_bn(x, 64, 1), 96, 3, pad=1), 96, 3, 2)
        return layers.Concatenate()([b3, b3d, layers.MaxPooling2D(3, 2)(x)])


    def _inception_c(self, x, c7: int):  # factorised 7x7: 1x7 and 7x1 convs
        def c17(y, channels):
            return self._conv_bn(y, channels, (1, 7), pad=(0, 3))

        def c71(y, channels):
            return self._conv_bn(y, channels, (7, 1), pad=(3, 0))
        b1 = self._conv_bn(x, 192, 1)
        b7 = c71(c17(self._conv_bn(x, c7, 1), c7), 192)
        b7d = c17(c71(c17(c71(self._conv_bn(x, c7, 1), c7), c7), c7), 192)
        return layers.Concatenate()([b1, b7, b7d, self._avg_branch(x, 192)])


    def _inception_d(self, x):  # 17 -> 8
        b3 = self._conv_bn(self._conv_bn(x, 192, 1), 320, 3, 2)
        b7 = self._conv_bn(self._conv_bn(x, 192, 1), 192, (1, 7), pad=(0, 3))
        b7 = self._conv_bn(self._conv_bn(b7, 192, (7, 1), pad=(3, 0)), 192, 3, 2)
        return layers.Concatenate()([b3, b7, layers.MaxPooling2D(3, 2)(x)])


    def _inception_e(self, x):  # expanded filter bank: 1x3 and 3x1 side by side
        def split(y):
            return layers.Concatenate()([self._conv_bn(y, 384, (1, 3), pad=(0, 1)),
                                         self._conv_bn(y, 384, (3, 1), pad=(1, 0))])
        b1 = self._conv_bn(x, 320, 1)
        b3 = split(self._conv_bn(x, 384, 1))
        b3d = split(self._conv_bn(self._conv_bn(x, 448, 1), 384, 3, pad=1))
        return layers.Concatenate()([b1, b3, b3d, self._avg_branch(x, 192)])


    def inception_v3(self, image_size: int) -> keras.Model:
        inputs = keras.Input((image_size, image_size, 3))
        x = self._conv_bn(self._conv_bn(self._conv_bn(inputs, 32, 3, 2), 32, 3), 64, 3, pad=1)
        x = layers.MaxPooling2D(3, 2)(x)
        x = layers.MaxPooling2D(3, 2)(self._conv_bn(self._conv_bn(x, 80, 1), 192, 3))
        for pool_channels in (32, 64, 64):
            x = self._inception_a(x, pool_channels)
        x = self._inception_b(x)
        for c7 in (128, 160, 160, 192):
            x = self._inception_c(x, c7)
        x = self._inception_e(self._inception_e(self._inception_d(x)))
        x = layers.Dropout(0.5)(layers.GlobalAveragePooling2D()(x))
        return keras.Model(inputs, self._dense(x, zoo.NUM_CLASSES))


    def cifar10_conv(self, image_size: int) -> keras.Model:
        # Neon's example gives no layer a bias (see trainables/mxnet/models.py), and its weights start
        # Uniform(-a, a) (zoo.UNIFORM_INIT; MXNet's side initialises the same).
        scale = zoo.UNIFORM_INIT.get("cifar10_conv")
        init = (lambda: keras.initializers.RandomUniform(-scale, scale)) if scale else None
        inputs = keras.Input((image_size, image_size, 3))
        x = layers.MaxPooling2D(2, 2)(self._conv(inputs, 16, 5, 1, 0, activation="relu", init=init))
        x = layers.MaxPooling2D(2, 2)(self._conv(x, 32, 5, 1, 0, activation="relu", init=init))
        x = self._dense(layers.Flatten()(x), 500, bias=False, activation="relu", init=init)
        return keras.Model(inputs, self._dense(x, zoo.NUM_CLASSES, bias=False, init=init))


    def alexnet(self, image_size: int) -> keras.Model:
        inputs = keras.Input((image_size, image_size, 3))
        x = layers.MaxPooling2D(3, 2)(self._conv(inputs, 64, 11, 4, 2, bias=True, activation="relu"))
        x = layers.MaxPooling2D(3, 2)(self._conv(x, 192, 5, 1, 2, bias=True, activation="relu"))
        for channels in (384, 256, 256):
            x = self._conv(x, channels, 3, 1, 1, bias=True, activation="relu")
        x = layers.Flatten()(layers.MaxPooling2D(3, 2)(x))
        x = layers.Dropout(0.5)(self._dense(x, 4096, activation="relu"))
        x = layers.Dropout(0.5)(self._dense(x, 4096, activation="relu"))
        return keras.Model(inputs, self._dense(x, zoo.NUM_CLASSES))

    def build(self, name: str, image_size: int, num_classes: int = zoo.NUM_CLASSES) -> keras.Model:
        found = zoo.named(name)  # a zoo's or the user's own
        if found is not None:
            return build_named(found, image_size, num_classes)
        units = zoo.cifar_resnet_units(name)
        fixed = {"resnet50_v1": self.resnet50_v1, "inception_v3": self.inception_v3,
                 "cifar10_conv": self.cifar10_conv, "alexnet": self.alexnet}
        if units is not None:
            model = (self.resnet_cifar_v2 if zoo.is_preact(name) else self.resnet_cifar)(units, image_size)
        elif name in fixed:
            model = fixed[name](image_size)
        else:
            raise ValueError(f"model {name} has no Keras builder")
        return model if num_classes == zoo.NUM_CLASSES else _resize_output(model, num_classes)


def build(name: str, image_size: int, num_classes: int = zoo.NUM_CLASSES) -> keras.Model:
    return Networks().build(name, image_size, num_classes)


def count_params(model: keras.Model) -> int:
    """Every weight, BN statistics included, as the other frameworks count them."""
    return int(model.count_params())


def _resize_output(model: keras.Model, num_classes: int) -> keras.Model:
    """The model with its last Dense (every builder above ends in one) replaced by one of num_classes outputs: an
    image folder's classes (data: imagenet)."""
    last = model.layers[-1]
    if not isinstance(last, layers.Dense):
        raise ValueError(f"model {model.name} does not end in a Dense layer: its outputs cannot be resized")
    return keras.Model(model.inputs, Networks()._dense(last.input, num_classes, bias=last.use_bias), name=model.name)


def zoos() -> list[str]:
    """The zoos of Keras models in this environment (the framework check reports them): keras.applications comes with Keras."""
    return ["keras"]


def _applications() -> list[str]:
    """keras.applications' models by name (ResNet50, EfficientNetB0, ...)."""
    apps = keras.applications
    return sorted(n for n in dir(apps) if n[:1].isupper() and callable(getattr(apps, n)))


def build_named(found: zoo.Named, image_size: int, num_classes: int) -> keras.Model:
    """A keras.applications model (weights=None: untrained; logits, no softmax) or the user's
    FUNCTION(num_classes=, image_size=), which must return a Keras 3 model (keras.Model; tf.keras is Keras 3 here)."""
    if found.zoo:
        known = _applications()
        if found.name not in known:
            raise zoo.ModelError(f"model {found.text}: keras.applications has no model {found.name}", known)
        make = getattr(keras.applications, found.name)
        model = zoo.call_builder(found, make, weights=None, input_shape=(image_size, image_size, 3), classes=num_classes,
                                 classifier_activation=None)
    else:
        model = zoo.call_builder(found, zoo.user_builder(found), num_classes=num_classes, image_size=image_size)
    if not isinstance(model, keras.Model):
        raise zoo.not_a_model(found, model, f"a Keras {keras.__version__} model (keras.Model)")
    return model


def check_named(name: str, image_size: int, num_classes: int) -> None:
    """The framework check of a named model on this process's Keras backend: built as a trial builds it, one
    training-mode forward pass of 2 images giving (2, num_classes) logits. A ModelError (one line) where it does not."""
    found = zoo.named(name)
    model = build_named(found, image_size, num_classes)
    try:
        out = model(ops.zeros((2, image_size, image_size, 3)), training=True)
    except Exception as e:  # noqa: BLE001
        raise zoo.ModelError(f"model {found.text}: its forward pass on 2 images of {image_size}x{image_size} raised "
                             f"{type(e).__name__}: {first_line(str(e))[:300]}") from None
    if not keras.ops.is_tensor(out):
        raise zoo.ModelError(f"model {found.text}: its forward pass returned {type(out).__name__}, not one tensor of logits")
    zoo.check_logits(found, tuple(out.shape), 2, num_classes, image_size)
