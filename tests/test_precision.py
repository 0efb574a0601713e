"""Precision and XLA: what the convolutions compute in, the rows a real run writes, and the refusals."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from conftest import HANG_S, ROOT, run_cli

from sweep import store
from sweep.store import RunStore
from trainables.config import TrialConfig
from trainables.environment import ONEDNN_BF16_FLAGS, cpu_flags, mxnet_bf16_cpu_problem
from trainables.loop import Devices


def test_tensorflow_convolutions_compute_in_the_policy_dtype() -> None:
    import keras
    import tensorflow as tf

    from trainables.tensorflow.backend import Backend

    try:
        for precision, dtype in [("bf16", "bfloat16"), ("fp16", "float16"), ("fp32", "float32")]:
            cfg = TrialConfig("tensorflow", "resnet8_cifar", num_gpus=1, batch_per_gpu=4, epochs=1, lr=0.1,
                              precision=precision)
            backend = Backend(cfg, Devices.of(["0"], emulated=True), 32)
            convs = [layer for layer in backend.model.layers if isinstance(layer, keras.layers.Conv2D)]
            assert convs and {c.compute_dtype for c in convs} == {dtype}
            assert {c.kernel.dtype for c in convs} == {"float32"}  # mixed: the variables stay fp32
            # The tensor a convolution hands on is of that dtype, not only the layer's setting.
            assert convs[0](tf.random.uniform((4, 32, 32, 3))).dtype.name == dtype
    finally:
        keras.mixed_precision.set_global_policy("float32")  # process-wide: other tests build fp32 models


BF16_CPU_PROBLEM = mxnet_bf16_cpu_problem(cpu_flags())


@pytest.mark.skipif(BF16_CPU_PROBLEM is not None, reason=f"{BF16_CPU_PROBLEM}: the refusals below stand in for it")
def test_mxnet_amp_graph_runs_its_convolutions_in_bfloat16() -> None:
    # amp.init rewrites MXNet's operators for the whole process: checked in a process of its own.
    script = textwrap.dedent("""
        import numpy as np
        from trainables.config import TrialConfig
        from trainables.loop import Devices
        from trainables.mxnet.backend import Backend
        cfg = TrialConfig("mxnet", "resnet8_cifar", num_gpus=1, batch_per_gpu=4, epochs=1, lr=0.1, precision="bf16")
        backend = Backend(cfg, Devices.of(["0"], emulated=True), 32)
        backend.train_step(backend.synthetic(), 0.1)
        internals = backend.net._cached_graph[1].get_internals()
        _, types, _ = internals.infer_type(data=np.float32)
        convs = {n: t for n, t in zip(internals.list_outputs(), types) if n.endswith("_fwd_output") and "conv" in n}
        print("computed", backend.compute_dtype())  # what the step's network produced: the rows' computed_precision
        print(len(convs), sorted({str(t) for t in convs.values()}))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    count, dtypes = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert int(count) >= 7 and "bfloat16" in dtypes and "float32" not in dtypes, out.stdout  # every conv of resnet8
    assert "computed bfloat16" in out.stdout.splitlines(), out.stdout


def test_tensorflow_rows_say_what_the_layers_computed_in_not_what_the_policy_asked() -> None:
    """Issue 46: rows record what ran. A bf16 trial whose layers were set back to float32 (as autocast switched off
    does in PyTorch) computes in float32, and its row says fp32 though the model's own policy still says bfloat16;
    untouched, the row says bf16. Before any step the backend knows of no dtype: read off the step, not assumed."""
    import keras

    from trainables.loop import TrialLoop

    def loop() -> TrialLoop:
        cfg = TrialConfig("tensorflow", "resnet8_cifar", num_gpus=1, batch_per_gpu=4, epochs=1, lr=0.05,
                          data="synthetic", steps_per_epoch=1, warmup_steps=0, precision="bf16")
        return TrialLoop(cfg, Devices.of(["0"], emulated=True), None)

    try:
        as_set = loop()
        assert as_set.backend.compute_dtype() is None
        assert as_set.run_epoch(0)["computed_precision"] == "bf16"
        in_fp32 = loop()
        for layer in in_fp32.backend.model.layers:
            layer.dtype_policy = keras.DTypePolicy("float32")
        assert in_fp32.backend.model.compute_dtype == "bfloat16"  # the model's policy still asks for bf16
        assert in_fp32.run_epoch(0)["computed_precision"] == "fp32"
    finally:
        keras.mixed_precision.set_global_policy("float32")  # process-wide: other tests build fp32 models


