"""The largest batch that fits, found by the engine: six configurations on emulated devices with a memory capacity.

    .venv/bin/python benchmarks/max_batch.py [--capacity 256MiB] [--results DIR]

Runs `python -m sweep benchmarks/max_batch.yaml --emulate-gpu-memory CAPACITY` (batch_per_gpu: max for
resnet8_cifar and resnet20_cifar in MXNet, TensorFlow and PyTorch, 32x32 images, range 16 to 512, step 16),
then checks every configuration from the store's own rows: its search found a boundary, the probe at the
boundary fitted (completed, its measured memory per device within the capacity) and the probe above it ran
out of memory (oom, its measure over the capacity). Prints the boundaries table (max_batch.parquet, as
`report` shows it) and one verdict line; exits 1 when a configuration has no boundary.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

from _common import PYTHON, ROOT, child_env

from sweep import max_batch, store

SWEEP = ROOT / "benchmarks" / "max_batch.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", default="256MiB", help="each emulated GPU's memory (default 256MiB)")
    parser.add_argument("--results", default="results", help="results root (default results/)")
    args = parser.parse_args()
    command = [PYTHON, "-m", "sweep", str(SWEEP), "--emulate-gpu-memory", args.capacity, "--results", args.results]
    print("$ " + " ".join(command[1:]), flush=True)
    started = time.time()
    ran = subprocess.run(command, cwd=ROOT, env=child_env(), text=True)
    wall = time.time() - started
    run = store.RunStore(store.run_dirs(ROOT / args.results, "max_batch_cifar")[-1])
    rows = {r["trial_id"]: r for r in run.trial_rows()}
    found = run.dir / max_batch.SUMMARY_FILE
    import pandas as pd

    table = pd.read_parquet(found)
    print(max_batch.frame(table.to_dict("records")).to_string(index=False))
    capacity = run.meta.memory_capacity_mib
    problems = []
    for b in table.to_dict("records"):
        name = f"{b['framework']} {b['model']}"
        if b["state"] != "found":
            problems.append(f"{name}: {b['state']}")
            continue
        probes = {r["batch_per_gpu"]: r for r in rows.values() if r.get("max_batch_probe") == b["config_id"]}
        fit, fail = probes[b["max_batch"]], probes[b["first_oom_batch"]]
        if not (fit["status"] == "completed" and fit["emulated_device_mem_mib"] <= capacity
                and fail["status"] == "oom" and fail["emulated_device_mem_mib"] > capacity
                and b["first_oom_batch"] - b["max_batch"] <= b["step"]):
            problems.append(f"{name}: the probes at {b['max_batch']} and {b['first_oom_batch']} do not bound it")
    probes = sum(1 for r in rows.values() if r.get("max_batch_probe"))
    print(f"{len(table)} configurations, {probes} probes, {wall / 60:.1f} min (exit {ran.returncode}); capacity "
          f"{capacity:g} MiB per device; " + ("every boundary found: the batch fits, the next probe above it is oom"
                                              if not problems else "NOT FOUND: " + "; ".join(problems)))
    return 1 if problems or ran.returncode else 0


if __name__ == "__main__":
    sys.exit(main())
