"""TensorFlow's input pipeline for image folders (trainables/tensorflow/input.py) and `data pack imagenet`
(sweep/data_pack.py, trainables/tensorflow/pack.py): the same crop boxes and validation pixels as PyTorch's
pipeline for the same seed, odd and bad files, TFRecord shards packed atomically, and trials that learn from them."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sweep import imagenet_like
from trainables import images

tf = pytest.importorskip("tensorflow")
from trainables.tensorflow import input as tf_input  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 classes x 24 training and 6 validation images, as `data make imagenet-like` writes them."""
    root = tmp_path_factory.mktemp("imagenet-like")
    imagenet_like.make_imagenet_like(root, classes=4, per_class=24, val_per_class=6, quiet=True)
    return root


def copy_of(generated: Path, tmp_path: Path) -> Path:
    shutil.copytree(generated / images.FOLDER, tmp_path / images.FOLDER, symlinks=True)
    return tmp_path


def pack_cli(data_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweep", "data", "pack", "imagenet", "--format", "tfrecord",
                           "--data-dir", str(data_dir), *extra], cwd=ROOT, capture_output=True, text=True, timeout=300)


def config(**settings):
    from trainables.config import TrialConfig
    return TrialConfig.from_dict({**dict(framework="tensorflow", model="resnet8_cifar", num_gpus=1, batch_per_gpu=16,
                                         epochs=1, lr=0.05, data="imagenet", image_size=32, loader_workers=2), **settings})


def test_tf_crop_boxes_are_pytorchs_for_the_same_draws() -> None:
    """images.crop_box in TF ops gives the box numpy gives, the fallback centre crops of extreme ratios included."""
    sizes = [(500, 375), (375, 500), (64, 64), (2000, 100), (100, 2000), (1, 1), (7, 300), (333, 334)]
    for width, height in sizes:
        for seed in range(20):
            draws = images.crop_draws(images.sample_rng(seed, 1, width))
            left, top, w, h = images.crop_box(width, height, draws)
            assert 0 <= left and left + w <= width and 0 <= top and top + h <= height
            got = tf_input.crop_box(tf.constant(width), tf.constant(height), tf.constant(draws)).numpy().tolist()
            assert got == [top, left, h, w], (width, height, seed)


def test_tf_training_and_validation_images_are_pytorchs_within_a_pixel_tolerance(generated: Path) -> None:
    """The same file, seed, epoch and index: TF's crop (decode_and_crop_jpeg, antialiased bilinear) against Pillow's
    (PyTorch's pipeline), and TF's validation resize + centre crop against Pillow's."""
    path = images.scan(generated).train.paths[5]
    encoded = tf.io.read_file(path)
    for index in range(6):
        want = images.train_pixels(path, 48, images.sample_rng(3, 1, index)).astype(np.float32)
        draws, flip = tf_input.augment_draws(3, 1, index)
        got = tf_input.train_image(encoded, tf.constant(draws), tf.constant(flip), 48).numpy()
        assert got.shape == want.shape == (48, 48, 3)
        assert np.abs(got - want).mean() < 2.0 and np.median(np.abs(got - want)) <= 1.5, index
    want = images.val_pixels(path, 48).astype(np.float32)
    got = tf_input.val_image(encoded, 48).numpy()
    assert got.shape == want.shape and np.abs(got - want).mean() < 2.0


def odd_files(folder: Path) -> None:
    """ImageNet's odd files under .JPEG names: a CMYK JPEG, a grayscale JPEG, a PNG; and two no decoder reads."""
    rgb = Image.fromarray(np.random.default_rng(0).integers(0, 255, (60, 80, 3), dtype=np.uint8))
    rgb.convert("CMYK").save(folder / "cmyk.JPEG", "JPEG")
    rgb.convert("L").save(folder / "gray.JPEG", "JPEG")
    rgb.save(folder / "png.JPEG", "PNG")
    rgb.save(folder / "whole.JPEG", "JPEG")
    (folder / "truncated.JPEG").write_bytes((folder / "whole.JPEG").read_bytes()[:300])
    (folder / "garbage.JPEG").write_bytes(b"not an image at all" * 10)


