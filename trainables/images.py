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

import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

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


PACKED = "PACKED.json"  # a packed form's manifest (DATA_DIR/imagenet/FORMAT/), written last by `data pack imagenet`
PACK_NAMES = {"recordio": "RecordIO", "tfrecord": "TFRecord"}
READS_PACKED = {"mxnet": "recordio"}  # frameworks whose pipeline reads a packed form only: ImageRecordIter, RecordIO
PACK_ORDER_SEED = 0  # the training records' one fixed order in every packed form


def pack_folder(folder: Path, out: Path, fmt: str, write_split: Callable[[Split, np.ndarray, str, ImageFolder], dict]) -> dict:
    """A pack of either format into `out`: the folder scanned; its training images written in one fixed shuffle (as
    im2rec shuffles its list: a rank's contiguous block of a class-sorted file would hold a few classes only) and its
    val images in order, each split by `write_split(split, order, split_name, folder)` -> {"records", "skipped": paths
    relative to the folder's root}; then the manifest, last (its presence says the pack is whole). The manifest."""
    if folder.name != FOLDER:
        raise ImageFolderError(f"{folder}: expected a folder named {FOLDER} (DATA_DIR/{FOLDER})")
    found = scan(folder.parent)
    out.mkdir(parents=True, exist_ok=True)
    splits = {"train": write_split(found.train, np.random.default_rng(PACK_ORDER_SEED).permutation(len(found.train.paths)),
                                   "train", found),
              "val": write_split(found.val, np.arange(len(found.val.paths)), "val", found)}
    for name, entry in splits.items():
        if entry["records"] == 0:
            raise ImageFolderError(f"{found.root / name}: none of its images can be decoded")
    manifest = {"format": fmt, "classes": list(found.classes), "splits": splits}
    (out / PACKED).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def pack_main(argv: list[str] | None, framework: str, fmt: str, pack: Callable[[Path, Path], dict]) -> int:
    """`python -m trainables.FRAMEWORK.pack --folder D/imagenet --out TMP`: run `pack`; bad input one line, exit 2."""
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m trainables.{framework}.pack",
                                     description=f"pack an image folder (DATA_DIR/{FOLDER}) as {PACK_NAMES[fmt]}")
    parser.add_argument("--folder", required=True, help=f"the image folder: DATA_DIR/{FOLDER}")
    parser.add_argument("--out", required=True, help=f"the folder to write the packed splits and {PACKED} to")
    args = parser.parse_args(argv)
    try:
        manifest = pack(Path(args.folder), Path(args.out))
    except ImageFolderError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an output folder that cannot be written
        print(f"error: {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    counts = ", ".join(f"{name} {entry['records']} images ({len(entry['skipped'])} skipped)"
                       for name, entry in manifest["splits"].items())
    print(f"packed {args.folder} as {PACK_NAMES[fmt]} in {args.out}: {counts}")
    return 0


def pack_command(folder: ImageFolder, fmt: str) -> str:
    return f"python -m sweep data pack imagenet --format {fmt} --data-dir {folder.root.parent}"


def require_packed(folder: ImageFolder, fmt: str) -> dict:
    """The manifest of the folder's packed form `fmt` (DATA_DIR/imagenet/FMT/PACKED.json), checked against the folder's
    classes; an ImageFolderError naming the pack command where there is none or it is of other classes."""
    path = folder.root / fmt / PACKED
    if not path.is_file():
        raise ImageFolderError(f"{folder.root}: not packed as {PACK_NAMES[fmt]}, which this framework reads: "
                               f"{pack_command(folder, fmt)}")
    try:
        manifest = json.loads(path.read_text())
        classes = tuple(manifest["classes"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ImageFolderError(f"{path}: cannot be read ({type(e).__name__}): {pack_command(folder, fmt)}") from None
    if classes != folder.classes:
        raise ImageFolderError(f"{path}: packed from other classes than {folder.root / 'train'} holds now "
                               f"({len(classes)} against {len(folder.classes)}): pack again: {pack_command(folder, fmt)}")
    return manifest


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


def crop_draws(rng: np.random.Generator) -> np.ndarray:
    """The random numbers of one random-resized crop, drawn before the image's size is known: CROP_TRIES areas
    (fractions), CROP_TRIES log aspect ratios, then the left and top positions as fractions of their room. A
    fixed count (2 * CROP_TRIES + 2, float64), so that a pipeline that knows the size only inside its graph
    (TensorFlow's) gets the same box from the same draws: crop_box(width, height, draws)."""
    areas = rng.uniform(*CROP_SCALE, size=CROP_TRIES)
    log_ratios = rng.uniform(math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1]), size=CROP_TRIES)
    return np.concatenate([areas, log_ratios, rng.random(2)])


def crop_box(width: int, height: int, draws: np.ndarray) -> tuple[int, int, int, int]:
    """(left, top, crop width, crop height) of torchvision's RandomResizedCrop from crop_draws' numbers: an area of
    8-100% of the image at a log-uniform aspect ratio in [3/4, 4/3], the first of ten tries that fits, then the
    centre crop at the nearest allowed ratio. Pure arithmetic: trainables/tensorflow/input.py computes it in TF ops."""
    area = width * height
    for i in range(CROP_TRIES):
        target, ratio = area * draws[i], math.exp(draws[CROP_TRIES + i])
        w, h = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))  # round half to even, as tf.round
        if 0 < w <= width and 0 < h <= height:
            left = int(draws[2 * CROP_TRIES] * (width - w + 1))
            top = int(draws[2 * CROP_TRIES + 1] * (height - h + 1))
            return left, top, w, h
    in_ratio = width / height
    if in_ratio < CROP_RATIO[0]:
        w, h = width, round(width / CROP_RATIO[0])
    elif in_ratio > CROP_RATIO[1]:
        w, h = round(height * CROP_RATIO[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def random_resized_crop_box(width: int, height: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """The crop box of an image of width x height for the draws of `rng` (crop_draws, then crop_box)."""
    return crop_box(width, height, crop_draws(rng))


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


def steady_rate(batch_sizes: Iterable[int], startup: int, clock: Callable[[], float]) -> float:
    """Images/s of a pipeline after its first `startup` batches, which carry its start (worker processes forked,
    threads and graphs made) and arrive together once the workers have each made one: timed from the last of them
    to the end, so the figure is what the pipeline keeps up while training, not its start. `clock` reads the time
    (and waits for a device's work first where the batches are made on one)."""
    sizes = iter(batch_sizes)
    for _ in range(startup):
        next(sizes)
    t0 = clock()
    produced = sum(sizes)
    return produced / (clock() - t0)
