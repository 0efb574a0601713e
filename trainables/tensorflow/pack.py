"""`python -m trainables.tensorflow.pack --folder D/imagenet --out TMP`: an image folder as TFRecord shards.

The format is tf_cnn_benchmarks' (and the TPU/TensorFlow models' build_imagenet_data.py's): tf.train.Example
records with image/encoded (the file's own bytes), image/class/label (1-based: 0 is tf_cnn_benchmarks'
background class), image/class/text (the class folder's name), image/format, image/filename, image/height and
image/width, in shards TMP/train-00000-of-000NN and TMP/validation-00000-of-000NN of up to SHARD_IMAGES images.
The training records are in one fixed shuffled order, as build_imagenet_data shuffles them, so that the reader's
shuffle buffer mixes classes; validation keeps the scan's order. A record's index (the images' per-image
randomness, trainables/tensorflow/input.py) is its position in its split.

An image goes in as its bytes where TensorFlow decodes it (a PNG or a CMYK JPEG under a .JPEG name included: the
reader decodes them as it decodes them here); one it cannot decode is listed as skipped. TMP/PACKED.json, written
last, says what was packed: {"format": "tfrecord", "classes": [...], "splits": {"train": {"records": n,
"skipped": [paths relative to the folder]}, "val": ...}}. sweep/data_pack.py runs this in TensorFlow's
interpreter, checks the manifest and renames TMP into place. Bad input: one line `error: ...`, exit 2.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

from trainables import images

FORMAT = "tfrecord"
SHARD_IMAGES = 1024  # images per shard at most (ImageNet's 1,024 training shards hold about 1,251 each)
SHARD_PREFIX = {"train": "train", "val": "validation"}  # tf_cnn_benchmarks' file names


def _feature(value: bytes | int) -> tf.train.Feature:
    if isinstance(value, bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def example(raw: bytes, label: int, cls: str, path: str) -> bytes | None:
    """One image's serialised tf.train.Example; None where TensorFlow cannot decode the file."""
    try:
        shape = tf.io.decode_image(raw, channels=3, expand_animations=False).shape
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError):
        return None
    fmt = b"JPEG" if tf.io.is_jpeg(raw) else b"other"
    return tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": _feature(raw),
        "image/class/label": _feature(label + 1),
        "image/class/text": _feature(cls.encode()),
        "image/format": _feature(fmt),
        "image/filename": _feature(Path(path).name.encode()),
        "image/height": _feature(int(shape[0])),
        "image/width": _feature(int(shape[1])),
    })).SerializeToString()


def write_split(split: images.Split, classes: tuple[str, ...], order: np.ndarray, root: Path, out: Path,
                prefix: str) -> dict:
    """Write the images of `split` in `order` as shards out/PREFIX-00000-of-000NN; the split's manifest entry."""
    shards = max(1, math.ceil(len(order) / SHARD_IMAGES))
    records, skipped = 0, []
    for shard, chunk in enumerate(np.array_split(order, shards)):
        with tf.io.TFRecordWriter(str(out / f"{prefix}-{shard:05d}-of-{shards:05d}")) as writer:
            for index in chunk:
                path, label = split.paths[int(index)], int(split.labels[int(index)])
                record = example(Path(path).read_bytes(), label, classes[label], path)
                if record is None:
                    skipped.append(str(Path(path).relative_to(root)))
                    continue
                writer.write(record)
                records += 1
    return {"records": records, "skipped": sorted(skipped)}


def pack(folder: Path, out: Path) -> dict:
    """Write the folder's two splits as TFRecord shards into `out`, then its manifest; the manifest."""
    return images.pack_folder(folder, out, FORMAT, lambda split, order, name, found: write_split(
        split, found.classes, order, found.root, out, SHARD_PREFIX[name]))


def main(argv: list[str] | None = None) -> int:
    return images.pack_main(argv, "tensorflow", FORMAT, pack)


if __name__ == "__main__":
    sys.exit(main())
