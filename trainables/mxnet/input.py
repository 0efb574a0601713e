"""MXNet's input pipeline for image folders (data: imagenet): ImageRecordIter over the folder's RecordIO.

MXNet's users train ImageNet from RecordIO files (im2rec's .rec/.idx) through mx.io.ImageRecordIter, which reads,
decodes (OpenCV), crops, flips, normalises and batches in its own C++ threads. So does a trial here: it reads
DATA_DIR/imagenet/recordio/, written once by `python -m sweep data pack imagenet --format recordio`
(trainables/mxnet/pack.py); a folder not packed is refused before any trial, naming that command.

- Training: each epoch a new iterator over this process's part of the records (num_parts / part_index: one
  process per node, so the nodes' parts are disjoint and no image is read twice in an epoch), shuffled by
  (seed, epoch); a random-resized crop (area 8-100%, aspect ratio 3/4-4/3), a random horizontal
  flip and ImageNet's mean and std, the transforms of trainables/images.py, drawn by ImageRecordIter's own
  generator (tests/test_mxnet_input.py compares their statistics); `loader_workers` threads per GPU.
- Validation: the shorter side resized to image_size / 0.875, the centre image_size crop, in the folder's order.
- The pack leaves out what no decoder reads (PACKED.json lists it). images_skipped counts those of the images an
  epoch reads as the other frameworks count them: the skipped files among the epoch's shard of the folder
  (images.shard) that its steps reach, and among the first val_examples validation images.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import numpy as np

import trainables.mxnet  # noqa: F401  (aliases np.bool before mxnet is imported)
import mxnet as mx  # noqa: E402

from trainables import images
from trainables.config import TrialConfig

FORMAT = "recordio"
# OpenCV's interpolation of the resizes (ImageRecordIter's inter_method). Training: bilinear, ImageRecordIter's
# default and what MXNet's ImageNet recipe runs; area averaging cost 23% more CPU per image (0.81x the images per
# CPU-second of a plain ImageRecordIter, benchmarks/mxnet_record_loader.py). Validation: 9, area averaging where it
# shrinks (as Pillow's antialiased resize in the other pipelines does; bicubic where it enlarges), 1.8 of 255 levels
# from images.val_pixels on average where bilinear was 5 to 6 (tests/test_mxnet_input.py).
TRAIN_INTER = 1
VAL_INTER = 9
Put = Callable[[mx.nd.NDArray, mx.nd.NDArray], Any]


def epoch_seed(seed: int, epoch: int) -> int:
    """ImageRecordIter's seed (its shuffle and its augmentations) for one epoch of a trial: one per (seed, epoch)."""
    return int(np.random.default_rng([seed, epoch]).integers(2 ** 31 - 1))


def _made(x: Any) -> Any:
    """The batch `x` once its pixels are made: MXNet's operations run asynchronously, so a timer waits for them."""
    x.wait_to_read()
    return x


