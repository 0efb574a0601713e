"""The PyTorch backend's semantics without Ray: its optimizer against a hand computation, DDP's ranks
against one process, divergence seen by every rank at once, checkpoints, the framework check, and the
classification of a CUDA out-of-memory error (no GPU here: the error itself is made)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT
from torch import nn

from trainables.config import TrialConfig
from trainables.pytorch.backend import MomentumSGD


def softmax_grad(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d/dw of the mean cross-entropy of softmax(x @ w.T) over the batch, by hand."""
    logits = x @ w.T
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(len(y)), y] -= 1
    return p.T @ x / len(y)


def test_sgd_is_the_other_frameworks_momentum_and_decay() -> None:
    # MXNet's and Keras' SGD: g = grad + wd w; v = m v - lr g; w += v. Three steps, the lr cut before the
    # third (where torch.optim.SGD, which keeps v without the lr, steps otherwise).
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 4)), rng.integers(0, 3, size=6)
    w0 = rng.normal(size=(3, 4))
    lrs, momentum, wd = [0.5, 0.5, 0.05], 0.9, 0.01

    w, v = w0.copy(), np.zeros_like(w0)
    for lr in lrs:
        v = momentum * v - lr * (softmax_grad(w, x, y) + wd * w)
        w = w + v

    def torch_steps(make_opt) -> np.ndarray:
        layer = torch.nn.Linear(4, 3, bias=False).double()
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(w0))
        opt = make_opt(layer.parameters())
        for lr in lrs:
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad()
            torch.nn.functional.cross_entropy(layer(torch.from_numpy(x)), torch.from_numpy(y)).backward()
            opt.step()
        return layer.weight.detach().numpy()

    ours = torch_steps(lambda p: MomentumSGD(p, lr=lrs[0], momentum=momentum, weight_decay=wd))
    np.testing.assert_allclose(ours, w, rtol=1e-12)
    torchs = torch_steps(lambda p: torch.optim.SGD(p, lr=lrs[0], momentum=momentum, weight_decay=wd))
    assert not np.allclose(torchs, w, rtol=1e-6)  # the test tells the two apart


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(config: dict, out: Path, lrs: list[float], world: int, timeout: float = 180,
              poison: str | None = None) -> list[list[list]]:
    """tests/pytorch_ranks.py as `world` processes under one gloo process group; each rank's step results."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SWEEP_DDP_TIMEOUT_S": "30", "POISON_RANK_STEP": poison or ""}
    if world > 1:
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(world)})
    command = [sys.executable, str(ROOT / "tests" / "pytorch_ranks.py"), json.dumps(config), str(out), *map(str, lrs)]
    ranks = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**env, **({"RANK": str(r)} if world > 1 else {})}) for r in range(world)]
    outs = [p.communicate(timeout=timeout) for p in ranks]
    assert all(p.returncode == 0 for p in ranks), [err[-2000:] for _, err in outs]
    return [[json.loads(line) for line in o.splitlines() if line.startswith("[")] for o, _ in outs]


def test_two_ranks_train_as_one_process_on_their_global_batch(tmp_path: Path) -> None:
    # cifar10_conv (no batch norm: per-device statistics would differ) on 8 images: one process, or two
    # ranks of 4 each. DDP averages the ranks' mean losses' gradients: the global batch's mean; weight
    # decay is added once, after the all-reduce; the velocities and weights after three steps agree.
    base = {"framework": "pytorch", "model": "cifar10_conv", "epochs": 1, "lr": 0.1, "weight_decay": 0.01, "seed": 3}
    one = run_ranks({**base, "num_gpus": 1, "batch_per_gpu": 8}, tmp_path / "one.npz", [0.01, 0.01, 0.002], 1)
    two = run_ranks({**base, "num_gpus": 2, "batch_per_gpu": 4}, tmp_path / "two.npz", [0.01, 0.01, 0.002], 2)
    assert [s[2] for s in one[0]] == [8] * 3 and [s[2] for s in two[0]] == [4] * 3  # images each process trained
    # The first step's loss (same weights on every rank): the two halves' sums make the whole's.
    assert two[0][0][0] + two[1][0][0] == pytest.approx(one[0][0][0], rel=1e-5)
    with np.load(tmp_path / "one.npz") as a, np.load(tmp_path / "two.npz") as b:
        assert len(a.files) == len(b.files) > 2
        for name in a.files:
            np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # inductor compiles each rank's step in C++ first: ~20 s
def test_compiled_ranks_compile_their_step_and_train_as_one_eager_process(tmp_path: Path) -> None:
    # compile: true on two ranks. torch.compile must compile the step (rows say `compiler: inductor`): over the DDP
    # module it compiled nothing, and the backend's check after the first step fails such a rank. And the compiled
    # ranks train as the eager process does: the same losses, weights and velocities after three steps.
    base = {"framework": "pytorch", "model": "cifar10_conv", "epochs": 1, "lr": 0.1, "weight_decay": 0.01, "seed": 3}
    lrs = [0.01, 0.01, 0.002]
    one = run_ranks({**base, "num_gpus": 1, "batch_per_gpu": 8}, tmp_path / "one.npz", lrs, 1)
    two = run_ranks({**base, "num_gpus": 2, "batch_per_gpu": 4, "compile": True}, tmp_path / "two.npz", lrs, 2,
                    timeout=600)  # inductor compiles the forward and backward in C++ first
    assert [s[0] for s in one[0]] == pytest.approx([a[0] + b[0] for a, b in zip(*two)], rel=1e-5)
    with np.load(tmp_path / "one.npz") as a, np.load(tmp_path / "two.npz") as b:
        assert len(a.files) == len(b.files) > 2
        for name in a.files:
            np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-6)


def test_every_rank_sees_a_non_finite_loss_in_the_same_step(tmp_path: Path) -> None:
    # Rank 1's images turn NaN in step 1, rank 0's stay finite: each rank must stop at the same step (a
    # rank that stopped alone would leave the other waiting in the next all-reduce), so both see a NaN
    # loss in step 1, though rank 0's own loss there was finite.
    config = {"framework": "pytorch", "model": "cifar10_conv", "num_gpus": 2, "batch_per_gpu": 4, "epochs": 1,
              "lr": 0.01}
    steps = run_ranks(config, tmp_path / "w.npz", [0.01] * 3, 2, poison="1:1")
    first_bad = [next((i for i, s in enumerate(rank) if not np.isfinite(s[0])), None) for rank in steps]
    assert first_bad == [1, 1], steps


def test_checkpoint_restores_weights_velocities_and_loss_scale(tmp_path: Path) -> None:
    from trainables.loop import Devices, TrialLoop

    cfg = TrialConfig(framework="pytorch", model="resnet8_cifar", num_gpus=1, batch_per_gpu=4, epochs=2, lr=0.05,
                      data="synthetic", steps_per_epoch=2, warmup_steps=0, precision="fp16")
    devices = Devices.of(["0"], emulated=True)
    first = TrialLoop(cfg, devices, None)
    first.run_epoch(0)
    first.backend.save(str(tmp_path))
    assert os.listdir(tmp_path) == ["pytorch.pt"]
    again = TrialLoop(cfg, devices, None)
    again.backend.load(str(tmp_path))
    x = np.random.default_rng(0).normal(size=(3, 3, 32, 32)).astype(np.float32)
    np.testing.assert_array_equal(first.backend.logits(x), again.backend.logits(x))
    a, b = first.backend, again.backend
    assert b.scaler.get_scale() == a.scaler.get_scale() and a.precision_columns()["loss_scale"] > 0
    for p, q in zip(a.net.parameters(), b.net.parameters()):
        if p in a.opt.state:
            assert torch.equal(a.opt.state[p]["velocity"], b.opt.state[q]["velocity"])
    row = again.run_epoch(1)
    assert row["framework_version"].startswith("pytorch ") and row["layout"] == "NCHW" and row["loss_scale"] > 0


def test_rows_record_the_precision_the_step_computed_in() -> None:
    """Issue 46: a run whose autocast was off said bf16 all the same. The rows' computed_precision is read off the
    step's output: bf16 under autocast, fp32 without it, and fp32 for tf32 on a CPU (no TF32 there)."""
    from trainables.loop import Devices, TrialLoop

    def loop(precision: str) -> TrialLoop:
        cfg = TrialConfig(framework="pytorch", model="resnet8_cifar", num_gpus=1, batch_per_gpu=4, epochs=2, lr=0.05,
                          data="synthetic", steps_per_epoch=2, warmup_steps=0, precision=precision)
        return TrialLoop(cfg, Devices.of(["0"], emulated=True), None)

    bf16 = loop("bf16")
    assert bf16.run_epoch(0)["computed_precision"] == "bf16"
    bf16.backend.autocast = None  # autocast off: the step computes in fp32, whatever the setting says
    assert bf16.run_epoch(1)["computed_precision"] == "fp32"
    tf32 = loop("tf32").run_epoch(0)
    assert (tf32["computed_precision"], tf32["tf32_allowed"]) == ("fp32", False)


