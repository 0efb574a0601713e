"""The five studies the shipped sweeps reproduce, and the figures of theirs that a report sets beside a run's.

A study is a published benchmark document the project started from, named by its number and file
(a sweep file's `study:`). docs/studies.md says where each comes from and holds the figures below.
Report headings name a study only as the layout they follow ("as in study 004, TF's benchmark table"),
never as if the run were that study.

Study 000 ("Profiling results": Keras 1.2.2 with the MXNet and the TensorFlow backend, on AWS EC2
P2.16xlarge and P2.8xlarge machines, whose GPUs are K80s of 12 GiB) tabulates "Maximum Memory
Consumption" on 1-16 GPUs: the total over the GPUs, as nvidia-smi reports it (MiB). ResNet-50 ran on
CIFAR-10's own images at batch 32 per GPU; Inception-v3 on CIFAR-10 resized to 299x299 at "Batchsize 32".
The figures are its "Reduce Randomization" tables' (one per backend); TensorFlow then took nearly all of
each GPU's memory whatever the model, so its rows say what it reserved.
"""
from __future__ import annotations

# number -> (file, a few words that say which study it is)
STUDIES: dict[str, tuple[str, str]] = {
    "000": ("000_1a1c9c6fdc2c6823.txt", "Keras' MXNet vs TensorFlow backends"),
    "001": ("001_e928307725c25476.txt", "MXNet's LR-scaling grid"),
    "002": ("002_d7568e858e648bf8.txt", "Neon vs MXNet"),
    "003": ("003_17e9074d3c0ac7a4.txt", "Poseidon"),
    "004": ("004_ff890fe14756fb7a.txt", "TF's benchmark table"),
}


def as_in(number: str) -> str:
    """How a heading names the study whose layout it follows: 'as in study 004, TF's benchmark table'."""
    return f"as in study {number}, {STUDIES[number][1]}"


STUDY_000 = STUDIES["000"][0]
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
