"""Image folders (ImageNet's layout) for every framework's input pipeline: the parts written once.

A data folder holds imagenet/train/CLASS/*.JPEG and imagenet/val/CLASS/*.JPEG (torchvision's ImageFolder
layout). Here: the scan of that folder (classes, files, one-line errors for a folder that cannot be used),
each rank's shard of an epoch, and the transforms' arithmetic as pure functions of an rng, so that every
framework's pipeline crops, flips and normalises the same way for the same seed. Decoding is Pillow's;
an image that cannot be decoded is skipped and counted, never a crash. Nothing loads the whole set: a
pipeline reads one file at a time, in its own worker processes or threads.

A trial's process imports this; it imports no framework and nothing of sweep/.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainables import data
from trainables.data import DataError

FOLDER = "imagenet"
SPLITS = ("train", "val")
GENERATED = "GENERATED.json"  # written by `python -m sweep data make imagenet-like`: the set is not ImageNet
EXTENSIONS = (".jpeg", ".jpg", ".png")  # any case: ImageNet's are .JPEG
# ImageNet's per-channel statistics (RGB, on 0..1 pixels), as torchvision's reference scripts normalise.
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
# The random-resized crop of torchvision (and of the Inception paper): area and log-uniform aspect ratio.
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3 / 4, 4 / 3)
CROP_TRIES = 10
VAL_CROP_FRACTION = 0.875  # validation resizes the shorter side to size / 0.875 (256 for 224), then crops the centre


class ImageFolderError(DataError):
    """An image folder that cannot be used; the message names the folder or file and the problem."""


@dataclass(frozen=True)
class Split:
    paths: tuple[str, ...]
    labels: np.ndarray  # int64, one per path


@dataclass(frozen=True)
class ImageFolder:
    root: Path  # DIR/imagenet
    classes: tuple[str, ...]  # sorted folder names of train; a label is an index here
    train: Split
    val: Split
    generated: bool  # made by `data make imagenet-like`, not the real ImageNet

    @property
    def data_kind(self) -> str:
        return "imagenet-generated" if self.generated else "imagenet"


def _inside(path: Path, real_root: Path) -> bool:
    """A symlink may point within the image folder only: a file elsewhere on the node is no image of the set."""
    return path.resolve().is_relative_to(real_root)


def _class_folders(split: Path, real_root: Path) -> list[str]:
    if not split.is_dir():
        raise ImageFolderError(f"{split}: missing: expected a folder of class folders")
    names = []
    for entry in sorted(os.scandir(split), key=lambda e: e.name):
        path = Path(entry.path)
        if entry.is_symlink() and not _inside(path, real_root):
            raise ImageFolderError(f"{path}: a symlink pointing outside {real_root}")
        if entry.is_dir():
            names.append(entry.name)
    if not names:
        raise ImageFolderError(f"{split}: empty: no class folders")
    return names


def _files(folder: Path, real_root: Path) -> list[str]:
    found = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        path = Path(entry.path)
        if entry.is_symlink() and not _inside(path, real_root):
            raise ImageFolderError(f"{path}: a symlink pointing outside {real_root}")
        if entry.name.lower().endswith(EXTENSIONS) and entry.is_file():
            found.append(entry.path)
    return found


def _split(root: Path, name: str, classes: tuple[str, ...], real_root: Path) -> Split:
    folder = root / name
    present = _class_folders(folder, real_root)
    unknown = [c for c in present if c not in classes]
    if unknown:
        raise ImageFolderError(f"{folder / unknown[0]}: class {unknown[0]} is not in train")
    paths, labels = [], []
    for label, cls in enumerate(classes):
        if cls in present:
            files = _files(folder / cls, real_root)
            paths += files
            labels += [label] * len(files)
    if not paths:
        raise ImageFolderError(f"{folder}: empty: no images ({', '.join(EXTENSIONS)}) in its class folders")
    return Split(tuple(paths), np.array(labels, dtype=np.int64))


def scan(data_dir: str | Path) -> ImageFolder:
    """The folder's classes and files, checked; an ImageFolderError names the first problem."""
    root = Path(data_dir) / FOLDER
    if not root.is_dir():
        raise ImageFolderError(f"{root}: missing: expected {FOLDER}/train/CLASS/*.JPEG and {FOLDER}/val/CLASS/*.JPEG "
                               f"(python -m sweep data make imagenet-like makes a small one)")
    # Links within the folder may point anywhere in it; the folder itself may be a link (to another disk).
    real_root = root.resolve()
    classes = tuple(_class_folders(root / "train", real_root))
    train = _split(root, "train", classes, real_root)
    val = _split(root, "val", classes, real_root)
    return ImageFolder(root, classes, train, val, (root / GENERATED).is_file())