class Pipeline:
    """One process's batches of a packed image folder: an epoch's training batches, and the validation images."""

    data_format = FORMAT

    def __init__(self, cfg: TrialConfig, folder: images.ImageFolder, image_size: int, rank: int, world: int,
                 batch: int, steps: int, on_gpu: bool) -> None:
        manifest = images.require_packed(folder, FORMAT)
        self.records = folder.root / FORMAT
        self.cfg, self.folder, self.image_size = cfg, folder, image_size
        self.rank, self.world, self.batch, self.steps = rank, world, batch, steps
        # One process drives its node's GPUs: loader_workers threads for each.
        self.threads = max(1, cfg.input_workers * cfg.gpus_per_node)
        self.skipped_train = self._indices(folder.train, manifest["splits"]["train"]["skipped"])
        self.skipped_val = self._indices(folder.val, manifest["splits"]["val"]["skipped"])
        self.skipped = 0  # images skipped since the last take_skipped()

    def _indices(self, split: images.Split, relative: list[str]) -> np.ndarray:
        """The split's indices of the files the pack left out."""
        left_out = {str(self.folder.root / path) for path in relative}
        return np.array([i for i, path in enumerate(split.paths) if path in left_out], dtype=np.int64)

    def _stem(self, name: str) -> str:
        return str(self.records / name)

    def _train_iter(self, epoch: int) -> mx.io.ImageRecordIter:
        mean, std = images.MEAN * 255, images.STD * 255
        seed = epoch_seed(self.cfg.seed, epoch)
        return mx.io.ImageRecordIter(
            path_imgrec=self._stem("train.rec"), path_imgidx=self._stem("train.idx"),
            data_shape=(3, self.image_size, self.image_size), batch_size=self.batch,
            num_parts=self.world, part_index=self.rank, shuffle=True, seed=seed, seed_aug=seed,
            random_resized_crop=True, min_random_area=images.CROP_SCALE[0], max_random_area=images.CROP_SCALE[1],
            min_aspect_ratio=images.CROP_RATIO[0], max_aspect_ratio=images.CROP_RATIO[1], rand_mirror=True,
            inter_method=TRAIN_INTER, mean_r=mean[0], mean_g=mean[1], mean_b=mean[2],
            std_r=std[0], std_g=std[1], std_b=std[2],
            preprocess_threads=self.threads, round_batch=True, verbose=False)

    def _val_iter(self) -> mx.io.ImageRecordIter:
        mean, std = images.MEAN * 255, images.STD * 255
        return mx.io.ImageRecordIter(
            path_imgrec=self._stem("val.rec"), path_imgidx=self._stem("val.idx"),
            data_shape=(3, self.image_size, self.image_size), batch_size=self.batch,
            resize=images.val_resize_side(self.image_size), inter_method=VAL_INTER,
            mean_r=mean[0], mean_g=mean[1], mean_b=mean[2], std_r=std[0], std_g=std[1], std_b=std[2],
            preprocess_threads=self.threads, round_batch=False, verbose=False)

    def _host_batches(self, epoch: int, steps: int) -> Iterator[tuple[mx.nd.NDArray, mx.nd.NDArray]]:
        """The epoch's first `steps` batches as ImageRecordIter gives them (in host memory); where this process's part
        holds fewer, the iterator starts over, as the other pipelines wrap around their shard."""
        records = self._train_iter(epoch)
        produced = 0
        while produced < steps:
            for batch in records:
                yield batch.data[0], batch.label[0]
                produced += 1
                if produced == steps:
                    return
            records.reset()

    def _count_train_skipped(self, epoch: int) -> None:
        """The files the pack left out among those the epoch's steps read, as images.shard deals them."""
        if len(self.skipped_train) == 0:
            return
        shard = images.shard(len(self.folder.train.paths), self.cfg.seed, epoch, self.rank, self.world)
        if len(shard) == 0:  # fewer files than ranks: every rank trains on all of them
            shard = np.arange(len(self.folder.train.paths))
        read = shard[np.arange(self.steps * self.batch) % len(shard)]
        self.skipped += int(np.isin(read, self.skipped_train).sum())

    def train(self, epoch: int, put: Put) -> Iterator[Any]:
        """The epoch's `steps` batches of this process's part, through `put` (to the devices)."""
        self._count_train_skipped(epoch)
        return (put(x, y) for x, y in self._host_batches(epoch, self.steps))

    def val(self, limit: int, put: Put) -> Iterator[Any]:
        """The first `limit` validation images in order, each packed one scored once; those the pack left out
        counted. The records hold the folder's images in order, less those left out."""
        left_out = int((self.skipped_val < limit).sum())
        self.skipped += left_out
        return self._val_batches(limit - left_out, put)

    def _val_batches(self, count: int, put: Put) -> Iterator[Any]:
        taken = 0
        for batch in self._val_iter():
            x, y = batch.data[0], batch.label[0]
            keep = min(x.shape[0] - batch.pad, count - taken)
            if keep <= 0:
                return
            yield put(x[:keep], y[:keep])
            taken += keep

    def take_skipped(self) -> int:
        skipped, self.skipped = self.skipped, 0
        return skipped

    def measure(self, batches: int) -> float:
        """Images/s of the pipeline alone, steady (images.steady_rate: its first batch, which carries the iterator's
        start, is not timed), over `batches` training batches of epoch 0: its threads reading, decoding, cropping,
        normalising and batching, no model and no copy to the devices."""
        return images.steady_rate((_made(x).shape[0] for x, _ in self._host_batches(0, 1 + batches)), 1, time.perf_counter)

