"""Soak: hundreds of short trials on a 4-node cluster while workers, nodes and the driver are killed.

A ray.cluster_utils.Cluster of --nodes nodes (head included, each with fake GPUs) runs on this
machine; the engine joins it with --address, as on a real cluster, and runs a sweep of --trials short
MXNet trials (synthetic data, --epochs epochs of one step) with --max-failures. Meanwhile this script:

- kills a running trial's worker process now and then (SIGKILL; its pid is the one its own epoch
  rows in the store name, so nothing outside the run is touched),
- removes a worker node (ray.cluster_utils' remove_node) and adds a fresh one a few seconds later,
- SIGKILLs the driver twice, at about a third and two thirds of the trials, and resumes the run each time
  with `--resume`.

At the end it checks the store: every trial has exactly one summary row, completed, and exactly one row
per epoch (the store's reader and a plain pandas.read_parquet of the epochs folder alike), and it
reports the driver's peak memory (RSS, polled every 0.2 s), Tune's overhead per trial (a trial's
wall time minus the training and validation time its epoch rows record: actor start, framework import,
model build, checkpoints, Tune's bookkeeping) and the store's compaction time (every trial's epochs
written back by the engine's writer as one file per trial into a copy, then RunStore.compact timed).

    .venv/bin/python benchmarks/soak.py                  # 300 trials, 4 nodes (~30-60 min on 2 cores)
    .venv/bin/python benchmarks/soak.py --trials 12      # a quick look at the mechanics (~3 min)
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repository on sys.path)
import pandas as pd
import psutil

from _common import PYTHON, ROOT, child_env, load_average, machine, median

from sweep import store


def sweep_file(work: Path, trials: int, epochs: int) -> Path:
    path = work / "soak.yaml"
    path.write_text(f"""\
name: soak
description: "Soak: {trials} short MXNet trials under worker kills, node removals and driver kills"
fixed: {{framework: mxnet, model: resnet8_cifar, data: synthetic, num_gpus: 1, batch_per_gpu: 4, epochs: {epochs},
        steps_per_epoch: 1, val_examples: 8, warmup_steps: 0, lr: 0.05}}
grid:
  seed: [{", ".join(str(s) for s in range(1, trials + 1))}]
