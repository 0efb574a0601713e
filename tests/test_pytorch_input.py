"""PyTorch's input pipeline of an image folder (trainables/pytorch/input.py) as the loop uses it: what every row
says of it (data_format, input_images_per_sec, steady_input_wait_share), validation that scores each decodable image
once, `decode: gpu` (refused where torchvision does not import; its batching, fallbacks and crops with Pillow standing
in for nvJPEG; trained with torchvision's decoder where it imports: CI's second lane), a trial's memory on a set 10x
larger, and a trial across two nodes, each rank reading its own shard."""
from __future__ import annotations

import json
import shutil
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from sweep import imagenet_like
from trainables import images
from trainables.config import TrialConfig
from trainables.loop import Devices, run_trial


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 classes x 16 training and 6 validation images, as `data make imagenet-like` writes them."""
    root = tmp_path_factory.mktemp("imagenet-like")
    imagenet_like.make_imagenet_like(root, classes=4, per_class=16, val_per_class=6, quiet=True)
    return root


def config(**over: object) -> TrialConfig:
    return TrialConfig.from_dict(dict(framework="pytorch", model="resnet8_cifar", num_gpus=1, batch_per_gpu=16, epochs=1,
                                      lr=0.05, data="imagenet", image_size=32, warmup_steps=0, loader_workers=0) | over)


def torchvision_imports() -> bool:
    try:
        import torchvision.io  # noqa: F401
    except Exception:  # noqa: BLE001 - not installed, or built for another torch
        return False
    return True


def one_epoch(cfg: TrialConfig, data_dir: Path | None) -> dict:
    rows: list[dict] = []
    run_trial(cfg, Devices.of(["0"], emulated=True), None if data_dir is None else str(data_dir),
              lambda metrics, _: rows.append(metrics))
    return rows[0]


def test_every_row_says_what_was_read_and_the_pipelines_own_rate_and_synthetic_rows_leave_them_null(generated: Path) -> None:
    row = one_epoch(config(steps_per_epoch=2), generated)
    assert row["data_format"] == "jpeg" and row["input_images_per_sec"] > 0
    assert row["images_skipped"] == 0 and row["val_examples"] == 24
    # No warm-up step: every step is timed, so the timed steps waited input_wait_s, within a time under the epoch's.
    share = row["steady_input_wait_share"]
    assert 0 < share < 1 and share * row["epoch_time_s"] >= row["input_wait_s"] - 1e-9
    synthetic = one_epoch(config(data="synthetic", steps_per_epoch=1), None)
    assert synthetic["data_format"] is None and synthetic["input_images_per_sec"] is None
    assert "val_examples" not in synthetic and synthetic["images_skipped"] is None
    assert synthetic["steady_input_wait_share"] is None


def test_measure_reads_decodes_and_batches_the_asked_batches_and_counts_no_epochs_skips(generated: Path, tmp_path: Path) -> None:
    from trainables.pytorch.input import Pipeline

    shutil.copytree(generated / images.FOLDER, tmp_path / images.FOLDER)
    (tmp_path / "imagenet/train/n00000000/garbage.JPEG").write_bytes(b"not an image" * 20)
    folder = images.scan(tmp_path)
    pipeline = Pipeline(config(), folder, 32, 0, 1, 16, 4, on_gpu=False)
    assert pipeline.measure(3) > 0
    assert pipeline.take_skipped() == 0  # the pass alone is not an epoch: its skips are no row's
    batches = list(pipeline.train(0, lambda x, y: (x, y)))
    assert len(batches) == 4 and all(x.shape == (16, 3, 32, 32) for x, _ in batches)
    garbage = folder.train.paths.index(str(tmp_path / "imagenet/train/n00000000/garbage.JPEG"))
    reached = garbage in images.shard(len(folder.train.paths), 0, 0, 0, 1)[:4 * 16]  # 65 files, 64 read
    assert reached and pipeline.take_skipped() == 1  # read once, replaced by the next file, counted once


def test_validation_scores_each_decodable_image_once_and_counts_the_others_as_skipped(generated: Path, tmp_path: Path) -> None:
    from trainables.pytorch.input import Pipeline

    shutil.copytree(generated / images.FOLDER, tmp_path / images.FOLDER)
    val = tmp_path / "imagenet/val"
    (val / "n00000001/aaa_garbage.JPEG").write_bytes(b"garbage" * 50)  # sorted first in its class
    good = (val / "n00000002/n00000002_0.JPEG").read_bytes()
    (val / "n00000002/aaa_truncated.JPEG").write_bytes(good[:len(good) // 3])
    folder = images.scan(tmp_path)
    assert len(folder.val.paths) == 26
    pipeline = Pipeline(config(), folder, 32, 0, 1, 5, 1, on_gpu=False)
    labels = torch.cat([y for _, y in pipeline.val(26, lambda x, y: (x, y))]).tolist()
    bad = {i for i, p in enumerate(folder.val.paths) if "aaa_" in p}
    assert labels == [int(folder.val.labels[i]) for i in range(26) if i not in bad]  # in order, each once, none twice
    assert pipeline.take_skipped() == 2

    row = one_epoch(config(steps_per_epoch=1), tmp_path)  # the loop: scored == the decodable of the images asked for
    assert row["val_examples"] == 24 and row["images_skipped"] == 2 and 0 <= row["val_acc"] <= 1


def test_decode_gpu_is_refused_for_tensorflow_and_mxnet_at_spec_time_and_is_pytorchs_setting(tmp_path: Path) -> None:
    from sweep import spec
    from sweep.errors import SpecError

    def sweep(**fixed: object) -> Path:
        path = tmp_path / "s.yaml"
        settings = {"model": "resnet8_cifar", "num_gpus": 1, "batch_per_gpu": 8, "epochs": 1, "lr": 0.1, **fixed}
        path.write_text(f"description: test\nfixed: {json.dumps(settings)}\n")
        return path

    for framework in ("mxnet", "tensorflow"):
        with pytest.raises(SpecError, match=f"decode: gpu decodes JPEGs with nvJPEG through torchvision, in pytorch trials "
                                            f"only; {framework} decodes on the CPU"):
            spec.load(str(sweep(framework=framework, decode="gpu"))).trials("full")
        assert spec.load(str(sweep(framework=framework, decode="cpu"))).trials("full")[0].decode == "cpu"
    with pytest.raises(SpecError, match="decode"):
        spec.load(str(sweep(framework="pytorch", decode="nvjpeg"))).trials("full")
    default = spec.load(str(sweep(framework="pytorch"))).trials("full")[0]
    gpu = spec.load(str(sweep(framework="pytorch", decode="gpu"))).trials("full")[0]
    # A setting added later: its default leaves the trial ids of every older run as they were.
    assert default.decode == "cpu" and default.trial_id == TrialConfig.from_dict(
        {k: v for k, v in default.to_dict().items() if k != "decode"}).trial_id
    assert gpu.trial_id != default.trial_id and "decode=gpu" in gpu.label(("decode",))


def test_decode_gpu_is_refused_where_the_framework_check_finds_no_torchvision() -> None:
    from sweep import checks
    from trainables import probe
    from trainables.probe import FrameworkCheck

    problem = probe.gpu_decode_problem()  # lane 1: no torchvision beside the CPU torch; CI's lane 2: torchvision 0.28
    assert (problem is None) == torchvision_imports(), problem
    problem = problem or "torchvision cannot be imported here (ModuleNotFoundError: No module named 'torchvision')"
    assert problem.startswith("torchvision cannot be imported here")
    trials = [config(), config(decode="gpu", seed=1)]
    found = [FrameworkCheck("a1b2c3d4e5", "pytorch", ok=True, hostname="vm", no_gpu_decode=problem)]
    refusal = checks.gpu_decode_refusal(trials, found)
    assert refusal.startswith("decode: gpu (1 of 2 trials) cannot run on node vm a1b2c3d4: torchvision cannot")
    assert "\n" not in refusal
    assert checks.gpu_decode_refusal(trials[:1], found) is None  # nobody asked for it
    assert checks.gpu_decode_refusal(trials, [FrameworkCheck("n", "pytorch", ok=True)]) is None  # torchvision there


def test_decode_gpus_crop_is_the_cpu_paths_box_and_flip(generated: Path) -> None:
    """decode: gpu cannot run here (no torchvision); its transform can: the same draws give the same crop as Pillow's."""
    from trainables.pytorch.input import train_crop

    path = images.scan(generated).train.paths[5]
    with Image.open(path) as image:
        decoded = torch.from_numpy(np.asarray(image.convert("RGB")).copy()).permute(2, 0, 1)
    for seed in range(6):
        cpu = images.train_pixels(path, 64, images.sample_rng(seed, 0, 5)).astype(np.float32)
        device = train_crop(decoded, 64, images.sample_rng(seed, 0, 5)).permute(1, 2, 0).numpy()
        assert device.shape == cpu.shape == (64, 64, 3)
        assert np.abs(device - cpu).mean() < 2.0, seed  # the same box and flip: within rounding of 0..255
        assert np.abs(device - cpu[:, ::-1]).mean() > 4 * np.abs(device - cpu).mean()  # and not its mirror


