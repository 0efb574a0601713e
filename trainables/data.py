"""CIFAR-10 from disk (safely), augmentation and batching: the input pipeline both frameworks share.

The same (seed, epoch) gives the same batches, in the same order and with the same crops and flips,
whichever framework consumes them. Batches are produced on a background thread so that the next one
is ready while the device computes the current one.
"""
from __future__ import annotations

import io
import pickle
import queue
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

FOLDER = "cifar-10-batches-py"
ARCHIVE = "cifar-10-python.tar.gz"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
IMAGE_VALUES = 32 * 32 * 3
CIFAR10_TRAIN_SIZE = 50_000
# Per-channel statistics of the CIFAR-10 training set (RGB, on 0..1 pixels).
MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32)
STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32)


class DataError(Exception):
    """A data file that cannot be used; the message names the file."""


class _PlainDataUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only; any other global is refused, never called."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # how protocol-2 pickles spell bytes
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}: not plain data")


def _unpickle(raw: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        batch = _PlainDataUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except pickle.UnpicklingError as e:
        raise DataError(f"{where}: {e}") from None
    except Exception as e:  # truncated or garbage bytes raise many types
        raise DataError(f"{where}: not a CIFAR-10 pickle ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'unreadable'})") from None
    if not isinstance(batch, dict):
        raise DataError(f"{where}: expected a dict with data and labels, got {type(batch).__name__}")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != IMAGE_VALUES:
        shape = getattr(data, "shape", None)
        raise DataError(f"{where}: data: expected a uint8 array of shape (N, {IMAGE_VALUES}), got {shape}")
    if labels is None or len(labels) != data.shape[0]:
        raise DataError(f"{where}: labels: expected {data.shape[0]} labels, got {None if labels is None else len(labels)}")
    labels = np.asarray(labels)
    if labels.dtype.kind not in "iu" or labels.min() < 0 or labels.max() > 9:
        raise DataError(f"{where}: labels: expected integers 0..9")
    if data.shape[0] == 0:
        raise DataError(f"{where}: no images")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # stored planar RGB; we keep NHWC
    return np.ascontiguousarray(images), labels.astype(np.int32)


def _read_files(data_dir: Path) -> dict[str, tuple[bytes, str]]:
    """The raw bytes of the six batch files, from the folder or else the archive."""
    folder = data_dir / FOLDER
    names = TRAIN_FILES + (TEST_FILE,)
    if folder.is_dir():
        out = {}
        for name in names:
            path = folder / name
            try:
                out[name] = (path.read_bytes(), str(path))
            except OSError as e:
                raise DataError(f"{path}: {e.strerror or 'cannot read'}") from None
        return out
    archive = data_dir / ARCHIVE
    if archive.is_file():
        out = {}
        try:
            with tarfile.open(archive, "r:gz") as tar:
                for name in names:
                    member = f"{FOLDER}/{name}"
                    try:
                        handle = tar.extractfile(member)
                    except KeyError:
                        raise DataError(f"{archive}: has no member {member}") from None
                    if handle is None:
                        raise DataError(f"{archive}: {member} is not a regular file")
                    out[name] = (handle.read(), f"{archive}:{member}")
        except (tarfile.TarError, EOFError, OSError, ValueError) as e:
            raise DataError(f"{archive}: not a readable .tar.gz ({type(e).__name__}: {e})") from None
        return out
    raise DataError(f"{data_dir}: no {FOLDER}/ folder and no {ARCHIVE}")


def has_cifar10(data_dir: str | None) -> bool:
    if not data_dir:
        return False
    root = Path(data_dir)
    return (root / FOLDER).is_dir() or (root / ARCHIVE).is_file()


@dataclass(frozen=True)
class Cifar10:
    train_x: np.ndarray  # uint8 NHWC
    train_y: np.ndarray  # int32
    test_x: np.ndarray
    test_y: np.ndarray


def load_cifar10(data_dir: str) -> Cifar10:
    """Load and check every file; a DataError names the first bad one."""
    files = _read_files(Path(data_dir))
    parts = [_unpickle(*files[name]) for name in TRAIN_FILES]
    test_x, test_y = _unpickle(*files[TEST_FILE])
    return Cifar10(
        train_x=np.concatenate([p[0] for p in parts]),
        train_y=np.concatenate([p[1] for p in parts]),
        test_x=test_x,
        test_y=test_y,
    )


def normalize(images: np.ndarray, layout: str, mean: np.ndarray = MEAN, std: np.ndarray = STD) -> np.ndarray:
    """uint8 NHWC -> float32 in `layout` (NHWC or NCHW), per channel by the set's mean and std (CIFAR-10's)."""
    # (x * (1/255) - mean) / std, computed in place in the output's layout: for NCHW, numpy's loops then run along
    # rows of pixels rather than along the 3 channels of one pixel, and no temporary array is made; this halves an
    # input worker's time per 224-px image (benchmarks/imagenet_loader.py). Bit for bit the same values.
    if layout == "NCHW":
        out = np.ascontiguousarray(images.transpose(0, 3, 1, 2), dtype=np.float32)
        mean, std = mean[:, None, None], std[:, None, None]
    else:
        out = images.astype(np.float32)
    out *= np.float32(1.0 / 255.0)
    out -= mean
    out /= std
    return out


def augment(images: np.ndarray, rng: np.random.Generator, pad: int = 4) -> np.ndarray:
    """Random crop (zero padding of `pad`) and horizontal flip, as in the CIFAR ResNet papers."""
    n, h, w, _ = images.shape
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    dy = rng.integers(0, 2 * pad + 1, size=n)
    dx = rng.integers(0, 2 * pad + 1, size=n)
    rows = dy[:, None] + np.arange(h)[None, :]  # (n, h)
    cols = dx[:, None] + np.arange(w)[None, :]  # (n, w)
    out = padded[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]
    flip = rng.random(n) < 0.5
    out[flip] = out[flip, :, ::-1]
    return out


def steps_per_epoch(train_size: int, global_batch: int, cap: int | None) -> int:
    full = max(1, train_size // global_batch)  # the last partial batch is dropped, as the anchors do
    return min(full, cap) if cap else full


def train_batches(x: np.ndarray, y: np.ndarray, global_batch: int, steps: int, seed: int, epoch: int,
                  layout: str, rank: int = 0, workers: int = 1) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Shuffled, augmented, normalised batches of one epoch; deterministic in (seed, epoch).

    With several workers, each takes its slice (rank of `workers`) of every global batch: together
    they see the same images in the same order as one worker would.
    """
    rng = np.random.default_rng([seed, epoch, rank])
    order = np.random.default_rng([seed, epoch]).permutation(len(x))
    local = global_batch // workers
    for step in range(steps):
        start = step * global_batch + rank * local
        idx = np.take(order, np.arange(start, start + local), mode="wrap")
        yield normalize(augment(x[idx], rng), layout), y[idx]


def eval_batches(x: np.ndarray, y: np.ndarray, batch: int, limit: int | None,
                 layout: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The test split (or its first `limit` images) in order, the last batch possibly short."""
    n = min(len(x), limit) if limit else len(x)
    for start in range(0, n, batch):
        end = min(start + batch, n)  # the last batch stops at the limit, not at the split's end
        yield normalize(x[start:end], layout), y[start:end]


def prefetch(batches: Iterator[Any], depth: int = 2) -> Iterator[Any]:
    """Run an iterator on a background thread, `depth` items ahead of the consumer."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()

    def produce() -> None:
        try:
            for item in batches:
                q.put(item)
        except BaseException as e:  # hand the error to the consumer instead of dying silently
            q.put(e)
        q.put(done)

    threading.Thread(target=produce, daemon=True).start()
    while True:
        item = q.get()
        if item is done:
            return
        if isinstance(item, BaseException):
            raise item
        yield item
