"""TensorFlow's input pipeline for image folders (data: imagenet): tf.data, as tf_cnn_benchmarks reads ImageNet.

The files, shards and transforms' arithmetic are trainables/images.py's, the same for every framework; here they
run as tf.data runs them: parallel reads and maps (AUTOTUNE) on a private thread pool of `loader_workers` threads
per GPU of the node (default: the trial's CPUs per GPU), a training crop decoded by tf.io.decode_and_crop_jpeg (only the crop's
blocks of the JPEG are decoded), bilinear resize, flip and normalisation in one traced function per image (traced
once per process), batching, and prefetch. The crops' random numbers are drawn on the host, 64 images a call.

What is read: TFRecord shards (tf_cnn_benchmarks' ImageNet format, `python -m sweep data pack imagenet --format
tfrecord`, trainables/tensorflow/pack.py) where DATA_DIR/imagenet/tfrecord/PACKED.json exists, else the JPEG
files. Either way each rank decodes its own shard of the epoch (images.shard: disjoint across ranks), each image
cropped and flipped by the draws of images.sample_rng(seed, epoch, index), so a box is the one PyTorch's pipeline
cuts from the same image. From files the shard is read in images.shard's order; TFRecord files are read in
order (they have no random access) and this rank's records kept, then shuffled per epoch by the seed in a
buffer, as tf_cnn_benchmarks shuffles them. A record's index is its position in its split's records.

Odd files: a PNG under a .JPEG name is decoded by tf.io.decode_image, CMYK and grayscale JPEGs by decode_jpeg
with channels=3. A file no decoder reads is dropped from the stream (Dataset.ignore_errors) and counted: each
element carries its position in the stream, so the positions missing between the images that came out are the
skipped ones (images_skipped). Training then takes the shard's next images, so a batch keeps its shape.
"""
from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import tensorflow as tf

from trainables import images
from trainables.config import TrialConfig

AUTOTUNE = tf.data.AUTOTUNE
SHUFFLE_BUFFER = 10_000  # TFRecord: records shuffled per epoch in a buffer of this many, tf_cnn_benchmarks' size
READ_BUFFER = 8 << 20  # bytes each TFRecord file is read ahead by
DRAWS = 2 * images.CROP_TRIES + 2  # images.crop_draws' count
DRAW_BATCH = 64  # indices whose crops are drawn in one call to Python
TFRECORD = "tfrecord"
# tf_cnn_benchmarks' feature names (its preprocessing.parse_example_proto); labels are 1-based there (0: background).
FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}
Put = Callable[[tf.Tensor, tf.Tensor], Any]


def augment_draws(seed: int, epoch: int, index: int) -> tuple[np.ndarray, bool]:
    """The crop's draws and the flip of image `index` in `epoch`: images.sample_rng's, as PyTorch's pipeline draws them."""
    rng = images.sample_rng(seed, epoch, index)
    draws = images.crop_draws(rng)
    return draws, images.flips(rng)


def crop_box(width: tf.Tensor, height: tf.Tensor, draws: tf.Tensor) -> tf.Tensor:
    """images.crop_box in TF ops (float64 as Python's floats): [top, left, crop height, crop width] as int32, the
    order decode_and_crop_jpeg's crop_window takes."""
    w_img, h_img = tf.cast(width, tf.float64), tf.cast(height, tf.float64)
    tries = images.CROP_TRIES
    target = w_img * h_img * draws[:tries]
    ratio = tf.exp(draws[tries:2 * tries])
    w = tf.round(tf.sqrt(target * ratio))  # round half to even, as Python's round
    h = tf.round(tf.sqrt(target / ratio))
    fits = (w > 0) & (w <= w_img) & (h > 0) & (h <= h_img)
    first = tf.argmax(tf.cast(fits, tf.int32))  # the first try that fits
    in_ratio = w_img / h_img
    lo, hi = images.CROP_RATIO
    fallback_w = tf.where(in_ratio > hi, tf.round(h_img * hi), w_img)
    fallback_h = tf.where(in_ratio < lo, tf.round(w_img / lo), h_img)
    found = tf.reduce_any(fits)
    cw = tf.where(found, w[first], fallback_w)
    ch = tf.where(found, h[first], fallback_h)
    left = tf.where(found, tf.floor(draws[2 * tries] * (w_img - cw + 1)), tf.floor((w_img - cw) / 2))
    top = tf.where(found, tf.floor(draws[2 * tries + 1] * (h_img - ch + 1)), tf.floor((h_img - ch) / 2))
    return tf.cast(tf.stack([top, left, ch, cw]), tf.int32)