def pillow_as_nvjpeg(data: torch.Tensor | list[torch.Tensor]) -> torch.Tensor | list[torch.Tensor]:
    """A stand-in for torchvision.io.decode_jpeg, which cannot be imported here: JPEG bytes -> CHW uint8 RGB, a
    RuntimeError for what nvJPEG refuses (a file that is no JPEG, a CMYK JPEG), a batch failing as a whole."""
    import io

    if isinstance(data, list):
        return [pillow_as_nvjpeg(blob) for blob in data]
    try:
        with Image.open(io.BytesIO(data.numpy().tobytes())) as image:
            if image.format != "JPEG" or image.mode == "CMYK":
                raise RuntimeError(f"nvJPEG: unsupported {image.format} {image.mode}")
            return torch.from_numpy(np.asarray(image.convert("RGB")).copy()).permute(2, 0, 1)
    except OSError as e:
        raise RuntimeError(f"nvJPEG: {e}") from None


def test_decode_gpus_batches_fall_back_to_pillow_count_what_nothing_decodes_and_match_the_cpu_path(
        generated: Path, tmp_path: Path) -> None:
    """decode: gpu's path with a Pillow stand-in for nvJPEG (on a GPU machine it is torchvision's, the rest the same):
    a PNG and a CMYK JPEG under .JPEG names decoded by Pillow instead, a garbage file counted and left out of its
    batch, and each image the CPU path's crop and flip of the same file (within resampling's rounding)."""
    from trainables.pytorch.input import Pipeline, _GpuDecode

    shutil.copytree(generated / images.FOLDER, tmp_path / images.FOLDER)
    train = tmp_path / "imagenet/train/n00000001"
    with Image.open(train / "n00000001_0.JPEG") as image:
        image.save(train / "png.JPEG", format="PNG")
        image.convert("CMYK").save(train / "cmyk.JPEG", format="JPEG")
    (train / "garbage.JPEG").write_bytes(b"garbage" * 50)
    folder = images.scan(tmp_path)
    pipeline = Pipeline(config(seed=3), folder, 32, 0, 1, 67, 1, on_gpu=False)
    on_main_thread = set()

    def decoder(data):  # noqa: ANN001, ANN202 - nvJPEG's stand-in, noting the thread it decodes on
        on_main_thread.add(threading.current_thread() is threading.main_thread())
        return pillow_as_nvjpeg(data)

    pipeline.gpu_decode = _GpuDecode(folder.train, 32, 3, torch.device("cpu"), decoder=decoder)
    [(x, y)] = list(pipeline.train(0, lambda x, y: (x, y)))  # the epoch's 67 files, one batch
    assert x.shape == (66, 3, 32, 32) and pipeline.take_skipped() == 1  # all but the garbage
    assert on_main_thread == {False}  # a batch ahead, on a thread of its own, not in the step's thread
    order = images.shard(67, 3, 0, 0, 1)
    kept = [int(i) for i in order if not folder.train.paths[i].endswith("garbage.JPEG")]
    assert y.tolist() == [int(folder.train.labels[i]) for i in kept]
    for row, index in enumerate(kept):
        cpu = images.normalize(images.train_pixels(folder.train.paths[index], 32, images.sample_rng(3, 0, index)))
        error = np.abs(x[row].numpy() - cpu).mean()  # 0.005-0.009 (of a range of ~4.5); another box 0.37-0.79
        assert error < 0.05, (error, folder.train.paths[index])
    assert pipeline.measure(1) > 0 and pipeline.take_skipped() == 0


