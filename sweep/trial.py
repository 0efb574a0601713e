"""The Ray Tune trainable: one trial of a sweep, run by trainables.loop, its rows written as it goes.

Each epoch's row is written to the store by the trial itself, before its checkpoint is handed to
Tune: whatever kills the driver or the trial, a checkpoint never runs ahead of the rows, and a
replayed epoch replaces its row. The driver only adds each trial's summary row at its end.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from sweep import location
from sweep.location import Location, RemotePath
from sweep.store import RunStore
from trainables import environment
from trainables.config import TrialConfig, trial_id
from trainables.loop import Devices, Report, checkpoint_epoch, run_trial


def assigned_devices(num_gpus: int, emulated: bool) -> Devices:
    """The GPUs Ray assigned to this trial; as many CPU devices when they are emulated."""
    import ray

    ids = tuple(str(i) for i in ray.get_gpu_ids())
    if len(ids) != num_gpus:
        raise RuntimeError(f"Ray assigned {len(ids)} GPUs ({','.join(ids)}), the trial asked for {num_gpus}")
    if emulated:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # fake GPU ids must never reach a real device
        return Devices("cpu-emulated", num_gpus, ids)
    return Devices("gpu", num_gpus, ids)


def latest_checkpoint(run_dir: Location, tid: str, scratch: str) -> str | None:
    """The newest complete epoch checkpoint of a trial from any earlier session of the run, as a local
    folder; checkpoints on remote storage (Tune keeps two per session) are downloaded into scratch."""
    found = []
    for i, path in enumerate(run_dir.glob(f"tune*/{tid}/checkpoint_*")):
        if isinstance(path, RemotePath):
            local = os.path.join(scratch, str(i))
            path.download(Path(local))
            path = local
        found.append((checkpoint_epoch(str(path)), str(path)))
    complete = [(epoch, path) for epoch, path in found if epoch is not None]
    return max(complete)[1] if complete else None


def train(config: dict[str, Any]) -> None:
    """Ray Tune function trainable. config: {"trial": TrialConfig dict, "runtime": engine settings}."""
    import ray
    from ray import tune

    cfg = TrialConfig.from_dict(config["trial"])
    runtime = config["runtime"]
    tid = trial_id(config["trial"])
    store = RunStore(location.at(runtime["run_dir"]))
    store.record_start(tid)
    # The driver decides for an embedded Ray; on a joined cluster each node tells for itself.
    emulated = runtime["emulated"] if runtime["emulated"] is not None else environment.real_gpu_count() == 0
    base = {**runtime["row_base"], **config["trial"], "trial_id": tid, "global_batch": cfg.global_batch,
            "attempt": store.attempts(tid), "ray_node_id": ray.get_runtime_context().get_node_id()}
    from sweep.monitor import TrialGauges

    gauges = TrialGauges(config)  # this trial's images/s, epoch and val_acc on Ray's metrics endpoint

    def report(metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        store.write_epoch({**base, **metrics, "status": "diverged" if metrics["diverged"] else "running",
                           "reported_at": time.time()})
        gauges.update(metrics)
        # tune.report persists the checkpoint folder before it returns, so it may be temporary.
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None)

    # A retry inside this session (Tune's FailureConfig) gets Tune's checkpoint; a resumed run gets
    # the newest complete one that an earlier session of the run left on disk.
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as path:
            _train(cfg, emulated, runtime["data_dir"], report, path)
        return
    with tempfile.TemporaryDirectory() as scratch:
        _train(cfg, emulated, runtime["data_dir"], report, latest_checkpoint(store.dir, tid, scratch))


def _train(cfg: TrialConfig, emulated: bool, data_dir: str | None, report: Report, restore_dir: str | None) -> None:
    """Here, on this trial's one bundle; or, for a distributed trial, by its workers (sweep/workers.py)."""
    if cfg.distributed:
        from sweep import workers

        workers.run(cfg, emulated, data_dir, report, restore_dir)
    else:
        run_trial(cfg, assigned_devices(cfg.num_gpus, emulated), data_dir, report, restore_dir=restore_dir)
