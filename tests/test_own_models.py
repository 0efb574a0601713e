"""Models named outside the engine's zoo (docs/models.md): a zoo's by name (keras:, gluon:, torchvision:, timm:) and
a network of your own (MODULE:FUNCTION), in every framework.

Fast: the names a sweep takes; each refusal of the framework check (a function that raises, an output of the
wrong shape, something that is not a model of the framework, an unknown module, function or zoo name, a zoo that
is not installed, an input size the model cannot take), built as the check builds them, in this process; the
refusal as the driver says it; `show` printing what each trial imports. Slow: the refusal through a real run
(exit 2, one line, before any trial); `--code` on a two-node cluster, the code shipped by Ray to the nodes, beside
a Keras and a Gluon zoo model across both; a run started with `--code` resumed without it; the examples learn the
learnable set. The examples' sweep runs end to end in the docs test (docs/models.md).
"""
from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, run_cli, two_node_cluster

from sweep import checks, store
from trainables import zoo
from trainables.probe import FrameworkCheck

EXAMPLES = ROOT / "examples" / "models"
EXAMPLE_SWEEP = EXAMPLES / "sweep.yaml"
OWN = {"pytorch": "torch_net:build", "tensorflow": "keras_net:build", "mxnet": "gluon_net:build"}

# Bad networks, each with the framework's own model type where one is needed.
BAD_NETS = '''
def raises(num_classes, image_size):
    raise ValueError("no such layer")


def not_a_model(num_classes, image_size):
    return "a string"


def wrong_shape_pytorch(num_classes, image_size):
    from torch import nn
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * image_size * image_size, num_classes + 1))


def wrong_shape_tensorflow(num_classes, image_size):
    import keras
    inputs = keras.Input((image_size, image_size, 3))
    return keras.Model(inputs, keras.layers.Dense(num_classes)(inputs))  # (N, H, W, classes)


def wrong_shape_mxnet(num_classes, image_size):
    from mxnet.gluon import nn
    net = nn.HybridSequential()
    net.add(nn.Dense(num_classes + 2))
    return net
'''


