"""Run a sweep: trials -> Ray Tune (one STRICT_PACK bundle per trial) -> the Parquet store."""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

# Our own console lines replace Tune's tables; Tune's checkpoint-frequency warning is expected here
# (a snapshot per epoch checkpoint keeps its state fresh for resume).
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")

from ray import tune  # noqa: E402

from sweep import cluster as ray_cluster
from sweep import store as results
from sweep.spec import Sweep, Trial
from trainables.config import trial_id


@dataclass(frozen=True)
class RunPlan:
    sweep: Sweep
    scale: str
    trials: list[Trial]
    results_root: Path
    data_dir: str | None  # None: no CIFAR-10, every trial runs on synthetic data
    emulated: bool | None  # None: each node decides (joined cluster)
    max_concurrent: int | None
    command: str
    run_id: str


def _error_of(trial: Any) -> tuple[str, str]:
    """The exception's type and first line, unwrapped from Ray's task error."""
    err = trial.get_error()
    cause = getattr(err, "cause", None) or err
    message = str(cause).strip().splitlines()
    return type(cause).__name__, message[0][:500] if message else ""


def _failure_status(error_type: str, message: str) -> str:
    oom = error_type in ("ResourceExhaustedError", "MemoryError", "OutOfMemoryError") or "out of memory" in message.lower()
    return "oom" if oom else "failed"


class StoreCallback(tune.Callback):
    """Writes each reported epoch and each trial's end to the store as Tune hands them over."""

    def __init__(self, store: results.RunStore, base: dict[str, Any], total: int,
                 print_line: Callable[[str], None]) -> None:
        self.store = store
        self.base = base
        self.total = total
        self.print = print_line
        self.started: dict[str, float] = {}
        self.attempts: dict[str, int] = {}
        self.finished: dict[str, str] = {}

    @staticmethod
    def _id(trial: Any) -> str:
        return trial_id(trial.config["trial"])

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        tid = self._id(trial)
        self.started.setdefault(tid, time.time())
        self.attempts[tid] = self.attempts.get(tid, 0) + 1

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        tid = self._id(trial)
        config = trial.config["trial"]
        row = {**self.base, **config, **{k: result.get(k) for k in results.EPOCH_SCHEMA.names if k in result},
               "trial_id": tid, "status": "running", "global_batch": config["batch_per_gpu"] * config["num_gpus"],
               "attempt": self.attempts.get(tid, 1), "reported_at": time.time()}
        self.store.write_epoch(row)
        acc = f", val_acc {row['val_acc']:.3f}" if row.get("val_acc") is not None else ""
        self.print(f"  {_label(config)}  epoch {row['epoch'] + 1}/{config['epochs']}: "
                   f"{row['images_per_sec']:.0f} img/s, {row['epoch_time_s']:.1f} s{acc}")

    def _finish(self, trial: Any, status: str, error: tuple[str, str] | None) -> None:
        tid = self._id(trial)
        config = trial.config["trial"]
        epochs = self.store.trial_epochs(tid)
        if status == "completed" and epochs and epochs[-1].get("diverged"):
            status = "diverged"
        elif status == "completed" and len(epochs) < config["epochs"]:
            status = "stopped_early"  # only a scheduler (ASHA) ends a healthy trial before its last epoch
        now = time.time()
        started = self.started.get(tid, now)
        summary = results.summarize(tid, config, epochs, status, self.base)
        summary.update({"started_at": started, "ended_at": now, "wall_time_s": now - started,
                        "attempts": self.attempts.get(tid, 1),
                        "gpu_hours": config["num_gpus"] * (now - started) / 3600.0})
        if error:
            summary["error_type"], summary["error"] = error
        self.store.finish_trial(summary)
        self.finished[tid] = status
        why = f" ({error[0]}: {error[1]})" if error else ""
        self.print(f"[{len(self.finished)}/{self.total}] {_label(config)}: {status}{why}")

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._finish(trial, "completed", None)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        error = _error_of(trial)
        self._finish(trial, _failure_status(*error), error)


def _label(config: dict[str, Any]) -> str:
    return (f"{config['framework']} {config['model']} gpus={config['num_gpus']} "
            f"batch={config['batch_per_gpu']} lr={config['lr']:g}")


def trial_resources(config: dict[str, Any]) -> tune.PlacementGroupFactory:
    """One bundle holding all of a trial's GPUs (and CPUs): its devices sit on one node."""
    trial = config["trial"]
    return tune.PlacementGroupFactory([{"CPU": trial["cpus_per_trial"], "GPU": trial["num_gpus"]}],
                                      strategy="STRICT_PACK")


def run(plan: RunPlan, base: dict[str, Any], print_line: Callable[[str], None] = print) -> dict[str, str]:
    """Run every trial of the plan on the connected Ray; returns trial id -> final status."""
    from trainables.loop import train

    store = results.RunStore.create(plan.results_root, plan.sweep.name, plan.run_id, _meta(plan, base), plan.sweep.text)
    print_line(f"results: {store.dir}")
    runtime = {"data_dir": plan.data_dir, "emulated": plan.emulated}
    callback = StoreCallback(store, {**base, "run_id": plan.run_id, "scale": plan.scale}, len(plan.trials), print_line)
    tuner = tune.Tuner(
        tune.with_resources(train, trial_resources),
        param_space={"trial": tune.grid_search([t.config for t in plan.trials]), "runtime": runtime},
        tune_config=tune.TuneConfig(max_concurrent_trials=plan.max_concurrent, reuse_actors=False,
                                    scheduler=_scheduler(plan),
                                    trial_name_creator=lambda t: f"{plan.sweep.name}-{trial_id(t.config['trial'])}",
                                    trial_dirname_creator=lambda t: trial_id(t.config["trial"])),
        run_config=tune.RunConfig(
            name="tune", storage_path=str(store.dir), callbacks=[callback], verbose=0,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            failure_config=tune.FailureConfig(max_failures=0)),
    )
    tuner.fit()
    return dict(callback.finished)


def _scheduler(plan: RunPlan) -> Any:
    """ASHA on val_acc where the sweep asks for early stopping; Tune's FIFO otherwise."""
    if not plan.sweep.early_stopping or plan.data_dir is None:
        return None
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr="training_iteration", metric="val_acc", mode="max",
                         max_t=max(t.config["epochs"] for t in plan.trials), **plan.sweep.early_stopping)


def _meta(plan: RunPlan, base: dict[str, Any]) -> dict[str, Any]:
    return {
        "sweep": plan.sweep.name, "run_id": plan.run_id, "scale": plan.scale, "command": plan.command,
        "spec_path": str(plan.sweep.path), "spec_sha256": _sha256(plan.sweep.text),
        "started_at": time.time(), "data_dir": plan.data_dir,
        "emulated": plan.emulated, "trials": [t.trial_id for t in plan.trials],
        "engine": {k: base.get(k) for k in ("engine_version", "git_commit", "ray_version")},
        "python": sys.version.split()[0], "cwd": os.getcwd(),
    }


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()
