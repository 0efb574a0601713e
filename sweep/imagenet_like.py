"""`python -m sweep data make imagenet-like`: a small ImageNet-format set generated here, for tests and smoke runs.

It writes DIR/imagenet/train/CLASS/*.JPEG and DIR/imagenet/val/CLASS/*.JPEG (torchvision's ImageFolder
layout, ImageNet's file names), JPEGs at ImageNet's usual sizes and quality, so that the input pipelines
decode, crop and resize what they would on the real set. Each class is a pattern a network has to learn:
stripes at the class's angle in the class's hue over a random background, and a shape of the class's
kind and hue at a random place and size, with noise. No one pixel tells the class (the background's
colour is random, the shape may be cropped away), but a small CNN at 32-64 px learns it in a few epochs.

The set is written into a temporary folder beside DIR/imagenet and renamed into place: DIR/imagenet is
whole or absent. GENERATED.json in it says the set was made here (rows say data_kind imagenet-generated).
"""
from __future__ import annotations

import colorsys
import json
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from sweep.errors import UsageError
from sweep.limits import SEED_MAX
from trainables import images

MAKING = ".imagenet-making-"  # the temporary folder's prefix, in DIR so that the rename is atomic
MAX_CLASSES = 1000
MAX_PER_CLASS = 100_000
QUALITY = 90  # ImageNet's JPEGs are mostly saved at quality 90-96
GOLDEN = (math.sqrt(5) - 1) / 2  # spreads the classes' angles and hues apart for any count


def check_arguments(classes: int, per_class: int, val_per_class: int, seed: int) -> None:
    for name, value, least, most in (("--classes", classes, 2, MAX_CLASSES), ("--per-class", per_class, 1, MAX_PER_CLASS),
                                     ("--val-per-class", val_per_class, 1, MAX_PER_CLASS), ("--seed", seed, 0, SEED_MAX)):
        if not least <= value <= most:
            raise UsageError(f"{name}: expected an integer >= {least} and <= {most}, got {value}")


def class_name(index: int) -> str:
    """ImageNet's folders are WordNet ids (n01440764); these are numbered the same way."""
    return f"n{index:08d}"


def _class_colour(index: int, classes: int) -> tuple[float, float, float]:
    hue = (index * GOLDEN) % 1.0
    return colorsys.hsv_to_rgb(hue, 0.85, 0.9)


def draw(index: int, classes: int, rng: np.random.Generator) -> Image.Image:
    """One image of class `index`: its stripes and shape over a random background, at an ImageNet size."""
    width, height = int(rng.integers(400, 501)), int(rng.integers(300, 376))
    if rng.random() < 0.25:  # a quarter of ImageNet's photos are portrait
        width, height = height, width
    colour = np.array(_class_colour(index, classes)) * 255
    background = rng.uniform(40, 215, size=3)
    # Stripes at the class's angle (spread over 180 degrees), of random period and phase: the texture
    # survives any crop, which the class's shape may not.
    angle = math.pi * ((index * GOLDEN * 0.5) % 1.0)
    period = rng.uniform(30, 60)
    step = 2 * math.pi / period
    xs = np.arange(width, dtype=np.float32) * (math.cos(angle) * step)
    ys = np.arange(height, dtype=np.float32)[:, None] * (math.sin(angle) * step)
    stripes = np.sin(xs + ys + rng.uniform(0, 2 * math.pi)) > 0  # (height, width), by broadcasting
    mixed = (background * 0.65 + colour * 0.35).astype(np.uint8)  # hard-edged stripes: 35% of the class's colour
    pixels = np.where(stripes[..., None], mixed, background.astype(np.uint8))
    image = Image.fromarray(pixels)
    # The class's shape (kind by class), in a jittered class colour, anywhere and of any size.
    side = rng.uniform(0.25, 0.6) * min(width, height)
    x0, y0 = rng.uniform(0, width - side), rng.uniform(0, height - side)
    fill = tuple(int(v) for v in np.clip(colour + rng.normal(0, 12, size=3), 0, 255))
    pen = ImageDraw.Draw(image)
    box = (x0, y0, x0 + side, y0 + side)
    kind = index % 3
    if kind == 0:
        pen.ellipse(box, fill=fill)
    elif kind == 1:
        pen.rectangle(box, fill=fill)
    else:
        pen.polygon([(x0 + side / 2, y0), (x0, y0 + side), (x0 + side, y0 + side)], fill=fill)
    noise = rng.integers(-16, 17, size=(height, width, 3), dtype=np.int16)  # pixel noise, as a camera's
    return Image.fromarray(np.clip(np.asarray(image, dtype=np.int16) + noise, 0, 255).astype(np.uint8))


def make_imagenet_like(data_dir: str | Path, classes: int, per_class: int, val_per_class: int, seed: int = 0,
                       quiet: bool = False) -> Path:
    """Write DIR/imagenet (train and val, ImageFolder layout) atomically; the folder it wrote."""
    check_arguments(classes, per_class, val_per_class, seed)
    root = Path(data_dir)
    target = root / images.FOLDER
    if target.exists():
        raise UsageError(f"{target} exists: remove it first to make another set there")
    try:
        root.mkdir(parents=True, exist_ok=True)
        making = Path(tempfile.mkdtemp(prefix=MAKING, dir=root))
    except OSError as e:
        raise UsageError(f"{root}: cannot write there ({e.strerror or e})") from None
    try:
        for split, count in (("train", per_class), ("val", val_per_class)):
            for index in range(classes):
                folder = making / split / class_name(index)
                folder.mkdir(parents=True)
                # One generator per (seed, split, class): the same arguments make the same files.
                rng = np.random.default_rng([seed, 0 if split == "train" else 1, index])
                for i in range(count):
                    draw(index, classes, rng).save(folder / f"{class_name(index)}_{i}.JPEG", "JPEG", quality=QUALITY)
        marker = {"generator": "python -m sweep data make imagenet-like", "classes": classes,
                  "per_class": per_class, "val_per_class": val_per_class, "seed": seed}
        (making / images.GENERATED).write_text(json.dumps(marker, indent=1) + "\n")
        making.rename(target)
    except BaseException as e:  # Ctrl-C included: nothing half-made is left behind
        shutil.rmtree(making, ignore_errors=True)
        if isinstance(e, OSError):
            raise UsageError(f"{root}: cannot write the set ({e.strerror or e})") from None
        raise
    if not quiet:
        print(f"wrote {target}: {classes} classes, {classes * per_class} train and {classes * val_per_class} val images")
    return target