def test_mxnet_rows_say_what_the_step_computed_in() -> None:
    """fp32 MXNet (amp is process-wide: bf16 is checked above in a process of its own): no dtype before a step,
    float32 after it, and the row says fp32."""
    from trainables.loop import TrialLoop

    cfg = TrialConfig("mxnet", "resnet8_cifar", num_gpus=1, batch_per_gpu=4, epochs=1, lr=0.05, data="synthetic",
                      steps_per_epoch=1, warmup_steps=0, precision="fp32")
    loop = TrialLoop(cfg, Devices.of(["0"], emulated=True), None)
    assert loop.backend.compute_dtype() is None
    assert loop.run_epoch(0)["computed_precision"] == "fp32" and loop.backend.compute_dtype() == "float32"


def test_computed_precision_is_what_ran_not_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """`precision` is the setting; `computed_precision` what the steps computed in: a CPU has no TF32 (issue 40:
    MXNet rows on the CPU said tf32), nor a GPU before Ampere, and a 16-bit dtype is the one the layers produced."""
    from trainables import environment, loop

    assert loop.computed_precision("float32", False, False) == "fp32"  # tf32 on CPU devices
    assert loop.computed_precision("bfloat16", False, False) == "bf16"
    assert loop.computed_precision("float16", True, True) == "fp16"
    assert loop.computed_precision("float32", True, True) == "tf32"
    assert loop.computed_precision("float32", True, None) is None  # TF32 allowed on a GPU the driver does not name
    assert loop.computed_precision("float32", False, None) == "fp32"
    assert loop.tf32_hardware(Devices.of(["0"], emulated=True)) is False
    gpus = {0: ("NVIDIA H100 80GB HBM3", "sm_90"), 1: ("Tesla V100-SXM2-16GB", "sm_70")}
    monkeypatch.setattr(environment, "gpu_architecture", gpus.get)
    assert loop.tf32_hardware(Devices("gpu", 1, ("0",))) is True
    assert loop.tf32_hardware(Devices("gpu", 1, ("1",))) is False
    assert loop.tf32_hardware(Devices("gpu", 1, ("2",))) is None