@pytest.fixture(scope="module")
def bad_code(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("bad-code")
    (folder / "bad_nets.py").write_text(BAD_NETS)
    sys.path.insert(0, str(folder))
    sys.path.insert(0, str(EXAMPLES))
    yield folder
    sys.path.remove(str(folder))
    sys.path.remove(str(EXAMPLES))


def models_of(framework: str):
    if framework == "mxnet":
        import trainables.mxnet  # noqa: F401  (aliases numpy.bool before mxnet is imported)
    import importlib

    return importlib.import_module(f"trainables.{framework}.models")


def refusal(framework: str, name: str, image_size: int = 32) -> str:
    """The model's refusal as the framework check makes it, in this process, and as the driver says it."""
    with pytest.raises(zoo.ModelError) as caught:
        models_of(framework).check_named(name, image_size, zoo.NUM_CLASSES)
    problem = {"model": name, "message": str(caught.value), "known": caught.value.known}
    said = checks.model_refusal([FrameworkCheck("n1", framework, ok=True, model_problems=(problem,))])
    assert said and "\n" not in said and len(said) < 400, said
    return said


def test_the_model_setting_takes_the_three_forms() -> None:
    for name in ("resnet20_cifar", "keras:ResNet50", "gluon:mobilenet1.0", "torchvision:resnet50",
                 "timm:convnext_tiny", "mynets:build", "lab.models.cnn:build"):
        assert zoo.is_known_form(name), name
    for name in ("resnet21_cifar", "mynets", "a:b:c", "lab..cnn:build", "mynets:build()", ":build", "keras:"):
        assert not zoo.is_known_form(name), name
    assert zoo.named("resnet20_cifar") is None  # the engine's own names stay plain
    assert zoo.default_image_size("keras:InceptionV3") == 299 and zoo.default_image_size("gluon:inceptionv3") == 299
    assert zoo.default_image_size("keras:ResNet50") == 224 and zoo.default_image_size("mynets:build") == 32


def test_a_zoo_model_in_another_framework_and_a_missing_code_folder_are_one_line(tmp_path: Path) -> None:
    out = run_cli("show", str(EXAMPLE_SWEEP), "--set", "model=keras:ResNet50")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "keras:ResNet50 is from keras's zoo (keras.applications), which tensorflow trains, not pytorch" in out.stderr
    out = run_cli("plan", str(EXAMPLE_SWEEP), "--code", str(tmp_path / "nowhere"))
    assert out.returncode == 2 and out.stderr.startswith("error: --code ") and "no such folder" in out.stderr, out.stderr


def test_show_prints_the_module_each_trial_imports_without_importing_it(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "loud.py").write_text("raise SystemExit('imported')\n\ndef build(num_classes, image_size):\n    pass\n")
    sweep = tmp_path / "loud.yaml"
    sweep.write_text(EXAMPLE_SWEEP.read_text().replace("torch_net:build", "loud:build").replace("name: own_models", "name: loud"))
    out = run_cli("show", str(sweep), "--code", str(code))
    assert out.returncode == 0, out.stderr
    assert f"loud:build: imports loud from {code / 'loud.py'} (--code: shipped to every node)" in out.stdout
    assert "keras_net:build: imports keras_net, not found here" in out.stdout  # not in this --code folder
    assert "keras:MobileNetV2: imports keras.applications: MobileNetV2, in tensorflow's environment" in out.stdout
    assert "as trusted as that code" in out.stdout


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mxnet"])
def test_a_model_the_loop_cannot_train_is_refused_in_one_line(framework: str, bad_code: Path) -> None:
    models_of(framework).check_named(OWN[framework], 32, 10)  # the example passes
    assert "building it raised ValueError: no such layer" in refusal(framework, "bad_nets:raises")
    assert "not_a_model returned builtins.str, not " in refusal(framework, "bad_nets:not_a_model")
    said = refusal(framework, f"bad_nets:wrong_shape_{framework}")
    assert "its output for 2 images of 32x32 has shape" in said and "the loop needs (2, 10)" in said, said
    assert "no module named no_such_module on the trial's path" in refusal(framework, "no_such_module:build")
    said = refusal(framework, "bad_nets:raise")
    assert "bad_nets has no function raise (did you mean raises?)" in said, said
    other = {"pytorch": "keras_net:build", "tensorflow": "torch_net:build", "mxnet": "torch_net:build"}[framework]
    assert "returned" in refusal(framework, other) and " not a" in refusal(framework, other)  # another framework's


def test_an_unknown_zoo_name_lists_the_close_ones() -> None:
    assert refusal("tensorflow", "keras:ResNet5O") == ("model keras:ResNet5O: keras.applications has no model ResNet5O "
                                                       "(did you mean ResNet50 or ResNet152 or ResNet50V2?) "
                                                       "(checked on node ? n1, tensorflow)")
    said = refusal("mxnet", "gluon:resnet18")
    assert "gluon.model_zoo.vision has no model resnet18 (did you mean resnet18_v2 or resnet18_v1" in said, said
    said = refusal("mxnet", "gluon:zzz")  # nothing close: the first names, and where all of them are
    assert "expected one of alexnet, densenet121" in said and "in all: mxnet.gluon.model_zoo.vision)" in said, said


def test_a_zoo_missing_here_and_a_size_the_model_cannot_take_are_refused() -> None:
    # torchvision and timm do not import beside this CPU torch (docs/models.md): the check says so.
    for name in ("torchvision:resnet18", "timm:resnet18"):
        said = refusal("pytorch", name)
        assert "is not installed for" in said or "does not import here" in said, said
    assert models_of("pytorch").zoos() == [z for z in ("torchvision", "timm") if models_of("pytorch")._imports(
        zoo.ZOO_PACKAGES[z])]
    said = refusal("tensorflow", "keras:InceptionV3", 32)
    assert "Input size must be at least 75x75" in said, said
    assert "kernel size exceed input" in refusal("mxnet", "gluon:inceptionv3", 32)


@pytest.mark.parametrize("name", ["torchvision:resnet18", "torchvision:inception_v3", "timm:resnet18"])
def test_pytorchs_zoos_build_their_models_where_they_import(name: str) -> None:
    """Where torchvision (built for this torch) and timm are installed, their models pass the check; here (CPU torch
    2.13 beside torchvision 0.28's CUDA build) they do not import, and the refusal above is what runs."""
    pytorch = models_of("pytorch")
    if name.partition(":")[0] not in pytorch.zoos():
        pytest.skip(f"{name.partition(':')[0]} does not import beside torch here")
    pytorch.check_named(name, 299 if "inception" in name else 32, zoo.NUM_CLASSES)


@pytest.mark.slow
def test_a_torchvision_model_trains_where_torchvision_imports(tmp_path: Path) -> None:
    """CI's second lane (.ci/run: the CUDA torch 2.13 with torchvision 0.28 and timm) trains torchvision's and timm's
    ResNet-18 in a sweep, on 1 and 2 emulated GPUs and across 2 nodes; where they do not import (this CPU torch), the
    check refuses them (above)."""
    if not {"torchvision", "timm"} <= set(models_of("pytorch").zoos()):
        pytest.skip("torchvision or timm does not import beside torch here")
    sweep = tmp_path / "zoos.yaml"
    sweep.write_text(textwrap.dedent("""\
        name: pytorch_zoos
        description: "torchvision's and timm's ResNet-18"
        fixed: {framework: pytorch, batch_per_gpu: 8, epochs: 1, steps_per_epoch: 2, warmup_steps: 0, lr: 0.01,
                image_size: 32, data: synthetic}
        include:
          - {model: "torchvision:resnet18", num_gpus: [1, 2]}
          - {model: "torchvision:resnet18", nodes: 2, gpus_per_node: 1}
          - {model: "timm:resnet18", num_gpus: 1}
        """))
    results = tmp_path / "results"
    out = run_cli(str(sweep), "--results", str(results), "--emulate-gpus", "2", timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "torchvision,timm" in out.stdout  # the check's zoos column
    trials = pd.read_parquet(store.run_dirs(results, "pytorch_zoos")[-1] / "epochs")
    assert sorted(zip(trials.model, trials.num_gpus, trials.nodes)) == [
        ("timm:resnet18", 1, 1), ("torchvision:resnet18", 1, 1), ("torchvision:resnet18", 2, 1), ("torchvision:resnet18", 2, 2)]
    across = trials[trials.nodes == 2].ray_node_id.iloc[0]
    assert len(set(across.split(";"))) == 2  # its two ranks on two Ray nodes
    assert set(trials.param_count) == {11_181_642 + 9_600}  # ResNet-18 at 10 classes, BN statistics counted


@pytest.mark.slow
def test_a_run_refuses_a_bad_model_at_the_check_before_any_trial(bad_code: Path, tmp_path: Path) -> None:
    out = run_cli(str(EXAMPLE_SWEEP), "--code", str(bad_code), "--set", "model=bad_nets:raises", "--set", "framework=mxnet",
                  "--results", str(tmp_path / "results"), "--data-dir", str(tmp_path / "none"), timeout=300)
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-2000:]
    (line,) = out.stderr.strip().splitlines()
    assert re.fullmatch(r"error: model bad_nets:raises: building it raised ValueError: no such layer "
                        r"\(checked on node \S+ \w+, mxnet\)", line), line
    assert "framework checks" in out.stdout and not (tmp_path / "results").exists()  # no run, no trial


SHIPPED = '''
import os
import sys

ORIGINAL = {original!r}
HERE = os.path.dirname(os.path.abspath(__file__))
with open({sentinel!r}, "a") as f:  # who imported it: the test reads it
    f.write(HERE + "\\n")
from {example} import build as _build


def build(num_classes, image_size):
    if HERE == ORIGINAL:  # a node must use Ray's copy of --code, not the folder on the driver's machine
        raise RuntimeError(f"imported from the driver's folder {{HERE}}, not from Ray's copy of it")
    return _build(num_classes=num_classes, image_size=image_size)
'''


@pytest.mark.slow
@pytest.mark.heavy
def test_code_is_shipped_to_both_nodes_of_a_cluster(tmp_path: Path) -> None:
    from cifar_files import write_cifar10

    code, sentinel = tmp_path / "code", tmp_path / "imported.txt"
    code.mkdir()
    for framework, own in OWN.items():
        example = own.partition(":")[0]
        (code / f"{example}.py").write_text((EXAMPLES / f"{example}.py").read_text())
        (code / f"shipped_{example}.py").write_text(
            SHIPPED.format(original=str(code), sentinel=str(sentinel), example=example))
    sweep = tmp_path / "shipped.yaml"
    sweep.write_text(textwrap.dedent("""\
        name: shipped
        description: "Own networks from --code on two nodes"
        fixed: {batch_per_gpu: 16, epochs: 1, steps_per_epoch: 3, val_examples: 64, warmup_steps: 1, lr: 0.05}
        include:
          - {framework: pytorch, model: "shipped_torch_net:build", nodes: 2, gpus_per_node: 1}
          - {framework: tensorflow, model: "shipped_keras_net:build", nodes: 2, gpus_per_node: 1}
          - {framework: mxnet, model: "shipped_gluon_net:build", nodes: 2, gpus_per_node: 1, kvstore: dist_sync}
        """))
    data = write_cifar10(tmp_path / "data", train_per_file=100, test=100)
    results = tmp_path / "results"
    gen = two_node_cluster({"num_cpus": 3, "num_gpus": 2})
    cluster = next(gen)
    try:
        out = run_cli(str(sweep), "--code", str(code), "--address", cluster.address, "--data-dir", str(data),
                      "--results", str(results), "--scale", "full", timeout=600)
    finally:
        gen.close()
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    places = set(sentinel.read_text().split())
    assert places and str(code) not in places and all("runtime_resources" in p for p in places), places
    folder = store.run_dirs(results, "shipped")[-1]
    trials, epochs = pd.read_parquet(folder / "trials"), pd.read_parquet(folder / "epochs")
    assert set(trials.status) == {"completed"} and len(trials) == 3
    own = sorted(f"shipped_{own}" for own in OWN.values())
    assert sorted(trials.model) == own  # the names as given
    assert len(set(epochs.param_count)) == 1  # one network, layer for layer, in every framework
    for model in own:  # each framework's workers on both nodes, so each node imported the shipped copy
        assert len(set(epochs[epochs.model == model].ray_node_id.iloc[0].split(";"))) == 2, model
    # Reading results never imports model code, with the code on the path.
    sentinel.write_text("")
    for command in (["report", str(folder)], ["status", str(sweep), "--results", str(results)],
                    ["runs", "--results", str(results)]):
        read = run_cli(*command, env={"PYTHONPATH": f"{code}:{ROOT}"})
        assert read.returncode == 0, read.stderr[-2000:]
    assert sentinel.read_text() == ""


@pytest.mark.slow
def test_your_own_networks_learn_the_learnable_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import learnability

    monkeypatch.setenv("PYTHONPATH", f"{EXAMPLES}:{ROOT}")
    data = learnability.write_data(tmp_path)
    base = {"num_gpus": 1, "batch_per_gpu": 32, "epochs": 2, "steps_per_epoch": 40, "image_size": 32, "lr": 0.05,
            "lr_decay_epochs": [1], "val_examples": learnability.VAL_IMAGES, "warmup_steps": 0, "seed": 0}
    processes = {fw: learnability.start({**base, "framework": fw, "model": own}, data) for fw, own in OWN.items()}
    final = {fw: learnability.finish(p, timeout=600)[-1]["val_acc"] for fw, p in processes.items()}
    print("final val_acc of your own networks:", json.dumps(final))
    assert all(acc > learnability.BAR for acc in final.values()), json.dumps(final)  # as the engine's zoo is held
    assert max(final.values()) - min(final.values()) <= learnability.TOLERANCE, json.dumps(final)


def test_a_code_folder_larger_than_ray_ships_is_one_line_before_ray_starts(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "torch_net.py").write_text((EXAMPLES / "torch_net.py").read_text())
    with open(code / "weights.bin", "wb") as sparse:  # 600 MiB that take no disk
        sparse.truncate(600 * 2**20)
    out = run_cli("plan", str(EXAMPLE_SWEEP), "--code", str(code))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "600 MiB or more" in out.stderr and "at most 512 MiB zipped" in out.stderr
    (code / "weights.bin").unlink()
    assert run_cli("plan", str(EXAMPLE_SWEEP), "--code", str(code)).returncode == 0


def test_a_resume_takes_the_code_folder_its_run_was_started_with(tmp_path: Path) -> None:
    """run.json keeps --code; a resume without it uses that folder, one that is gone or another is one line."""
    import argparse

    from sweep import environments, launch
    from sweep.errors import UsageError
    from sweep.runs import RunState

    code, other = tmp_path / "code", tmp_path / "other"
    code.mkdir(), other.mkdir()
    meta = store.RunMeta(sweep="s", run_id="r1", scale="smoke", spec_path="s.yaml", spec_sha256="0", data_dir=None,
                         emulated=True, trials=[], code=str(code), code_sha256=environments.code_digest(str(code)))
    assert store.RunMeta.from_json(meta.to_json(), "run.json").code == str(code)  # stored, read back
    resumed = RunState(tmp_path, meta, {})
    plain, forced = argparse.Namespace(force=False), argparse.Namespace(force=True)
    assert launch._code_as_started(plain, None, resumed) == str(code)
    assert launch._code_as_started(plain, str(code), resumed) == str(code)
    with pytest.raises(UsageError, match="started with --code .*code.*, this command gives --code .*other"):
        launch._code_as_started(plain, str(other), resumed)
    assert launch._code_as_started(forced, str(other), resumed) == str(other)
    (code / "__pycache__").mkdir()  # what importing the code writes is not a change
    assert launch._code_as_started(plain, None, resumed) == str(code)
    (code / "net.py").write_text("")  # a changed folder is, as a changed sweep file is
    with pytest.raises(UsageError, match="changed since run r1 started .*--force"):
        launch._code_as_started(plain, None, resumed)
    assert launch._code_as_started(forced, None, resumed) == str(code)
    (code / "net.py").unlink(), (code / "__pycache__").rmdir()
    code.rmdir()
    with pytest.raises(UsageError, match="which is no longer a folder: give --code DIR"):
        launch._code_as_started(plain, None, resumed)
    without = RunState(tmp_path, store.RunMeta(**{**meta.__dict__, "code": None}), {})
    assert launch._code_as_started(plain, None, without) is None


def test_the_check_builds_each_model_with_the_classes_its_trials_train_on(tmp_path: Path) -> None:
    """data: imagenet trains on the folder's classes, not CIFAR-10's 10: a network fixed at 10 outputs is refused for
    a folder of 3 at the framework check, in one line, before any trial."""
    from dataclasses import replace

    from sweep.imagenet_like import make_imagenet_like
    from trainables.config import TrialConfig

    make_imagenet_like(tmp_path / "data", 3, 2, 1, 0)
    trial = TrialConfig.from_dict(dict(framework="pytorch", model="ten_outputs:build", num_gpus=1, batch_per_gpu=2,
                                       epochs=1, lr=0.1, data="imagenet", image_size=32))
    assert checks.named_models([trial], str(tmp_path / "data")) == {"pytorch": (("ten_outputs:build", 32, 3),)}
    assert checks.named_models([replace(trial, data="cifar10")], str(tmp_path / "data")) == {
        "pytorch": (("ten_outputs:build", 32, 10),)}
    (tmp_path / "ten_outputs.py").write_text(
        "import torch\n\ndef build(num_classes, image_size):\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * image_size * image_size, 10))\n")
    sys.path.insert(0, str(tmp_path))
    try:
        models_of("pytorch").check_named("ten_outputs:build", 32, 10)  # fine for CIFAR-10
        with pytest.raises(zoo.ModelError, match=r"the loop needs \(2, 3\)"):
            models_of("pytorch").check_named("ten_outputs:build", 32, 3)
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.slow
def test_a_run_started_with_code_resumes_without_it(tmp_path: Path, shared_ray: list[str]) -> None:
    """A run killed before its trial ended resumes from run.json's --code: the command need not name it again, and
    a folder changed since the start is one line, as a changed sweep file is."""
    import os
    import signal
    import subprocess
    import time

    code, results, sweep = tmp_path / "code", tmp_path / "results", tmp_path / "resumed.yaml"
    code.mkdir()
    (code / "torch_net.py").write_text((EXAMPLES / "torch_net.py").read_text())
    sweep.write_text(textwrap.dedent("""\
        name: resumed
        description: "Your own network, resumed without --code"
        fixed: {batch_per_gpu: 16, epochs: 1, steps_per_epoch: 3, val_examples: 64, warmup_steps: 1, lr: 0.05}
        include:
          - {framework: pytorch, model: "torch_net:build", num_gpus: 1}
        """))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    proc = subprocess.Popen([sys.executable, "-m", "sweep", str(sweep), "--code", str(code), "--results", str(results)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)  # a session of its own: the test kills what it started only
    deadline = time.time() + 240
    while not (runs := store.run_dirs(results, "resumed")) or not (runs[-1] / "run.json").is_file():
        assert proc.poll() is None and time.time() < deadline, "the run never started: " + proc.stdout.read()[-3000:]
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    folder = runs[-1]
    assert store.RunStore(folder).meta.code == str(code.resolve())
    with open(code / "torch_net.py", "a") as edited:
        edited.write("\n# edited\n")
    out = run_cli(str(sweep), "--results", str(results), "--resume", timeout=120)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "changed since run" in out.stderr and "--force" in out.stderr, out.stderr
    (code / "torch_net.py").write_text((EXAMPLES / "torch_net.py").read_text())
    # The resume joins the session's shared Ray, which the code folder reaches as it reaches any cluster.
    out = run_cli(str(sweep), "--results", str(results), "--resume", *shared_ray, timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    trials = pd.read_parquet(folder / "trials")
    assert list(trials.status) == ["completed"] and list(trials.model) == ["torch_net:build"]