@pytest.mark.slow
def test_a_decode_gpu_run_stops_in_one_line_before_any_trial_where_torchvision_does_not_import(tmp_path: Path) -> None:
    from conftest import run_cli

    if torchvision_imports():
        pytest.skip("torchvision imports here: decode: gpu runs (the next test)")
    imagenet_like.make_imagenet_like(tmp_path / "data", classes=2, per_class=4, val_per_class=2, quiet=True)
    sweep = tmp_path / "gpu_decode.yaml"
    sweep.write_text(textwrap.dedent("""\
        description: test
        fixed: {framework: pytorch, model: resnet8_cifar, data: imagenet, image_size: 32, num_gpus: 1, batch_per_gpu: 4,
                epochs: 1, lr: 0.1, decode: gpu}
        """))
    out = run_cli(str(sweep), "--data-dir", str(tmp_path / "data"), "--results", str(tmp_path / "r"), "--emulate-gpus", "1",
                  timeout=300)
    errors = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(errors) == 1 and errors[0].startswith("error: decode: gpu (1 of 1 trials)"), out.stderr
    assert "torchvision cannot be imported here" in errors[0]
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("*.parquet"))


@pytest.mark.slow
def test_decode_gpu_trains_through_the_sweep_where_torchvision_imports(tmp_path: Path, shared_ray: list[str]) -> None:
    """CI's second lane (.ci/run: the CUDA torch 2.13 with torchvision 0.28): decode: gpu's path with torchvision's
    own decode_jpeg, on the CPU device of an emulated GPU (on a GPU machine the same code decodes on the GPU): the
    framework check lets it run, a PNG under a .JPEG name is decoded by Pillow instead, a garbage file is counted."""
    from conftest import run_cli

    from sweep import store

    if not torchvision_imports():
        pytest.skip("torchvision does not import beside torch here (its refusal: the test above)")
    data_dir = tmp_path / "data"
    imagenet_like.make_imagenet_like(data_dir, classes=2, per_class=16, val_per_class=4, quiet=True)
    train = data_dir / "imagenet/train/n00000001"
    with Image.open(train / "n00000001_0.JPEG") as image:
        image.save(train / "png.JPEG", format="PNG")
    (train / "garbage.JPEG").write_bytes(b"garbage" * 50)
    sweep = tmp_path / "gpu_decode.yaml"
    sweep.write_text(textwrap.dedent("""        name: gpu_decode
        description: test
        fixed: {framework: pytorch, model: resnet8_cifar, data: imagenet, image_size: 32, num_gpus: 1, batch_per_gpu: 34,
                epochs: 1, lr: 0.05, warmup_steps: 0, decode: gpu, loader_workers: 1}
        """))
    results = tmp_path / "results"
    out = run_cli(str(sweep), "--data-dir", str(data_dir), "--results", str(results), *shared_ray, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    [row] = store.RunStore(store.run_dirs(results, "gpu_decode")[-1]).epochs().to_dict("records")
    assert row["decode"] == "gpu" and row["data_format"] == "jpeg" and row["input_images_per_sec"] > 0
    assert row["steps"] == 1 and row["images_skipped"] == 1  # the 34 files, one batch: the garbage left out
    assert row["val_examples"] == 8 and 0 <= row["val_acc"] <= 1


@pytest.mark.slow
def test_a_trials_peak_memory_on_a_set_10x_larger_stays_within_10_percent(tmp_path: Path) -> None:
    """Nothing loads the whole set: one epoch over every training image of a set, then of a set 10x larger, each
    trial in a fresh process decoding in that process (loader_workers 0, so that its peak holds the pipeline's
    memory); the rows' peak_host_rss_mib within 10%."""
    import subprocess
    import sys

    from conftest import ROOT

    peaks = {}
    for name, per_class in (("small", 12), ("large", 120)):
        data_dir = tmp_path / name
        imagenet_like.make_imagenet_like(data_dir, classes=4, per_class=per_class, val_per_class=2, quiet=True)
        cfg = dict(framework="pytorch", model="resnet8_cifar", num_gpus=1, batch_per_gpu=16, epochs=1, lr=0.05,
                   data="imagenet", image_size=32, warmup_steps=0, loader_workers=0, val_examples=8)
        out = subprocess.run([sys.executable, "-m", "trainables.local", json.dumps(cfg), "--data-dir", str(data_dir),
                              "--emulate"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        row = json.loads(out.stdout.strip().splitlines()[-1])
        assert row["steps"] == per_class * 4 // 16 and row["images_skipped"] == 0  # the whole set, read once
        peaks[name] = row["peak_host_rss_mib"]
    assert peaks["large"] <= 1.10 * peaks["small"], peaks  # (a decoded copy of the large set alone: ~270 MiB)


@pytest.fixture
def two_nodes():
    from conftest import two_node_cluster

    yield from two_node_cluster({"num_cpus": 2, "num_gpus": 1})


@pytest.mark.slow
def test_a_pytorch_trial_across_two_nodes_learns_a_generated_set_each_rank_reading_its_own_shard(
        two_nodes, tmp_path: Path) -> None:
    """data: imagenet on a real two-node Ray cluster on this machine (one fake GPU on each): a rank per node, each
    reading its own shard of the epoch; the set learned (chance 0.25); a broken file counted once, by the rank whose
    shard it is in (the row sums the ranks')."""
    from conftest import run_cli

    from sweep import store

    data_dir = tmp_path / "data"
    imagenet_like.make_imagenet_like(data_dir, classes=4, per_class=32, val_per_class=8, quiet=True)
    (data_dir / "imagenet/train/n00000003/broken.JPEG").write_bytes(b"\xff\xd8\xff not really a JPEG")
    sweep = tmp_path / "nodes.yaml"
    sweep.write_text(textwrap.dedent("""\
        name: imagenet_nodes
        description: "PyTorch across two nodes on a generated image folder"
        fixed: {framework: pytorch, model: resnet8_cifar, data: imagenet, image_size: 32, nodes: 2, gpus_per_node: 1,
                batch_per_gpu: 16, epochs: 6, lr: 0.05, warmup_steps: 1, loader_workers: 1}
        """))
    results = tmp_path / "results"
    out = run_cli(str(sweep), "--address", two_nodes.address, "--data-dir", str(data_dir), "--results", str(results),
                  "--scale", "full", timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    epochs = store.RunStore(store.run_dirs(results, "imagenet_nodes")[-1]).epochs().sort_values("epoch")
    assert len(epochs) == 6 and (epochs["nodes"] == 2).all()
    assert all(len(set(ids.split(";"))) == 2 for ids in epochs["ray_node_id"])  # a rank on each node
    assert (epochs["data_format"] == "jpeg").all() and (epochs["input_images_per_sec"] > 0).all()
    assert epochs["val_acc"].iloc[-1] > 0.45, epochs[["epoch", "val_acc", "train_acc"]]
    train = images.scan(data_dir).train.paths
    broken = train.index(str(data_dir / "imagenet/train/n00000003/broken.JPEG"))
    for row in epochs.itertuples():  # 129 files: 64 per rank, the one left over dropped; 4 steps of 16 read them all
        reached = [broken in images.shard(len(train), 0, row.epoch, rank, 2) for rank in range(2)]
        assert row.steps == 4 and row.images_skipped == sum(reached), (row.epoch, row.images_skipped, reached)
