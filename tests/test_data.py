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
