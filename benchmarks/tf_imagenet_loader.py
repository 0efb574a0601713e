"""Is our TensorFlow input pipeline as fast as a plain tf.data pipeline? The TensorFlow CPU yardstick of issue 41.

Ours: trainables/tensorflow/input.py's Pipeline (data: imagenet) over a generated ImageNet-layout set, through
an epoch of Pipeline.train, the batches a trial trains on (no model, no copy to a device), reading the JPEG
files (or, with --tfrecord, the set packed by `python -m sweep data pack imagenet --format tfrecord`). Theirs: the
pipeline a TensorFlow user writes after tf_cnn_benchmarks' preprocessing (its RecordInputImagePreprocessor's
train path), written here apart from the project (it imports nothing of it): the file names shuffled, then
read_file -> a random-resized-crop box drawn in TF ops (RandomResizedCrop's: area 8-100%, log-uniform ratio
3/4-4/3, ten tries, then the centre; --distorted-boxes: tf_cnn_benchmarks' own sample_distorted_bounding_box,
whose boxes are smaller) -> tf.io.decode_and_crop_jpeg -> bilinear resize (antialiased, as ours) -> random flip ->
normalisation by ImageNet's mean and std -> batch -> prefetch, maps parallel (AUTOTUNE) on a private pool of the
same threads; with --tfrecord it reads the same TFRecord shards (TFRecordDataset, parse_single_example) instead.
Both read the same images, the same number of batches of the same size.

The two take turns in one process, the order flipping every round. Each side's figures: images/s from the
pipeline's start to its last batch, and images per CPU-second (this process's CPU time, all its threads, from
getrusage): the rate the side would have on cores of its own, which a machine shared with other work does not blur
as it blurs the wall clock. Each ratio is the median of the rounds' ours / theirs; the goal, >= 0.95, is judged on
images per CPU-second (both are printed).

Run (from the repository root):

  .venv/bin/python benchmarks/tf_imagenet_loader.py
  .venv/bin/python benchmarks/tf_imagenet_loader.py --tfrecord --rounds 5 --workers 2 --batch 32 --batches 20
"""
from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from _common import load_average, machine, pipeline_parser, pipeline_rates  # noqa: E402  (puts the repository root on sys.path)

from sweep import imagenet_like  # noqa: E402
from trainables import images  # noqa: E402  (imported here, not in the first round's time)
from trainables.config import TrialConfig  # noqa: E402
from trainables.tensorflow.input import Pipeline  # noqa: E402

MEAN = tf.constant([0.485, 0.456, 0.406]) * 255
STD = tf.constant([0.229, 0.224, 0.225]) * 255


def random_resized_box(shape: tf.Tensor) -> tf.Tensor:
    """torchvision's RandomResizedCrop box in TF ops, by hand: ten tries of an area of 8-100% at a log-uniform ratio
    in [3/4, 4/3], the first that fits, else the centre crop at the nearest allowed ratio; [top, left, h, w]."""
    height, width = tf.cast(shape[0], tf.float32), tf.cast(shape[1], tf.float32)
    target = height * width * tf.random.uniform([10], 0.08, 1.0)
    ratio = tf.exp(tf.random.uniform([10], math.log(3 / 4), math.log(4 / 3)))
    w, h = tf.round(tf.sqrt(target * ratio)), tf.round(tf.sqrt(target / ratio))
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = tf.argmax(tf.cast(fits, tf.int32))
    found = tf.reduce_any(fits)
    cw = tf.where(found, w[first], tf.where(width / height > 4 / 3, tf.round(height * 4 / 3), width))
    ch = tf.where(found, h[first], tf.where(width / height < 3 / 4, tf.round(width * 4 / 3), height))
    left = tf.floor(tf.random.uniform([]) * (width - cw + 1))
    top = tf.floor(tf.random.uniform([]) * (height - ch + 1))
    return tf.cast(tf.stack([top, left, ch, cw]), tf.int32)


def distorted_box(shape: tf.Tensor) -> tf.Tensor:
    """tf_cnn_benchmarks' own box: tf.image.sample_distorted_bounding_box (area 8-100%, ratio 3/4-4/3, ten tries,
    else the whole image). Its boxes are smaller than RandomResizedCrop's (measured: 37% of the image on average
    against 44% on 500x375 images), so less of each JPEG is decoded: not the same transform (--distorted-boxes)."""
    begin, crop_size, _ = tf.image.sample_distorted_bounding_box(
        shape, bounding_boxes=tf.zeros([1, 0, 4]), min_object_covered=0.0, aspect_ratio_range=(3 / 4, 4 / 3),
        area_range=(0.08, 1.0), max_attempts=10, use_image_if_no_bounding_boxes=True)
    return tf.concat([begin[:2], crop_size[:2]], axis=0)


def plain_train(encoded: tf.Tensor, size: int, box=random_resized_box) -> tf.Tensor:  # noqa: ANN001
    """tf_cnn_benchmarks' train_image, by hand: a box, decode_and_crop_jpeg, resize, flip, normalise."""
    image = tf.io.decode_and_crop_jpeg(encoded, box(tf.io.extract_jpeg_shape(encoded)), channels=3)
    image = tf.image.resize(image, [size, size], method="bilinear", antialias=True)
    image = tf.image.random_flip_left_right(image)
    return (image - MEAN) / STD


