"""The Ray Tune trainable: one trial of a sweep, run by trainables.loop, its rows written as it goes.

This module runs in the trial's process (a Tune actor on some node); it imports no driver-side module.
Each epoch's row is written to the store by the trial itself, before its checkpoint is handed to
Tune: whatever kills the driver or the trial, a checkpoint never runs ahead of the rows, and a
replayed epoch replaces its row. The driver only adds each trial's summary row at its end.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from sweep import environments, location
from sweep.environments import Environment
from sweep.location import Location, RemotePath
from sweep.schema import Status
from sweep.store import RunStore, config_columns
from trainables import environment, peaks
from trainables.config import TrialConfig
from trainables.failure import plain_errors
from trainables.loop import Devices, Report, checkpoint_epoch, run_trial

METRIC_TAGS = ("sweep", "run", "trial", "framework", "model", "num_gpus", "batch")


@dataclass(frozen=True)
class TrialRuntime:
    """What every trial of a session gets besides its config: where and how it runs."""

    run_dir: str  # the run's folder or URI in the store
    data_dir: str | None  # None: no CIFAR-10, every trial runs on synthetic data
    emulated: bool | None  # None: a joined cluster, where each node tells for itself
    columns: dict[str, Any]  # what every row of the run carries: sweep, run_id, scale, the engine
    # trial id -> the settings its label adds so that no two trials read the same (spec.label_axes)
    label_axes: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def describe(self, config: TrialConfig) -> str:
        """A trial's settings in one phrase, as the console's lines name it."""
        return config.label(self.label_axes.get(config.trial_id, ()))
    environments: dict[str, Environment] = field(default_factory=dict)  # environments.chosen(): where trials run
    code_root: str | None = None  # this project's folder, for environments that lack its packages
    placement: dict[str, tuple[str, ...]] = field(default_factory=dict)  # runs_as -> the only nodes it runs on

    def environment(self, config: TrialConfig) -> Environment | None:
        """Where a trial runs (sweep/environments.py: of); None: the driver's Python."""
        return environments.of(self.environments, config.runs_as)

    def runtime_env(self, config: TrialConfig) -> dict[str, Any] | None:
        """Ray's runtime_env of a trial's environment; None: the driver's Python."""
        env = self.environment(config)
        return env.runtime_env(self.code_root) if env else None

    def label(self, config: TrialConfig) -> str:
        """A trial as the dashboard's actors and the live view name it: `<sweep>-<trial id> <settings>`."""
        return f"{self.columns['sweep']}-{config.trial_id} {self.describe(config)}"


def trial_of(config: dict[str, Any]) -> TrialConfig:
    """The trial a Tune config holds. Tune's param_space carries it as plain data, which Tune resolves
    and logs natively (an object there becomes a placeholder that trial-name creators see unresolved)."""
    return TrialConfig.from_dict(config["trial"])


def labelled_trainable(resources: Callable[[dict[str, Any]], Any]) -> type:
    """`train` as a Tune function trainable whose actors carry the trial's label.

    Ray records an actor's repr once it is constructed, when the actor's class itself defines
    `__repr__` (Tune's own wrapper says only the function's name); `resources` is what
    `tune.with_resources` would give: the trial's placement group from its config.
    """
    from ray.tune.trainable.function_trainable import wrap_function

    class SweepTrial(wrap_function(train)):
        @classmethod
        def default_resource_request(cls, config: dict[str, Any]) -> Any:
            return resources(config)

        def __repr__(self) -> str:
            try:
                return self.config["runtime"].label(trial_of(self.config))
            except (AttributeError, KeyError, TypeError):
                return "SweepTrial"

    SweepTrial.__qualname__ = SweepTrial.__name__  # the dashboard's Class column
    return SweepTrial


