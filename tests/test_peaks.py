"""The peak table (trainables/peaks.py): its anchors, device names as rows record them, and MFU."""
import pytest

from trainables.pytorch.flops import forward_gflops_per_image
from trainables.pytorch.models import resnet50_v1
from trainables.peaks import PEAKS, achieved_and_mfu, gpu_model, peak_tflops, utilisation


def test_anchor_figures_from_the_datasheets():
    assert peak_tflops("H100 SXM", "bf16") == pytest.approx(989, abs=1)
    assert peak_tflops("H100 SXM", "tf32") == pytest.approx(495, abs=1)
    assert peak_tflops("H100 SXM", "fp32") == 67
    assert (peak_tflops("A100 SXM 80GB", "bf16"), peak_tflops("A100 SXM 80GB", "tf32"),
            peak_tflops("A100 SXM 80GB", "fp32")) == (312, 156, 19.5)
    assert peak_tflops("V100 SXM2", "bf16") is None  # no bf16 tensor cores on Volta
    assert peak_tflops("no such GPU", "bf16") is None


def test_every_entry_names_its_source():
    for model, peaks in PEAKS.items():
        assert "datasheet" in peaks["source"], model
        assert set(peaks) - {"source"} <= {"fp32", "tf32", "bf16", "fp16", "fp8"}, model


@pytest.mark.parametrize("name, model", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200"), ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"), ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"), ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA L4", "L4"), ("NVIDIA A10", "A10"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"), ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ("NVIDIA L40", None), ("NVIDIA GeForce RTX 4090", None), ("", None), (None, None),
])
def test_gpu_model_of_device_names(name, model):
    assert gpu_model(name) == model


def test_mfu_of_the_h100_row_in_shared_gpu_md():
    # ../shared/GPU.md: NVIDIA H100 80GB HBM3, ResNet-50 v1 224x224 bf16 eager, 4,036 img/s.
    # ResNet-50 v1 forward at 224x224 counted from the zoo's network; training counted as 3x forward.
    gflops = forward_gflops_per_image(resnet50_v1(), 224)
    assert gflops == pytest.approx(7.71, abs=0.01)  # convolutions and the classifier, 2 FLOPs a multiply-add
    achieved, mfu, note = achieved_and_mfu(4036, gflops, "NVIDIA H100 80GB HBM3", "bf16")
    assert achieved == pytest.approx(4036 * 3 * gflops / 1000)
    assert mfu == pytest.approx(achieved / 989.4) and note is None
    assert 0.09 < mfu < 0.11


def test_mfu_is_null_with_a_note_saying_why():
    assert achieved_and_mfu(100, 1.0, "NVIDIA H100 80GB HBM3", "bf16", emulated=True)[1:] == (None, "emulated devices")
    assert achieved_and_mfu(100, 1.0, "NVIDIA GeForce RTX 4090", "bf16")[1:] == (None, "unknown GPU NVIDIA GeForce RTX 4090")
    assert achieved_and_mfu(100, 1.0, "Tesla V100-SXM2-16GB", "bf16")[1:] == (None, "no published bf16 peak for V100 SXM2")


# The ImageNet-size networks (~12 CPU-s of the fast lane to build twice) run in the full suite (lane 1), a CIFAR-size one
# in the fast lane too, through the same FLOP counters (issue 46, the fast lane's 3 minutes).
LARGE = [pytest.param(name, size, marks=pytest.mark.slow) for name, size in (("resnet50_v1", 32), ("inception_v3", 75),
                                                                                ("alexnet", 100))]


@pytest.mark.parametrize("name, size", [("resnet20_cifar", 32), ("cifar10_conv", 32), *LARGE])
def test_the_same_network_gets_the_same_flops_in_pytorch_and_tensorflow(name, size):
    from trainables.pytorch import models as torch_models
    from trainables.tensorflow import models as tf_models
    from trainables.tensorflow.flops import forward_gflops_per_image as keras_gflops

    in_torch = forward_gflops_per_image(torch_models.build(name, size), size)
    in_keras = keras_gflops(tf_models.build(name, size))
    assert in_torch > 0
    assert in_keras == pytest.approx(in_torch, rel=1e-9)


