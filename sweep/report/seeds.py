"""Reference figures the studies' documents (../shared/seeds) publish, for the report to set beside a run's.

Study 000 (Keras 1.2.2 with the MXNet and TensorFlow backends on AWS p2 machines: K80 GPUs of 12 GiB)
tabulates "Maximum Memory Consumption" on 1-16 GPUs: the total over the GPUs, as nvidia-smi reports it
(MiB). ResNet-50 ran on CIFAR-10's own images at batch 32 per GPU; Inception-v3 on CIFAR-10 resized to
299x299 at "Batchsize 32". The figures are its "Reduce Randomization" tables' (one per backend); TensorFlow
then took nearly all of each GPU's memory whatever the model, so its rows say what it reserved.
"""
from __future__ import annotations

STUDY_000 = "000_1a1c9c6fdc2c6823.txt"
STUDY_000_BATCH = 32
# (framework, model) -> {GPUs: MiB over all GPUs}
STUDY_000_MEMORY: dict[tuple[str, str], dict[int, float]] = {
    ("mxnet", "resnet50_v1"): {1: 5091, 2: 5855, 4: 5126, 8: 9826, 16: 15267},
    ("tensorflow", "resnet50_v1"): {1: 10946, 2: 21890, 4: 43778, 8: 87544, 16: 175088},
    ("mxnet", "inception_v3"): {1: 10896, 2: 10961, 4: 11846, 8: 13701, 16: 17628},
    ("tensorflow", "inception_v3"): {1: 10946, 2: 21890, 4: 43778, 8: 87544, 16: 175088},
}


def study_000_mib_per_gpu(framework: str, model: str, gpus: int) -> float | None:
    """Study 000's maximum memory per GPU at batch 32 for this configuration; None where it has no row."""
    total = STUDY_000_MEMORY.get((framework, model), {}).get(gpus)
    return None if total is None else total / gpus
