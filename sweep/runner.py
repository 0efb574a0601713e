"""Run a sweep's pending trials: Ray Tune (one STRICT_PACK bundle per trial) -> the Parquet store.

A run may take several sessions (a first one, then `--resume` after a kill or Ctrl-C). Each session
is a fresh Tuner over the trials the store has no summary row for; Tune's own experiment state is
not the record (it lags and is lost on SIGKILL), the store is. Each trial restarts from its newest
complete checkpoint on disk (sweep/trial.py).
"""
from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

# Our own console lines replace Tune's tables; Tune's checkpoint-frequency warning is expected here
# (a snapshot per epoch checkpoint). SIGINT is ours: Tune's handler could not tell us it fired.
# A failed trial is one console line of ours (its error's type and first line, also in its summary row;
# the traceback stays in its Tune folder), not Tune's 20-line traceback on stderr, which a lost cluster
# printed once per running trial before the engine's own line (TUNE_PRINT_ALL_TRIAL_ERRORS=1 brings it back).
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
# Tune's own result files (result.json, progress.csv, TensorBoard events) are not the record (the store is),
# and their TensorBoard logger imports tensorboardX and with it torch: 1.8 s of every run's start.
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
# The first worker or raylet message the driver prints (a check's failed environment, a worker that
# died) would swap builtins.print for Ray's tqdm-safe one, and Tune, pickling the console view's
# `print` by reference, would then fail the whole run ("Can't pickle <built-in function print>").
os.environ.setdefault("RAY_TQDM_PATCH_PRINT", "0")

from ray import tune  # noqa: E402

from sweep import checks, gcs, location  # noqa: E402
from sweep.console import SweepView  # noqa: E402
from sweep.schema import Status  # noqa: E402
from sweep.spec import Sweep  # noqa: E402
from sweep.store import RunStore, gpu_hours, summarize  # noqa: E402
from sweep.trial import TrialRuntime, labelled_trainable, trial_of  # noqa: E402
from trainables.config import TrialConfig  # noqa: E402
from trainables.failure import TrialError, trial_error  # noqa: E402


@dataclass(frozen=True)
class RunPlan:
    sweep: Sweep
    trials: list[TrialConfig]  # the trials to run in this session
    total: int  # trials in the whole run
    store: RunStore
    runtime: TrialRuntime  # what every trial gets besides its config
    max_concurrent: int | None
    max_failures: int  # retries of a trial whose worker or node was lost (Tune's FailureConfig)
    session: int  # 1 for the first session of the run, 2 for its first resume, ...
    round: int = 0  # a largest-batch search's round in this session (sweep/max_batch.py); 0: the session's one Tune run