@pytest.mark.parametrize("name, size", [("resnet20_cifar", 32), *LARGE])
def test_the_same_network_gets_the_same_flops_in_mxnet(name, size):
    mx_flops = pytest.importorskip("trainables.mxnet.flops")  # MXNet has its own interpreter in the numpy 2 lane
    from trainables.mxnet import models as mx_models
    from trainables.pytorch import models as torch_models

    net = mx_models.build(name, size)
    net.initialize()
    in_mxnet = mx_flops.forward_gflops_per_image(net, size)
    assert in_mxnet == pytest.approx(forward_gflops_per_image(torch_models.build(name, size), size), rel=1e-9)


def test_a_rows_utilisation_is_its_gpus_images_against_their_peak():
    # The H100 row of ../shared/GPU.md through what the store applies to every epoch and summary row.
    gflops = forward_gflops_per_image(resnet50_v1(), 224)
    row = {"steady_images_per_sec": 4036.0, "num_gpus": 1, "device_kind": "gpu", "gpu_model": "NVIDIA H100 80GB HBM3",
           "computed_precision": "bf16", "model_gflops_per_image": gflops}
    one = utilisation(row)
    assert one["achieved_tflops"] == pytest.approx(4036 * 3 * gflops / 1000)
    assert one["mfu"] == pytest.approx(4036 * 3 * gflops / 1000 / 989.4) and one["mfu_note"] is None
    # Two GPUs at twice the images: twice the TFLOP/s, the same MFU (each GPU against its own peak).
    two = utilisation({**row, "steady_images_per_sec": 8072.0, "num_gpus": 2})
    assert two["achieved_tflops"] == pytest.approx(2 * one["achieved_tflops"]) and two["mfu"] == pytest.approx(one["mfu"])
    # tf32 against the tf32 peak, not bf16's.
    assert utilisation({**row, "computed_precision": "tf32"})["mfu"] == pytest.approx(one["mfu"] * 989.4 / 494.7)
    for changed, note in (({"device_kind": "cpu"}, "emulated devices"), ({"gpu_model": "NVIDIA GeForce RTX 4090"}, "unknown GPU"),
                          ({"computed_precision": None}, "precision the steps computed in is not known"),
                          ({"model_gflops_per_image": None}, "no throughput or FLOPs count")):
        got = utilisation({**row, **changed})
        assert got["mfu"] is None and note in got["mfu_note"], (changed, got)


def test_engine_rows_carry_flops_achieved_tflops_and_why_mfu_is_null_on_emulated_devices(engine_runs):
    import pandas as pd

    mx_flops = pytest.importorskip("trainables.mxnet.flops")
    from trainables.mxnet import models as mx_models

    run = engine_runs.run_dir(1)
    epochs, trials = pd.read_parquet(run / "epochs"), pd.read_parquet(run / "trials")
    counted = {}
    for row in epochs.to_dict("records"):  # counted here apart, on the network the row names, at the size it ran
        net = mx_models.build(row["model"], int(row["image_size"]))
        net.initialize()
        counted[row["trial_id"]] = mx_flops.forward_gflops_per_image(net, int(row["image_size"]))
        assert row["model_gflops_per_image"] == pytest.approx(counted[row["trial_id"]], rel=1e-9)
    done = trials[trials["status"] == "completed"].to_dict("records")
    assert len(done) == 2 and set(counted) == {row["trial_id"] for row in done}
    for row in epochs.to_dict("records") + done:
        gflops = counted[row["trial_id"]]
        assert row["model_gflops_per_image"] == pytest.approx(gflops, rel=1e-9)
        assert row["achieved_tflops"] == pytest.approx(row["steady_images_per_sec"] * 3 * gflops / 1000)
        assert pd.isna(row["mfu"]) and row["mfu_note"] == "emulated devices"