def shard(count: int, seed: int, epoch: int, rank: int, world: int) -> np.ndarray:
    """This rank's indices into the epoch's files, as DistributedSampler(shuffle, drop_last) gives them: one
    shuffle per (seed, epoch), the remainder that does not divide by the ranks dropped, then every world-th
    index from `rank` on. The ranks' shards are disjoint, of equal size, and cover the epoch's files."""
    order = np.random.default_rng([seed, epoch]).permutation(count)
    per_rank = count // world
    return order[:per_rank * world][rank::world]


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The rng of one image's augmentation: the same (seed, epoch, file) crops and flips the same in any
    worker process, whatever order the workers load in."""
    return np.random.default_rng([seed, epoch, index])


def random_resized_crop_box(width: int, height: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(left, top, crop width, crop height) of torchvision's RandomResizedCrop: an area of 8-100% of the image at a
    log-uniform aspect ratio in [3/4, 4/3], ten tries, then the centre crop at the nearest allowed ratio."""
    area = width * height
    log_lo, log_hi = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    for _ in range(CROP_TRIES):
        target = area * rng.uniform(*CROP_SCALE)
        ratio = math.exp(rng.uniform(log_lo, log_hi))
        w, h = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1)), w, h
    in_ratio = width / height
    if in_ratio < CROP_RATIO[0]:
        w, h = width, round(width / CROP_RATIO[0])
    elif in_ratio > CROP_RATIO[1]:
        w, h = round(height * CROP_RATIO[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def flips(rng: np.random.Generator) -> bool:
    return bool(rng.random() < 0.5)


def shorter_side_to(width: int, height: int, side: int) -> tuple[int, int]:
    """(width, height) with the shorter side resized to `side`, the ratio kept (torchvision's Resize(int))."""
    if width <= height:
        return side, int(side * height / width)
    return int(side * width / height), side


def val_resize_side(image_size: int) -> int:
    return int(round(image_size / VAL_CROP_FRACTION))


def center_crop_box(width: int, height: int, size: int) -> tuple[int, int, int, int]:
    """(left, top, size, size) in the middle of the image, as torchvision's CenterCrop rounds it."""
    return int(round((width - size) / 2.0)), int(round((height - size) / 2.0)), size, size


def normalize(pixels: np.ndarray, layout: str = "NCHW") -> np.ndarray:
    """uint8 HWC -> float32 CHW (or HWC for layout NHWC), per channel by ImageNet's mean and std."""
    return data.normalize(pixels[None], layout, MEAN, STD)[0]


_skip_logged = False


def decode(path: str) -> Any:
    """The file as an RGB image (CMYK, grayscale and a PNG under a .JPEG name included); None where it cannot
    be decoded, said once per process (a pipeline counts them: images_skipped)."""
    from PIL import Image  # here, not at import: a framework's own environment may have no Pillow
    global _skip_logged
    try:
        with Image.open(path) as image:
            image.load()  # decodes now: a truncated file fails here, not later in a resize
            return image.convert("RGB")
    except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError... on bad bytes
        if not _skip_logged:
            _skip_logged = True
            print(f"skipping an image that cannot be decoded: {path} ({type(e).__name__}: {e}); "
                  f"further ones are counted in images_skipped", file=sys.stderr)
        return None


def train_pixels(path: str, image_size: int, rng: np.random.Generator) -> np.ndarray | None:
    """One training image: random-resized crop to image_size x image_size, random flip; uint8 HWC, or None."""
    from PIL import Image  # here, not at import: a framework's own environment may have no Pillow
    image = decode(path)
    if image is None:
        return None
    left, top, w, h = random_resized_crop_box(image.width, image.height, rng)
    out = image.resize((image_size, image_size), Image.BILINEAR, box=(left, top, left + w, top + h))
    if flips(rng):
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
    return np.asarray(out, dtype=np.uint8)


def val_pixels(path: str, image_size: int) -> np.ndarray | None:
    """One validation image: shorter side to image_size / 0.875, centre crop image_size; uint8 HWC, or None."""
    from PIL import Image  # here, not at import: a framework's own environment may have no Pillow
    image = decode(path)
    if image is None:
        return None
    resized = image.resize(shorter_side_to(image.width, image.height, val_resize_side(image_size)), Image.BILINEAR)
    left, top, w, h = center_crop_box(resized.width, resized.height, image_size)
    return np.asarray(resized.crop((left, top, left + w, top + h)), dtype=np.uint8)


def first_decodable(indices: np.ndarray, position: int, load) -> tuple[np.ndarray, int, int]:  # noqa: ANN001
    """(pixels, the index that gave them, images skipped): `load(index)` at `position` of `indices`, or where it
    cannot be decoded, at the next positions in turn, so a batch keeps its shape. A pipeline counts the skips."""
    for tried in range(len(indices)):
        index = int(indices[(position + tried) % len(indices)])
        pixels = load(index)
        if pixels is not None:
            return pixels, index, tried
    raise ImageFolderError(f"none of the {len(indices)} images of this shard can be decoded")
