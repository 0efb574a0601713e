"""`python -m trainables.mxnet.pack --folder D/imagenet --out TMP`: an image folder as RecordIO, im2rec's format.

MXNet's ImageRecordIter (trainables/mxnet/input.py) reads RecordIO: TMP/train.rec + train.idx and TMP/val.rec +
val.idx, written by mx.recordio.MXIndexedRecordIO, each record an IRHeader (the class's label, the record's
index) and the image's bytes, as `im2rec.py --pass-through` writes them. The training records are in one fixed
shuffled order, as im2rec shuffles its list: ImageRecordIter gives each rank a contiguous block of records
(num_parts), and a block of a class-sorted file would hold a few classes only. Validation keeps the scan's order.

An image goes in as its own bytes where it is a JPEG that Pillow reads as RGB or grayscale and MXNet's decoder
(OpenCV) reads too; other images that Pillow decodes (a PNG or a CMYK JPEG under a .JPEG name) are re-encoded as
RGB JPEGs, so that their colours are Pillow's, as in the other frameworks' pipelines; the rest are listed as
skipped. TMP/PACKED.json, written last, says what was packed:
{"format": "recordio", "classes": [...], "splits": {"train": {"records": n, "skipped": [paths]}, "val": ...}},
the skipped paths relative to the folder. sweep/data_pack.py runs this in MXNet's interpreter, checks the
manifest and renames TMP into place. Bad input: one line `error: ...`, exit 2.
"""
from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np

import trainables.mxnet  # noqa: F401  (aliases np.bool before mxnet is imported)
import mxnet as mx  # noqa: E402

from trainables import images

FORMAT = "recordio"
RECORD_FILES = {"train": "train", "val": "val"}  # split -> the stem of its .rec and .idx, as im2rec names them
JPEG_QUALITY = 95  # im2rec's default, for the images re-encoded
PASSED_MODES = ("RGB", "L")  # JPEGs stored as they are: OpenCV decodes these to the same RGB pixels as Pillow


def record_bytes(path: str) -> bytes | None:
    """The bytes a record holds for one image: the file's own, or a re-encoded RGB JPEG; None where no decoder can."""
    from PIL import Image  # here: only packing needs Pillow (the mxnet extra holds it)

    raw = Path(path).read_bytes()
    try:
        with Image.open(io.BytesIO(raw)) as image:
            image.load()  # decodes now: a truncated file fails here
            if image.format == "JPEG" and image.mode in PASSED_MODES and _mxnet_decodes(raw):
                return raw
            out = io.BytesIO()
            image.convert("RGB").save(out, "JPEG", quality=JPEG_QUALITY)
            return out.getvalue()
    except Exception:  # Pillow raises OSError, SyntaxError, ValueError... on bad bytes
        return None


def _mxnet_decodes(raw: bytes) -> bool:
    try:
        mx.image.imdecode(raw)
        return True
    except Exception:  # MXNetError or OSError, by where OpenCV stops
        return False


def write_split(split: images.Split, order: np.ndarray, root: Path, out: Path, stem: str) -> dict:
    """Write out/STEM.rec and .idx: the images of `split` in `order`; the split's manifest entry."""
    writer = mx.recordio.MXIndexedRecordIO(str(out / f"{stem}.idx"), str(out / f"{stem}.rec"), "w")
    records, skipped = 0, []
    try:
        for index in order:
            path = split.paths[int(index)]
            blob = record_bytes(path)
            if blob is None:
                skipped.append(str(Path(path).relative_to(root)))
                continue
            header = mx.recordio.IRHeader(0, float(split.labels[int(index)]), records, 0)
            writer.write_idx(records, mx.recordio.pack(header, blob))
            records += 1
    finally:
        writer.close()
    return {"records": records, "skipped": sorted(skipped)}


def pack(folder: Path, out: Path) -> dict:
    """Write the folder's two splits as RecordIO into `out`, then its manifest; the manifest."""
    return images.pack_folder(folder, out, FORMAT,
                              lambda split, order, name, found: write_split(split, order, found.root, out, RECORD_FILES[name]))


def main(argv: list[str] | None = None) -> int:
    return images.pack_main(argv, "mxnet", FORMAT, pack)


if __name__ == "__main__":
    sys.exit(main())