class Interrupt(tune.Stopper):
    """First SIGINT or SIGTERM: stop the trials and return (their rows stand, resume continues them).

    A second one aborts at once. SIGTERM is what `kill`, a batch scheduler's time limit or `docker stop` send
    first, so it gets Ctrl-C's orderly stop (Ray's own SIGTERM handler would just exit).
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signal: int | None = None  # the one that fired

    @property
    def fired(self) -> bool:
        return self.signal is not None

    def __enter__(self) -> Interrupt:
        self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python

    def _handle(self, sig: int, frame: Any) -> None:
        if self.fired:
            raise KeyboardInterrupt
        self.signal = sig
        again = "Ctrl-C again" if sig == signal.SIGINT else "a second signal"
        print(f"interrupted ({signal.Signals(sig).name}): stopping the running trials ({again} aborts at once)",
              flush=True)

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.fired


def _error_of(trial: Any) -> TrialError:
    """The trial's error as its process recorded it (sweep/trial.py: a TrialError), unwrapped from Ray's task error.

    Read from the trial's local error files: Tune's get_error() reads its storage copy, which is
    synced later than the callback runs.
    """
    from ray import cloudpickle

    err: BaseException | None = None
    if trial.pickled_error_file and os.path.exists(trial.pickled_error_file):
        try:
            with open(trial.pickled_error_file, "rb") as f:
                err = cloudpickle.load(f)
        except Exception:  # noqa: BLE001 - an error that does not unpickle here is read from its text
            err = None
    if err is None:
        text = Path(trial.error_file).read_text() if trial.error_file and os.path.exists(trial.error_file) else ""
        return TrialError("TrialError", (text.strip().splitlines() or ["unknown error"])[-1][:500], "")
    return trial_error(err)  # (through Ray's RayTaskError to the error it carries)


# TensorFlow; Python; Ray's memory monitor and torch.cuda.OutOfMemoryError (both named OutOfMemoryError); the engine's emulated capacity (trainables/failure.py)
OOM_TYPES = ("ResourceExhaustedError", "MemoryError", "OutOfMemoryError", "EmulatedOutOfMemoryError")
# CUDA's and XLA's words (MXNet on a GPU: "cudaMalloc retry failed: out of memory"), MXNet's on the CPU
# ("Failed to allocate CPU Memory").
OOM_WORDS = ("out of memory", "failed to allocate")


# Errors of a trial whose process or node went away (Ray's exception types): the cluster's loss, if its GCS
# stops answering within NODE_LOSS_WATCH_S; the trial's own failure (retried with --max-failures) otherwise.
# An embedded Ray whose GCS and raylet still run is not going: no watch there (gcs.cluster_lost).
ACTOR_DEATHS = {"ActorDiedError", "RayActorError", "NodeDiedError", "OwnerDiedError", "WorkerCrashedError",
                "ActorUnavailableError"}
NODE_LOSS_WATCH_S = 10.0


def _failure_status(error_type: str, message: str) -> Status:
    oom = error_type in OOM_TYPES or any(words in message.lower() for words in OOM_WORDS)
    return Status.OOM if oom else Status.FAILED


class SummaryCallback(tune.Callback):
    """Writes each trial's summary row when Tune says it ended, and tells the console view (sweep/console.py)."""

    def __init__(self, plan: RunPlan, interrupt: Interrupt, view: SweepView) -> None:
        self.plan = plan
        self.interrupt = interrupt
        self.view = view
        self.started: dict[str, float] = {}
        self.lost: str | None = None  # why the cluster is gone, once a trial's error turned out to be that
        self.results: set[str] = set()  # Tune's ids of the trials whose failure is a result: largest-batch probes out of memory

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.started[trial_of(trial.config).trial_id] = time.time()

    def _finish(self, trial: Any, status: Status, error: TrialError | None) -> None:
        config = trial_of(trial.config)
        tid = config.trial_id
        epochs = self.plan.store.trial_epochs(tid)
        if status == Status.COMPLETED:
            if epochs and epochs[-1].get("status") == Status.DIVERGED:
                status = Status.DIVERGED
            elif len(epochs) < config.epochs:
                if self.interrupt.fired or not self.plan.sweep.early_stopping:
                    return  # stopped by Ctrl-C or SIGTERM: not finished, a resume continues it
                status = Status.STOPPED_EARLY  # ASHA ended a healthy trial before its last epoch
        now = time.time()
        started = self.started.get(tid, now)
        attempt = self.plan.store.attempts(tid)
        # GPU time reserved: this attempt's wall time, plus the epochs kept from earlier attempts.
        earlier = sum((e["epoch_time_s"] or 0) + (e["val_time_s"] or 0) for e in epochs if (e["attempt"] or 0) < attempt)
        wall = now - started + earlier
        summary = summarize(tid, config, epochs, status, self.plan.runtime.columns)
        summary.update({"started_at": started, "ended_at": now, "wall_time_s": wall, "attempts": attempt,
                        "gpu_hours": gpu_hours(config.num_gpus, wall)})
        if error:
            summary.update({"error_type": error.error_type, "error": error.message, "error_class": error.error_class or None})
        elif status == Status.DIVERGED:
            summary["error"] = f"training loss not finite in epoch {epochs[-1]['epoch']}"
        self.plan.store.finish_trial(summary, epochs)
        if status == Status.OOM and config.max_batch_probe:
            self.results.add(trial.trial_id)
        self.view.ended(config, status, str(error) if error else None)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._finish(trial, Status.COMPLETED, None)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        # A trial whose actor died with the cluster (the head node gone: "owner's node has crashed") did not
        # fail: it gets no summary row, so that --resume runs it again, and the run ends as lost.
        error = _error_of(trial)
        self.lost = self.lost or gcs.cluster_lost(NODE_LOSS_WATCH_S if error.error_type in ACTOR_DEATHS else 0.0)
        if self.lost:
            return
        self._finish(trial, _failure_status(error.error_type, error.message), error)