class TrialGauges:
    """The trial's images/s, epoch and val_acc on Ray's metrics endpoint (`ray_sweep_*`), set from
    its own process at each epoch; they go when the trial's actor does."""

    def __init__(self, config: TrialConfig, runtime: TrialRuntime) -> None:
        self.tags = {"sweep": str(runtime.columns["sweep"]), "run": str(runtime.columns["run_id"]),
                     "trial": config.trial_id, "framework": config.framework, "model": config.model,
                     "num_gpus": str(config.num_gpus), "batch": str(config.batch_per_gpu)}
        try:
            from ray.util.metrics import Gauge

            self.images = Gauge("sweep_images_per_sec", "images/s of the trial's latest epoch", tag_keys=METRIC_TAGS)
            self.epoch = Gauge("sweep_epoch", "epochs the trial has finished", tag_keys=METRIC_TAGS)
            self.val_acc = Gauge("sweep_val_acc", "validation accuracy after the latest epoch", tag_keys=METRIC_TAGS)
        except Exception as e:  # noqa: BLE001 - metrics never stop a trial
            print(f"sweep: no Ray metrics for this trial: {e}", file=sys.stderr)
            self.images = None

    def update(self, metrics: dict[str, Any]) -> None:
        if self.images is None:
            return
        try:
            self.images.set(float(metrics["images_per_sec"]), tags=self.tags)
            self.epoch.set(float(metrics["epoch"]) + 1, tags=self.tags)
            if metrics.get("val_acc") is not None:
                self.val_acc.set(float(metrics["val_acc"]), tags=self.tags)
        except Exception as e:  # noqa: BLE001
            print(f"sweep: Ray metrics failed: {e}", file=sys.stderr)
            self.images = None


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


@plain_errors  # a framework's exception would not unpickle in the driver, which imports no framework
def train(config: dict[str, Any]) -> None:
    """Ray Tune function trainable. config: {"trial": TrialConfig.to_dict(), "runtime": TrialRuntime}."""
    import ray
    from ray import tune

    cfg = trial_of(config)
    runtime: TrialRuntime = config["runtime"]
    tid = cfg.trial_id
    store = RunStore(location.at(runtime.run_dir))
    store.record_start(tid)
    # The driver decides for an embedded Ray; on a joined cluster each node tells for itself.
    emulated = runtime.emulated if runtime.emulated is not None else environment.real_gpu_count() == 0
    env = runtime.environment(cfg)
    base = {**runtime.columns, **config_columns(cfg), "trial_id": tid, "attempt": store.attempts(tid),
            "ray_node_id": ray.get_runtime_context().get_node_id(), "environment": env.describe() if env else None}
    gauges = TrialGauges(cfg, runtime)

    def report(metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        status = Status.DIVERGED if metrics["diverged"] else Status.RUNNING
        row = {**base, **metrics, "status": status.value, "reported_at": time.time()}
        store.write_epoch({**row, **peaks.utilisation(row)})  # MFU: the row's images/s against its GPUs' peak
        gauges.update(metrics)
        # tune.report persists the checkpoint folder before it returns, so it may be temporary.
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None)

    # A retry inside this session (Tune's FailureConfig) gets Tune's checkpoint; a resumed run gets
    # the newest complete one that an earlier session of the run left on disk.
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as path:
            _train(cfg, emulated, runtime, report, path)
        return
    with tempfile.TemporaryDirectory() as scratch:
        _train(cfg, emulated, runtime, report, latest_checkpoint(store.dir, tid, scratch))


def _train(cfg: TrialConfig, emulated: bool, runtime: TrialRuntime, report: Report, restore_dir: str | None) -> None:
    """Here, on this trial's one bundle; or by workers in its bundles (sweep/workers.py): a distributed
    trial's, or those of a trial whose framework has its own environment (this process is the driver's)."""
    data_dir, runtime_env = runtime.data_dir, runtime.runtime_env(cfg)
    if cfg.distributed or runtime_env:
        from sweep import workers

        workers.run(cfg, emulated, data_dir, report, restore_dir, runtime_env)
    else:
        import ray

        devices = Devices.of([str(i) for i in ray.get_gpu_ids()], emulated)
        if devices.count != cfg.num_gpus:
            raise RuntimeError(f"Ray assigned {devices.count} GPUs ({','.join(devices.ray_gpu_ids)}), "
                               f"the trial asked for {cfg.num_gpus}")
        run_trial(cfg, devices, data_dir, report, restore_dir=restore_dir)