def _resize(image: tf.Tensor, height: Any, width: Any) -> tf.Tensor:
    """Bilinear with antialiasing: what Pillow's BILINEAR resize (PyTorch's pipeline) computes on a downscale."""
    return tf.image.resize(image, tf.stack([height, width]), method="bilinear", antialias=True)


def train_image(encoded: tf.Tensor, draws: tf.Tensor, flip: tf.Tensor, image_size: int) -> tf.Tensor:
    """One training image, float32 HWC 0..255: the random-resized crop of `draws` to image_size, flipped if `flip`.
    A JPEG decodes only its crop (decode_and_crop_jpeg); another format (a PNG under a .JPEG name) whole."""
    def jpeg() -> tf.Tensor:
        shape = tf.io.extract_jpeg_shape(encoded)
        window = crop_box(shape[1], shape[0], draws)
        return tf.io.decode_and_crop_jpeg(encoded, window, channels=3)

    def other() -> tf.Tensor:
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        shape = tf.shape(image)
        top, left, h, w = tf.unstack(crop_box(shape[1], shape[0], draws))
        return image[top:top + h, left:left + w]

    crop = tf.cond(tf.io.is_jpeg(encoded), jpeg, other)
    out = _resize(crop, image_size, image_size)
    out = tf.cond(flip, lambda: tf.reverse(out, axis=[1]), lambda: out)
    out.set_shape((image_size, image_size, 3))
    return out


def val_image(encoded: tf.Tensor, image_size: int) -> tf.Tensor:
    """One validation image, float32 HWC 0..255: shorter side to image_size / 0.875, centre crop image_size
    (images.shorter_side_to and images.center_crop_box in TF ops)."""
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    shape = tf.cast(tf.shape(image), tf.float64)
    height, width = shape[0], shape[1]
    side = tf.constant(float(images.val_resize_side(image_size)), tf.float64)
    new_w = tf.where(width <= height, side, tf.floor(side * width / height))
    new_h = tf.where(width <= height, tf.floor(side * height / width), side)
    resized = _resize(image, tf.cast(new_h, tf.int32), tf.cast(new_w, tf.int32))
    top = tf.cast(tf.round((new_h - image_size) / 2.0), tf.int32)
    left = tf.cast(tf.round((new_w - image_size) / 2.0), tf.int32)
    out = resized[top:top + image_size, left:left + image_size]
    out.set_shape((image_size, image_size, 3))
    return out


