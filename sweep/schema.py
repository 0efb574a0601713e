"""What a row of the store holds: the Parquet columns of epoch and summary rows, and a trial's status.

Epoch rows are written by the trials (one per trial and epoch), summary rows by the driver (one per
trial); sweep/store.py reads and writes them. Every TrialConfig field is a column of both.
"""
from __future__ import annotations

from enum import StrEnum

import pyarrow as pa

from trainables.config import field_names


class Status(StrEnum):
    """A trial's status. An epoch row says `running` until its trial ends; then every row of the trial
    and its summary row carry the final status."""

    RUNNING = "running"
    COMPLETED = "completed"
    STOPPED_EARLY = "stopped_early"  # ASHA ended a healthy trial before its last epoch
    FAILED = "failed"
    OOM = "oom"
    DIVERGED = "diverged"  # the training loss turned non-finite: a result, not a fault
    INFEASIBLE = "infeasible"  # fits no node of the cluster, or asks what emulated GPUs cannot run

    @property
    def done(self) -> bool:
        """An ended trial whose measurements count (the others count as failed)."""
        return self in (Status.COMPLETED, Status.STOPPED_EARLY)

    @property
    def retryable(self) -> bool:
        """Run again by `--resume --retry-failed`; a diverged trial is not: the same seed diverges the same way."""
        return self in (Status.FAILED, Status.OOM, Status.INFEASIBLE)

    @property
    def label(self) -> str:
        """The status as tables and console lines name it."""
        return {Status.OOM: "OOM", Status.STOPPED_EARLY: "stopped early"}.get(self, self.value)


CONFIG_COLUMNS: dict[str, pa.DataType] = {
    "framework": pa.string(), "model": pa.string(), "num_gpus": pa.int64(), "batch_per_gpu": pa.int64(),
    "global_batch": pa.int64(), "epochs": pa.int64(), "lr": pa.float64(), "lr_rule": pa.string(),
    "base_lr": pa.float64(), "base_batch": pa.int64(), "warmup_epochs": pa.int64(),
    "lr_decay_epochs": pa.list_(pa.int64()), "lr_decay_factor": pa.float64(), "momentum": pa.float64(),
    "weight_decay": pa.float64(), "data": pa.string(), "image_size": pa.int64(),
    "steps_per_epoch": pa.int64(), "val_examples": pa.int64(), "warmup_steps": pa.int64(), "seed": pa.int64(),
    "cpus_per_trial": pa.int64(), "kvstore": pa.string(), "nodes": pa.int64(), "gpus_per_node": pa.int64(),
    "variable_update": pa.string(), "precision": pa.string(), "compile": pa.bool_(), "cpus_per_gpu": pa.int64(),
    "max_batch_probe": pa.string(), "memory_capacity_mib": pa.float64(), "loader_workers": pa.int64(),
    "decode": pa.string(), "keras_backend": pa.string(),
}
assert set(CONFIG_COLUMNS) - {"global_batch"} == set(field_names()), "every TrialConfig field is a column"
ENV_COLUMNS: dict[str, pa.DataType] = {
    "hostname": pa.string(), "device_kind": pa.string(), "gpu_model": pa.string(), "gpu_count": pa.int64(),
    "gpu_driver": pa.string(),
    # What CUDA and cuDNN ran, each from its own source (trainables/environment.py): the newest CUDA
    # the driver supports (nvidia-smi's "CUDA Version"), the CUDA and cuDNN the framework was built
    # with (TensorFlow's build info; MXNet names its CUDA in its wheel's name, its cuDNN nowhere), and
    # the cuDNN library loaded in the trial's process (cudnnGetVersion). None where not on a GPU or unknown.
    "driver_cuda_version": pa.string(), "framework_cuda_version": pa.string(),
    "framework_cudnn_version": pa.string(), "cudnn_loaded_version": pa.string(),
    "cpu_model": pa.string(), "cpu_count": pa.int64(),
    "framework_version": pa.string(), "python_version": pa.string(), "numpy_version": pa.string(),
    "os": pa.string(), "ray_version": pa.string(), "engine_version": pa.string(), "git_commit": pa.string(),
    # Where the trial's framework ran: the interpreter, and the sweep's environment for it (sweep/environments.py).
    "python_executable": pa.string(), "environment": pa.string(),
}
# How the trial's arithmetic ran, as its framework reports it (absent, so null, in rows of older runs):
# the layout its images and convolutions used, whether TF32 tensor cores were allowed (None where the
# framework cannot say), and the last dynamic loss scale (None without loss scaling).
# `compiler` names the graph compiler that ran (xla, inductor), None where none did. `computed_precision` is what
# the steps computed in, in `precision`'s names (trainables/loop.py computed_precision): fp32 for tf32 on a CPU.
PRECISION_COLUMNS: dict[str, pa.DataType] = {
    "layout": pa.string(), "tf32_allowed": pa.bool_(), "loss_scale": pa.float64(), "compiler": pa.string(),
    "computed_precision": pa.string(),
}
# The network's forward GFLOPs per image (its framework's counter on the built network; training is 3x), the
# TFLOP/s the steady images/s achieved at that, and MFU: achieved over the GPUs' published dense peak at the
# computed precision (trainables/peaks.py). mfu is null with mfu_note saying why: emulated devices, a GPU or a
# precision without a published peak, a network the counter cannot read. Null in rows of older runs.
UTILISATION_COLUMNS: dict[str, pa.DataType] = {
    "model_gflops_per_image": pa.float64(), "achieved_tflops": pa.float64(), "mfu": pa.float64(),
    "mfu_note": pa.string(),
}
# Columns of runs written before the ones above split them: old name -> the column it is read into.
# cuda_version was the driver's CUDA, cudnn_version the framework's cuDNN build (TensorFlow's).
# xla was compile's name (trainables/config.py RENAMED).
LEGACY_COLUMNS: dict[str, str] = {"cuda_version": "driver_cuda_version", "cudnn_version": "framework_cudnn_version",
                                  "xla": "compile"}