""")
    return path


class Driver:
    """One `python -m sweep` session, its peak RSS polled while it runs."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = open(log, "a")
        self.proc = subprocess.Popen([PYTHON, "-m", "sweep", *args], cwd=ROOT, env=child_env(), stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.peak_rss = 0
        self.started = time.monotonic()
        threading.Thread(target=self._poll, daemon=True).start()

    def _poll(self) -> None:
        try:
            process = psutil.Process(self.proc.pid)
            while self.proc.poll() is None:
                self.peak_rss = max(self.peak_rss, process.memory_info().rss)
                time.sleep(0.2)
        except psutil.Error:
            pass

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def wait(self) -> int:
        code = self.proc.wait()
        self.log.close()
        return code


def running_trial_pids(run: store.RunStore) -> list[int]:
    """Worker pids of trials that have written an epoch row and no summary row yet, alive now."""
    try:
        ended = set(run.finished())
        rows = run.epochs()
    except store.StoreError:
        return []
    rows = rows[~rows.trial_id.isin(ended)]
    return [int(p) for p in rows.drop_duplicates("trial_id", keep="last").pid.dropna() if psutil.pid_exists(int(p))]


def progress(results: Path) -> tuple[store.RunStore | None, int]:
    runs = store.run_dirs(results, "soak")
    if not runs:
        return None, 0
    run = store.RunStore(runs[-1])
    try:
        return run, len(run.finished())
    except store.StoreError:
        return run, 0


def compaction_seconds(run: store.RunStore, work: Path) -> tuple[float, int, int]:
    """Every trial's epoch rows written back by the engine's writer as one file per trial, then compacted."""
    copy = store.RunStore.create(work / "compaction", run.meta, run.spec_text)
    rows = run.epochs().to_dict("records")
    for row in rows:
        copy.write_epoch(row)
    files = len(list(copy.epochs_dir.glob("*.parquet")))
    t0 = time.perf_counter()
    copy.compact(set(copy.meta.trials))
    return time.perf_counter() - t0, files, len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--nodes", type=int, default=4, help="Ray nodes, the head included")
    parser.add_argument("--cpus-per-node", type=int, default=1, help="trials running at once per node")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--worker-kills", type=int, default=6)
    parser.add_argument("--node-removals", type=int, default=2)
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--stall-minutes", type=float, default=10, help="give up when no trial ends for this long")
    parser.add_argument("--work", type=Path, help="folder for the results and logs (default: a new temporary one)")
    args = parser.parse_args()

    from ray.cluster_utils import Cluster

    rng = random.Random(args.seed)
    work = args.work or Path(tempfile.mkdtemp(prefix="soak-"))
    work.mkdir(parents=True, exist_ok=True)
    results, log = work / "results", work / "driver.log"
    sweep = sweep_file(work, args.trials, args.epochs)
    node = {"num_cpus": args.cpus_per_node, "num_gpus": args.cpus_per_node, "object_store_memory": 128 * 2**20}
    print(f"{machine()}; load {load_average()}; work folder {work}", flush=True)
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    workers = [cluster.add_node(**node) for _ in range(args.nodes - 1)]
    cluster.wait_for_nodes()
    command = [str(sweep), "--address", cluster.address, "--results", str(results), "--scale", "full",
               "--max-failures", "5"]
    # The disruptions, each at a fraction of the trials ended.
    events = sorted([(rng.uniform(0.05, 0.95), "worker") for _ in range(args.worker_kills)]
                    + [(f, "node") for f in (0.25, 0.6)[: args.node_removals]]
                    + [(1 / 3, "driver"), (2 / 3, "driver")])
    done = {"worker": 0, "node": 0, "driver": 0}
    drivers = [Driver(command, log)]
    t_start = last_change = time.monotonic()
    last_ended = 0
    try:
        while True:
            driver = drivers[-1]
            code = driver.proc.poll()
            run, ended = progress(results)
            if code is not None:
                print(f"  driver session {len(drivers)} exited {code} ({ended} trials ended)", flush=True)
                if code in (0, 1):  # 1: some trial failed for good; the checks below say which
                    break
                raise SystemExit(f"the driver exited {code}: see {log}")
            if ended > last_ended:
                last_ended, last_change = ended, time.monotonic()
            if time.monotonic() - last_change > args.stall_minutes * 60:
                raise SystemExit(f"no trial ended for {args.stall_minutes} min: see {log}")
            if events and ended >= events[0][0] * args.trials:
                fraction, kind = events.pop(0)
                if kind == "worker" and run is not None and (pids := running_trial_pids(run)):
                    victim = rng.choice(pids)
                    os.kill(victim, signal.SIGKILL)
                    done["worker"] += 1
                    print(f"  [{ended}/{args.trials}] killed trial worker pid {victim}", flush=True)
                elif kind == "worker":
                    events.insert(0, (fraction, kind))  # no trial has a row yet: next time round
                elif kind == "node":
                    gone = workers.pop(rng.randrange(len(workers)))
                    cluster.remove_node(gone)
                    done["node"] += 1
                    print(f"  [{ended}/{args.trials}] removed node {gone.node_id[:8]}", flush=True)
                    time.sleep(3)
                    workers.append(cluster.add_node(**node))
                    print(f"  [{ended}/{args.trials}] added node {workers[-1].node_id[:8]}", flush=True)
                elif kind == "driver":
                    driver.kill()
                    done["driver"] += 1
                    print(f"  [{ended}/{args.trials}] SIGKILLed the driver (pid {driver.proc.pid}); resuming", flush=True)
                    drivers.append(Driver([*command, "--resume"], log))
            time.sleep(0.5)
        wall = time.monotonic() - t_start
    finally:
        for d in drivers:
            if d.proc.poll() is None:
                d.kill()
        cluster.shutdown()

    run = store.RunStore(store.run_dirs(results, "soak")[-1])
    summary, epochs = run.trials(), run.epochs()
    plain = pd.read_parquet(run.epochs_dir)
    summary_files = len(list(run.trials_dir.glob("*.parquet")))
    checks = {
        "one summary row per trial": summary_files == len(summary) == summary.trial_id.nunique() == args.trials,
        "every trial completed": set(summary.status) == {"completed"},
        "one row per trial and epoch (store reader)": len(epochs) == args.trials * args.epochs
        and not epochs.duplicated(["trial_id", "epoch"]).any(),
        "one row per trial and epoch (pandas.read_parquet)": len(plain) == args.trials * args.epochs
        and not plain.duplicated(["trial_id", "epoch"]).any(),
        "every epoch of every trial": all(sorted(g.epoch) == list(range(args.epochs)) for _, g in epochs.groupby("trial_id")),
    }
    trained = (epochs.epoch_time_s + epochs.val_time_s.fillna(0)).groupby(epochs.trial_id).sum()
    overhead = (summary.set_index("trial_id").wall_time_s - trained).dropna()
    seconds, files, rows = compaction_seconds(run, work)
    retried = int((summary.attempts > 1).sum())
    print(f"\nsoak: {args.trials} trials x {args.epochs} epochs on {args.nodes} nodes, {wall / 60:.1f} min wall, "
          f"{len(drivers)} driver sessions")
    print(f"disruptions: {done['worker']} trial workers killed, {done['node']} nodes removed (and replaced), "
          f"{done['driver']} driver SIGKILLs + --resume; {retried} trials ran more than once")
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    print(f"driver peak RSS: {max(d.peak_rss for d in drivers) / 2**20:.0f} MiB "
          f"(per session: {', '.join(f'{d.peak_rss / 2**20:.0f}' for d in drivers)})")
    print(f"Tune overhead per trial (wall - training - validation): median {median(list(overhead)):.2f} s, "
          f"mean {overhead.mean():.2f} s, p90 {overhead.quantile(0.9):.2f} s; sweep wall / trials: {wall / args.trials:.2f} s")
    print(f"store compaction: {rows} epoch rows in {files} files -> one part file in {seconds:.3f} s")
    print(f"load average at the end: {load_average()}; driver log: {log}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