def draws_of(seed: int, epoch: int, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """augment_draws of each of `indices`: (crop draws (n, DRAWS) float64, flips (n,) bool)."""
    drawn = [augment_draws(seed, epoch, int(index)) for index in indices]
    return (np.array([d for d, _ in drawn], dtype=np.float64).reshape(len(drawn), DRAWS),
            np.array([f for _, f in drawn], dtype=bool))


SCALAR = {dtype: tf.TensorSpec([], dtype) for dtype in (tf.string, tf.int64)}


@functools.lru_cache(maxsize=None)
def train_function(image_size: int) -> Any:
    """(encoded bytes, crop draws, flip) -> the normalised training image (train_image). Traced once per size and
    process: each epoch's dataset reuses the graph rather than tracing its ops again (tenths of a CPU-second)."""
    spec = [SCALAR[tf.string], tf.TensorSpec([DRAWS], tf.float64), tf.TensorSpec([], tf.bool)]
    return tf.function(lambda encoded, crop, flip: normalize(train_image(encoded, crop, flip, image_size)),
                       input_signature=spec)


@functools.lru_cache(maxsize=None)
def val_function(image_size: int) -> Any:
    """encoded bytes -> the validation image (val_image), traced once per size and process (see train_function)."""
    return tf.function(lambda encoded: normalize(val_image(encoded, image_size)), input_signature=[SCALAR[tf.string]])


SCALE = (1.0 / (255.0 * images.STD)).astype(np.float32)  # (x / 255 - mean) / std as one multiply and one add
OFFSET = (-images.MEAN / images.STD).astype(np.float32)


def normalize(image: tf.Tensor) -> tf.Tensor:
    """float32 0..255 HWC by ImageNet's mean and std (images.normalize's values, to float32 rounding), on each image
    in the parallel map: two passes over the pixels on any of the pool's threads, not three on one batch's."""
    return image * SCALE + OFFSET


class Pipeline:
    """One rank's batches of an image folder, through tf.data: an epoch's training batches, and the validation images."""

    def __init__(self, cfg: TrialConfig, folder: images.ImageFolder, image_size: int, rank: int, world: int,
                 batch: int, steps: int, on_gpu: bool) -> None:
        self.cfg, self.folder, self.image_size = cfg, folder, image_size
        self.rank, self.world, self.batch, self.steps, self.on_gpu = rank, world, batch, steps, on_gpu
        # tf.data's pool: loader_workers threads per GPU, for the one process that feeds all of this node's GPUs
        # (0, PyTorch's "in the training process", is one thread).
        self.workers = max(1, cfg.input_workers * cfg.gpus_per_node)
        self.skipped = 0  # images skipped since the last take_skipped()
        self.records = None  # TFRecord: {split: (files, records)}
        packed = folder.root / TFRECORD / images.PACKED
        if packed.is_file():
            manifest = images.require_packed(folder, TFRECORD)
            self.records = {split: (_record_files(folder.root / TFRECORD, split), manifest["splits"][split]["records"])
                            for split in images.SPLITS}
        self.data_format = TFRECORD if self.records else "jpeg"

    def _options(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        options = tf.data.Options()
        options.threading.private_threadpool_size = self.workers
        options.deterministic = True  # the images in the shard's order, whichever thread decodes them
        return dataset.with_options(options)

    def _train_files(self, epoch: int, count: int) -> tf.data.Dataset:
        """This rank's shard of the epoch, then again from its start, `count` images in all: (bytes, label, index)."""
        split = self.folder.train
        indices = _shard(len(split.paths), self.cfg.seed, epoch, self.rank, self.world)
        picked = indices[np.arange(count) % len(indices)]
        paths = np.array(split.paths, dtype=object)[picked]
        dataset = tf.data.Dataset.from_tensor_slices((paths.astype(str), split.labels[picked].astype(np.int32), picked))
        return dataset.map(lambda path, label, index: (tf.io.read_file(path), label, index), num_parallel_calls=AUTOTUNE)

    def _raw_records(self, split: str) -> tf.data.Dataset:
        """A split's records in order, unparsed, with their index: (index, serialised Example). The files are read
        one after the other (the records' order is their index), each ahead by READ_BUFFER bytes."""
        files, _ = self.records[split]
        return tf.data.TFRecordDataset(files, buffer_size=READ_BUFFER).enumerate()

    def _records(self, split: str) -> tf.data.Dataset:
        """A split's records in order, parsed in parallel: (bytes, label (0-based), index)."""
        return self._raw_records(split).map(lambda index, record: _parsed(record, index), num_parallel_calls=AUTOTUNE)

    def _train_records(self, epoch: int, count: int) -> tf.data.Dataset:
        """This rank's records of the epoch (images.shard's set), shuffled by (seed, epoch) in a buffer, twice over at
        most, `count` in all; parsed after the shuffle, as tf_cnn_benchmarks does (only this rank's records are parsed)."""
        _, total = self.records["train"]
        mine = np.zeros(total, dtype=bool)
        mine[_shard(total, self.cfg.seed, epoch, self.rank, self.world)] = True
        keep = tf.constant(mine)
        dataset = self._raw_records("train").filter(lambda index, record: keep[index])
        seed = int(np.random.default_rng([self.cfg.seed, epoch]).integers(2**31))
        dataset = dataset.shuffle(SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=False)
        # A second pass, started only where the first runs out (undecodable records replaced): concatenate, not
        # repeat(), which after a shuffle cost 0.4 CPU-seconds before the first record (measured here).
        dataset = dataset.concatenate(dataset).take(count)
        return dataset.map(lambda index, record: _parsed(record, index), num_parallel_calls=AUTOTUNE)

    def _augmented(self, epoch: int, count: int) -> tf.data.Dataset:
        """`count` training images of this rank, augmented, each with its position in the stream (skips counted)."""
        stream = self._train_records(epoch, count) if self.records else self._train_files(epoch, count)
        seed = self.cfg.seed
        # The crops' draws on the host, DRAW_BATCH indices a call (one Python call per image costs more than its draws).
        def draws(indices: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            crop, flip = tf.numpy_function(lambda i: draws_of(seed, epoch, i), [indices], [tf.float64, tf.bool],
                                           stateful=False)
            return tf.ensure_shape(crop, [None, DRAWS]), tf.ensure_shape(flip, [None])

        drawn = stream.batch(DRAW_BATCH).map(lambda encoded, label, index: (encoded, label, *draws(index))).unbatch()
        load = train_function(self.image_size)
        return drawn.enumerate().map(lambda position, e: (load(e[0], e[2], e[3]), e[1], position),
                                     num_parallel_calls=AUTOTUNE).ignore_errors()

    def _batched(self, dataset: tf.data.Dataset, drop_remainder: bool) -> tf.data.Dataset:
        dataset = dataset.batch(self.batch, drop_remainder=drop_remainder, num_parallel_calls=AUTOTUNE)
        return self._options(dataset.prefetch(AUTOTUNE))

    def _train_count(self) -> int:
        return self.records["train"][1] if self.records else len(self.folder.train.paths)

    def train(self, epoch: int, put: Put) -> Iterator[Any]:
        """The epoch's `steps` batches of this rank's shard, through `put` (to the devices)."""
        return (put(x, y) for x, y in self._counted(self._host_batches(epoch, self.steps)))

    def _host_batches(self, epoch: int, steps: int) -> Iterator[tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
        """The epoch's first `steps` batches on the host: (images, labels, the images' positions in the stream). The
        stream holds `steps` batches plus one pass of the shard, for undecodable images to be replaced from."""
        shard = len(_shard(self._train_count(), self.cfg.seed, epoch, self.rank, self.world))
        count = steps * self.batch + shard
        batches = 0
        for x, y, at in self._batched(self._augmented(epoch, count), True).take(steps):
            batches += 1
            yield x, y, at
        if batches < steps:
            raise images.ImageFolderError(f"{self.folder.root}: too few of this shard's images can be decoded for "
                                          f"{steps} batches of {self.batch}")

    def _counted(self, batches: Iterator[tuple[tf.Tensor, tf.Tensor, tf.Tensor]]) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
        """The batches, the images skipped before each added to self.skipped: the stream's positions up to the batch's
        last image that did not come out (each image carries its position in the stream)."""
        made, missing = 0, 0
        for x, y, at in batches:
            made += int(y.shape[0])
            now_missing = int(at[-1]) + 1 - made
            self.skipped += now_missing - missing
            missing = now_missing
            yield x, y

    def val(self, limit: int, put: Put) -> Iterator[Any]:
        """The first `limit` validation images in order, each decodable one scored once, the others counted."""
        if self.records:
            stream = self._records("val").take(limit)
        else:
            split = self.folder.val
            stream = tf.data.Dataset.from_tensor_slices(
                (np.array(split.paths[:limit], dtype=str), split.labels[:limit].astype(np.int32), np.arange(limit)))
            stream = stream.map(lambda path, label, index: (tf.io.read_file(path), label, index),
                                num_parallel_calls=AUTOTUNE)
        load = val_function(self.image_size)
        decoded = stream.enumerate().map(lambda at, e: (load(e[0]), e[1], at),
                                         num_parallel_calls=AUTOTUNE).ignore_errors()
        return self._val_batches(self._batched(decoded, False), limit, put)

    def _val_batches(self, batches: tf.data.Dataset, limit: int, put: Put) -> Iterator[Any]:
        made = 0
        for x, y, _ in batches:
            made += int(y.shape[0])
            yield put(x, y)
        self.skipped += limit - made

    def take_skipped(self) -> int:
        skipped, self.skipped = self.skipped, 0
        return skipped

    def measure(self, batches: int) -> float:
        """Images/s of the pipeline alone, steady (images.steady_rate: its first batch, which carries the dataset's
        start, is not timed), over `batches` training batches of epoch 0: read, decoded, cropped, batched and
        normalised on the host, no model and no copy to the devices. The images it skips are not counted in any
        epoch's row."""
        return images.steady_rate((int(y.shape[0]) for _, y, _ in self._host_batches(0, 1 + batches)), 1, time.perf_counter)


def _shard(count: int, seed: int, epoch: int, rank: int, world: int) -> np.ndarray:
    """images.shard; where there are fewer images than ranks, every rank's shard is all of them (as PyTorch's)."""
    indices = images.shard(count, seed, epoch, rank, world)
    if len(indices) == 0:
        indices = np.random.default_rng([seed, epoch]).permutation(count)
    return indices


def _record_files(folder: Path, split: str) -> list[str]:
    """A split's TFRecord shards in order: train-00000-of-000NN..., validation-... (tf_cnn_benchmarks' names)."""
    prefix = "train" if split == "train" else "validation"
    return [str(p) for p in sorted(folder.glob(f"{prefix}-*-of-*"))]


def _parsed(record: tf.Tensor, index: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    features = tf.io.parse_single_example(record, FEATURES)
    return features["image/encoded"], tf.cast(features["image/class/label"] - 1, tf.int32), index