def test_odd_files_decode_and_bad_ones_are_counted_not_a_crash(generated: Path, tmp_path: Path) -> None:
    odd_files(tmp_path)
    draws, flip = tf_input.augment_draws(0, 0, 0)
    for name in ("cmyk", "gray", "png"):
        encoded = tf.io.read_file(str(tmp_path / f"{name}.JPEG"))
        pixels = tf_input.train_image(encoded, tf.constant(draws), tf.constant(flip), 32).numpy()
        want = images.val_pixels(str(tmp_path / f"{name}.JPEG"), 32).astype(np.float32)
        assert pixels.shape == (32, 32, 3)
        assert np.abs(tf_input.val_image(encoded, 32).numpy() - want).mean() < 3.0, name  # Pillow's colours
    # A class folder holding all of them: the pipeline counts the two bad ones, in training and in validation.
    root = copy_of(generated, tmp_path / "data")
    for split in ("train", "val"):
        odd_files(root / "imagenet" / split / "n00000001")
    folder = images.scan(root)
    pipeline = tf_input.Pipeline(config(), folder, 32, 0, 1, len(folder.train.paths), 1, False)
    batches = list(pipeline.train(0, lambda x, y: (x.numpy(), y.numpy())))
    assert len(batches) == 1 and batches[0][0].shape == (len(folder.train.paths), 32, 32, 3)
    assert pipeline.take_skipped() == 2 and pipeline.data_format == "jpeg"
    scored = sum(len(y) for _, y in pipeline.val(len(folder.val.paths), lambda x, y: (x.numpy(), y.numpy())))
    assert scored == len(folder.val.paths) - 2 and pipeline.take_skipped() == 2


