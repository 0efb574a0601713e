"""Trackers shared by both frameworks: step-time throughput and peak memory.

Throughput follows tf_cnn_benchmarks: the first `warmup` steps of a process are thrown away, then
images/s is the mean of per-step rates, with its standard error (std/sqrt(n)) and jitter
(1.4826 x median absolute deviation). Callers synchronise the device before a step ends.
"""
from __future__ import annotations

import resource
import statistics
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Throughput:
    mean: float | None  # images/s
    stderr: float | None
    jitter: float | None
    steps: int  # timed steps behind the figures


def throughput(step_times: list[float], images_per_step: int) -> Throughput:
    rates = [images_per_step / t for t in step_times if t > 0]
    if not rates:
        return Throughput(None, None, None, 0)
    mean = statistics.fmean(rates)
    if len(rates) < 2:
        return Throughput(mean, None, None, 1)
    stderr = statistics.stdev(rates) / len(rates) ** 0.5
    median = statistics.median(rates)
    jitter = 1.4826 * statistics.median(abs(r - median) for r in rates)
    return Throughput(mean, stderr, jitter, len(rates))


class StepTimer:
    """Times steps; the first `warmup` steps this timer sees are never counted."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.seen = 0
        self.timed: list[float] = []  # post-warm-up step times of the whole trial
        self._epoch_start = 0
        self._t0 = 0.0

    def start_epoch(self) -> None:
        self._epoch_start = len(self.timed)

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        elapsed = time.perf_counter() - self._t0
        self.seen += 1
        if self.seen > self.warmup:
            self.timed.append(elapsed)
        return elapsed

    def epoch_times(self) -> list[float]:
        return self.timed[self._epoch_start:]


def host_peak_rss_mib() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def host_rss_mib() -> float:
    """This process's resident memory now (Linux's /proc; elsewhere its peak so far, an upper bound)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return float(line.split()[1]) / 1024.0
    except OSError:
        pass
    return host_peak_rss_mib()


class EmulatedMemory:
    """The memory emulated devices take, measured: the process's peak resident memory since just before its
    backend was built (its framework imported already), shared evenly over the process's devices.

    On a CPU that is what a GPU would hold for the trial: weights, optimizer state, the activations of a step
    and the framework's workspaces. It grows with the batch (activations), which the largest-batch search
    relies on; the framework's own import is left out, as a GPU does not hold it either.
    """

    def __init__(self, devices: int) -> None:
        self.devices = max(devices, 1)
        self.baseline = host_rss_mib()

    def per_device_mib(self) -> float:
        return max(host_peak_rss_mib() - self.baseline, 0.0) / self.devices


class NvmlPeakMemory:
    """Polls NVML for each visible GPU's used memory and keeps the peak, in MiB.

    For frameworks whose allocator keeps no peak (MXNet). Counts the whole device, like the
    seeds' nvidia-smi readings; the baseline at start is subtracted, as seed 002 does by hand.
    """

    def __init__(self, gpu_indices: list[int], interval_s: float = 0.05) -> None:
        import pynvml  # only on real GPUs, from the `gpu` extra

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in gpu_indices]
        self._baseline = [self._used(h) for h in self._handles]
        self._peak = list(self._baseline)
        self._interval = interval_s
        self._stop = threading.Event()
        threading.Thread(target=self._poll, daemon=True).start()

    def _used(self, handle: object) -> float:
        return self._nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20

    def _poll(self) -> None:
        while not self._stop.wait(self._interval):
            for i, h in enumerate(self._handles):
                self._peak[i] = max(self._peak[i], self._used(h))

    def peak_mib(self) -> list[float]:
        return [p - b for p, b in zip(self._peak, self._baseline)]


def total_over_workers(rows: list[dict]) -> dict:
    """One epoch row of a trial trained by several workers (rank order).

    Throughput is the sum over workers, as tf_cnn_benchmarks' `total images/sec`; the epoch lasts as
    long as its slowest worker; loss and accuracy are the workers' mean; the first worker validates.
    Where each worker has its own value (node, GPUs, memory), the row lists them all, worker by worker.
    """
    if len(rows) == 1:
        return dict(rows[0])

    def total(key: str) -> float | None:
        values = [r[key] for r in rows]
        return None if any(v is None for v in values) else sum(values)

    def spread(key: str) -> float | None:  # independent workers: their errors add in quadrature
        values = [r[key] for r in rows]
        return None if any(v is None for v in values) else sum(v * v for v in values) ** 0.5

    def mean(key: str) -> float | None:
        values = [r[key] for r in rows]
        return None if any(v is None for v in values) else statistics.fmean(values)

    memory = [r["peak_device_mem_mib"] for r in rows]
    return {
        **rows[0],
        "ray_gpu_ids": ";".join(r["ray_gpu_ids"] for r in rows),
        "ray_node_id": ";".join(r["ray_node_id"] for r in rows),
        "hostname": ";".join(dict.fromkeys(r["hostname"] for r in rows)),
        "epoch_time_s": max(r["epoch_time_s"] for r in rows),
        "images_per_sec": total("images_per_sec"),
        "steady_images_per_sec": total("steady_images_per_sec"),
        "steady_images_per_sec_stderr": spread("steady_images_per_sec_stderr"),
        "steady_jitter": spread("steady_jitter"),
        "steady_steps": min(r["steady_steps"] for r in rows),
        "train_loss": mean("train_loss"),
        "train_acc": mean("train_acc"),
        "peak_device_mem_mib": None if any(m is None for m in memory) else [v for m in memory for v in m],
        "peak_host_rss_mib": max(r["peak_host_rss_mib"] for r in rows),
        "emulated_device_mem_mib": None if any(r.get("emulated_device_mem_mib") is None for r in rows)
        else max(r["emulated_device_mem_mib"] for r in rows),
        "diverged": any(r["diverged"] for r in rows),
        # data: imagenet: every rank's undecodable images; the longest any rank's steps waited for their input.
        "images_skipped": total("images_skipped") if "images_skipped" in rows[0] else None,
        "input_wait_s": None if any(r.get("input_wait_s") is None for r in rows) else max(r["input_wait_s"] for r in rows),
        "steady_input_wait_share": max((r["steady_input_wait_share"] for r in rows
                                        if r.get("steady_input_wait_share") is not None), default=None),
    }