class ResultsNotErrors(logging.Filter):
    """Tune's closing error, "Trials did not complete: [...]" (ray.tune.tune, once Tuner.fit's loop ends), without
    the trials whose failure is a result: a largest-batch probe that ran out of memory is what its search looks
    for (docs/max-batch.md), and our own line has said so. With no other trial left in it, no line at all."""

    PREFIX = "Trials did not complete"

    def __init__(self, results: set[str]) -> None:
        super().__init__()
        self.results = results  # Tune's trial ids (SummaryCallback.results)

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self.PREFIX) or not isinstance(record.args, tuple) or len(record.args) != 1:
            return True
        left = [t for t in record.args[0] if getattr(t, "trial_id", None) not in self.results]
        record.args = (left,)
        return bool(left)


def trial_resources(config: dict[str, Any]) -> tune.PlacementGroupFactory:
    """One bundle per node the trial spans, holding that node's GPUs (and CPUs).

    A one-node trial trains in Tune's trainable itself, in its one STRICT_PACK bundle. A trial whose
    workers train (sweep/workers.py: a distributed trial, or one whose framework has its own
    environment) has a trainable that only coordinates: it takes an empty head bundle, and its workers
    take one bundle each, STRICT_SPREAD over as many nodes. Where the trial's framework runs on some
    nodes only (sweep/checks.py), each bundle may go to those nodes only.
    """
    trial = trial_of(config)
    runtime: TrialRuntime | None = config.get("runtime")  # None: the trial alone (benchmarks/packing_makespan.py)
    bundle = {"CPU": trial.cpus, "GPU": trial.gpus_per_node}
    nodes = runtime.placement.get(trial.runs_as) if runtime else None
    only = {"bundle_label_selector": [checks.selector(nodes)] * trial.nodes} if nodes else {}
    if trial.distributed or (runtime and runtime.runtime_env(trial)):
        return tune.PlacementGroupFactory([{}] + [bundle] * trial.nodes,
                                          strategy="STRICT_SPREAD" if trial.nodes > 1 else "STRICT_PACK", **only)
    return tune.PlacementGroupFactory([bundle], strategy="STRICT_PACK", **only)


def _scheduler(plan: RunPlan) -> Any:
    """ASHA on val_acc where the sweep asks for early stopping; Tune's FIFO otherwise."""
    if not plan.sweep.early_stopping or plan.runtime.data_dir is None:
        return None
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr="training_iteration", metric="val_acc", mode="max",
                         max_t=max(t.epochs for t in plan.trials), **plan.sweep.early_stopping)


def run(plan: RunPlan, print_line: Callable[[str], None] = print) -> int | None:
    """Run the plan's trials on the connected Ray; the signal that stopped them (SIGINT, SIGTERM), if one did.
    Raises gcs.ClusterLost when trials ended because the cluster went away."""
    with Interrupt() as interrupt, SweepView(plan, print_line) as view:
        callback = SummaryCallback(plan, interrupt, view)
        tuner = tune.Tuner(
            labelled_trainable(trial_resources),  # actors named after their trial
            param_space={"trial": tune.grid_search([t.to_dict() for t in plan.trials]), "runtime": plan.runtime},
            tune_config=tune.TuneConfig(
                max_concurrent_trials=plan.max_concurrent, reuse_actors=False, scheduler=_scheduler(plan),
                trial_name_creator=lambda t: f"{plan.sweep.name}-{trial_of(t.config).trial_id}",
                trial_dirname_creator=lambda t: trial_of(t.config).trial_id),
            run_config=tune.RunConfig(
                name=f"tune-{plan.session}" + (f"-{plan.round}" if plan.round > 1 else ""), **location.tune_storage(plan.store.dir), callbacks=[callback, view], verbose=0,
                stop=interrupt,  # a Stopper: stop_all() turns true on Ctrl-C or SIGTERM
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                failure_config=tune.FailureConfig(max_failures=plan.max_failures)),
        )
        tune_log, results = logging.getLogger("ray.tune.tune"), ResultsNotErrors(callback.results)
        tune_log.addFilter(results)
        try:
            tuner.fit()
        finally:
            tune_log.removeFilter(results)
    plan.store.compact(set(plan.store.finished()))
    if callback.lost:
        raise gcs.ClusterLost(callback.lost)
    return interrupt.signal
