"""Does every shipped sweep (search_spaces/*.yaml) run at its smoke scale? A table of its trials' outcomes.

Each sweep runs through the real CLI (`python -m sweep NAME --scale smoke`), all of them joined to one
local Ray (one node, 4 emulated GPUs, this machine's CPUs: what `run` starts here, started once), on a
CIFAR-10 set in its on-disk format (tests/cifar_files.py, no download), beside a generated image folder packed as
RecordIO and TFRecord (`data make imagenet-like`, `data pack imagenet`) for the sweeps with `data: imagenet`.
A sweep passes when each of its
smoke trials has a summary row `completed`, every framework it names ran, and its rows are sane (steady
images/s > 0, val_acc on real data only, one parameter count per model and image size).

The suite checks one shipped sweep this way (tests/test_docs.py): the README's first run, resnet50_lr_scaling at
its smoke scale; the others' smoke runs take a minute or more each on two cores, so they run here (tf_cnn_benchmarks
among them: its smoke scale varies every axis the studies have, framework, model, data, batch, GPUs and
variable_update):

  .venv/bin/python benchmarks/study_smokes.py                                   # every shipped sweep
  .venv/bin/python benchmarks/study_smokes.py --sweeps keras_mxnet_vs_tf_resnet50,cifar10_conv_mgpu

Exit 0 when every sweep passed, 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from cifar_files import write_cifar10  # noqa: E402

from sweep import spec, store  # noqa: E402


def problems(name: str, results: Path) -> list[str]:
    """What is wrong with the latest smoke run of `name` under `results` (nothing: an empty list)."""
    folders = store.run_dirs(results, name)
    if not folders:
        return ["no run folder"]
    summary, epochs = pd.read_parquet(folders[-1] / "trials"), pd.read_parquet(folders[-1] / "epochs")
    trials = spec.load(name).trials("smoke")
    found = []
    if sorted(summary.trial_id) != sorted(t.trial_id for t in trials):
        found.append(f"{len(summary)} summary rows for {len(trials)} trials")
    if set(summary.status) != {"completed"}:
        found.append(f"statuses {sorted(set(summary.status))}")
    if set(epochs.framework) != {t.framework for t in trials}:
        found.append(f"frameworks {sorted(set(epochs.framework))} ran of {sorted({t.framework for t in trials})}")
    real = epochs[epochs.data_kind == "real"]
    if real.val_acc.isna().any() or epochs[epochs.data_kind == "synthetic"].val_acc.notna().any():
        found.append("val_acc where the data was synthetic, or none where it was real")
    if not ((epochs.param_count > 0).all() and (epochs.images_per_sec > 0).all()):
        found.append("a row without parameters or images/s")
    # One model at one image size is one architecture: every framework reports the same parameter count (for the same
    # data: an image folder's classes size the output layer, the generated one here has 4, CIFAR-10 and synthetic 10).
    if not (epochs.groupby(["model", "image_size", "data_kind"]).param_count.nunique() == 1).all():
        found.append("frameworks disagree on a model's parameter count")
    return found


def add_image_folder(data: Path) -> None:
    """A small generated ImageNet-layout set in `data`, and its packed forms, made with the CLI as a user makes them."""
    from sweep import imagenet_like

    imagenet_like.make_imagenet_like(data, classes=4, per_class=16, val_per_class=4, quiet=True)
    for fmt in ("recordio", "tfrecord"):
        subprocess.run([sys.executable, "-m", "sweep", "data", "pack", "imagenet", "--format", fmt, "--data-dir", str(data)],
                       cwd=ROOT, check=True, capture_output=True, timeout=600)


def run_smoke(name: str, address: str, results: Path, data: Path, timeout: float = 1800) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run([sys.executable, "-m", "sweep", name, "--address", address, "--scale", "smoke",
                           "--results", str(results), "--data-dir", str(data)],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**env, "PYTHONUNBUFFERED": "1"})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sweeps", default=",".join(s.name for s in spec.list_sweeps()),
                   help="comma-separated sweep names (default: every sweep in search_spaces/)")
    args = p.parse_args(argv)
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": os.cpu_count(), "num_gpus": 4,
                                                            "include_dashboard": False})
    rows = []
    try:
        cluster.wait_for_nodes()
        with tempfile.TemporaryDirectory() as tmp:
            data = write_cifar10(Path(tmp) / "data", train_per_file=40, test=64)
            if any(t.data == "imagenet" for name in args.sweeps.split(",") for t in spec.load(name).trials("smoke")):
                add_image_folder(data)
            for name in args.sweeps.split(","):
                start = time.time()
                out = run_smoke(name, cluster.address, Path(tmp) / "results", data)
                found = problems(name, Path(tmp) / "results") if out.returncode == 0 else \
                    [f"exit {out.returncode}: {(out.stderr.strip() or out.stdout.strip()).splitlines()[-1:]}"]
                rows.append((name, len(spec.load(name).trials("smoke")), time.time() - start, found))
                print(f"{name}: {'ok' if not found else '; '.join(found)} ({rows[-1][2]:.0f} s)", flush=True)
    finally:
        cluster.shutdown()
    print("\n| sweep | smoke trials | wall s | result |\n|---|---|---|---|")
    for name, trials, seconds, found in rows:
        print(f"| {name} | {trials} | {seconds:.0f} | {'ok' if not found else '; '.join(found)} |")
    return 0 if all(not found for *_, found in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