def plain_dataset(root: Path, size: int, workers: int, batch: int, seed: int, tfrecord: bool,
                  box=random_resized_box) -> tf.data.Dataset:  # noqa: ANN001
    if tfrecord:
        files = sorted(str(p) for p in (root / "imagenet" / "tfrecord").glob("train-*"))
        features = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                    "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
        dataset = tf.data.Dataset.from_tensor_slices(files).interleave(
            tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE).shuffle(10_000, seed=seed)
        dataset = dataset.map(lambda r: tf.io.parse_single_example(r, features), num_parallel_calls=tf.data.AUTOTUNE)
        dataset = dataset.map(lambda f: (plain_train(f["image/encoded"], size, box), f["image/class/label"] - 1),
                              num_parallel_calls=tf.data.AUTOTUNE)
    else:
        train = root / "imagenet" / "train"
        classes = sorted(d.name for d in train.iterdir() if d.is_dir())
        samples = [(str(f), label) for label, c in enumerate(classes) for f in sorted((train / c).iterdir())]
        paths, labels = zip(*samples)
        dataset = tf.data.Dataset.from_tensor_slices((list(paths), list(labels))).shuffle(len(paths), seed=seed)
        dataset = dataset.map(lambda p, y: (plain_train(tf.io.read_file(p), size, box), y), num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.threading.private_threadpool_size = workers
    return dataset.with_options(options)


def plain_images(root: Path, size: int, workers: int, batch: int, batches: int, seed: int, tfrecord: bool,
                 distorted: bool = False) -> int:
    dataset = plain_dataset(root, size, workers, batch, seed, tfrecord, distorted_box if distorted else random_resized_box)
    return sum(int(y.shape[0]) for _, y in dataset.take(batches))


def our_images(root: Path, size: int, workers: int, batch: int, batches: int, seed: int, tfrecord: bool,
               distorted: bool = False) -> int:
    cfg = TrialConfig(framework="tensorflow", model="resnet50_v1", num_gpus=1, batch_per_gpu=batch, epochs=1, lr=0.1,
                      data="imagenet", image_size=size, loader_workers=workers, seed=seed)
    pipeline = Pipeline(cfg, images.scan(root), size, 0, 1, batch, batches, on_gpu=False)
    assert pipeline.data_format == ("tfrecord" if tfrecord else "jpeg")
    # An epoch of `batches` batches as a trial trains on them, before the copy to a device; whole, start included, as
    # the plain loader's pass is timed (Pipeline.measure leaves the start out: the rows' input_images_per_sec).
    return sum(int(y.shape[0]) for y in pipeline.train(0, lambda x, y: y))


def main() -> int:
    parser = pipeline_parser(__doc__.split("\n")[0])
    parser.add_argument("--tfrecord", action="store_true", help="both read the set's TFRecord shards, not the JPEGs")
    parser.add_argument("--distorted-boxes", action="store_true",
                        help="the plain side crops with tf_cnn_benchmarks' sample_distorted_bounding_box (smaller boxes)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # Twice the files a pass reads: neither side's stream ends with its last batch, so both decode ahead of it
        # (prefetch, parallel maps) as they would in an epoch, and the images decoded ahead are in both sides' CPU time.
        per_class = math.ceil(2 * args.batch * args.batches / 10)
        imagenet_like.make_imagenet_like(root, classes=10, per_class=per_class, val_per_class=1, quiet=True)
        if args.tfrecord:
            subprocess.run([sys.executable, "-m", "sweep", "data", "pack", "imagenet", "--format", "tfrecord",
                            "--data-dir", str(root)], check=True, cwd=Path(__file__).resolve().parent.parent)
        for warm in (our_images, plain_images):  # each side's graph traced once before any round is timed
            warm(root, args.image_size, args.workers, args.batch, 1, 0, args.tfrecord, args.distorted_boxes)
        wall, cpu = [], []
        for round_ in range(args.rounds):
            sides = [("ours", our_images), ("plain", plain_images)]
            if round_ % 2:
                sides.reverse()
            rate = {name: pipeline_rates(run, root, args.image_size, args.workers, args.batch, args.batches, round_, args.tfrecord,
                                args.distorted_boxes)
                    for name, run in sides}
            wall.append(rate["ours"][0] / rate["plain"][0])
            cpu.append(rate["ours"][1] / rate["plain"][1])
            print(f"round {round_ + 1}: ours {rate['ours'][0]:.1f} img/s, {rate['ours'][1]:.1f} img/CPU-s; plain "
                  f"{rate['plain'][0]:.1f} img/s, {rate['plain'][1]:.1f} img/CPU-s; ratios {wall[-1]:.3f}, {cpu[-1]:.3f}",
                  flush=True)
    print(f"{machine()}; load {load_average()}; tensorflow {tf.__version__}; {args.workers} threads, batch {args.batch}, "
          f"{args.batches} batches of {args.image_size} px from {'TFRecord' if args.tfrecord else 'JPEG files'}, "
          f"{args.rounds} paired rounds; plain boxes: "
          f"{'sample_distorted_bounding_box' if args.distorted_boxes else 'RandomResizedCrop'}")
    print(f"ours / plain, images per CPU-second (median): {statistics.median(cpu):.3f}  (goal >= 0.95)")
    print(f"ours / plain, images/s (median; the wall clock of a shared machine): {statistics.median(wall):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
