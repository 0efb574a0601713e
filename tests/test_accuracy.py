"""Accuracy is a fraction of exactly the images it claims: the loop's train_acc and val_acc against a
plain numpy argmax(logits) == label over the same images, in both frameworks, on 1 to 3 emulated
devices, with batches that do not divide the split (a last batch of fewer images than devices too)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cifar_files import write_cifar10
from conftest import ROOT

TEST_IMAGES = 500


@pytest.fixture(scope="module")
def cifar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("cifar"), train_per_file=100, test=TEST_IMAGES)


@pytest.mark.parametrize("devices", [1, 2, 3])
@pytest.mark.parametrize("framework", ["mxnet", "tensorflow"])
def test_accuracies_are_numpy_counts_over_exactly_the_claimed_images(framework: str, devices: int, cifar: Path) -> None:
    batch_per_gpu = 7
    global_batch = batch_per_gpu * devices
    # 2 images past whole batches: the last validation batch has fewer images than there are devices
    # (on 3), and neither it nor the whole split (500) is a multiple of the batch.
    limit = 2 * global_batch + 2
    assert TEST_IMAGES % global_batch and limit % global_batch
    config = {"framework": framework, "num_gpus": devices, "batch_per_gpu": batch_per_gpu}
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "accuracy_probe.py"), json.dumps(config), str(cifar),
                          "none", str(limit)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    checks = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [c["limit"] for c in checks] == ["none", str(limit)]
    for check, images in zip(checks, (TEST_IMAGES, limit)):
        train_correct, train_images = check["train_ref"]
        val_correct, val_images = check["val_ref"]
        assert train_images == check["steps"] * global_batch and val_images == images
        assert check["train_acc"] == train_correct / train_images, check
        assert check["val_acc"] == val_correct / val_images, check
        assert 0 < check["val_acc"] < 1  # a model that is neither blank nor perfect: a miscount would show