@pytest.mark.parametrize("precision, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16),
                                              ("fp32", torch.float32)])
def test_every_layer_computes_in_the_precision_and_the_row_says_what_they_computed_in(precision: str,
                                                                                      dtype: torch.dtype) -> None:
    """Issue 46: PyTorch's bf16 trained in fp32 and no test saw it. Forward hooks on every convolution and linear
    layer of the backend's own network record the dtype each computed in during the loop's real training steps:
    all of them in 16 bits at bf16 and fp16 (autocast around the whole network, not only its last layer), and the
    epoch's row says the dtype they observed. Before any step the backend knows of no dtype: it is read, not
    assumed from the setting."""
    from trainables.loop import Devices, TrialLoop

    cfg = TrialConfig(framework="pytorch", model="resnet8_cifar", num_gpus=1, batch_per_gpu=4, epochs=1, lr=0.05,
                      data="synthetic", steps_per_epoch=2, warmup_steps=0, precision=precision)
    loop = TrialLoop(cfg, Devices.of(["0"], emulated=True), None)
    assert loop.backend.compute_dtype() is None
    seen: list[torch.dtype] = []
    layers = [m for m in loop.backend.net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    for layer in layers:
        layer.register_forward_hook(lambda _module, _inputs, out: seen.append(out.dtype))
    row = loop.run_epoch(0)
    assert len(layers) >= 8 and len(seen) >= 2 * len(layers)  # every layer, in each of the two steps
    assert set(seen) == {dtype}
    assert row["computed_precision"] == precision


def test_a_trial_on_several_gpus_refuses_to_run_as_one_process() -> None:
    from trainables.loop import Devices, TrialLoop

    cfg = TrialConfig(framework="pytorch", model="resnet8_cifar", num_gpus=2, batch_per_gpu=4, epochs=1, lr=0.05,
                      data="synthetic")
    with pytest.raises(ValueError, match="runs as 2 processes, one per GPU"):
        TrialLoop(cfg, Devices.of(["0"], emulated=True), None)


def test_cuda_out_of_memory_is_an_oom_row() -> None:
    from sweep.runner import _failure_status
    from sweep.schema import Status
    from trainables.failure import trial_error

    error = trial_error(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
                                                    "79.10 GiB total capacity)"))
    assert error.error_type == "OutOfMemoryError" and error.error_class.startswith("torch.")
    assert _failure_status(error.error_type, error.message) == Status.OOM
    other = trial_error(RuntimeError("Connection closed by peer [127.0.0.1]:29500"))  # gloo: a rank died
    assert _failure_status(other.error_type, other.message) == Status.FAILED


