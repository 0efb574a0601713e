"""The Keras 3 yardstick: a plain Keras 3 training program, written apart from the engine, as a user writes one.

  python benchmarks/keras_peer.py --backend jax --model resnet8_cifar --devices 2 --batch-per-gpu 64 \\
      --image-size 32 --warmup-steps 10 --steps 50 --threads 1

Nothing of the engine runs here, and nothing of this repository is imported: the network is written again
in Keras layers, layer for layer as trainables/tensorflow/models.py builds it (benchmarks/jax_peer.py
lists the layers; the trainable parameter counts are the same: 75,290 for resnet8_cifar, 23,528,522 for
resnet50_v1 with 10 classes). The rest is the Keras 3 a user writes:

  - KERAS_BACKEND from --backend (jax, torch or tensorflow), set before keras is imported;
  - keras.Model (functional), compile with keras.optimizers.SGD (momentum, weight decay) and sparse
    categorical cross-entropy from logits; jit_compile left at Keras' default;
  - data parallel as Keras documents it for JAX: keras.distribution.DataParallel over --devices devices
    (host devices on the CPU: --xla_force_host_platform_device_count); the other backends run one device here;
  - --precision bf16: Keras' mixed_bfloat16 policy;
  - one synthetic batch, made once as a backend tensor and given to model.train_on_batch every step;
    train_on_batch returns the loss to the host, so each step's time is the step's.

Measured as the engine's loop measures (trainables/measure.py): the first --warmup-steps steps are thrown
away (they compile); steady images/s is the mean of per-step rates (global batch / step time); and
images / wall time of the timed steps. It prints one JSON line.
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
    p.add_argument("--backend", choices=("jax", "torch", "tensorflow"), default="jax")
    p.add_argument("--model", default="resnet8_cifar", help="resnet<6n+2>_cifar or resnet50_v1")
    p.add_argument("--devices", type=int, default=1, help="data-parallel devices (JAX backend; host devices on the CPU)")
    p.add_argument("--platform", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--batch-per-gpu", type=int, default=64)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--steps", type=int, default=50, help="timed steps, after the warm-up")
    p.add_argument("--threads", type=int, default=1, help="1: one thread per device; more: the backend's own pool")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if min(args.devices, args.batch_per_gpu, args.image_size, args.steps, args.threads) < 1 or args.warmup_steps < 0:
        p.error("devices, batch, image size, steps and threads must be >= 1, warm-up steps >= 0")
    if args.devices > 1 and args.backend != "jax":
        p.error(f"--devices {args.devices}: this program runs data parallel on the jax backend only")
    if not (args.model == "resnet50_v1" or _cifar_units(args.model)):
        p.error(f"--model {args.model}: expected resnet<6n+2>_cifar or resnet50_v1")
    return args


def _cifar_units(name: str) -> int | None:
    if not (name.startswith("resnet") and name.endswith("_cifar") and name[6:-6].isdigit()):
        return None
    depth = int(name[6:-6])
    return (depth - 2) // 6 if depth >= 8 and (depth - 2) % 6 == 0 else None


def configure(args: argparse.Namespace) -> None:
    """The backend and its threads, set before keras (and its backend) is imported."""
    os.environ["KERAS_BACKEND"] = args.backend
    if args.platform == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        os.environ["JAX_PLATFORMS"] = "cpu"
        flags = [os.environ.get("XLA_FLAGS", ""), f"--xla_force_host_platform_device_count={args.devices}"]
        if args.threads == 1:
            flags.append("--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
        os.environ["XLA_FLAGS"] = " ".join(f for f in flags if f)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)


def build(keras, args: argparse.Namespace):  # noqa: ANN001, ANN201
    layers, ops = keras.layers, keras.ops

    def conv(x, channels, kernel, stride=1, padding="same"):  # noqa: ANN001, ANN202
        init = keras.initializers.VarianceScaling(2.0, "fan_in", "untruncated_normal")
        return layers.Conv2D(channels, kernel, stride, padding=padding, use_bias=False, kernel_initializer=init)(x)

    def bn(x, relu):  # noqa: ANN001, ANN202
        x = layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(x)
        return layers.ReLU()(x) if relu else x

    class OptionA(layers.Layer):  # subsample by the stride, zero channels on both sides
        def __init__(self, stride, pad, **kwargs):  # noqa: ANN001
            super().__init__(**kwargs)
            self.stride, self.pad = stride, pad

        def call(self, x):  # noqa: ANN001, ANN202
            return ops.pad(x[:, ::self.stride, ::self.stride, :], ((0, 0), (0, 0), (0, 0), (self.pad, self.pad)))

    inputs = keras.Input((args.image_size, args.image_size, 3))
    units = _cifar_units(args.model)
    if units:
        x = bn(conv(inputs, 16, 3), relu=False)
        for stage, channels in enumerate((16, 32, 64)):
            for unit in range(units):
                stride = 2 if stage > 0 and unit == 0 else 1
                y = bn(conv(x, channels, 3, stride), relu=True)
                y = bn(conv(y, channels, 3), relu=False)
                pad = (channels - x.shape[-1]) // 2
                skip = OptionA(stride, pad)(x) if stride > 1 or pad else x
                x = layers.ReLU()(layers.Add()([y, skip]))
    else:
        x = bn(conv(layers.ZeroPadding2D(3)(inputs), 64, 7, 2, "valid"), relu=True)
        x = layers.MaxPooling2D(3, 2)(layers.ZeroPadding2D(1)(x))  # after a ReLU: zeros pad as -inf would
        for stage, (blocks, channels) in enumerate(zip((3, 4, 6, 3), (256, 512, 1024, 2048))):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                y = bn(conv(x, channels // 4, 1, stride, "valid"), relu=True)
                y = bn(conv(y, channels // 4, 3), relu=True)
                y = bn(conv(y, channels, 1), relu=False)
                skip = bn(conv(x, channels, 1, stride, "valid"), relu=False) if block == 0 else x
                x = layers.ReLU()(layers.Add()([y, skip]))
    x = layers.GlobalAveragePooling2D()(x)
    init = keras.initializers.VarianceScaling(2.0, "fan_in", "untruncated_normal")
    outputs = layers.Dense(args.classes, kernel_initializer=init, dtype="float32")(x)
    return keras.Model(inputs, outputs)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure(args)
    import keras
    import numpy as np

    keras.utils.set_random_seed(args.seed)
    if args.precision == "bf16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    kind = "gpu" if args.platform == "gpu" else "cpu"
    devices = keras.distribution.list_devices(kind) if args.backend == "jax" else [kind]
    if len(devices) < args.devices:
        print(f"error: {args.devices} devices asked, {len(devices)} found", file=sys.stderr)
        return 2
    if args.devices > 1:
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices[:args.devices]))
    if args.backend == "torch":
        import torch

        torch.set_num_threads(args.threads)
    model = build(keras, args)
    model.compile(optimizer=keras.optimizers.SGD(args.lr, momentum=args.momentum, weight_decay=args.weight_decay),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    batch = args.batch_per_gpu * args.devices
    rng = np.random.default_rng(args.seed)
    images = keras.ops.convert_to_tensor(rng.standard_normal((batch, args.image_size, args.image_size, 3), np.float32))
    labels = keras.ops.convert_to_tensor(rng.integers(0, args.classes, batch).astype(np.int32))
    times = []
    for _ in range(args.warmup_steps + args.steps):
        t0 = time.perf_counter()
        loss = model.train_on_batch(images, labels)  # a host float: the step has finished
        times.append(time.perf_counter() - t0)
    timed = times[args.warmup_steps:]
    print(json.dumps({
        "program": "keras_peer", "backend": args.backend, "keras": keras.version(), "model": args.model,
        "devices": args.devices, "platform": args.platform, "precision": args.precision,
        "batch_per_gpu": args.batch_per_gpu, "params": int(sum(np.prod(w.shape) for w in model.trainable_weights)),
        "steady_images_per_sec": statistics.fmean(batch / t for t in timed),
        "images_per_sec_wall": batch * len(timed) / sum(timed), "timed_steps": len(timed),
        "first_step_s": times[0], "loss": float(loss)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
