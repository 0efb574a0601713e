"""The JAX yardstick: a plain JAX training program, written apart from the engine, as a user writes one.

  python benchmarks/jax_peer.py --model resnet8_cifar --devices 2 --batch-per-gpu 64 --image-size 32 \\
      --warmup-steps 10 --steps 50 --threads 1

Nothing of the engine runs here, and nothing of this repository is imported: the network is written
again in jax.numpy / jax.lax, layer for layer as trainables/tensorflow/models.py builds it:

  - resnet<6n+2>_cifar (He et al. 2016, tf_cnn_benchmarks' v1): conv3x3 16 + BN (no ReLU); three stages
    of 16, 32, 64 channels, n basic blocks each (conv3x3 "SAME" + BN + ReLU, conv3x3 + BN, the option-A
    shortcut: subsample by the stride, zero channels on both sides; add, ReLU); global average pool; dense;
  - resnet50_v1 (Keras' ResNet50): conv7x7/2 + BN + ReLU, maxpool 3x3/2, bottlenecks (3, 4, 6, 3) with
    the stride on the first 1x1; global average pool; dense.
  Convolutions without bias, He-normal (std sqrt(2 / fan_in)); BN momentum 0.9, epsilon 1e-5.

The rest is plain JAX: one process; data parallel over --devices devices by sharding the batch over a
one-axis mesh and replicating the weights (jit inserts the gradient all-reduce); SGD with momentum and
weight decay (torch's form: g + wd w); softmax cross-entropy; one synthetic batch placed on the devices
once and reused every step, as tf_cnn_benchmarks does; --precision bf16 computes convolutions and the
dense layer in bfloat16 over float32 weights. Each step ends with float(loss), the host read a training
program makes to log its loss (it also waits for the step, so each step's time is the step's).

On CPUs the devices are XLA's host devices (--xla_force_host_platform_device_count), as the engine
emulates GPUs; --threads 1 turns XLA's Eigen thread pool off, so each device computes on one thread.

Measured as the engine's loop measures (trainables/measure.py): the first --warmup-steps steps are thrown
away (they compile); steady images/s is the mean of per-step rates (global batch / step time); and, as
tf_cnn_benchmarks' figure, images / wall time of the timed steps. It prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet8_cifar", help="resnet<6n+2>_cifar or resnet50_v1")
    p.add_argument("--devices", type=int, default=1, help="data-parallel devices (host devices on the CPU)")
    p.add_argument("--platform", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--batch-per-gpu", type=int, default=64)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--steps", type=int, default=50, help="timed steps, after the warm-up")
    p.add_argument("--threads", type=int, default=1, help="1: one thread per host device; more: XLA's own pool")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if min(args.devices, args.batch_per_gpu, args.image_size, args.steps, args.threads) < 1 or args.warmup_steps < 0:
        p.error("devices, batch, image size, steps and threads must be >= 1, warm-up steps >= 0")
    if not (args.model == "resnet50_v1" or _cifar_units(args.model)):
        p.error(f"--model {args.model}: expected resnet<6n+2>_cifar or resnet50_v1")
    return args


def _cifar_units(name: str) -> int | None:
    if not (name.startswith("resnet") and name.endswith("_cifar") and name[6:-6].isdigit()):
        return None
    depth = int(name[6:-6])
    return (depth - 2) // 6 if depth >= 8 and (depth - 2) % 6 == 0 else None


def configure(args: argparse.Namespace) -> None:
    """XLA's flags, set before jax is imported (they are read once)."""
    flags = [os.environ.get("XLA_FLAGS", "")]
    if args.platform == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
        flags.append(f"--xla_force_host_platform_device_count={args.devices}")
        if args.threads == 1:
            flags.append("--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    os.environ["XLA_FLAGS"] = " ".join(f for f in flags if f)


class Net:
    """The network's weights as flat lists, in the order the forward pass uses them: `init` makes them,
    a pass with given lists reads them back (the same code builds and runs the network)."""

    def __init__(self, jax, params=None, state=None, key=None, train=True, dtype=None):  # noqa: ANN001
        self.jax, self.jnp = jax, jax.numpy
        self.init = params is None
        self.params, self.state = ([], []) if self.init else (params, state)
        self.new_state: list = []
        self.key, self.train, self.dtype = key, train, dtype or self.jnp.float32
        self.i = self.j = 0

    def _param(self, make):  # noqa: ANN001
        if self.init:
            self.key, sub = self.jax.random.split(self.key)
            self.params.append(make(sub))
        self.i += 1
        return self.params[self.i - 1]

    def _state(self, value):  # noqa: ANN001
        if self.init:
            self.state.append(value)
        self.j += 1
        return self.state[self.j - 1]

    def conv(self, x, channels: int, kernel: int, stride: int = 1, padding="SAME"):  # noqa: ANN001
        shape = (kernel, kernel, x.shape[-1], channels)
        std = (2.0 / (kernel * kernel * x.shape[-1])) ** 0.5
        w = self._param(lambda k: std * self.jax.random.normal(k, shape, self.jnp.float32))
        return self.jax.lax.conv_general_dilated(x.astype(self.dtype), w.astype(self.dtype), (stride, stride), padding,
                                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def bn(self, x, relu: bool):  # noqa: ANN001
        jnp, c = self.jnp, x.shape[-1]
        gamma = self._param(lambda k: jnp.ones((c,), jnp.float32))
        beta = self._param(lambda k: jnp.zeros((c,), jnp.float32))
        mean_m = self._state(jnp.zeros((c,), jnp.float32))
        var_m = self._state(jnp.ones((c,), jnp.float32))
        x32 = x.astype(jnp.float32)
        if self.train:
            # One pass over x: E[x^2] - E[x]^2 (biased, as Keras keeps it), not x.var's second pass over x - mean.
            mean = x32.mean((0, 1, 2))
            var = jnp.maximum(jnp.square(x32).mean((0, 1, 2)) - jnp.square(mean), 0.0)
            self.new_state += [0.9 * mean_m + 0.1 * mean, 0.9 * var_m + 0.1 * var]
        else:
            mean, var = mean_m, var_m
        scale = self.jax.lax.rsqrt(var + 1e-5) * gamma  # per channel first: one multiply-add over x
        y = x32 * scale + (beta - mean * scale)
        return (self.jax.nn.relu(y) if relu else y).astype(self.dtype)

    def dense(self, x, units: int):  # noqa: ANN001
        std = (2.0 / x.shape[-1]) ** 0.5
        w = self._param(lambda k: std * self.jax.random.normal(k, (x.shape[-1], units), self.jnp.float32))
        b = self._param(lambda k: self.jnp.zeros((units,), self.jnp.float32))
        return (x.astype(self.dtype) @ w.astype(self.dtype)).astype(self.jnp.float32) + b


def resnet_cifar(net: Net, x, units: int, classes: int):  # noqa: ANN001
    jnp = net.jnp
    x = net.bn(net.conv(x, 16, 3), relu=False)
    for stage, channels in enumerate((16, 32, 64)):
        for unit in range(units):
            stride = 2 if stage > 0 and unit == 0 else 1
            y = net.bn(net.conv(x, channels, 3, stride), relu=True)
            y = net.bn(net.conv(y, channels, 3), relu=False)
            skip, pad = x[:, ::stride, ::stride, :], (channels - x.shape[-1]) // 2
            skip = jnp.pad(skip, ((0, 0), (0, 0), (0, 0), (pad, pad))) if pad else skip
            x = net.jax.nn.relu(y + skip)
    return net.dense(x.mean((1, 2)), classes)


def resnet50_v1(net: Net, x, classes: int):  # noqa: ANN001
    x = net.bn(net.conv(x, 64, 7, 2, ((3, 3), (3, 3))), relu=True)
    x = net.jax.lax.reduce_window(x, -net.jnp.inf, net.jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                                  ((0, 0), (1, 1), (1, 1), (0, 0)))
    for stage, (blocks, channels) in enumerate(zip((3, 4, 6, 3), (256, 512, 1024, 2048))):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            y = net.bn(net.conv(x, channels // 4, 1, stride, "VALID"), relu=True)
            y = net.bn(net.conv(y, channels // 4, 3), relu=True)
            y = net.bn(net.conv(y, channels, 1), relu=False)
            skip = net.bn(net.conv(x, channels, 1, stride, "VALID"), relu=False) if block == 0 else x
            x = net.jax.nn.relu(y + skip)
    return net.dense(x.mean((1, 2)), classes)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure(args)
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = jax.devices()
    if len(devices) < args.devices:
        print(f"error: {args.devices} devices asked, {len(devices)} found", file=sys.stderr)
        return 2
    mesh = Mesh(devices[:args.devices], ("data",))
    replicated, sharded = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("data"))
    dtype = jnp.bfloat16 if args.precision == "bf16" else jnp.float32
    units = _cifar_units(args.model)

    def forward(net: Net, x):  # noqa: ANN001
        return resnet_cifar(net, x, units, args.classes) if units else resnet50_v1(net, x, args.classes)

    batch = args.batch_per_gpu * args.devices
    key = jax.random.PRNGKey(args.seed)
    shape = (batch, args.image_size, args.image_size, 3)
    images = jax.device_put(jax.random.normal(key, shape, jnp.float32), sharded)
    labels = jax.device_put(jax.random.randint(key, (batch,), 0, args.classes), sharded)
    init = Net(jax, key=key)
    forward(init, jnp.zeros((1, *shape[1:]), jnp.float32))  # eagerly, on one image: makes the weights
    params = jax.device_put([jnp.asarray(p) for p in init.params], replicated)
    state = jax.device_put([jnp.asarray(s) for s in init.state], replicated)
    velocity = jax.device_put([jnp.zeros_like(p) for p in params], replicated)

    def loss_fn(params, state, x, y):  # noqa: ANN001
        net = Net(jax, params, state, dtype=dtype)
        logits = forward(net, x)
        loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))
        return loss, net.new_state

    def step(params, state, velocity, x, y):  # noqa: ANN001
        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state, x, y)
        velocity = [args.momentum * v + g + args.weight_decay * p for v, g, p in zip(velocity, grads, params)]
        params = [p - args.lr * v for p, v in zip(params, velocity)]
        return params, new_state, velocity, loss

    train_step = jax.jit(step, donate_argnums=(0, 1, 2))
    times = []
    for _ in range(args.warmup_steps + args.steps):
        t0 = time.perf_counter()
        params, state, velocity, loss = train_step(params, state, velocity, images, labels)
        last_loss = float(loss)
        times.append(time.perf_counter() - t0)
    timed = times[args.warmup_steps:]
    print(json.dumps({
        "program": "jax_peer", "model": args.model, "devices": args.devices, "platform": args.platform,
        "device_kind": devices[0].device_kind, "jax": jax.__version__, "precision": args.precision,
        "batch_per_gpu": args.batch_per_gpu, "params": int(sum(p.size for p in params)),
        "steady_images_per_sec": statistics.fmean(batch / t for t in timed),
        "images_per_sec_wall": batch * len(timed) / sum(timed), "timed_steps": len(timed),
        "first_step_s": times[0], "loss": last_loss}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
