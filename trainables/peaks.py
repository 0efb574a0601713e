"""Published dense peak TFLOP/s per GPU model and precision: the denominator of MFU.

Figures are the vendors' dense (no structured sparsity) tensor-core peaks per GPU, from the datasheet
named in each entry's "source"; "fp32" is the non-tensor-core FP32 peak. A precision a GPU has no
tensor-core path for is left out, so its peak reads None.
"""
from __future__ import annotations

H100_DATASHEET = "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/)"
H200_DATASHEET = "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200/)"
A100_DATASHEET = "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100/)"
L40S_DATASHEET = "NVIDIA L40S GPU datasheet (nvidia.com/en-us/data-center/l40s/)"
L4_DATASHEET = "NVIDIA L4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/l4/)"
A10_DATASHEET = "NVIDIA A10 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/products/a10-gpu/)"
V100_DATASHEET = "NVIDIA Tesla V100 GPU datasheet (nvidia.com/en-us/data-center/v100/)"

# TFLOP/s, dense. The datasheets print sparse tensor figures (2x); these are halved to dense.
PEAKS = {
    "H100 SXM": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9,
                 "source": H100_DATASHEET},
    "H100 PCIe": {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0,
                  "source": H100_DATASHEET},
    "H100 NVL": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5,
                 "source": H100_DATASHEET},
    "H200": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9,
             "source": H200_DATASHEET},
    "A100 SXM 40GB": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0, "source": A100_DATASHEET},
    "A100 SXM 80GB": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0, "source": A100_DATASHEET},
    "A100 PCIe 40GB": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0, "source": A100_DATASHEET},
    "A100 PCIe 80GB": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0, "source": A100_DATASHEET},
    "L40S": {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0,
             "source": L40S_DATASHEET},
    "L4": {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5, "source": L4_DATASHEET},
    "A10": {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0, "source": A10_DATASHEET},
    "V100 SXM2": {"fp32": 15.7, "fp16": 125.0, "source": V100_DATASHEET},
    "V100 PCIe": {"fp32": 14.0, "fp16": 112.0, "source": V100_DATASHEET},
}

# (substring of the lower-cased nvidia-smi name, table key), most specific first.
_NAME_PATTERNS = [
    ("h200", "H200"),
    ("h100 nvl", "H100 NVL"),
    ("h100 pcie", "H100 PCIe"),
    ("h100", "H100 SXM"),  # "NVIDIA H100 80GB HBM3": the SXM part (the PCIe part says "PCIe")
    ("a100-pcie-80gb", "A100 PCIe 80GB"),
    ("a100 80gb pcie", "A100 PCIe 80GB"),
    ("a100-pcie", "A100 PCIe 40GB"),
    ("a100-sxm4-80gb", "A100 SXM 80GB"),
    ("a100 80gb", "A100 SXM 80GB"),
    ("a100", "A100 SXM 40GB"),
    ("l40s", "L40S"),
    ("l4", "L4"),
    ("a10", "A10"),
    ("v100-pcie", "V100 PCIe"),
    ("v100 pcie", "V100 PCIe"),
    ("v100", "V100 SXM2"),
]


def gpu_model(device_name: str | None) -> str | None:
    """The PEAKS key for a device name as rows record it (nvidia-smi's name), or None if unknown."""
    if not device_name:
        return None
    name = device_name.lower()
    for pattern, model in _NAME_PATTERNS:
        if pattern == "l4" and "l40" in name:
            continue  # "L40" (not L40S) has no entry; do not read it as an L4
        if pattern == "a10" and "a100" in name:
            continue
        if pattern in name:
            return model
    return None


def peak_tflops(model: str, precision: str) -> float | None:
    """Dense peak TFLOP/s of a PEAKS model at a computed precision (fp32/tf32/bf16/fp16/fp8), or None."""
    return PEAKS.get(model, {}).get(precision)


def training_gflops(forward_gflops: float) -> float:
    """Training FLOPs per image by the usual convention: backward costs twice the forward, so 3x forward."""
    return 3.0 * forward_gflops


def achieved_and_mfu(images_per_s: float | None, forward_gflops: float | None, device_name: str | None, precision: str,
                     emulated: bool = False) -> tuple[float | None, float | None, str | None]:
    """(achieved_tflops, mfu, mfu_note) of steady images/s on one GPU; mfu is None with a note saying why."""
    if images_per_s is None or forward_gflops is None:
        return None, None, "no throughput or FLOPs count"
    achieved = images_per_s * training_gflops(forward_gflops) / 1000.0
    if emulated:
        return achieved, None, "emulated devices"
    model = gpu_model(device_name)
    if model is None:
        return achieved, None, f"unknown GPU {device_name}"
    peak = peak_tflops(model, precision)
    if peak is None:
        return achieved, None, f"no published {precision} peak for {model}"
    return achieved, achieved / peak, None


def utilisation(row: dict) -> dict:
    """achieved_tflops, mfu and mfu_note of a row, an epoch's or a trial's summary: its steady images/s (all of the
    trial's GPUs together) at the training FLOPs of its model_gflops_per_image, against the peak of its gpu_model at
    its computed_precision times its num_gpus. Where MFU cannot be had, mfu is None and mfu_note says why."""
    gpus = row.get("num_gpus") or 1
    rate = row.get("steady_images_per_sec")
    precision = row.get("computed_precision")
    emulated = row.get("device_kind") != "gpu"
    # Per GPU, as the peaks are; the trial's achieved TFLOP/s is all of its GPUs'.
    achieved, mfu, note = achieved_and_mfu(rate / gpus if rate else None, row.get("model_gflops_per_image"),
                                           row.get("gpu_model"), precision or "", emulated=emulated)
    if precision is None and mfu is None and not emulated and achieved is not None:
        note = "the precision the steps computed in is not known"
    return {"achieved_tflops": None if achieved is None else achieved * gpus, "mfu": mfu, "mfu_note": note}
