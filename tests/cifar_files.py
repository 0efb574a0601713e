"""Small data sets in the real CIFAR-10 on-disk format (python pickles), made by the tests."""
from __future__ import annotations

import pickle
import tarfile
from pathlib import Path

import numpy as np

TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]


def learnable_images(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Images whose class shows in colour and in a stripe pattern, under noise: a model can learn it."""
    labels = rng.integers(0, 10, size=n)
    palette = np.random.default_rng(1234).integers(30, 226, size=(10, 3))
    yy, xx = np.mgrid[0:32, 0:32]
    images = np.empty((n, 32, 32, 3), dtype=np.float32)
    for k in range(10):
        stripes = np.sin((xx * np.cos(k * np.pi / 10) + yy * np.sin(k * np.pi / 10)) * (0.4 + 0.1 * k))
        images[labels == k] = palette[k] + 40 * stripes[..., None]
    images += rng.normal(0, 25, size=images.shape)
    return np.clip(images, 0, 255).astype(np.uint8), labels


def _batch(images: np.ndarray, labels: np.ndarray) -> dict:
    planar = images.transpose(0, 3, 1, 2).reshape(len(images), -1)  # the format stores planar RGB rows
    return {b"batch_label": b"test", b"labels": [int(v) for v in labels], b"data": planar, b"filenames": []}


def write_cifar10(root: Path, train_per_file: int = 200, test: int = 500, seed: int = 0) -> Path:
    """root/cifar-10-batches-py/ with five training files and a test file; returns root."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for name in TRAIN_FILES:
        with open(folder / name, "wb") as f:
            pickle.dump(_batch(*learnable_images(train_per_file, rng)), f, protocol=2)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump(_batch(*learnable_images(test, rng)), f, protocol=2)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [f"class{i}".encode() for i in range(10)]}, f, protocol=2)
    return root


def write_archive(folder_root: Path, archive_root: Path) -> Path:
    """The same files as cifar-10-python.tar.gz under archive_root."""
    archive_root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive_root / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(folder_root / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return archive_root
