"""PyTorch's input pipeline for image folders (data: imagenet): a Dataset over this rank's shard and a DataLoader.

The files, shards and transforms are trainables/images.py's, the same for every framework; here they run as
PyTorch runs them: a torch.utils.data.Dataset whose items are decoded and augmented by `loader_workers` worker
processes (default: the trial's CPUs per GPU), batched, prefetched, and pinned on GPUs so that the copy to the
device does not wait.

`decode: cpu` (the default): the workers decode with Pillow and crop, flip and normalise on the CPU. A training
image that cannot be decoded is replaced by the next one of the shard that can (a batch keeps its shape) and
counted: the rows' images_skipped. A validation image that cannot be decoded is counted and not scored, so that
every decodable image is scored once.

`decode: gpu`: the workers only read the files; each batch's JPEGs are decoded together by nvJPEG
(torchvision.io.decode_jpeg on the trial's GPU; on a CPU device where GPUs are emulated) and cropped, flipped
and normalised there with the same boxes and flips (images.random_resized_crop_box, images.flips). A file nvJPEG
cannot decode (a PNG or a CMYK JPEG under a .JPEG name) is decoded by Pillow on the host instead; one that
neither can is counted and left out of its batch.
"""
from __future__ import annotations

import time
from functools import partial
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from trainables import data, images
from trainables.config import TrialConfig

PREFETCH_BATCHES = 2  # per worker: torch's default, a batch being decoded while the step runs
Put = Callable[[torch.Tensor, torch.Tensor], Any]


class _TrainImages(Dataset):
    """`length` items over the files `indices` picks (wrapping around where the shard is shorter): (image CHW
    float32, label, images skipped to get it), an undecodable file replaced by the next decodable one."""

    def __init__(self, split: images.Split, indices: np.ndarray, length: int, image_size: int, seed: int,
                 epoch: int) -> None:
        self.split, self.indices, self.length = split, indices, length
        self.image_size, self.seed, self.epoch = image_size, seed, epoch

    def __len__(self) -> int:
        return self.length

    def _load(self, index: int) -> np.ndarray | None:
        # The crop and flip drawn from (seed, epoch, file), whichever worker loads it.
        return images.train_pixels(self.split.paths[index], self.image_size, images.sample_rng(self.seed, self.epoch, index))

    def __getitem__(self, position: int) -> tuple[torch.Tensor, int, int]:
        pixels, index, skipped = images.first_decodable(self.indices, position % len(self.indices), self._load)
        return torch.from_numpy(images.normalize(pixels, "NCHW")), int(self.split.labels[index]), skipped


class _ValImages(Dataset):
    """The first `length` validation images in order: (image CHW float32, label, 0), or (None, label, 1) for one that
    cannot be decoded, which _collate leaves out of its batch."""

    def __init__(self, split: images.Split, length: int, image_size: int) -> None:
        self.split, self.length, self.image_size = split, length, image_size

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor | None, int, int]:
        pixels = images.val_pixels(self.split.paths[index], self.image_size)
        label = int(self.split.labels[index])
        return (None, label, 1) if pixels is None else (torch.from_numpy(images.normalize(pixels, "NCHW")), label, 0)


