"""Accuracy is a fraction of exactly the images it claims: the loop's train_acc and val_acc against a
plain numpy argmax(logits) == label over the same images, in every framework, on 1 to 3 emulated
devices, with batches that do not divide the split (a last batch of fewer images than devices too).
PyTorch on n devices is n processes under DDP, each counting its shard, rank 0 validating: their rows
are totalled as the engine totals them (trainables.measure.total_over_workers)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from cifar_files import write_cifar10
from conftest import ROOT

TEST_IMAGES = 500
BATCH_PER_GPU = 7


@pytest.fixture(scope="module")
def cifar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("cifar"), train_per_file=100, test=TEST_IMAGES)


def probe(command: list[str], env: dict[str, str] | None = None) -> list[dict]:
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def probe_pytorch(command: list[str], devices: int) -> list[dict]:
    """One process per device (a gloo process group among them); each check totalled over the ranks."""
    if devices == 1:
        return probe(command)
    from trainables.measure import total_over_workers

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
                                   "WORLD_SIZE": str(devices), "SWEEP_DDP_TIMEOUT_S": "120"})
             for r in range(devices)]
    outs = [p.communicate(timeout=300) for p in ranks]
    assert all(p.returncode == 0 for p in ranks), [err[-2000:] for _, err in outs]
    per_rank = [[json.loads(line) for line in out.splitlines() if line.startswith("{")] for out, _ in outs]
    checks = []
    for rows in zip(*per_rank):  # one check, as each rank saw it
        assert [r["rank"] for r in rows] == list(range(devices)) and all(r["val_acc"] is None for r in rows[1:])
        keys = {"ray_gpu_ids": "", "ray_node_id": "", "hostname": "", "epoch_time_s": 0.0, "images_per_sec": 0.0,
                "steady_images_per_sec": None, "steady_images_per_sec_stderr": None, "steady_jitter": None,
                "steady_steps": 0, "train_loss": 0.0, "peak_device_mem_mib": None, "peak_host_rss_mib": 0.0,
                "diverged": False}
        total = total_over_workers([{**keys, **r} for r in rows])
        checks.append({**total, "train_ref": [sum(r["train_ref"][i] for r in rows) for i in (0, 1)],
                       "steps": rows[0]["steps"]})
    return checks


# PyTorch on several devices starts a process per device, and TensorFlow on several builds a MirroredStrategy
# (~9 s each here), and TensorFlow's import takes 7-16 s: in the slow lane (the fast one keeps MXNet on 1 and 2 devices
# and PyTorch on 1; MXNet on 3, ~8 CPU-s, runs in the full suite: issue 46, the fast lane's 3 minutes).
CASES = [("mxnet", 1), ("mxnet", 2), ("pytorch", 1)] + [
    pytest.param(fw, n, marks=pytest.mark.slow) for fw, n in [("mxnet", 3), ("tensorflow", 1), ("tensorflow", 2), ("tensorflow", 3), ("pytorch", 2), ("pytorch", 3)]]


def limit_of(devices: int) -> int:
    """2 images past whole batches: the last validation batch has fewer images than there are devices
    (on 3), and neither it nor the whole split (500) is a multiple of the batch."""
    global_batch = BATCH_PER_GPU * devices
    limit = 2 * global_batch + 2
    assert TEST_IMAGES % global_batch and limit % global_batch
    return limit


def run_probe(framework: str, devices: int, cifar: Path) -> list[dict]:
    config = {"framework": framework, "num_gpus": devices, "batch_per_gpu": BATCH_PER_GPU}
    command = [sys.executable, str(ROOT / "tests" / "accuracy_probe.py"), json.dumps(config), str(cifar), "none",
               str(limit_of(devices))]
    return probe_pytorch(command, devices) if framework == "pytorch" else probe(command)


@pytest.fixture(scope="module")
def probed(request: pytest.FixtureRequest, cifar: Path) -> dict[tuple[str, int], Future]:
    """The probes of every case this session runs, started at once, two at a time: each is mostly one core's
    work (a framework's import, then one thread), so two keep both cores busy."""
    cases = [(item.callspec.params["framework"], item.callspec.params["devices"]) for item in request.session.items
             if item.originalname == "test_accuracies_are_numpy_counts_over_exactly_the_claimed_images"]
    pool = ThreadPoolExecutor(2)
    request.addfinalizer(pool.shutdown)
    return {case: pool.submit(run_probe, *case, cifar) for case in cases}


@pytest.mark.parametrize("framework,devices", CASES)
def test_accuracies_are_numpy_counts_over_exactly_the_claimed_images(framework: str, devices: int, probed) -> None:
    checks = probed[(framework, devices)].result()  # a probe's failed assertion is raised here, in its own case
    global_batch, limit = BATCH_PER_GPU * devices, limit_of(devices)
    assert [c["limit"] for c in checks] == ["none", str(limit)]
    for check, images in zip(checks, (TEST_IMAGES, limit)):
        train_correct, train_images = check["train_ref"]
        val_correct, val_images = check["val_ref"]
        assert train_images == check["steps"] * global_batch and val_images == images
        assert check["train_acc"] == train_correct / train_images, check
        assert check["val_acc"] == val_correct / val_images, check
        assert 0 < check["val_acc"] < 1  # a model that is neither blank nor perfect: a miscount would show
