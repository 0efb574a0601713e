"""MXNet's side of data: imagenet: the RecordIO pack (trainables/mxnet/pack.py, im2rec's format), ImageRecordIter's
pipeline (trainables/mxnet/input.py): parts that cover an epoch once across ranks, crops and validation pixels
that agree with trainables/images.py's, what the pack skipped counted in images_skipped, a folder not packed
refused before any trial, and MXNet trials that learn a generated set through the sweep."""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sweep import imagenet_like
from trainables import images
from trainables.config import TrialConfig
from trainables.images import ImageFolderError

import trainables.mxnet  # noqa: F401,E402  (aliases numpy.bool before mxnet is imported)
import mxnet as mx  # noqa: E402
from trainables.mxnet import pack  # noqa: E402
from trainables.mxnet.input import Pipeline  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 classes x 16 training and 4 validation images, as `data make imagenet-like` writes them."""
    root = tmp_path_factory.mktemp("imagenet-like")
    imagenet_like.make_imagenet_like(root, classes=4, per_class=16, val_per_class=4, quiet=True)
    return root


def config(**over: object) -> TrialConfig:
    return TrialConfig.from_dict(dict(framework="mxnet", model="resnet8_cifar", num_gpus=1, batch_per_gpu=16, epochs=1,
                                      lr=0.05, data="imagenet", image_size=32, warmup_steps=0, loader_workers=1) | over)


def with_odd_files(generated: Path, tmp_path: Path) -> Path:
    """A copy of the set with ImageNet's odd files (CMYK, grayscale, PNG under .JPEG) and two it cannot decode."""
    shutil.copytree(generated / images.FOLDER, tmp_path / images.FOLDER)
    train, val = tmp_path / "imagenet/train/n00000001", tmp_path / "imagenet/val/n00000000"
    photo = Image.open(train / "n00000001_0.JPEG")
    photo.convert("CMYK").save(train / "cmyk.JPEG", "JPEG")
    photo.convert("L").save(train / "gray.JPEG", "JPEG")
    photo.save(train / "png.JPEG", "PNG")
    (train / "garbage.JPEG").write_bytes(b"not an image" * 20)
    good = (val / "n00000000_0.JPEG").read_bytes()
    (val / "a-truncated.JPEG").write_bytes(good[:len(good) // 3])  # sorts first: the first val image
    return tmp_path


def run_pack(folder: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainables.mxnet.pack", "--folder", str(folder), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def records(stem: Path) -> list[tuple[float, bytes]]:
    reader = mx.recordio.MXIndexedRecordIO(f"{stem}.idx", f"{stem}.rec", "r")
    out = []
    for key in reader.keys:
        header, blob = mx.recordio.unpack(reader.read_idx(key))
        out.append((float(header.label), blob))
    reader.close()
    return out


def packed(root: Path) -> Path:
    pack.pack(root / images.FOLDER, root / images.FOLDER / pack.FORMAT)
    return root


def test_pack_writes_im2recs_format_reencodes_odd_files_and_lists_the_undecodable(generated: Path, tmp_path: Path) -> None:
    root = with_odd_files(generated, tmp_path)
    out = tmp_path / "packing"
    done = run_pack(root / "imagenet", out)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / images.PACKED).read_text())
    assert manifest["format"] == "recordio" and manifest["classes"] == [f"n0000000{i}" for i in range(4)]
    assert manifest["splits"]["train"] == {"records": 67, "skipped": ["train/n00000001/garbage.JPEG"]}
    assert manifest["splits"]["val"] == {"records": 16, "skipped": ["val/n00000000/a-truncated.JPEG"]}
    folder = images.scan(root)
    train = records(out / "train")
    # In one fixed shuffled order (each rank's contiguous part holds every class), labels by the folder's classes.
    labels = [label for label, _ in train]
    assert labels != sorted(labels) and set(labels) == {0.0, 1.0, 2.0, 3.0}
    order = [int(i) for i in np.random.default_rng(images.PACK_ORDER_SEED).permutation(len(folder.train.paths))
             if not folder.train.paths[int(i)].endswith("garbage.JPEG")]
    by_path = dict(zip((folder.train.paths[i] for i in order), train))
    for path, (label, blob) in by_path.items():
        assert label == folder.train.labels[folder.train.paths.index(path)]
        name = Path(path).name
        if name in ("cmyk.JPEG", "png.JPEG"):  # re-encoded: an RGB JPEG with Pillow's colours
            assert blob[:2] == b"\xff\xd8" and blob != Path(path).read_bytes()
            with Image.open(io.BytesIO(blob)) as again:
                assert again.mode == "RGB"
            pillow = np.asarray(images.decode(path), dtype=np.float32)
            assert np.abs(mx.image.imdecode(blob).asnumpy() - pillow).mean() < 3
        else:  # an RGB or grayscale JPEG: its own bytes, as im2rec --pass-through stores it
            assert blob == Path(path).read_bytes()
    val = records(out / "val")
    assert [label for label, _ in val] == [float(v) for v in folder.val.labels[1:]]  # the folder's order, less the bad one


def test_pack_says_bad_input_in_one_line_exit_2(tmp_path: Path) -> None:
    done = run_pack(tmp_path / "imagenet", tmp_path / "out")
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "imagenet: missing" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def identified(generated_count: int, tmp_path: Path) -> Path:
    """A set whose every training image is one flat colour that names it (red: its index), packed."""
    for split, count in (("train", generated_count), ("val", 2)):
        for i in range(count):
            folder = tmp_path / "imagenet" / split / f"c{i % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (80, 60), (4 * i + 2, 100, 50)).save(folder / f"{i:03d}.JPEG", quality=95)
    return packed(tmp_path)


def red_ids(x: mx.nd.NDArray) -> list[int]:
    red = x.asnumpy()[:, 0].mean(axis=(1, 2)) * images.STD[0] * 255 + images.MEAN[0] * 255
    return [int(round((r - 2) / 4)) for r in red]


def test_ranks_read_disjoint_parts_that_cover_the_epoch_shuffled_by_seed_and_epoch(tmp_path: Path) -> None:
    root = identified(64, tmp_path)
    folder = images.scan(root)
    paths = [Path(p).stem for p in folder.train.paths]

    def epoch_ids(rank: int, world: int, epoch: int, seed: int = 0) -> list[int]:
        pipeline = Pipeline(config(seed=seed), folder, 16, rank, world, 8, 64 // (8 * world), on_gpu=False)
        return [i for x, _ in pipeline.train(epoch, lambda x, y: (x, y)) for i in red_ids(x)]

    ranks = [epoch_ids(rank, 2, 0) for rank in range(2)]
    assert sorted(ranks[0] + ranks[1]) == sorted(int(p) for p in paths)  # each image once in the epoch across ranks
    one = epoch_ids(0, 1, 0)
    assert sorted(one) == list(range(64)) and one == epoch_ids(0, 1, 0)  # reproducible
    assert one != epoch_ids(0, 1, 1) and one != epoch_ids(0, 1, 0, seed=1)  # another order by epoch and by seed


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical distributions."""
    xs = np.sort(np.concatenate([a, b]))
    return float(np.abs(np.searchsorted(np.sort(a), xs, "right") / len(a)
                        - np.searchsorted(np.sort(b), xs, "right") / len(b)).max())


def test_training_crops_and_flips_are_distributed_as_the_shared_transforms_draw_them(tmp_path: Path) -> None:
    """ImageRecordIter draws its own crops: recovered from images whose red and green say each pixel's x and y, 512
    crops' areas and aspect ratios have the distribution of images.random_resized_crop_box's (two-sample KS distance
    under 0.09, the 0.1% critical value for these sizes; measured 0.057 and 0.047), and about half are flipped."""
    width, height, size = 400, 300, 32
    x = np.linspace(0, 255, width)[None, :].repeat(height, 0)
    y = np.linspace(0, 255, height)[:, None].repeat(width, 1)
    pixels = np.stack([x, y, np.full_like(x, 128)], -1).astype(np.uint8)
    for split, count in (("train", 128), ("val", 2)):
        for i in range(count):
            folder = tmp_path / "imagenet" / split / f"c{i % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(folder / f"{i}.JPEG", quality=98)
    folder = images.scan(packed(tmp_path))
    pipeline = Pipeline(config(batch_per_gpu=32), folder, size, 0, 1, 32, 4, on_gpu=False)
    crops = []
    for epoch in range(4):
        for batch, _ in pipeline.train(epoch, lambda x, y: (x, y)):
            values = batch.asnumpy() * (images.STD * 255)[None, :, None, None] + (images.MEAN * 255)[None, :, None, None]
            for image in values:
                xs, ys = image[0] / 255 * (width - 1), image[1] / 255 * (height - 1)
                # The outer output pixels sample half a pixel's footprint in from the crop's edges.
                w, h = np.ptp(xs) * size / (size - 1), np.ptp(ys) * size / (size - 1)
                crops.append((w * h / (width * height), w / h, xs[:, 0].mean() > xs[:, -1].mean()))
    got = np.array(crops, dtype=float)
    rngs = [np.random.default_rng([9, i]) for i in range(4000)]
    want = np.array([(w * h / (width * height), w / h, images.flips(rng))
                     for rng in rngs for _, _, w, h in [images.random_resized_crop_box(width, height, rng)]], dtype=float)
    assert len(got) == 512
    assert ks_distance(got[:, 0], want[:, 0]) < 0.09
    assert ks_distance(np.log(got[:, 1]), np.log(want[:, 1])) < 0.09
    assert 0.06 < got[:, 0].min() and got[:, 0].max() < 1.05 and 0.72 < got[:, 1].min() and got[:, 1].max() < 1.39
    assert 0.4 < got[:, 2].mean() < 0.6


def test_validation_pixels_agree_with_the_shared_resize_and_centre_crop(generated: Path, tmp_path: Path) -> None:
    """Resized to image_size / 0.875 by area averaging (OpenCV's, as Pillow's antialiased resize of images.val_pixels
    averages) and centre-cropped: 1.8 of 255 levels apart on average, measured; OpenCV's plain bilinear was 5-6."""
    shutil.copytree(generated / images.FOLDER, tmp_path / images.FOLDER)
    folder = images.scan(packed(tmp_path))
    for size in (32, 64):
        pipeline = Pipeline(config(), folder, size, 0, 1, 8, 1, on_gpu=False)
        got = np.concatenate([x.asnumpy() for x, _ in pipeline.val(16, lambda x, y: (x, y))])
        want = np.stack([images.normalize(images.val_pixels(path, size)) for path in folder.val.paths[:16]])
        levels = np.abs(got - want) * (images.STD * 255)[None, :, None, None]
        assert got.shape == (16, 3, size, size) and levels.mean() < 3, levels.mean()
    assert pipeline.take_skipped() == 0


def test_a_trial_reads_the_pack_counts_what_it_skipped_and_sizes_its_output_to_the_classes(generated: Path, tmp_path: Path) -> None:
    from trainables.loop import Devices, run_trial

    root = packed(with_odd_files(generated, tmp_path))
    rows: list[dict] = []
    cfg = config(batch_per_gpu=68, steps_per_epoch=1)  # one step: the whole training split of 68 files
    run_trial(cfg, Devices.of(["0"], emulated=True), str(root), lambda metrics, _: rows.append(metrics))
    row = rows[0]
    # The garbage training file (in the epoch's one batch) and the truncated first val image: left out by the pack.
    assert row["images_skipped"] == 2 and row["val_examples"] == 16
    assert row["data_format"] == "recordio" and row["data_kind"] == "imagenet-generated"
    assert row["input_images_per_sec"] > 0 and row["input_wait_s"] > 0 and 0 <= row["val_acc"] <= 1
    from trainables.mxnet.backend import Backend

    backend = Backend(cfg, Devices.of(["0"], emulated=True), 32, num_classes=4)
    assert backend.logits(np.zeros((2, 3, 32, 32), np.float32)).shape == (2, 4)


def test_a_folder_not_packed_is_refused_naming_the_pack_command(generated: Path, tmp_path: Path) -> None:
    folder = images.scan(generated)
    with pytest.raises(ImageFolderError, match="python -m sweep data pack imagenet --format recordio --data-dir"):
        Pipeline(config(), folder, 32, 0, 1, 8, 1, on_gpu=False)
    shutil.copytree(generated / images.FOLDER, tmp_path / images.FOLDER)
    packed(tmp_path)
    shutil.copytree(tmp_path / "imagenet/train/n00000003", tmp_path / "imagenet/train/n00000004")  # a class added since
    with pytest.raises(ImageFolderError, match="packed from other classes"):
        Pipeline(config(), images.scan(tmp_path), 32, 0, 1, 8, 1, on_gpu=False)


def test_a_run_on_a_folder_not_packed_stops_before_any_trial_in_one_line(generated: Path, tmp_path: Path) -> None:
    from conftest import run_cli

    sweep = tmp_path / "imagenet.yaml"
    sweep.write_text('description: test\nfixed: {framework: mxnet, model: resnet8_cifar, data: imagenet, num_gpus: 1, '
                     'batch_per_gpu: 8, epochs: 1, lr: 0.1}\n')
    out = run_cli(str(sweep), "--data-dir", str(generated), "--results", str(tmp_path / "r"), "--emulate-gpus", "1",
                  timeout=300)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "not packed as RecordIO" in out.stderr and "data pack imagenet --format recordio" in out.stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("*.parquet"))


@pytest.mark.slow
def test_mxnet_trials_on_1_and_2_gpus_learn_a_packed_generated_image_folder_through_the_sweep(tmp_path: Path,
                                                                                              shared_ray: list[str]) -> None:
    from conftest import run_cli

    from sweep import store

    data_dir = tmp_path / "data"
    imagenet_like.make_imagenet_like(data_dir, classes=4, per_class=48, val_per_class=12, quiet=True)
    (data_dir / "imagenet/train/n00000002/broken.JPEG").write_bytes(b"\xff\xd8\xff not really a JPEG")
    done = run_cli("data", "pack", "imagenet", "--format", "recordio", "--data-dir", str(data_dir), timeout=300)
    assert done.returncode == 0 and "train 192 images (1 skipped)" in done.stdout, done.stdout + done.stderr
    sweep = tmp_path / "imagenet.yaml"
    sweep.write_text(textwrap.dedent("""\
        description: "Test sweep: MXNet on a generated image folder through ImageRecordIter"
        fixed: {framework: mxnet, model: resnet8_cifar, data: imagenet, image_size: 64, batch_per_gpu: 16,
                epochs: 5, lr: 0.05, warmup_steps: 1}
        grid: {num_gpus: [1, 2]}
        """))
    results = tmp_path / "results"
    # On the session's shared Ray (its emulated GPUs): the subject is the input pipeline, not Ray's start.
    out = run_cli(str(sweep), "--data-dir", str(data_dir), "--results", str(results), *shared_ray, timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    epochs = store.RunStore(store.run_dirs(results, "imagenet")[-1]).epochs()
    assert len(epochs) == 10
    assert set(epochs["data_kind"]) == {"imagenet-generated"} and set(epochs["data_format"]) == {"recordio"}
    assert (epochs["input_images_per_sec"] > 0).all() and (epochs["val_examples"] == 48).all()
    last = epochs[epochs["epoch"] == 4].set_index("num_gpus")
    assert last.loc[1, "val_acc"] > 0.6 and last.loc[2, "val_acc"] > 0.45, last[["val_acc", "train_acc"]]  # chance: 0.25
    # The broken file, left out by the pack, is counted in each epoch whose steps reach it in the shard.
    train = images.scan(data_dir).train.paths
    broken = train.index(str(data_dir / "imagenet/train/n00000002/broken.JPEG"))
    for row in epochs.itertuples():
        used = row.steps * row.batch_per_gpu * row.num_gpus
        assert row.images_skipped == int(broken in images.shard(len(train), 0, row.epoch, 0, 1)[:used]), row


@pytest.mark.slow
@pytest.mark.heavy
def test_an_mxnet_trial_across_two_nodes_reads_one_part_per_node_and_learns(tmp_path: Path) -> None:
    """dist_sync over two nodes (one emulated GPU each): each node's process reads its part of the records
    (num_parts 2); the rows sum the nodes' skipped files, which each counts in its own shard."""
    from conftest import run_cli, two_node_cluster

    from sweep import store

    data_dir = tmp_path / "data"
    imagenet_like.make_imagenet_like(data_dir, classes=4, per_class=32, val_per_class=8, quiet=True)
    (data_dir / "imagenet/train/n00000001/broken.JPEG").write_bytes(b"\xff\xd8\xff not really a JPEG")
    done = run_cli("data", "pack", "imagenet", "--format", "recordio", "--data-dir", str(data_dir), timeout=300)
    assert done.returncode == 0 and "train 128 images (1 skipped)" in done.stdout, done.stdout + done.stderr
    sweep = tmp_path / "imagenet_nodes.yaml"
    sweep.write_text(textwrap.dedent("""\
        description: "Test sweep: MXNet dist_sync across two nodes on a packed generated image folder"
        fixed: {framework: mxnet, model: resnet8_cifar, data: imagenet, image_size: 32, nodes: 2, gpus_per_node: 1,
                kvstore: dist_sync, batch_per_gpu: 16, epochs: 5, lr: 0.05, warmup_steps: 1}
        """))
    results = tmp_path / "results"
    cluster = two_node_cluster({"num_cpus": 2, "num_gpus": 2})
    address = next(cluster).address
    try:
        out = run_cli(str(sweep), "--address", address, "--data-dir", str(data_dir), "--results", str(results),
                      "--scale", "full", timeout=900)
    finally:
        cluster.close()
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    epochs = store.RunStore(store.run_dirs(results, "imagenet_nodes")[-1]).epochs()
    assert len(epochs) == 5 and set(epochs["data_format"]) == {"recordio"} and (epochs["nodes"] == 2).all()
    assert epochs["val_acc"].max() > 0.45, list(epochs["val_acc"])  # chance: 0.25
    train = images.scan(data_dir).train.paths
    broken = train.index(str(data_dir / "imagenet/train/n00000001/broken.JPEG"))
    for row in epochs.itertuples():
        reached = any(broken in images.shard(len(train), 0, row.epoch, rank, 2)[:row.steps * 16] for rank in range(2))
        assert row.images_skipped == int(reached), row
