"""PyTorch's input pipeline for image folders (data: imagenet): a Dataset over this rank's shard and a DataLoader.

The files, shards and transforms are trainables/images.py's, the same for every framework; here they run as
PyTorch runs them: a torch.utils.data.Dataset whose items are decoded (Pillow) and augmented on the CPU by
`loader_workers` worker processes (default: the trial's CPUs per GPU), batched, prefetched, and pinned on
GPUs so that the copy to the device does not wait. An image that cannot be decoded is replaced by the next
one of the shard that can (a batch keeps its shape) and counted: the rows' images_skipped.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from trainables import images
from trainables.config import TrialConfig

PREFETCH_BATCHES = 2  # per worker: torch's default, a batch being decoded while the step runs


class _Images(Dataset):
    """`length` items over the files `indices` picks (wrapping around where the shard is shorter), each decoded
    by `load(index)`: (image CHW float32, label, images skipped to get it)."""

    def __init__(self, split: images.Split, indices: np.ndarray, length: int, load: Callable[[int], Any]) -> None:
        self.split, self.indices, self.length, self.load = split, indices, length, load

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, position: int) -> tuple[torch.Tensor, int, int]:
        pixels, index, skipped = images.first_decodable(self.indices, position % len(self.indices), self.load)
        return torch.from_numpy(images.normalize(pixels, "NCHW")), int(self.split.labels[index]), skipped


class _TrainLoad:
    """One training image's load: its crop and flip drawn from (seed, epoch, file), whichever worker loads it.
    A class, not a closure, so that a worker started by spawn could receive it too."""

    def __init__(self, split: images.Split, image_size: int, seed: int, epoch: int) -> None:
        self.split, self.image_size, self.seed, self.epoch = split, image_size, seed, epoch

    def __call__(self, index: int) -> np.ndarray | None:
        rng = images.sample_rng(self.seed, self.epoch, index)
        return images.train_pixels(self.split.paths[index], self.image_size, rng)


class _ValLoad:
    def __init__(self, split: images.Split, image_size: int) -> None:
        self.split, self.image_size = split, image_size

    def __call__(self, index: int) -> np.ndarray | None:
        return images.val_pixels(self.split.paths[index], self.image_size)


class Pipeline:
    """One rank's batches of an image folder: an epoch's training batches, and the validation images."""

    def __init__(self, cfg: TrialConfig, folder: images.ImageFolder, image_size: int, rank: int, world: int,
                 batch: int, steps: int, on_gpu: bool) -> None:
        self.cfg, self.folder, self.image_size = cfg, folder, image_size
        self.rank, self.world, self.batch, self.steps, self.on_gpu = rank, world, batch, steps, on_gpu
        self.workers = cfg.input_workers
        self.skipped = 0  # images skipped since the last take_skipped()

    def _loader(self, dataset: Dataset, batch: int) -> DataLoader:
        return DataLoader(dataset, batch_size=batch, shuffle=False, drop_last=False, num_workers=self.workers,
                          pin_memory=self.on_gpu, prefetch_factor=PREFETCH_BATCHES if self.workers else None)

    def _batches(self, loader: DataLoader, put: Callable[[torch.Tensor, torch.Tensor], Any]) -> Iterator[Any]:
        for x, y, skipped in loader:
            self.skipped += int(skipped.sum())
            yield put(x, y)

    def train(self, epoch: int, put: Callable[[torch.Tensor, torch.Tensor], Any]) -> Iterator[Any]:
        """The epoch's `steps` batches of this rank's shard, through `put` (to the device)."""
        split = self.folder.train
        indices = images.shard(len(split.paths), self.cfg.seed, epoch, self.rank, self.world)
        if len(indices) == 0:  # fewer files than ranks: every rank trains on all of them
            indices = np.random.default_rng([self.cfg.seed, epoch]).permutation(len(split.paths))
        dataset = _Images(split, indices, self.steps * self.batch, _TrainLoad(split, self.image_size, self.cfg.seed, epoch))
        return self._batches(self._loader(dataset, self.batch), put)

    def val(self, limit: int, put: Callable[[torch.Tensor, torch.Tensor], Any]) -> Iterator[Any]:
        """The first `limit` validation images in order, each once (an undecodable one replaced and counted)."""
        split = self.folder.val
        dataset = _Images(split, np.arange(len(split.paths)), limit, _ValLoad(split, self.image_size))
        return self._batches(self._loader(dataset, self.batch), put)

    def take_skipped(self) -> int:
        skipped, self.skipped = self.skipped, 0
        return skipped
