"""What a trial ran on, captured in the trial's own process (its node, its devices)."""
from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
import sys

import numpy as np


def _cpuinfo(field: str) -> str | None:
    """The first CPU's `field` as Linux's /proc/cpuinfo lists it; None where it is not listed (another OS)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


# MXNet 1.9.1 computes bfloat16 on a CPU through its oneDNN (MKLDNN), whose bf16 kernels need AVX-512 (oneDNN's
# avx512_core: these four). On an AVX2-only CPU (this project's AMD EPYC machine, 2026-11-28) its first bf16
# convolution fails with "could not create a primitive descriptor iterator".
ONEDNN_BF16_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq")


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags as Linux lists them; None where none are listed (another OS or architecture)."""
    flags = _cpuinfo("flags")
    return None if flags is None else set(flags.split())


def mxnet_bf16_cpu_problem(flags: set[str] | None) -> str | None:
    """Why MXNet cannot compute bf16 on a CPU with these flags (one phrase), or None: it can, or they are unknown."""
    if flags is None or platform.machine() not in ("x86_64", "AMD64"):
        return None
    missing = [flag for flag in ONEDNN_BF16_FLAGS if flag not in flags]
    return f"MXNet's bf16 on a CPU needs AVX-512 for oneDNN; this CPU lacks {', '.join(missing)}" if missing else None


def _nvidia_smi() -> tuple[str | None, str | None, str | None]:
    """(GPU model, driver version, CUDA version the driver supports) of the visible GPUs."""
    if not shutil.which("nvidia-smi"):
        return None, None, None
    try:
        names = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
        header = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None, None
    if not names:
        return None, None, None
    model, driver = (p.strip() for p in names[0].split(",", 1))
    cuda = header.split("CUDA Version:", 1)[1].split()[0] if "CUDA Version:" in header else None
    return model, driver, cuda


def capture(device_kind: str, gpu_count: int) -> dict[str, object]:
    gpu_model = driver = cuda = None
    if device_kind == "gpu":
        gpu_model, driver, cuda = _nvidia_smi()
    return {
        "hostname": platform.node(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu_model": gpu_model,
        "gpu_count": gpu_count if device_kind == "gpu" else 0,
        "gpu_driver": driver,
        "driver_cuda_version": cuda,  # the newest CUDA the driver supports, not what a framework runs
        "python_version": platform.python_version(),
        "numpy_version": np.__version__,
        "os": f"{platform.system()} {platform.release()}",
        "python_executable": sys.executable,
    }


def cudnn_version_text(number: int) -> str:
    """cudnnGetVersion()'s number as a version: major*1000 + minor*100 + patch up to cuDNN 8,
    major*10000 + minor*100 + patch from cuDNN 9 on (9.3.0 is 90300)."""
    major, rest = divmod(number, 10_000) if number >= 90_000 else divmod(number, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def loaded_cudnn_version(maps: str = "/proc/self/maps") -> str | None:
    """The version of the cuDNN library loaded in this process (None where none is, or it cannot be read):
    the first mapped library that answers cudnnGetVersion. Frameworks load cuDNN lazily, at their first
    convolution on a GPU, so this is read after a step."""
    try:
        with open(maps) as f:
            paths = {line.split()[-1] for line in f if "libcudnn" in line and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            get_version = ctypes.CDLL(path).cudnnGetVersion
        except (OSError, AttributeError):
            continue
        get_version.restype = ctypes.c_size_t
        return cudnn_version_text(int(get_version()))
    return None


def gpu_architecture(index: int) -> tuple[str, str] | None:
    """(model, architecture as sm_XY) of the GPU with this index, as the NVIDIA driver says (no framework
    needed); None where there is no driver or no such GPU."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    name, _, cap = out.stdout.strip().rpartition(",")
    if out.returncode != 0 or not name or "." not in cap:
        return None
    return name.strip(), "sm_" + cap.strip().replace(".", "")


def real_gpu_count() -> int:
    """GPUs the NVIDIA driver sees on this node and CUDA_VISIBLE_DEVICES, where set, lets us use
    (0 where there is no driver, or CUDA_VISIBLE_DEVICES="" hides them all)."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    found = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return found if visible is None else min(found, len([i for i in visible.split(",") if i.strip()]))