class _Files(Dataset):
    """decode: gpu: the training shard's files as bytes (uint8 tensors), with their index into the split; the
    decoding and the transforms run on the device, a batch at a time (_GpuDecode)."""

    def __init__(self, split: images.Split, indices: np.ndarray, length: int) -> None:
        self.split, self.indices, self.length = split, indices, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, position: int) -> tuple[torch.Tensor, int]:
        index = int(self.indices[position % len(self.indices)])
        with open(self.split.paths[index], "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8), index


def _collate(items: list[tuple[torch.Tensor | None, int, int]]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(images, labels, images skipped) of a batch: the items without an image are counted, not stacked. Stacked by
    torch's default_collate, which in a worker process stacks straight into shared memory: the batch then reaches
    the training process without a copy (a plain torch.stack costs one more copy of every batch)."""
    kept = [(x, y) for x, y, _ in items if x is not None]
    skipped = sum(s for _, _, s in items)
    if not kept:
        return torch.empty(0), torch.empty(0, dtype=torch.int64), skipped
    x, y = default_collate(kept)
    return x, y, skipped


def _collate_files(items: list[tuple[torch.Tensor, int]]) -> tuple[list[torch.Tensor], list[int]]:
    return [data for data, _ in items], [index for _, index in items]


def train_crop(image: torch.Tensor, image_size: int, rng: np.random.Generator) -> torch.Tensor:
    """decode: gpu's training transform of one decoded image (CHW uint8, on any device) -> CHW float32 0..255: the
    CPU path's box and flip (images.random_resized_crop_box, images.flips, the same draws of `rng`), resized with
    bilinear antialiasing, which is what Pillow's BILINEAR resize computes on a downscale."""
    left, top, w, h = images.random_resized_crop_box(image.shape[2], image.shape[1], rng)
    box = image[None, :, top:top + h, left:left + w].float()
    out = torch.nn.functional.interpolate(box, size=(image_size, image_size), mode="bilinear", align_corners=False,
                                          antialias=True)[0]
    return out.flip(2) if images.flips(rng) else out


class _GpuDecode:
    """decode: gpu: a batch of JPEG bytes -> normalised images on `device`, batched through nvJPEG, each cropped and
    flipped as images.random_resized_crop_box and images.flips draw it for (seed, epoch, file)."""

    def __init__(self, split: images.Split, image_size: int, seed: int, device: torch.device,
                 decoder: Callable[[Any], Any] | None = None) -> None:
        if decoder is None:  # torchvision only here: the framework check refuses decode: gpu where it cannot import
            from torchvision.io import ImageReadMode, decode_jpeg

            decoder = partial(decode_jpeg, mode=ImageReadMode.RGB, device=device)
        # JPEG bytes (a uint8 tensor, or a list of them: one batched call) -> CHW uint8 RGB on the device; a
        # RuntimeError where it cannot decode one.
        self.decoder = decoder
        self.split, self.image_size, self.seed, self.device = split, image_size, seed, device
        self.mean = torch.tensor(images.MEAN, device=device).view(3, 1, 1) * 255
        self.std = torch.tensor(images.STD, device=device).view(3, 1, 1) * 255

    def _decoded(self, data: list[torch.Tensor], indices: list[int]) -> list[torch.Tensor | None]:
        """Each file as a CHW uint8 RGB tensor on the device; Pillow on the host for what nvJPEG refuses; None where
        neither decodes it."""
        try:  # one batched call: nvJPEG decodes the batch's images together
            return list(self.decoder(data))
        except RuntimeError:  # one file of the batch it cannot decode: each on its own, Pillow where it fails
            out: list[torch.Tensor | None] = []
            for blob, index in zip(data, indices):
                try:
                    out.append(self.decoder(blob))
                except RuntimeError:
                    image = images.decode(self.split.paths[index])
                    out.append(None if image is None else
                               torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1).to(self.device))
            return out

    def __call__(self, data: list[torch.Tensor], indices: list[int], epoch: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(images NCHW float32, labels, images that could not be decoded) on the device."""
        decoded = self._decoded(data, indices)
        kept = [(image, index) for image, index in zip(decoded, indices) if image is not None]
        crops = [train_crop(image, self.image_size, images.sample_rng(self.seed, epoch, index)) for image, index in kept]
        x = (torch.stack(crops) - self.mean) / self.std if crops else torch.empty(0, device=self.device)
        y = torch.tensor([int(self.split.labels[index]) for _, index in kept], dtype=torch.int64, device=self.device)
        return x, y, len(decoded) - len(kept)


class Pipeline:
    """One rank's batches of an image folder: an epoch's training batches, and the validation images."""

    data_format = "jpeg"  # what it reads: the folder's image files

    def __init__(self, cfg: TrialConfig, folder: images.ImageFolder, image_size: int, rank: int, world: int,
                 batch: int, steps: int, on_gpu: bool) -> None:
        self.cfg, self.folder, self.image_size = cfg, folder, image_size
        self.rank, self.world, self.batch, self.steps, self.on_gpu = rank, world, batch, steps, on_gpu
        self.workers = cfg.input_workers
        self.skipped = 0  # images skipped since the last take_skipped()
        self.gpu_decode = None
        if cfg.decode == "gpu":  # on the trial's GPU; on the CPU device that stands in for it where GPUs are emulated
            device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
            self.gpu_decode = _GpuDecode(folder.train, image_size, cfg.seed, device)

    def _loader(self, dataset: Dataset, batch: int, collate: Callable[[list[Any]], Any] = _collate) -> DataLoader:
        return DataLoader(dataset, batch_size=batch, shuffle=False, drop_last=False, num_workers=self.workers,
                          collate_fn=collate, pin_memory=self.on_gpu and self.gpu_decode is None,
                          prefetch_factor=PREFETCH_BATCHES if self.workers else None)

    def _batches(self, loader: DataLoader, put: Put) -> Iterator[Any]:
        for x, y, skipped in loader:
            self.skipped += skipped
            if len(y):  # a batch whose every image was undecodable (validation's, decode: gpu's) has nothing to give
                yield put(x, y)

    def _shard(self, epoch: int) -> np.ndarray:
        indices = images.shard(len(self.folder.train.paths), self.cfg.seed, epoch, self.rank, self.world)
        if len(indices) == 0:  # fewer files than ranks: every rank trains on all of them
            indices = np.random.default_rng([self.cfg.seed, epoch]).permutation(len(self.folder.train.paths))
        return indices

    def _host_batches(self, epoch: int, steps: int) -> Iterator[tuple[Any, Any, int]]:
        """The epoch's first `steps` batches as the pipeline makes them, before `put` (on the host; on the device where
        decode: gpu decoded them there)."""
        split, indices = self.folder.train, self._shard(epoch)
        if self.gpu_decode is None:
            return iter(self._loader(_TrainImages(split, indices, steps * self.batch, self.image_size, self.cfg.seed,
                                                  epoch), self.batch))
        files = self._loader(_Files(split, indices, steps * self.batch), self.batch, _collate_files)
        return (self.gpu_decode(data, picked, epoch) for data, picked in files)

    def train(self, epoch: int, put: Put) -> Iterator[Any]:
        """The epoch's `steps` batches of this rank's shard, through `put` (to the device)."""
        batches = self._batches(self._host_batches(epoch, self.steps), put)
        if self.gpu_decode is None:  # decoded in the loader's worker processes, which run ahead on their own
            return batches
        # decode: gpu decodes in this process. In the step's thread nvJPEG's host work for the next batch (parsing,
        # Huffman decoding) waited for the step, and the steps waited 44% of their time on the H100 (2026-11-27). On a
        # thread of its own, a batch ahead, it runs while the step's kernels do; its kernels go to the same default
        # stream, so the step reads a batch only after it is made.
        return data.prefetch(batches)

    def val(self, limit: int, put: Put) -> Iterator[Any]:
        """The first `limit` validation images in order, each decodable one scored once, the others counted."""
        return self._batches(self._loader(_ValImages(self.folder.val, limit, self.image_size), self.batch), put)

    def take_skipped(self) -> int:
        skipped, self.skipped = self.skipped, 0
        return skipped

    def measure(self, batches: int) -> float:
        """Images/s of the pipeline alone, steady (images.steady_rate): its workers' first batches (their start) and
        then `batches`, at least two per worker so that every worker's pace counts, of epoch 0's training batches:
        the files read, decoded, cropped and batched, no model and no copy to the device (decode: gpu decodes on
        the device: that is its pipeline). The images it skips are not counted in any epoch's row."""
        startup, timed = max(1, self.workers), max(batches, 2 * self.workers)

        def clock() -> float:
            if self.gpu_decode is not None and self.on_gpu:
                torch.cuda.synchronize()
            return time.perf_counter()

        return images.steady_rate((len(y) for _, y, _ in self._host_batches(0, startup + timed)), startup, clock)