@pytest.mark.slow
def test_rows_on_cpu_devices_say_fp32_where_the_setting_is_tf32() -> None:
    """MXNet and TensorFlow, one epoch each on an emulated GPU (a process of its own: TensorFlow's devices and
    MXNet's amp are fixed per process)."""
    script = textwrap.dedent("""
        from trainables.config import TrialConfig
        from trainables.loop import Devices, TrialLoop
        for framework, precision in [("mxnet", "tf32"), ("tensorflow", "tf32"), ("tensorflow", "bf16")]:
            cfg = TrialConfig(framework, "resnet8_cifar", num_gpus=1, batch_per_gpu=4, epochs=1, lr=0.05,
                              data="synthetic", steps_per_epoch=2, precision=precision)
            row = TrialLoop(cfg, Devices.of(["0"], emulated=True), None).run_epoch(0)
            print("row", framework, precision, row["computed_precision"], row["tf32_allowed"])
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split()[1:] for line in out.stdout.splitlines() if line.startswith("row ")]
    assert rows == [["mxnet", "tf32", "fp32", "False"], ["tensorflow", "tf32", "fp32", "False"],
                    ["tensorflow", "bf16", "bf16", "False"]], out.stdout


def test_mxnet_bf16_without_avx512_is_refused_before_the_run_and_in_the_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    """MXNet's bf16 on a CPU needs AVX-512 (oneDNN's): on an AVX2-only CPU its first convolution failed in words that say
    nothing of why. The driver refuses such a trial on emulated devices in one line, and a trial that runs anyway (a
    joined cluster's node) fails at once with the reason. Checked here with an AVX2 CPU's flags, whatever this CPU is."""
    from sweep import plan
    from trainables import environment
    from trainables.mxnet.backend import Backend

    avx2 = {"fpu", "sse4_2", "avx", "avx2", "fma", "f16c"}
    assert mxnet_bf16_cpu_problem(avx2 | set(ONEDNN_BF16_FLAGS)) is None and mxnet_bf16_cpu_problem(None) is None
    assert mxnet_bf16_cpu_problem(avx2 | {"avx512f", "avx512bw"}).endswith("this CPU lacks avx512vl, avx512dq")
    monkeypatch.setattr(environment, "cpu_flags", lambda: avx2)
    bf16 = TrialConfig("mxnet", "resnet8_cifar", num_gpus=1, batch_per_gpu=4, epochs=1, lr=0.1, precision="bf16")
    refused = plan.emulated_refusals([replace(bf16, precision="tf32"), bf16])
    assert list(refused) == [bf16.trial_id]
    assert re.fullmatch(f"MXNet trial {bf16.trial_id} asks for bf16, .*this CPU lacks avx512f.*", refused[bf16.trial_id])
    assert plan.emulated_refusals([replace(bf16, framework="tensorflow"), replace(bf16, framework="pytorch")]) == {}
    with pytest.raises(RuntimeError, match="^MXNet's bf16 on a CPU needs AVX-512 for oneDNN; this CPU lacks avx512f, avx512bw, avx512vl, avx512dq$"):
        Backend(bf16, Devices.of(["0"], emulated=True), 32)


def test_mxnet_fp16_on_emulated_devices_is_refused_in_one_line(tmp_path: Path) -> None:
    sweep = tmp_path / "fp16.yaml"
    sweep.write_text('description: "x"\nfixed: {framework: mxnet, model: resnet8_cifar, num_gpus: 1, batch_per_gpu: 4, '
                     'epochs: 1, lr: 0.1, data: synthetic, precision: fp16}\n')
    out = run_cli("run", str(sweep), "--results", str(tmp_path / "results"), timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "asks for fp16, which MXNet cannot run on the CPU devices" in out.stderr
    assert out.stderr.rstrip().endswith("; --skip-infeasible records such trials as infeasible and runs the rest")
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "results").exists()
    planned = run_cli("plan", str(sweep), "--results", str(tmp_path / "results"), timeout=120)  # says so before a run
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert re.search(r"^note: MXNet trial \w+ asks for fp16, which MXNet cannot run .*; `run` stops here, or "
                     r"--skip-infeasible records such trials as infeasible$", planned.stdout, re.M), planned.stdout


@pytest.mark.slow
def test_skip_infeasible_records_what_emulated_devices_cannot_run_and_runs_the_rest(tmp_path: Path) -> None:
    """Under --skip-infeasible an MXNet fp16 trial (no fp16 on CPUs) is recorded as infeasible, with the reason, as a
    trial too big for every node is, and the sweep's other trials run; a resume has nothing left to do."""
    sweep = tmp_path / "mixed.yaml"
    sweep.write_text('description: "x"\nfixed: {model: resnet8_cifar, num_gpus: 1, batch_per_gpu: 4, epochs: 1, lr: 0.1, '
                     'data: synthetic, steps_per_epoch: 2, warmup_steps: 1}\n'
                     'grid: {framework: [mxnet, pytorch], precision: [fp16]}\n')
    results = tmp_path / "results"
    out = run_cli("run", str(sweep), "--results", str(results), "--skip-infeasible", "--dashboard", "off", timeout=HANG_S)
    assert "1 trial skipped as infeasible (--skip-infeasible): MXNet trial " in out.stdout, out.stdout + out.stderr[-2000:]
    assert "done: 1 completed, 0 failed, 1 infeasible, 0 not finished" in out.stdout and out.returncode == 1
    run_dir = store.run_dirs(results, "mixed")[-1]
    summaries = RunStore(run_dir).trial_rows()
    by_framework = {r["framework"]: r for r in summaries}
    assert by_framework["pytorch"]["status"] == "completed", by_framework["pytorch"]
    assert by_framework["mxnet"]["status"] == "infeasible" and by_framework["mxnet"]["error_type"] == "Infeasible"
    assert "asks for fp16, which MXNet cannot run on the CPU devices" in by_framework["mxnet"]["error"]
    again = run_cli("run", str(sweep), "--results", str(results), "--resume", "--dashboard", "off", timeout=HANG_S)
    assert again.returncode == 2 and "nothing to resume" in again.stderr, again.stdout[-2000:] + again.stderr


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.skipif(BF16_CPU_PROBLEM is not None, reason=f"{BF16_CPU_PROBLEM}: the study's MXNet bf16 trials cannot run")
def test_precision_study_smoke_runs_end_to_end_and_its_rows_say_how(tmp_path: Path, shared_ray: list[str]) -> None:
    """search_spaces/resnet50_precision.yaml at its smoke scale: bf16 in both frameworks, TensorFlow's fp32,
    fp16 (with its loss scale) and fp16 + XLA, the default; real Ray, real Parquet, the report. On resnet8_cifar:
    ResNet-50's TensorFlow graphs and XLA compile doubled the run here (68 s against 34 s); benchmarks/study_smokes.py
    runs the study as shipped."""
    results = tmp_path / "results"
    # On the session's shared Ray (its four emulated GPUs, at the smoke scale), as the study's subject is not Ray's start.
    out = run_cli("resnet50_precision", "--set", "model=resnet8_cifar", "--results", str(results), *shared_ray,
                  timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run_dir = next((results / "resnet50_precision").iterdir())
    trials, epochs = pd.read_parquet(run_dir / "trials"), pd.read_parquet(run_dir / "epochs")
    assert set(trials.status) == {"completed"} and len(trials) == 10
    assert {(r.framework, r.precision, bool(r.compile)) for r in trials.itertuples()} == {
        ("mxnet", "tf32", False), ("mxnet", "bf16", False), ("tensorflow", "tf32", False), ("tensorflow", "fp32", False),
        ("tensorflow", "bf16", False), ("tensorflow", "fp16", False), ("tensorflow", "fp16", True)}
    for row in trials.itertuples():
        assert row.layout == ("NCHW" if row.framework == "mxnet" else "NHWC")
        assert not row.tf32_allowed  # CPU devices: no TF32
        assert row.computed_precision == ("fp32" if row.precision == "tf32" else row.precision)  # nor tf32 computed
        assert (row.loss_scale > 0) if row.precision == "fp16" else pd.isna(row.loss_scale)
        assert row.compiler == ("xla" if row.compile else None)
        assert row.steady_images_per_sec > 0
    assert epochs.train_loss.notna().all() and set(epochs.precision) == {"tf32", "fp32", "bf16", "fp16"}

    # Precision and XLA are part of a throughput cell (never pooled), and the study's table shows them per GPUs.
    from sweep import report
    built = report.build_report(report.load_run(run_dir))
    assert built.figures["speed_group"].nunique() == 9  # 10 trials: tensorflow tf32 at 1 and 2 GPUs share one
    table = next(t for t in built.ratios if t.name == "precision")
    assert {"tf32", "fp32", "bf16", "fp16", "fp16 + compiled", "bf16 / tf32"} <= set(table.frame.columns)
    assert table.frame.index.names == ["", "GPUs"] and set(table.frame.index.get_level_values("GPUs")) == {1, 2}

    # A run stored before these columns existed still reads, at the defaults it ran with.
    import pyarrow.parquet as pq

    from sweep import store
    for path in (run_dir / "trials").glob("*.parquet"):
        pq.write_table(pq.read_table(path).drop_columns(["precision", "compile", "layout", "tf32_allowed", "loss_scale", "compiler"]), path)
    older = store.read_runs(str(results), "resnet50_precision", "trials")
    assert list(older.precision) == ["tf32"] * 10 and not older.compile.any() and older.layout.isna().all()


@pytest.mark.slow
def test_synthetic_batches_are_made_on_each_device_once() -> None:
    # Each framework's synthetic batch lives on the trial's devices (two emulated ones here) and is reused:
    # no host-to-device copy per step. A process of its own: TensorFlow's devices are fixed at its start.
    script = textwrap.dedent("""
        from trainables.config import TrialConfig
        from trainables.loop import Devices, load_backend
        for framework in ("tensorflow", "mxnet"):
            cfg = TrialConfig(framework, "resnet8_cifar", num_gpus=2, batch_per_gpu=4, epochs=1, lr=0.1)
            backend = load_backend(cfg, Devices.of(["0", "1"], emulated=True), 32)
            x, y = backend.synthetic()
            if framework == "tensorflow":
                where = [t.device.split("/")[-1] for t in backend.strategy.experimental_local_results(x)]
            else:
                where = [str(a.context) for a in x]
            print(framework, where, backend.synthetic() is backend.synthetic())
            if framework == "tensorflow":  # a real batch too, slice by slice
                import numpy as np
                x, y = backend.put(np.zeros((8, 32, 32, 3), np.float32), np.zeros(8, np.int64))
                print(framework, [t.device.split("/")[-1] for t in backend.strategy.experimental_local_results(x)])
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()[-3:]
    assert lines == ["tensorflow ['device:CPU:0', 'device:CPU:1'] True", "tensorflow ['device:CPU:0', 'device:CPU:1']",
                     "mxnet ['cpu(0)', 'cpu(1)'] True"], lines


SWITCH = textwrap.dedent("""
    import json, os, sys
    from trainables.config import TrialConfig
    from trainables.loop import Devices, load_backend

    def switch(framework):  # the framework's own TF32 switch, as its libraries read it
        if framework == "tensorflow":
            import tensorflow as tf
            return tf.config.experimental.tensor_float_32_execution_enabled()
        return os.environ.get("NVIDIA_TF32_OVERRIDE") != "0" and os.environ.get("MXNET_CUDA_ALLOW_TENSOR_CORE") != "0"

    framework = sys.argv[1]
    base = {"framework": framework, "model": "resnet8_cifar", "num_gpus": 1, "batch_per_gpu": 4, "epochs": 1, "lr": 0.1}
    seen = []
    for extra in ({}, {"precision": "fp32"}, {"precision": "tf32"}):  # the default first, then off, then on again
        cfg = TrialConfig(**base, **extra)
        load_backend(cfg, Devices.of(["0"], True), 32)
        seen.append([cfg.precision, switch(framework)])
    print(json.dumps(seen))
""")


@pytest.mark.parametrize("framework", ["mxnet", pytest.param("tensorflow", marks=pytest.mark.slow)])  # TF: ~12 s
def test_the_default_precision_is_tf32_and_fp32_turns_tf32_off(framework: str) -> None:
    """Read inside the trial's process, after its backend is built: TensorFlow's own switch
    (tensor_float_32_execution_enabled), and for MXNet the variables cuBLAS, cuDNN and MXNet read."""
    out = subprocess.run([sys.executable, "-c", SWITCH, framework], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={k: v for k, v in os.environ.items() if k != "NVIDIA_TF32_OVERRIDE"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == '[["tf32", true], ["fp32", false], ["tf32", true]]'