EPOCH_SCHEMA = pa.schema({
    "sweep": pa.string(), "run_id": pa.string(), "trial_id": pa.string(), "epoch": pa.int64(),
    "status": pa.string(), "scale": pa.string(),
    **CONFIG_COLUMNS,
    "data_kind": pa.string(), "lr_applied": pa.float64(), "steps": pa.int64(),
    # data: imagenet: images that could not be decoded (replaced by others of the shard), and the time the
    # epoch's steps waited for the input pipeline's next batch (null in rows of older runs).
    "images_skipped": pa.int64(), "input_wait_s": pa.float64(),
    # What the pipeline read (jpeg, tfrecord, recordio), and its images/s alone (no model, no copy to the device),
    # measured once before training (null for synthetic data and in-memory CIFAR-10, and in rows of older runs).
    "data_format": pa.string(), "input_images_per_sec": pa.float64(),
    # The share of the timed steps' time (warm-up steps excluded, as in steady_images_per_sec) that they waited for
    # their batch: above 5%, the report marks the input as what bound the step (null for synthetic data).
    "steady_input_wait_share": pa.float64(),
    "epoch_time_s": pa.float64(), "val_time_s": pa.float64(), "images_per_sec": pa.float64(),
    "steady_images_per_sec": pa.float64(), "steady_images_per_sec_stderr": pa.float64(),
    "steady_jitter": pa.float64(), "steady_steps": pa.int64(),
    "train_loss": pa.float64(), "train_acc": pa.float64(), "val_acc": pa.float64(),
    "peak_device_mem_mib": pa.list_(pa.float64()), "peak_host_rss_mib": pa.float64(),
    "emulated_device_mem_mib": pa.float64(),
    "param_count": pa.int64(), "threads": pa.int64(), "ray_gpu_ids": pa.string(), "ray_node_id": pa.string(), "pid": pa.int64(),
    "attempt": pa.int64(), "reported_at": pa.float64(),
    **PRECISION_COLUMNS,
    **UTILISATION_COLUMNS,
    **ENV_COLUMNS,
})
TRIAL_SCHEMA = pa.schema({
    "sweep": pa.string(), "run_id": pa.string(), "trial_id": pa.string(), "status": pa.string(),
    "scale": pa.string(),
    **CONFIG_COLUMNS,
    "data_kind": pa.string(), "data_format": pa.string(),
    "error_type": pa.string(), "error": pa.string(), "error_class": pa.string(),
    "started_at": pa.float64(), "ended_at": pa.float64(), "wall_time_s": pa.float64(),
    "attempts": pa.int64(), "gpu_hours": pa.float64(), "epochs_done": pa.int64(),
    "best_val_acc": pa.float64(), "final_val_acc": pa.float64(), "final_train_acc": pa.float64(),
    "steady_images_per_sec": pa.float64(), "mean_epoch_time_s": pa.float64(),
    "peak_device_mem_mib": pa.list_(pa.float64()), "peak_host_rss_mib": pa.float64(),
    "emulated_device_mem_mib": pa.float64(),
    **PRECISION_COLUMNS,
    **UTILISATION_COLUMNS,
    **ENV_COLUMNS,
})
