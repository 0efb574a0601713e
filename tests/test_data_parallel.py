"""MXNet and TensorFlow on 2 emulated devices take the same steps as on 1 device, given the same global batch
(issue 46), as tests/test_pytorch.py checks PyTorch's ranks: the gradients are the mean over the global batch,
weight decay is added once, and an lr change between steps applies alike. An error of a factor of 2 in the
gradients' scale (averaged over one device's batch) at a small lr passed everything else; here it cannot.

cifar10_conv (no batch norm: per-device statistics would differ, no dropout), 8 fixed images, three steps with
the lr cut before the third. The two backends start from the same weights (copied), and what each step changed
is compared, not the weights themselves, so that a small lr's small change is not lost in the weights' size."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import ROOT

LRS = [0.01, 0.01, 0.002]
BASE = {"model": "cifar10_conv", "epochs": 1, "lr": 0.1, "weight_decay": 0.01, "seed": 3}
# The relative size of the difference between the two changes, per weight array: float32 sums taken in two
# halves differ from one sum by rounding only (measured: 4e-7 to 1e-6 in both); gradients averaged over one device's
# batch make it 0.6 to 0.8.
CLOSE = 1e-3


def images(layout: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.random((8, 32, 32, 3), dtype=np.float32)
    return (x.transpose(0, 3, 1, 2).copy() if layout == "NCHW" else x), rng.integers(0, 10, 8)


def relative_differences(one_before: list, one_after: list, two_before: list, two_after: list) -> list[float]:
    """Per weight array: |change on 2 devices - change on 1| / |change on 1|."""
    assert len(one_before) == len(two_after) > 2
    out = []
    for b1, a1, b2, a2 in zip(one_before, one_after, two_before, two_after):
        np.testing.assert_array_equal(b1, b2)  # the same start
        change = a1 - b1
        assert np.linalg.norm(change) > 0  # each array was trained
        out.append(float(np.linalg.norm((a2 - b2) - change) / np.linalg.norm(change)))
    return out


def test_mxnet_on_two_devices_takes_the_step_of_one_device_on_the_same_global_batch() -> None:
    from trainables.config import TrialConfig
    from trainables.loop import Devices, load_backend

    def backend(gpus: int):  # type: ignore[no-untyped-def]
        cfg = TrialConfig(framework="mxnet", num_gpus=gpus, batch_per_gpu=8 // gpus, **BASE)
        return load_backend(cfg, Devices.of([str(i) for i in range(gpus)], emulated=True), 32)

    def weights(b) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
        return [p.data(b.ctx[0]).asnumpy() for p in b.net.collect_params().values()]

    one, two = backend(1), backend(2)
    for p, q in zip(one.net.collect_params().values(), two.net.collect_params().values()):
        q.set_data(p.data(one.ctx[0]).copy())
    x, y = images(one.layout)
    before = weights(one)
    losses = {n: [b.train_step(b.put(x, y), lr) for lr in LRS] for n, b in ((1, one), (2, two))}
    assert [s[2] for s in losses[2]] == [8] * 3  # both devices' images counted in each step
    assert losses[2][0][0] == pytest.approx(losses[1][0][0], rel=1e-5)  # the first step's loss sum, same weights
    # Both devices hold the same weights after the steps (each applies the all-reduced gradient).
    for p in two.net.collect_params().values():
        np.testing.assert_array_equal(p.data(two.ctx[1]).asnumpy(), p.data(two.ctx[0]).asnumpy())
    assert max(relative_differences(before, weights(one), before, weights(two))) < CLOSE


TENSORFLOW = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    # Two CPU devices, set before TensorFlow initialises: the 1-device backend uses the first.
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from test_data_parallel import BASE, LRS, images, relative_differences
    from trainables.config import TrialConfig
    from trainables.loop import Devices, load_backend

    def backend(gpus):
        cfg = TrialConfig(framework="tensorflow", num_gpus=gpus, batch_per_gpu=8 // gpus, **BASE)
        return load_backend(cfg, Devices.of([str(i) for i in range(gpus)], emulated=True), 32)

    one, two = backend(1), backend(2)
    two.model.set_weights(one.model.get_weights())
    x, y = images(one.layout)
    before = one.model.get_weights()
    steps = {n: [b.train_step(b.put(x, y), lr) for lr in LRS] for n, b in ((1, one), (2, two))}
    print(json.dumps({"steps": steps, "replicas": two.strategy.num_replicas_in_sync,
                      "differences": relative_differences(before, one.model.get_weights(), before,
                                                          two.model.get_weights())}))
""")


def test_tensorflow_on_two_devices_takes_the_step_of_one_device_on_the_same_global_batch() -> None:
    """In a process of its own: TensorFlow's logical devices are fixed when it initialises, and this process's
    TensorFlow may have started with one."""
    out = subprocess.run([sys.executable, "-c", TENSORFLOW], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    said = json.loads(out.stdout.strip().splitlines()[-1])
    assert said["replicas"] == 2 and [s[2] for s in said["steps"]["2"]] == [8] * 3
    assert said["steps"]["2"][0][0] == pytest.approx(said["steps"]["1"][0][0], rel=1e-5)
    assert max(said["differences"]) < CLOSE, said["differences"]
