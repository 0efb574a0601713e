"""Is our PyTorch input pipeline as fast as a plain ImageFolder + DataLoader? The CPU yardstick of issue 41.

Ours: trainables/pytorch/input.py's Pipeline (data: imagenet) over a generated ImageNet-layout set, through
an epoch of Pipeline.train, the batches a trial trains on (no model, no copy to a device), start included. Theirs: the loader a PyTorch user
writes from torchvision's reference recipe, written here apart from the project (it imports nothing of it):
a Dataset over DIR/imagenet/train/CLASS/*.JPEG that opens each file with Pillow, converts it to RGB, takes a
RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3, ten tries, then the centre), resizes it bilinearly to the
image size, flips it half the time and normalises it by ImageNet's mean and std, in a DataLoader with the same
workers, batch, prefetch and shuffling. Both read the same files, the same number of batches.

The two take turns, the order flipping every round. Each side's figures: images/s from the loader's start (its
workers started) to its last batch, and images per CPU-second (the CPU time of this process and of its worker
processes, from getrusage): the rate the side would have on cores of its own, which a machine shared with other
work does not blur as it blurs the wall clock. Each ratio is the median of the rounds' ours / theirs; the goal,
>= 0.95, is judged on images per CPU-second (both are printed).

Run (from the repository root):

  .venv/bin/python benchmarks/imagenet_loader.py
  .venv/bin/python benchmarks/imagenet_loader.py --rounds 5 --workers 2 --batch 32 --batches 20
"""
from __future__ import annotations

import math
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from _common import load_average, machine, pipeline_parser, pipeline_rates  # (puts the repository root on sys.path)

from sweep import imagenet_like
from trainables import images  # imported here, not in the first round's time
from trainables.config import TrialConfig
from trainables.pytorch.input import Pipeline

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class PlainImageFolder(Dataset):
    """torchvision's ImageFolder + RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize, by hand."""

    def __init__(self, root: Path, size: int) -> None:
        classes = sorted(d.name for d in root.iterdir() if d.is_dir())
        self.samples = [(str(f), label) for label, c in enumerate(classes) for f in sorted((root / c).iterdir())]
        self.size = size

    def __len__(self) -> int:
        return len(self.samples)

    def _crop_box(self, width: int, height: int) -> tuple[int, int, int, int]:
        area = width * height
        for _ in range(10):
            target = area * random.uniform(0.08, 1.0)
            ratio = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
            w, h = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
            if 0 < w <= width and 0 < h <= height:
                left, top = random.randint(0, width - w), random.randint(0, height - h)
                return left, top, left + w, top + h
        side = min(width, height)
        return (width - side) // 2, (height - side) // 2, (width + side) // 2, (height + side) // 2

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        with Image.open(path) as image:
            image = image.convert("RGB")
        out = image.resize((self.size, self.size), Image.BILINEAR, box=self._crop_box(image.width, image.height))
        if random.random() < 0.5:
            out = out.transpose(Image.FLIP_LEFT_RIGHT)
        x = torch.from_numpy(np.asarray(out, dtype=np.uint8).copy()).permute(2, 0, 1).float().div_(255)
        return (x - MEAN) / STD, label


def plain_images(root: Path, size: int, workers: int, batch: int, batches: int, seed: int) -> int:
    loader = DataLoader(PlainImageFolder(root / "imagenet" / "train", size), batch_size=batch, shuffle=True,
                        num_workers=workers, prefetch_factor=2 if workers else None,
                        generator=torch.Generator().manual_seed(seed))
    seen = 0
    for (x, _), _ in zip(loader, range(batches)):
        seen += len(x)
    del loader  # its workers end and are joined: their CPU time is counted
    return seen


def our_images(root: Path, size: int, workers: int, batch: int, batches: int, seed: int) -> int:
    cfg = TrialConfig(framework="pytorch", model="resnet50_v1", num_gpus=1, batch_per_gpu=batch, epochs=1, lr=0.1,
                      data="imagenet", image_size=size, loader_workers=workers, seed=seed)
    pipeline = Pipeline(cfg, images.scan(root), size, 0, 1, batch, batches, on_gpu=False)
    # An epoch of `batches` batches as a trial trains on them, before the copy to a device; whole, start included, as
    # the plain loader's pass is timed (Pipeline.measure leaves the start out: the rows' input_images_per_sec).
    return sum(len(y) for y in pipeline.train(0, lambda x, y: y))


def main() -> int:
    parser = pipeline_parser(__doc__.split("\n")[0])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        per_class = math.ceil(args.batch * args.batches / 10)  # one pass reads every file once
        imagenet_like.make_imagenet_like(root, classes=10, per_class=per_class, val_per_class=1, quiet=True)
        wall, cpu = [], []
        for round_ in range(args.rounds):
            sides = [("ours", our_images), ("plain", plain_images)]
            if round_ % 2:
                sides.reverse()
            rate = {name: pipeline_rates(run, root, args.image_size, args.workers, args.batch, args.batches, round_)
                    for name, run in sides}
            wall.append(rate["ours"][0] / rate["plain"][0])
            cpu.append(rate["ours"][1] / rate["plain"][1])
            print(f"round {round_ + 1}: ours {rate['ours'][0]:.1f} img/s, {rate['ours'][1]:.1f} img/CPU-s; plain "
                  f"{rate['plain'][0]:.1f} img/s, {rate['plain'][1]:.1f} img/CPU-s; ratios {wall[-1]:.3f}, {cpu[-1]:.3f}",
                  flush=True)
    print(f"{machine()}; load {load_average()}; {args.workers} workers, batch {args.batch}, "
          f"{args.batches} batches of {args.image_size} px, {args.rounds} paired rounds")
    print(f"ours / plain, images per CPU-second (median): {statistics.median(cpu):.3f}  (goal >= 0.95)")
    print(f"ours / plain, images/s (median; the wall clock of a shared machine): {statistics.median(wall):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
