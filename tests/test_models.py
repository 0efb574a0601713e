"""The model zoo: one name, one architecture, in MXNet Gluon and in Keras.

Each model is built in both frameworks; the parameter counts must be equal, and with the MXNet weights
copied into the Keras model both give the same outputs (inference mode), which checks the wiring too.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from trainables import zoo

# Small but valid inputs: the ImageNet ResNet ends in global average pooling, inception_v3 needs 75x75
# at least, AlexNet 63x63 (at 100 its last feature map is 2x2, so the flatten order is exercised).
# Parameter counts (BN moving statistics included) at these sizes, counted by each framework's own
# model (tf_cnn_benchmarks' and train_cifar10.py's counts of their networks were read from their code
# run beside ours: benchmarks/yardsticks.py). At their default sizes: resnet50_v1
# 23,581,642 (Gluon's resnet50_v1 has 18,880 more: biases on the bottleneck's 1x1 convs, which the BN
# after them makes redundant), inception_v3 21,840,490 (as Gluon's inceptionv3 with classes=10), alexnet
# 57,044,810 (as Gluon's alexnet with classes=10).
CASES = {
    "resnet20_cifar": (32, 271_098),  # tf_cnn_benchmarks' resnet20 has as many
    "resnet8_cifar": (30, 75_770),  # 30 -> 15 -> 8: "SAME" pads 0+1, then 1+1
    "resnet20_cifar_v2": (28, 273_926),  # MXNet's symbols/resnet.py --num-layers 20 has as many
    "resnet8_cifar_v2": (32, 78_598),
    "resnet50_v1": (32, 23_581_642),
    "inception_v3": (75, 21_840_490),
    "cifar10_conv": (32, 419_000),
    "alexnet": (100, 23_490_378),
}
BATCH = 2


@pytest.fixture(scope="module")
def mx():
    import trainables.mxnet  # noqa: F401  (aliases numpy.bool before mxnet is imported)
    import mxnet
    return mxnet


@pytest.fixture(scope="module")
def keras():
    import keras
    return keras


def _copy_weights(net, model, keras) -> None:
    """Gluon parameters into the Keras model. Per layer kind (conv, batch norm, dense) both frameworks
    list layers in creation order: Gluon in registration order, Keras by the number in the layer's
    automatic name. Kernels go OIHW -> HWIO and (out, in) -> (in, out); the dense layer after a flatten
    gets its rows reordered from CHW (MXNet's flatten) to HWC (Keras')."""
    from trainables.tensorflow.models import BatchNorm

    kinds = {keras.layers.Conv2D: "conv", BatchNorm: "batchnorm", keras.layers.Dense: "dense"}
    flatten = [layer for layer in model.layers if isinstance(layer, keras.layers.Flatten)]
    for kind in kinds.values():
        ours = [p for p in net.collect_params().values() if re.match(rf"{kind}\d+_", p.name)]
        theirs = sorted((layer for layer in model.layers if kinds.get(type(layer)) == kind),
                        key=lambda layer: int(re.search(r"(?:_(\d+))?$", layer.name).group(1) or 0))
        # Gluon's order; Keras lists an untrained (fixed) gamma after the trained weights.
        variables = [v for layer in theirs for v in ((layer.gamma, layer.beta, layer.moving_mean, layer.moving_variance)
                                                     if kind == "batchnorm" else layer.weights)]
        assert len(ours) == len(variables), kind
        for i, (param, var) in enumerate(zip(ours, variables)):
            value = param.data().asnumpy()
            if value.ndim == 4:
                value = value.transpose(2, 3, 1, 0)
            elif value.ndim == 2:
                if i == 0 and flatten:
                    h, w, c = flatten[0].input.shape[1:]
                    value = value.reshape(-1, c, h, w).transpose(0, 2, 3, 1).reshape(value.shape[0], -1)
                value = value.T
            var.assign(value)


def test_every_fixed_model_is_covered() -> None:
    assert set(zoo.FIXED_MODELS) <= set(CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_same_model_in_both_frameworks(name: str, mx, keras) -> None:
    from trainables.mxnet import models as mx_models
    from trainables.tensorflow import models as tf_models

    size, expected = CASES[name]
    x = np.random.default_rng(0).random((BATCH, size, size, 3), dtype=np.float32)
    x_nchw = mx.nd.array(x.transpose(0, 3, 1, 2))

    net = mx_models.build(name, size)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2))
    net(x_nchw)  # fixes the deferred shapes
    for param in net.collect_params().values():  # BN statistics other than 0 and 1, so they count
        if param.name.endswith(("running_mean", "beta")):
            param.set_data(mx.nd.random.normal(0, 0.1, param.shape))
        elif param.name.endswith(("running_var", "gamma")):
            param.set_data(mx.nd.random.uniform(0.5, 1.5, param.shape))
    mx_out = net(x_nchw).asnumpy()
    mx_params = int(sum(np.prod(p.shape) for p in net.collect_params().values()))

    keras.backend.clear_session()
    model = tf_models.build(name, size)
    tf_params = int(model.count_params())
    assert mx_params == tf_params == expected

    _copy_weights(net, model, keras)
    tf_out = np.asarray(model(x, training=False))
    assert mx_out.shape == tf_out.shape == (BATCH, zoo.NUM_CLASSES)
    assert np.isfinite(mx_out).all()
    scale = max(1.0, float(np.abs(mx_out).max()))
    np.testing.assert_allclose(tf_out, mx_out, rtol=0, atol=1e-4 * scale)


def test_unknown_name_is_refused(mx, keras) -> None:
    from trainables.mxnet import models as mx_models
    from trainables.tensorflow import models as tf_models

    with pytest.raises(ValueError):
        mx_models.build("resnet9_cifar", 32)
    with pytest.raises(ValueError):  # MXNet's symbol builds bottleneck units from depth 164: not this family
        tf_models.build("resnet164_cifar_v2", 32)
    with pytest.raises(ValueError):
        tf_models.build("vgg16", 224)