def test_ranks_read_disjoint_shards_shuffled_by_seed(generated: Path) -> None:
    folder = images.scan(generated)

    def labels(seed: int, rank: int, world: int, epoch: int = 0) -> list[int]:
        pipeline = tf_input.Pipeline(config(seed=seed), folder, 32, rank, world, 8, 6 // world, False)
        return [int(v) for _, y in pipeline.train(epoch, lambda x, y: (x, y)) for v in y.numpy()]

    whole = labels(0, 0, 1)
    assert sorted(whole) == sorted(folder.train.labels[images.shard(96, 0, 0, 0, 1)[:48]].tolist())
    assert whole == [int(folder.train.labels[i]) for i in images.shard(96, 0, 0, 0, 1)[:48]]  # the shard's order
    assert whole == labels(0, 0, 1) and whole != labels(1, 0, 1) and whole != labels(0, 0, 1, epoch=1)
    assert labels(0, 1, 2) == [int(folder.train.labels[i]) for i in images.shard(96, 0, 0, 1, 2)[:24]]


def test_packed_tfrecord_shards_are_checked_and_read_by_the_pipeline(generated: Path, tmp_path: Path) -> None:
    """trainables/tensorflow/pack.py in this process (the CLI's run of it in TensorFlow's interpreter: the slow test
    below), its manifest checked by the driver's check, the shards read by the pipeline."""
    from sweep import data_pack
    from sweep.errors import UsageError
    from trainables.tensorflow import pack

    root = copy_of(generated, tmp_path)
    odd_files(root / "imagenet/train/n00000002")
    packed = root / "imagenet/tfrecord"
    manifest = pack.pack(root / "imagenet", packed)
    folder = images.scan(root)
    assert data_pack.check_manifest(packed / images.PACKED, folder, "tfrecord") == manifest
    assert manifest["format"] == "tfrecord" and manifest["classes"] == list(folder.classes)
    assert manifest["splits"]["train"] == {"records": 96 + 4, "skipped": ["train/n00000002/garbage.JPEG",
                                                                          "train/n00000002/truncated.JPEG"]}
    assert manifest["splits"]["val"] == {"records": 24, "skipped": []}
    assert sorted(p.name for p in packed.iterdir()) == [images.PACKED, "train-00000-of-00001", "validation-00000-of-00001"]
    # tf_cnn_benchmarks' features, 1-based labels
    record = next(iter(tf.data.TFRecordDataset(str(packed / "validation-00000-of-00001"))))
    features = tf.train.Example.FromString(record.numpy()).features.feature
    assert features["image/class/label"].int64_list.value[0] == 1 and features["image/class/text"].bytes_list.value
    pipeline = tf_input.Pipeline(config(), folder, 32, 0, 1, 16, 3, False)
    assert pipeline.data_format == "tfrecord"
    batches = list(pipeline.train(0, lambda x, y: (x.numpy(), y.numpy())))
    assert len(batches) == 3 and all(x.shape == (16, 32, 32, 3) for x, _ in batches)
    assert pipeline.take_skipped() == 0  # the undecodable files were left out when packed
    val = list(pipeline.val(24, lambda x, y: (x.numpy(), y.numpy())))
    assert np.concatenate([y for _, y in val]).tolist() == folder.val.labels.tolist()
    # A manifest that does not add up to the folder's files is refused in one line.
    (root / "imagenet/val/n00000001/extra.JPEG").write_bytes(b"")
    with pytest.raises(UsageError, match="val: 24 images packed or skipped, the folder has 25"):
        data_pack.check_manifest(packed / images.PACKED, images.scan(root), "tfrecord")


@pytest.mark.slow
def test_the_cli_packs_in_place_and_packing_again_replaces_it_whole(generated: Path, tmp_path: Path) -> None:
    root = copy_of(generated, tmp_path)
    out = pack_cli(root)
    assert out.returncode == 0 and "train 96 images (0 skipped), val 24 images (0 skipped)" in out.stdout, out.stderr
    packed = root / "imagenet/tfrecord"
    manifest = json.loads((packed / images.PACKED).read_text())
    assert not list((root / "imagenet").glob(".tfrecord-packing-*"))
    (root / "imagenet/train/n00000001/extra.JPEG").write_bytes((root / "imagenet/train/n00000001/n00000001_0.JPEG").read_bytes())
    again = pack_cli(root)
    assert again.returncode == 0, again.stderr
    assert json.loads((packed / images.PACKED).read_text())["splits"]["train"]["records"] == 97
    assert manifest["splits"]["train"]["records"] == 96 and not list((root / "imagenet").glob(".tfrecord-*"))


def test_pack_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    for args in ((tmp_path / "none",), ()):
        out = pack_cli(*args) if args else subprocess.run(
            [sys.executable, "-m", "sweep", "data", "pack", "imagenet", "--format", "tiff", "--data-dir", str(tmp_path)],
            cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and out.stderr.startswith("error: ") and len(out.stderr.strip().splitlines()) == 1, out.stderr
    empty = tmp_path / "empty"
    (empty / "imagenet/train/a").mkdir(parents=True)
    (empty / "imagenet/val/a").mkdir(parents=True)
    out = pack_cli(empty)
    assert out.returncode == 2 and "empty: no images" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (empty / "imagenet/tfrecord").exists()


@pytest.mark.slow  # TensorFlow imported in the env's interpreter: ~5 s
def test_pack_runs_in_the_interpreter_env_names_and_refuses_one_it_cannot_use_in_one_line(generated: Path,
                                                                                          tmp_path: Path) -> None:
    root = copy_of(generated, tmp_path)
    python = tmp_path / "tf-python"  # an interpreter of its own, as `run --env tensorflow=...` names one
    python.write_text(f"#!/bin/sh\ntouch {tmp_path}/ran\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    done = pack_cli(root, "--env", f"tensorflow={python}")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ran").exists() and (root / "imagenet/tfrecord" / images.PACKED).exists()
    for given, said in ((f"mxnet={python}", "written by tensorflow, not mxnet"),
                        ("tensorflow={image_uri: tf:latest}", "not in image_uri"),
                        (f"tensorflow={tmp_path}/none/python", "no interpreter"),
                        ("caffe=/usr/bin/python3", "unknown framework")):
        out = pack_cli(root, "--env", given)
        assert out.returncode == 2 and said in out.stderr and len(out.stderr.strip().splitlines()) == 1, (given, out.stderr)


@pytest.mark.slow
def test_a_stopped_pack_leaves_nothing_and_an_earlier_pack_stays_whole(generated: Path, tmp_path: Path) -> None:
    root = copy_of(generated, tmp_path)
    assert pack_cli(root).returncode == 0
    packed = root / "imagenet/tfrecord"
    for attempt in range(3):
        before = {p.name: p.read_bytes() for p in packed.iterdir()}
        (root / f"imagenet/train/n00000001/extra{attempt}.JPEG").write_bytes(
            (root / "imagenet/train/n00000001/n00000001_0.JPEG").read_bytes())
        pack = subprocess.Popen([sys.executable, "-m", "sweep", "data", "pack", "imagenet", "--format", "tfrecord",
                                 "--data-dir", str(root)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        deadline = time.monotonic() + 120
        while not list((root / "imagenet").glob(".tfrecord-packing-*/train-*")):  # the new pack is writing its shards
            assert pack.poll() is None and time.monotonic() < deadline, "the pack ended before it was stopped"
            time.sleep(0.01)
        # Frozen where it is (the driver and the framework's interpreter it started), then Ctrl-C, then let go. On a
        # loaded machine this test may get the core back only once the pack has ended: that pack proves nothing, and
        # the stop is tried again on a pack of one more image (the pack it made is then the earlier one).
        os.killpg(pack.pid, signal.SIGSTOP)
        if pack.poll() is None and list((root / "imagenet").glob(".tfrecord-packing-*")):
            break
        with contextlib.suppress(ProcessLookupError):  # the pack's processes may all have ended already
            os.killpg(pack.pid, signal.SIGCONT)
        pack.wait(timeout=60)
    else:
        pytest.fail("each of 3 packs ended before this test could stop it")
    os.killpg(pack.pid, signal.SIGINT)  # Ctrl-C: to the driver and the framework's interpreter it started
    os.killpg(pack.pid, signal.SIGCONT)
    pack.wait(timeout=60)
    assert pack.returncode != 0
    assert not list((root / "imagenet").glob(".tfrecord-packing-*"))
    assert {p.name: p.read_bytes() for p in packed.iterdir()} == before  # the earlier pack, as it was


def test_a_tensorflow_trial_reads_jpegs_counts_bad_ones_and_sizes_its_output_to_the_classes(generated: Path,
                                                                                           tmp_path: Path) -> None:
    from trainables.loop import Devices, run_trial

    root = copy_of(generated, tmp_path)
    train = root / "imagenet/train/n00000001"
    (train / "garbage.JPEG").write_bytes(b"garbage" * 50)
    rows = []
    cfg = config(batch_per_gpu=97, warmup_steps=0)
    run_trial(cfg, Devices.of(["0"], emulated=True), str(root), lambda metrics, _: rows.append(metrics))
    row = rows[0]
    assert row["images_skipped"] == 1 and row["data_format"] == "jpeg" and row["input_images_per_sec"] > 0
    assert row["data_kind"] == "imagenet-generated" and row["val_examples"] == 24 and row["steps"] == 1
    assert 0 <= row["val_acc"] <= 1


@pytest.mark.slow
# Heavy (issue 46: ~60 CPU-s a case). CI learns through tf.data in the sweep across two nodes from TFRecord (below), and a
# trial's loop reads JPEGs, counting a broken one (above).
@pytest.mark.heavy
@pytest.mark.parametrize("packed", [False, True], ids=["jpeg", "tfrecord"])
def test_tensorflow_trials_on_1_and_2_gpus_learn_a_generated_image_folder_through_the_sweep(tmp_path: Path,
                                                                                           packed: bool,
                                                                                           shared_ray: list[str]) -> None:
    from conftest import run_cli

    from sweep import store

    data_dir = tmp_path / "data"
    imagenet_like.make_imagenet_like(data_dir, classes=4, per_class=48, val_per_class=12, quiet=True)
    if packed:
        assert pack_cli(data_dir).returncode == 0
    sweep = tmp_path / "imagenet.yaml"
    sweep.write_text(textwrap.dedent("""\
        description: "Test sweep: TensorFlow on a generated image folder through tf.data"
        fixed: {framework: tensorflow, model: resnet8_cifar, data: imagenet, image_size: 32, batch_per_gpu: 16,
                epochs: 6, lr: 0.05, warmup_steps: 1}
        grid: {num_gpus: [1, 2]}
        """))
    results = tmp_path / "results"
    # On the session's shared Ray (its emulated GPUs): the subject is the input pipeline, not Ray's start.
    out = run_cli(str(sweep), "--data-dir", str(data_dir), "--results", str(results), *shared_ray, timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    epochs = store.RunStore(store.run_dirs(results, "imagenet")[-1]).epochs()
    assert len(epochs) == 12
    assert set(epochs["data_kind"]) == {"imagenet-generated"}
    assert set(epochs["data_format"]) == {"tfrecord" if packed else "jpeg"} and (epochs["input_images_per_sec"] > 0).all()
    assert (epochs["images_skipped"] == 0).all() and (epochs["val_examples"] == 48).all()
    last = epochs[epochs["epoch"] == 5].set_index("num_gpus")
    assert last.loc[1, "val_acc"] > 0.6 and last.loc[2, "val_acc"] > 0.45, last[["val_acc", "train_acc"]]  # chance: 0.25


@pytest.fixture
def two_nodes():
    from conftest import two_node_cluster

    yield from two_node_cluster({"num_cpus": 2, "num_gpus": 1})


@pytest.mark.slow
def test_a_tensorflow_trial_across_two_nodes_learns_from_tfrecord_each_worker_reading_its_own_shard(
        two_nodes, tmp_path: Path) -> None:
    """data: imagenet packed as TFRecord, on a real two-node Ray cluster on this machine (one fake GPU on each):
    MultiWorkerMirroredStrategy, a worker per node, each reading its own shard of the epoch's records; learned."""
    from conftest import run_cli

    from sweep import store

    data_dir = tmp_path / "data"
    imagenet_like.make_imagenet_like(data_dir, classes=4, per_class=32, val_per_class=8, quiet=True)
    assert pack_cli(data_dir).returncode == 0
    sweep = tmp_path / "nodes.yaml"
    sweep.write_text(textwrap.dedent("""\
        name: imagenet_nodes
        description: "TensorFlow across two nodes on a generated image folder packed as TFRecord"
        fixed: {framework: tensorflow, model: resnet8_cifar, data: imagenet, image_size: 32, nodes: 2, gpus_per_node: 1,
                batch_per_gpu: 16, epochs: 6, lr: 0.05, warmup_steps: 1, loader_workers: 1}
        """))
    results = tmp_path / "results"
    out = run_cli(str(sweep), "--address", two_nodes.address, "--data-dir", str(data_dir), "--results", str(results),
                  "--scale", "full", timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    epochs = store.RunStore(store.run_dirs(results, "imagenet_nodes")[-1]).epochs().sort_values("epoch")
    assert len(epochs) == 6 and (epochs["nodes"] == 2).all()
    assert all(len(set(ids.split(";"))) == 2 for ids in epochs["ray_node_id"])  # a worker on each node
    assert (epochs["data_format"] == "tfrecord").all() and (epochs["images_skipped"] == 0).all()
    assert epochs["val_acc"].iloc[-1] > 0.45, epochs[["epoch", "val_acc", "train_acc"]]  # chance: 0.25
