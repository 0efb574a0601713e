"""Is our MXNet input pipeline as fast as a plain ImageRecordIter program? The CPU yardstick of issue 41, MXNet's side.

Ours: trainables/mxnet/input.py's Pipeline (data: imagenet) over a generated ImageNet-layout set packed by
trainables/mxnet/pack.py, its training batches taken as they come off ImageRecordIter (no model, no copy to a
device): an epoch of Pipeline.train, start included. Theirs: the iterator an MXNet user writes
from MXNet's example/image-classification (common/data.py's get_rec_iter with its ResNet augmentations), written
here apart from the project (it imports nothing of it): ImageRecordIter over the same train.rec/.idx with a
random-resized crop (area 0.08-1, aspect 3/4-4/3), a random mirror, ImageNet's mean and std, shuffled, the same
threads, batch and batches; its resizes at ImageRecordIter's default interpolation (bilinear), where ours
resizes by area averaging when it shrinks (as the other frameworks' antialiased resize does).

The two take turns, the order flipping every round; each side's figure is images/s from the iterator's making to
its last batch; the ratio is the median of the rounds' ours / theirs. Goal: >= 0.95. On a loaded machine the
wall-clock rates swing with the neighbours; the images per CPU-second of the process (ImageRecordIter's threads
are the process's) are printed beside them, a ratio that load moves much less.

Run (from the repository root):

  .venv/bin/python benchmarks/mxnet_record_loader.py
  .venv/bin/python benchmarks/mxnet_record_loader.py --rounds 5 --threads 2 --batch 32 --batches 20
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import trainables.mxnet  # noqa: E402,F401  (aliases numpy.bool before mxnet is imported)
import mxnet as mx  # noqa: E402

from _common import load_average, machine, pipeline_parser, pipeline_rates  # noqa: E402


def plain_rate(records: Path, size: int, threads: int, batch: int, batches: int, seed: int) -> int:
    data = mx.io.ImageRecordIter(
        path_imgrec=str(records / "train.rec"), path_imgidx=str(records / "train.idx"), data_shape=(3, size, size),
        batch_size=batch, shuffle=True, seed=seed, random_resized_crop=True, min_random_area=0.08,
        max_random_area=1.0, min_aspect_ratio=3 / 4, max_aspect_ratio=4 / 3, rand_mirror=True,
        mean_r=123.68, mean_g=116.779, mean_b=103.939, std_r=58.393, std_g=57.12, std_b=57.375,
        preprocess_threads=threads, verbose=False)
    seen = 0
    for _, out in zip(range(batches), data):
        out.data[0].wait_to_read()
        seen += out.data[0].shape[0]
    return seen


def our_rate(folder: Any, size: int, threads: int, batch: int, batches: int, seed: int) -> int:
    from trainables.config import TrialConfig
    from trainables.mxnet.input import Pipeline

    cfg = TrialConfig(framework="mxnet", model="resnet50_v1", num_gpus=1, batch_per_gpu=batch, epochs=1, lr=0.1,
                      data="imagenet", image_size=size, loader_workers=threads, seed=seed)
    pipeline = Pipeline(cfg, folder, size, 0, 1, batch, batches, on_gpu=False)
    # An epoch of `batches` batches as a trial trains on them, before the copy to a device; whole, start included, as
    # the plain iterator's pass is timed (Pipeline.measure leaves the start out: the rows' input_images_per_sec).
    seen = 0
    for x in pipeline.train(0, lambda x, y: x):
        x.wait_to_read()  # MXNet's operations are asynchronous: the batch made
        seen += x.shape[0]
    return seen


def main() -> int:
    parser = pipeline_parser(__doc__.split("\n")[0], workers="--threads")
    args = parser.parse_args()
    from sweep import imagenet_like
    from trainables import images
    from trainables.mxnet import pack

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        per_class = math.ceil(args.batch * args.batches / 10)  # one pass reads every record once
        imagenet_like.make_imagenet_like(root, classes=10, per_class=per_class, val_per_class=1, quiet=True)
        records = root / "imagenet" / pack.FORMAT
        pack.pack(root / "imagenet", records)
        folder = images.scan(root)  # the trial's scan, before its pipeline: not timed
        ratios, cpu_ratios = [], []
        for round_ in range(args.rounds):
            sides = [("ours", lambda *a: our_rate(folder, *a)), ("plain", lambda *a: plain_rate(records, *a))]
            if round_ % 2:
                sides.reverse()
            got = {name: pipeline_rates(run, args.image_size, args.threads, args.batch, args.batches, round_)
                   for name, run in sides}
            ratios.append(got["ours"][0] / got["plain"][0])
            cpu_ratios.append(got["ours"][1] / got["plain"][1])
            print(f"round {round_ + 1}: ours {got['ours'][0]:.1f} img/s ({got['ours'][1]:.1f} per CPU-s), plain "
                  f"{got['plain'][0]:.1f} img/s ({got['plain'][1]:.1f} per CPU-s), ratio {ratios[-1]:.3f} "
                  f"(per CPU-s {cpu_ratios[-1]:.3f})", flush=True)
    print(f"{machine()}; load {load_average()}; {os.cpu_count()} CPUs; {args.threads} threads, batch {args.batch}, "
          f"{args.batches} batches of {args.image_size} px")
    print(f"ours / plain (median of {len(ratios)} paired rounds): {statistics.median(ratios):.3f}  (goal >= 0.95); "
          f"images per CPU-second: {statistics.median(cpu_ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
