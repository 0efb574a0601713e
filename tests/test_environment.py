"""Environment columns that say what ran: the driver's CUDA, each framework's CUDA and cuDNN build, the
cuDNN loaded, each from its own source; older runs' cuda_version and cudnn_version still read."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, EngineRuns, copy_run
from test_frameworks import FAKE_NVIDIA_SMI

from sweep.schema import ENV_COLUMNS, EPOCH_SCHEMA, LEGACY_COLUMNS
from sweep.store import RunStore
from trainables import environment

NEW = ("driver_cuda_version", "framework_cuda_version", "framework_cudnn_version", "cudnn_loaded_version")

# Each framework's own account of its build, read in a process of its own.
BUILD_INFO = {
    "tensorflow": "import json, tensorflow as tf; i = tf.sysconfig.get_build_info(); "
                  "print(json.dumps([i.get('cuda_version'), i.get('cudnn_version')]))",
    "mxnet": "import json, trainables.mxnet, mxnet as mx; f = mx.runtime.Features(); "
             "print(json.dumps([f.is_enabled('CUDA'), f.is_enabled('CUDNN')]))",
    "pytorch": "import json, torch; from trainables.environment import cudnn_version_text as t; "
               "v = torch.backends.cudnn.version(); print(json.dumps([torch.version.cuda, v and t(v)]))",
}


def test_schema_names_each_version_once() -> None:
    assert set(NEW) <= set(ENV_COLUMNS)
    assert not set(LEGACY_COLUMNS) & set(EPOCH_SCHEMA.names)


# TensorFlow's case (~9-18 s: its import) and PyTorch's (~8 CPU-s) run in the full suite, not in the fast lane
# (issue 46, the fast lane's 3 minutes).
@pytest.mark.parametrize("framework", ["mxnet", *(pytest.param(f, marks=pytest.mark.slow) for f in ("tensorflow", "pytorch"))])
def test_a_trials_rows_carry_the_frameworks_own_build_facts(framework: str) -> None:
    config = {"framework": framework, "model": "resnet8_cifar", "num_gpus": 1, "batch_per_gpu": 4, "epochs": 1,
              "steps_per_epoch": 1, "warmup_steps": 0, "lr": 0.05, "data": "synthetic"}
    out = subprocess.run([sys.executable, "-m", "trainables.local", json.dumps(config), "--emulate"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    row = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
    info = subprocess.run([sys.executable, "-c", BUILD_INFO[framework]], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    first, second = json.loads(info.stdout.strip().splitlines()[-1])
    if framework in ("tensorflow", "pytorch"):  # each names both versions (neither, in a CPU build)
        assert (row["framework_cuda_version"], row["framework_cudnn_version"]) == (first, second)
    else:  # MXNet says only whether it has CUDA and cuDNN: this machine's build has neither
        assert (first, second) == (False, False) and row["framework_cuda_version"] is None
        assert row["framework_cudnn_version"] is None
    # No GPU: no driver to ask, no cuDNN loaded.
    assert row["driver_cuda_version"] is None and row["cudnn_loaded_version"] is None
    assert not set(LEGACY_COLUMNS) & set(row)


@pytest.mark.parametrize("dist, expected", [("mxnet-cu117", "11.7"), ("mxnet_cu118", "11.8"), ("mxnet-cu102", "10.2"),
                                            ("mxnet-cu121", "12.1"), ("mxnet", None), ("mxnet-mkl", None)])
def test_the_cuda_of_a_build_is_read_from_its_distributions_name(dist: str, expected: str | None, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """MXNet's wheels say their CUDA only in their names (mxnet-cu117 is CUDA 11.7): an installed
    distribution of that name, made here as pip lays one out, providing a package `fakemx`."""
    from trainables import probe

    info = tmp_path / f"{dist.replace('-', '_')}-1.9.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.9.1\n")
    (info / "top_level.txt").write_text("fakemx\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert probe.cuda_in_name("fakemx") == expected
    assert probe.cuda_in_name("no_such_package_here") is None


def test_driver_cuda_is_the_drivers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """On a GPU node (only nvidia-smi faked) the driver's CUDA goes to its own column."""
    (tmp_path / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    found = environment.capture("gpu", 1)
    assert (found["gpu_model"], found["gpu_driver"], found["driver_cuda_version"]) == (
        "NVIDIA H100 80GB HBM3", "580.159.04", "13.0")


def test_loaded_cudnn_is_read_from_the_library_in_the_process(tmp_path: Path) -> None:
    """A library that answers cudnnGetVersion as cuDNN 9.5.1 does, named in the process's memory map."""
    assert environment.loaded_cudnn_version() is None  # this process, before the fake is loaded: none
    source = tmp_path / "cudnn.c"
    source.write_text("#include <stddef.h>\nsize_t cudnnGetVersion(void) { return 90501; }\n")
    library = tmp_path / "libcudnn.so.9"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    maps = tmp_path / "maps"
    maps.write_text(f"7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n7f02-7f03 r-xp 00000000 08:01 2 {library}\n")
    assert environment.loaded_cudnn_version(str(maps)) == "9.5.1"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n")
    assert environment.loaded_cudnn_version(str(maps)) is None  # no cuDNN loaded
    assert environment.cudnn_version_text(8902) == "8.9.2" and environment.cudnn_version_text(90300) == "9.3.0"


def test_an_older_runs_columns_read_into_the_new_ones(engine_runs: EngineRuns, tmp_path: Path) -> None:
    """A run written before the split, made from an engine-made run: its epoch rows rewritten without the new
    columns and with cuda_version (the driver's) and cudnn_version (TensorFlow's build), as then. Those are
    read as driver_cuda_version and framework_cudnn_version; the new columns it lacks are None."""
    folder = copy_run(engine_runs, 1, tmp_path)
    (part,) = list((folder / "epochs").iterdir())
    table = pq.read_table(part)
    old = table.drop_columns(list(NEW)).append_column("cuda_version", pa.array(["13.0"] * len(table))) \
               .append_column("cudnn_version", pa.array(["9"] * len(table)))
    pq.write_table(old, part)
    read = RunStore(folder).epochs()
    assert len(read) == len(table) == 2
    assert set(read.driver_cuda_version) == {"13.0"} and set(read.framework_cudnn_version) == {"9"}
    assert read.framework_cuda_version.isna().all() and read.cudnn_loaded_version.isna().all()
    assert "cuda_version" not in read.columns and "cudnn_version" not in read.columns
    assert sorted(read.images_per_sec) == sorted(table.column("images_per_sec").to_pylist())  # the rest as written
