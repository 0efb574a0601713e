"""Failures are results: a trial that raises, runs out of memory or diverges is a row, and the sweep goes on."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import SWEEPS, run_cli

from sweep import store
from sweep.runner import _failure_status


@pytest.mark.slow
def test_failed_trials_are_rows_and_the_sweep_goes_on(tmp_path: Path, shared_ray: list[str]) -> None:
    results = tmp_path / "results"
    # TUNE_PRINT_ALL_TRIAL_ERRORS=1 brings back Tune's own traceback per failed trial, on stderr (the engine sets
    # it to 0 unless given; tests/test_report.py's failing run checks that default). On the session's shared Ray:
    # what fails here is the trials, not Ray's start.
    out = run_cli(str(SWEEPS / "failures.yaml"), "--results", str(results), *shared_ray, timeout=400,
                  env={"TUNE_PRINT_ALL_TRIAL_ERRORS": "1"})
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]  # some trials failed
    assert "Traceback" not in out.stdout
    assert "Trial task failed for trial" in out.stderr and "kernel size exceed input" in out.stderr, out.stderr[-3000:]
    run_dir = store.run_dirs(results, "failures")[-1]
    summary = pd.read_parquet(run_dir / "trials").set_index(["framework", "model", "batch_per_gpu", "lr"])
    assert len(summary) == 5
    healthy = summary.loc[("mxnet", "resnet8_cifar", 8, 0.05)]
    assert healthy.status == "completed" and healthy.epochs_done == 2
    raised = summary.loc[("mxnet", "inception_v3", 8, 0.05)]
    assert raised.status == "failed" and raised.error_type == "ValueError" and "kernel size exceed input" in raised.error
    # MXNet's own error class, which the driver cannot unpickle: the trial's process made it plain data.
    mxnet_error = summary.loc[("mxnet", "resnet8_cifar", 65536, 0.05)]
    assert mxnet_error.status == "failed" and mxnet_error.error_type == "MXNetError", mxnet_error.error
    assert mxnet_error.error_class == "mxnet.base.MXNetError" and "larger than 2^31 elements" in mxnet_error.error
    assert not mxnet_error.error.startswith("Traceback")  # the first line that says something
    oom = summary.loc[("tensorflow", "resnet8_cifar", 65536, 0.05)]
    assert oom.status == "oom" and oom.error_type == "ResourceExhaustedError" and "OOM" in oom.error
    assert oom.error_class == "tensorflow.python.framework.errors_impl.ResourceExhaustedError"
    diverged = summary.loc[("mxnet", "resnet8_cifar", 8, 1e8)]
    assert diverged.status == "diverged" and diverged.error_type is None and "not finite" in diverged.error
    epochs = pd.read_parquet(run_dir / "epochs")
    div_rows = epochs[epochs.trial_id == diverged.trial_id]
    assert len(div_rows) >= 1 and div_rows.status.eq("diverged").all()  # the rows it has stay
    for line in ("failed (", "OOM (ResourceExhaustedError", "diverged"):
        assert line in out.stdout


@pytest.mark.parametrize("error_type,message,expected", [
    # Real messages: MXNet's CPU allocator (provoked in test_framework_errors_are_plain_data below)
    # and its GPU pool (from the issue: an MXNet trial out of memory on an H100).
    ("MXNetError", "Failed to allocate CPU Memory", "oom"),
    ("MXNetError", "Check failed: param_shape.Size() < (int64_t{1} << 31) - 1 (307200000000 vs. 2147483647) : "
                   "[InitShape-input] Size of tensor you are trying to allocate is larger than 2^31 elements.", "failed"),
    ("ResourceExhaustedError", "OOM when allocating tensor with shape[64,256,56,56]", "oom"),
    ("MXNetError", "[12:00:00] src/storage/pooled_storage_manager.h:161: cudaMalloc retry failed: out of memory", "oom"),
    ("MemoryError", "Unable to allocate 72.8 TiB for an array", "oom"),
    ("OutOfMemoryError", "Task was killed due to the node running low on memory.", "oom"),
    ("ValueError", "Computed output size would be zero or negative", "failed"),
    # The engine's own, on emulated devices with a capacity (--emulate-gpu-memory; trainables/loop.py)
    ("EmulatedOutOfMemoryError", "emulated device out of memory: the trial took 129 MiB per device, more than "
                                 "the capacity of 100 MiB", "oom"),
    ("RayActorError", "The actor died unexpectedly before finishing this task.", "failed"),
])
def test_failure_classification(error_type: str, message: str, expected: str) -> None:
    assert _failure_status(error_type, message) == expected


PROVOKE = {
    # Each framework in its own process, as in a trial; MXNet's CPU allocator fails under a 6 GB address-space cap.
    "mxnet": ("import trainables.mxnet, mxnet as mx\n"
              "provoked = [lambda: mx.nd.dot(mx.nd.ones((2, 3)), mx.nd.ones((4, 5))).asnumpy(),\n"
              "            lambda: mx.nd.zeros((1 << 31) - 2).wait_to_read()]\n"),
    "tensorflow": ("import tensorflow as tf\n"
                   "provoked = [lambda: tf.matmul(tf.ones((2, 3)), tf.ones((4, 5)))]\n"),
}
RECORD = ("import base64, pickle, sys\nfrom trainables.failure import trial_error\nerrors = []\n"
          "for provoke in provoked:\n    try:\n        provoke()\n    except Exception as e:\n"
          "        errors.append(trial_error(e))\n"
          "sys.stdout.write(base64.b64encode(pickle.dumps(errors)).decode())\n")
READ = ("import base64, pickle, sys\nerrors = pickle.loads(base64.b64decode(sys.stdin.read()))\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('mxnet', 'tensorflow', 'keras')], 'a framework loaded'\n"
        "print(repr([(e.error_type, e.message, e.error_class) for e in errors]))\n")


@pytest.mark.slow
def test_framework_errors_are_plain_data() -> None:
    """Real MXNet and TensorFlow errors, made plain where they were raised, read where neither framework loads."""
    import ast
    import subprocess
    import sys

    from conftest import ROOT

    found = []
    for framework, code in PROVOKE.items():
        made = subprocess.run(["bash", "-c", 'ulimit -v 6000000 && exec "$0" -c "$1"', sys.executable, code + RECORD],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stderr[-2000:]
        read = subprocess.run([sys.executable, "-c", READ], input=made.stdout, cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert read.returncode == 0, read.stderr[-2000:]
        found += ast.literal_eval(read.stdout)
    (mx_type, mx_message, mx_class), (oom_type, oom, _), (tf_type, tf_message, tf_class) = found
    assert (mx_type, mx_class) == ("MXNetError", "mxnet.base.MXNetError")
    assert mx_message.startswith("Check failed") and "dot shape error" in mx_message  # its first line that says something
    assert (oom_type, oom) == ("MXNetError", "Failed to allocate CPU Memory")
    assert tf_type == "InvalidArgumentError" and "Matrix size-incompatible" in tf_message
    assert tf_class == "tensorflow.python.framework.errors_impl.InvalidArgumentError"
    assert [_failure_status(t, m) for t, m, _ in found] == ["failed", "oom", "failed"]


def test_a_remote_calls_error_is_the_error_it_carries() -> None:
    """A worker's call that failed (Ray's RayTaskError, as a trainable's ray.get raises it) is recorded as the
    error inside it: a disk over Ray's threshold reads as OutOfDiskError and Ray's words, not the call's
    coloured name and pid. A worker's own TrialError, wrapped the same way, keeps its fields."""
    from ray.exceptions import OutOfDiskError, RayTaskError

    from trainables.failure import TrialError, trial_error

    words = "The object cannot be created because the local object store is full and the local disk's utilization is over capacity (95% by default)."
    full = RayTaskError("checkpoint", "Traceback (most recent call last):\n...", OutOfDiskError(words),
                        "ray::TrialWorker.checkpoint()").as_instanceof_cause()
    assert str(full).startswith("\x1b[36mray::TrialWorker.checkpoint()")  # what the row said before (stop 32's run)
    fields = lambda e: (e.error_type, e.message, e.error_class)  # noqa: E731
    assert fields(trial_error(full)) == ("OutOfDiskError", words, "ray.exceptions.OutOfDiskError")
    own = RayTaskError("epoch", "...", TrialError("MXNetError", "Check failed", "mxnet.base.MXNetError"),
                       "ray::TrialWorker.epoch()").as_instanceof_cause()
    assert fields(trial_error(own)) == ("MXNetError", "Check failed", "mxnet.base.MXNetError")
