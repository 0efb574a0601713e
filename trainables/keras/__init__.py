"""framework: keras: Keras 3 on the jax, tensorflow or torch backend.

Keras reads its backend (KERAS_BACKEND) once, when it is first imported, and JAX its number of host devices
(XLA_FLAGS) once, when it first starts: both are set here from the trial's config, before trainables/keras/
backend.py imports keras (trainables/loop.py: backend_module). This module itself imports no framework.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainables.config import TrialConfig
    from trainables.loop import Devices

HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"
EIGEN_FLAG = "--xla_cpu_multi_thread_eigen"
INTRA_OP_FLAG = "intra_op_parallelism_threads"
THREAD_FLAGS = (HOST_DEVICES_FLAG, EIGEN_FLAG, INTRA_OP_FLAG)  # set here from the trial: any earlier value replaced


def prepare(cfg: TrialConfig, devices: Devices) -> None:
    """Set this process's environment for a Keras trial on cfg.keras_backend; a ValueError (one line) where keras
    was already imported here with another backend (a process runs Keras on one backend only)."""
    keras = sys.modules.get("keras")
    if keras is not None and keras.backend.backend() != cfg.keras_backend:
        raise ValueError(f"keras_backend {cfg.keras_backend}: this process imported Keras on "
                         f"{keras.backend.backend()} already, and Keras's backend is fixed at its first import "
                         f"(run the trial in a fresh process)")
    os.environ["KERAS_BACKEND"] = cfg.keras_backend
    if cfg.keras_backend == "jax" and devices.kind != "gpu":
        # Emulated GPUs: JAX on the CPU alone (no GPU plugin tried), one host device per emulated GPU.
        os.environ["JAX_PLATFORMS"] = "cpu"
        flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(THREAD_FLAGS)]
        flags.append(f"{HOST_DEVICES_FLAG}={devices.count}")
        if cfg.cpus // devices.count <= 1:
            # A core or less per device: each device computes on one thread (XLA's Eigen pool off), as the plain
            # JAX program it is measured against does (benchmarks/jax_peer.py --threads 1), and as a TensorFlow or
            # PyTorch trial keeps to its CPUs. With the pool on, every host device runs a pool as wide as the machine.
            flags += [f"{EIGEN_FLAG}=false", f"{INTRA_OP_FLAG}=1"]
        os.environ["XLA_FLAGS"] = " ".join(flags)
