"""Is our network the one their benchmark program trains? A check for yardsticks.py.

Builds their resnet20 with their own code, from the checkout given (nothing of it is copied here),
beside ours, and prints one JSON line.

  .venv/bin/python benchmarks/_same_network.py mxnet EXAMPLE_DIR
      their symbols/resnet.py --num-layers 20 at 28x28 (train_cifar10.py's network) against our
      resnet20_cifar_v2: parameter counts, and both networks' outputs on one random batch with the
      same random weights (every parameter and moving statistic; inference mode).
  TF_USE_LEGACY_KERAS=1 .venv/bin/python benchmarks/_same_network.py tensorflow TF_CNN_BENCHMARKS_DIR
      their models/ resnet20 for cifar10, built by their ConvNetBuilder in a TF1 graph, against our
      resnet20_cifar: parameter counts (weights and batch-norm moving statistics, as both frameworks
      count them). Their variables are TF1 variable-scope code, so outputs are not compared here.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

IMAGE_MXNET = 28  # their symbol builds the CIFAR network for heights <= 28 only


def mxnet_check(example: Path) -> dict:
    import trainables.mxnet  # noqa: F401  (the numpy alias mxnet 1.9.1 needs)
    import mxnet as mx

    from trainables.mxnet import models

    sys.path.insert(0, str(example))
    from symbols import resnet  # theirs, from the checkout

    logits = resnet.get_symbol(10, 20, f"3,{IMAGE_MXNET},{IMAGE_MXNET}").get_internals()["fc1_output"]
    x = mx.nd.random.uniform(shape=(4, 3, IMAGE_MXNET, IMAGE_MXNET))
    net = models.build("resnet20_cifar_v2", IMAGE_MXNET)
    net.initialize()
    net(x)
    params = list(net.collect_params().values())
    arg_shapes, _, aux_shapes = logits.infer_shape(data=x.shape)
    shapes = dict(zip(logits.list_arguments(), arg_shapes)) | dict(zip(logits.list_auxiliary_states(), aux_shapes))
    del shapes["data"]
    # Both list the weights in the order the network uses them, moving statistics apart (their aux states).
    stats = ("running_mean", "running_var")
    pairs = list(zip([p for p in params if not p.name.endswith(stats)], [a for a in logits.list_arguments() if a != "data"]))
    pairs += list(zip([p for p in params if p.name.endswith(stats)], logits.list_auxiliary_states()))
    rng = np.random.default_rng(0)
    values = {}
    for param, name in pairs:
        if param.shape != shapes[name]:
            raise SystemExit(f"not the same network: our {param.name} {param.shape}, their {name} {shapes[name]}")
        if len(param.shape) > 1:  # weights: He-scaled, so that 20 layers keep the activations O(1)
            value = rng.normal(0, np.sqrt(2 / np.prod(param.shape[1:])), param.shape)
        elif name.endswith(("gamma", "var")):
            value = rng.uniform(0.5, 1.5, param.shape)
        else:
            value = rng.uniform(-0.1, 0.1, param.shape)
        values[name] = mx.nd.array(value)
        param.set_data(values[name])
    aux = set(logits.list_auxiliary_states())
    run = logits.bind(mx.cpu(), {"data": x, **{k: v for k, v in values.items() if k not in aux}},
                      aux_states={k: v for k, v in values.items() if k in aux})
    theirs = run.forward(is_train=False)[0].asnumpy()
    ours = net(x).asnumpy()
    return {"their_params": int(sum(np.prod(s) for s in shapes.values())),
            "our_params": int(sum(np.prod(p.shape) for p in params)),
            "max_abs_output_diff": float(np.abs(theirs - ours).max()), "output_scale": float(np.abs(theirs).max())}


def tensorflow_check(folder: Path) -> dict:
    import tensorflow as tf

    from trainables.tensorflow import models

    ours = int(models.build("resnet20_cifar", 32).count_params())
    sys.path.insert(0, str(folder))
    from models import model_config  # theirs, from the checkout

    class Cifar10:  # the one attribute their model map reads
        name = "cifar10"

    graph = tf.Graph()
    with graph.as_default():
        v1 = tf.compat.v1
        model = model_config.get_model_config("resnet20", Cifar10, params=None)
        images = v1.placeholder(tf.float32, (64, 32, 32, 3))
        model.build_network((images, v1.placeholder(tf.int32, (64,))), phase_train=True, nclass=10)
        theirs = int(sum(np.prod(v.shape.as_list()) for v in v1.global_variables()))
    return {"their_params": theirs, "our_params": ours}


if __name__ == "__main__":
    framework, folder = sys.argv[1], Path(sys.argv[2])
    print(json.dumps(mxnet_check(folder) if framework == "mxnet" else tensorflow_check(folder)))
