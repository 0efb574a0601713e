"""The CIFAR-10 loader: both on-disk forms, and every bad file refused once, by name, before trials."""
from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from cifar_files import write_archive, write_cifar10
from conftest import run_cli

from trainables import data
from trainables.data import DataError, load_cifar10


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("good"), train_per_file=20, test=30)


def copy_of(good: Path, tmp_path: Path) -> Path:
    shutil.copytree(good, tmp_path / "data")
    return tmp_path / "data"


def test_folder_and_archive_load_the_same(good: Path, tmp_path: Path) -> None:
    folder = load_cifar10(str(good))
    archive = load_cifar10(str(write_archive(good, tmp_path / "tgz")))
    assert folder.train_x.shape == (100, 32, 32, 3) and folder.test_x.shape == (30, 32, 32, 3)
    assert folder.train_x.dtype == np.uint8
    np.testing.assert_array_equal(folder.train_x, archive.train_x)
    np.testing.assert_array_equal(folder.test_y, archive.test_y)


def test_decoded_pixels_and_labels_are_the_ones_written(tmp_path: Path) -> None:
    """The format, byte by byte as CIFAR-10 documents it, written here without the loader's or the writer's
    code: each row is 1024 red bytes, 1024 green, 1024 blue, each plane row-major (32 rows of 32)."""
    folder = tmp_path / data.FOLDER
    folder.mkdir()
    files = [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]
    for f, name in enumerate(files):
        rows, labels = [], []
        for i in range(2):
            n = 2 * f + i  # this image's number over all files, in order
            planes = np.zeros((3, 32, 32), dtype=np.uint8)
            planes[0], planes[1], planes[2] = 10 + n, 100 + n, 200 + n  # red, green, blue
            planes[0, 1, 2] = 7  # one red pixel at row 1, column 2: a row/column swap moves it
            rows.append(planes.reshape(-1))
            labels.append((3 * n + 1) % 10)
        with open(folder / name, "wb") as out:
            pickle.dump({b"batch_label": b"x", b"labels": labels, b"data": np.stack(rows), b"filenames": []}, out,
                        protocol=2)
    loaded = load_cifar10(str(tmp_path))
    assert loaded.train_x.shape == (10, 32, 32, 3) and loaded.test_x.shape == (2, 32, 32, 3)
    everything = np.concatenate([loaded.train_x, loaded.test_x])
    for n, image in enumerate(everything):  # NHWC, channels in RGB order, the files' order kept
        assert image[0, 0].tolist() == [10 + n, 100 + n, 200 + n], n
        assert image[1, 2, 0] == 7 and image[2, 1, 0] == 10 + n, n
    assert np.concatenate([loaded.train_y, loaded.test_y]).tolist() == [(3 * n + 1) % 10 for n in range(12)]


class RunsCode:
    """A pickle payload that would create a file if it were ever unpickled by a permissive loader."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_hostile_pickle_is_refused_without_running_it(good: Path, tmp_path: Path) -> None:
    root = copy_of(good, tmp_path)
    marker = tmp_path / "pwned"
    with open(root / data.FOLDER / "data_batch_3", "wb") as f:
        pickle.dump({b"data": RunsCode(marker), b"labels": [0]}, f, protocol=2)
    with pytest.raises(DataError, match=r"data_batch_3: refusing to load global (_?io|builtins)\.open"):
        load_cifar10(str(root))
    assert not marker.exists()


def corrupt_truncated(folder: Path) -> str:
    path = folder / "data_batch_2"
    path.write_bytes(path.read_bytes()[:500])
    return "data_batch_2"


def corrupt_missing(folder: Path) -> str:
    (folder / "test_batch").unlink()
    return "test_batch"


def corrupt_shape(folder: Path) -> str:
    with open(folder / "data_batch_1", "wb") as f:
        pickle.dump({b"data": np.zeros((4, 100), np.uint8), b"labels": [0, 1, 2, 3]}, f, protocol=2)
    return "data_batch_1"


def corrupt_labels(folder: Path) -> str:
    with open(folder / "data_batch_4", "wb") as f:
        pickle.dump({b"data": np.zeros((2, 3072), np.uint8), b"labels": [3, 12]}, f, protocol=2)
    return "data_batch_4"


def corrupt_hostile(folder: Path) -> str:
    with open(folder / "data_batch_5", "wb") as f:
        pickle.dump(RunsCode(folder / "pwned"), f, protocol=2)
    return "data_batch_5"


@pytest.mark.parametrize("corrupt", [corrupt_truncated, corrupt_missing, corrupt_shape, corrupt_labels, corrupt_hostile])
def test_bad_data_stops_the_run_before_any_trial(corrupt, good: Path, tmp_path: Path) -> None:
    root = copy_of(good, tmp_path)
    name = corrupt(root / data.FOLDER)
    results = tmp_path / "results"
    out = run_cli("resnet50_lr_scaling", "--data-dir", str(root), "--results", str(results), timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and "Traceback" not in out.stderr, out.stderr
    assert not results.exists()  # nothing written, no Ray started for nothing
    assert not (root / data.FOLDER / "pwned").exists()


def test_broken_archive_is_named(tmp_path: Path) -> None:
    (tmp_path / data.ARCHIVE).write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(DataError, match=data.ARCHIVE):
        load_cifar10(str(tmp_path))