def test_framework_check_trains_a_pytorch_step_and_reads_the_build() -> None:
    from trainables import probe

    out = subprocess.run([sys.executable, "-m", "trainables.probe", "pytorch", "0", "1"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    said = {k: v for line in out.stdout.splitlines() if line.startswith(probe.PREFIX)
            for k, v in json.loads(line[len(probe.PREFIX):]).items()}
    assert said.get("step") == "ok", out.stdout[-2000:] + out.stderr[-2000:]
    assert said["build"]["version"] == torch.__version__ and said["build"]["gpu_build"] is (torch.version.cuda is not None)
    build = probe.Build(**{**said["build"], "archs": None})
    # This build on a GPU node, in the check's own words: a CPU build (pip's on Python 3.11 here) has no
    # kernels; a CUDA build (the GPU machine's own torch, or pip's on Python 3.12) that sees no GPU has none
    # of its CUDA libraries loaded; one that sees the GPU can train.
    name = f"pytorch {torch.__version__}" + (f" (CUDA {torch.version.cuda})" if torch.version.cuda else "")
    expected = (f"{name} is a CPU build: no kernels for the NVIDIA H100 80GB HBM3" if not build.gpu_build else
                f"{name} sees no GPU here (NVIDIA H100 80GB HBM3): its CUDA libraries did not load" if not build.gpus else
                None)
    assert probe.verdict("pytorch", build, ("NVIDIA H100 80GB HBM3", "sm_90"), None) == expected


RENDEZVOUS = """
import errno, os, socket
from trainables.loop import open_rendezvous
store, port = open_rendezvous("pytorch", "127.0.0.1")  # as sweep/workers.py opens it in rank 0's actor
try:
    socket.socket().bind(("127.0.0.1", port))
    print("taken by another: no")
except OSError as e:
    print("taken by another:", "yes" if e.errno == errno.EADDRINUSE else e)
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
import torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
print("group on it:", dist.get_world_size())
os._exit(0)
"""


def test_rank_zeros_rendezvous_port_is_held_until_its_process_group_takes_it_over() -> None:
    # A port found free and then let go can be taken by another process before rank 0's process group binds it
    # (a trial failed so, EADDRINUSE): the store rank 0 opens keeps it, and env:// in that process reuses it.
    proc = subprocess.run([sys.executable, "-c", RENDEZVOUS], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""})
    assert proc.stdout.splitlines() == ["taken by another: yes", "group on it: 1"], proc.stdout + proc.stderr[-2000:]
