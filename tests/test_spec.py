"""Sweep files: each study's sweep expands to the study's grid; bad files fail once, in one line."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from conftest import run_cli

from sweep import spec
from sweep.errors import SpecError
from trainables.config import TrialConfig


def axis(trials: list[TrialConfig], key: str) -> set:
    return {getattr(t, key) for t in trials}


def test_every_shipped_sweep_loads_both_scales_and_names_its_seed() -> None:
    names = {s.name for s in spec.list_sweeps()}
    seeds = Path(__file__).resolve().parents[2] / "shared" / "seeds"  # the studies sit beside the project
    if not seeds.is_dir():  # a clone without the studies beside it (CI and the workplace have them)
        pytest.skip(f"no study documents at {seeds}")
    assert {"resnet50_lr_scaling", "keras_mxnet_vs_tf_resnet50", "keras_mxnet_vs_tf_inception_v3",
            "cifar10_conv_mgpu", "tf_cnn_benchmarks"} <= names
    for sweep in spec.list_sweeps():
        assert sweep.study and (seeds / sweep.study).is_file(), f"{sweep.name}: no study document {sweep.study}"
        assert sweep.description.startswith("Study ")
        for scale in spec.SCALES:
            trials = sweep.trials(scale)
            assert trials and len({t.trial_id for t in trials}) == len(trials)
            if sweep.name == "keras3_backends":  # study 000 on today's backends: Keras 3 on all three (issue 43)
                assert axis(trials, "framework") == {"keras"}
                assert axis(trials, "keras_backend") == {"jax", "tensorflow", "torch"}
                continue
            # both of the studies' frameworks at both scales; PyTorch in the variants that add it
            assert axis(trials, "framework") - {"pytorch"} == {"mxnet", "tensorflow"}


def test_the_documented_example_sweep_loads_at_both_scales(tmp_path: Path) -> None:
    """docs/sweep-files.md's annotated example is what users copy: it must load as printed."""
    readme = (spec.SPEC_DIR.parent / "docs" / "sweep-files.md").read_text()
    example = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "my_lr_study.yaml").write_text(example)
    sweep = spec.load(str(tmp_path / "my_lr_study.yaml"))
    assert len(sweep.trials("full")) == 2 * 3 * 2 * 3 + 2 * 3  # the grid, and the include entry per framework x seed
    assert {t.model for t in sweep.trials("smoke")} == {"resnet8_cifar"}


PYTORCH_VARIANTS = {"keras_mxnet_vs_tf_resnet50_pytorch": "keras_mxnet_vs_tf_resnet50",
                    "keras_mxnet_vs_tf_inception_v3_pytorch": "keras_mxnet_vs_tf_inception_v3",
                    "tf_cnn_benchmarks_pytorch": "tf_cnn_benchmarks"}


@pytest.mark.parametrize("variant", list(PYTORCH_VARIANTS))
def test_pytorch_variant_is_its_study_plus_pytorch(variant: str) -> None:
    """Beside study 000's and 004's files: the study's own trials (same ids), and PyTorch's copy of its
    all-reduce trials (TensorFlow's, framework changed), at both scales."""
    for scale in spec.SCALES:
        original = spec.load(PYTORCH_VARIANTS[variant]).trials(scale)
        trials = spec.load(variant).trials(scale)
        ours = [t for t in trials if t.framework == "pytorch"]
        assert sorted(t.trial_id for t in trials if t.framework != "pytorch") == sorted(t.trial_id for t in original)
        expected = [{**t.to_dict(), "framework": "pytorch"} for t in original
                    if t.framework == "tensorflow" and t.variable_update == "replicated"]
        assert sorted(map(str, expected)) == sorted(str(t.to_dict()) for t in ours) and ours


def test_frameworks_today_study() -> None:
    """ResNet-50 v1 at 224, TensorFlow and PyTorch over GPUs 1-8 x batch 64/256 x precision x compile;
    MXNet every precision without a compiler."""
    trials = spec.load("resnet50_frameworks_today").trials("full")
    cells = Counter((t.framework, t.compile) for t in trials)
    assert cells == {("tensorflow", False): 32, ("tensorflow", True): 32, ("pytorch", False): 32, ("pytorch", True): 32,
                     ("mxnet", False): 32}
    assert axis(trials, "num_gpus") == {1, 2, 4, 8} and axis(trials, "batch_per_gpu") == {64, 256}
    assert axis(trials, "precision") == {"fp32", "tf32", "bf16", "fp16"}
    assert axis(trials, "model") == {"resnet50_v1"} and axis(trials, "image_size") == {224}
    assert axis(trials, "data") == {"synthetic"} and axis(trials, "warmup_steps") == {20}
    smoke = spec.load("resnet50_frameworks_today").trials("smoke")
    assert {(t.framework, t.compile) for t in smoke} >= {("tensorflow", True), ("pytorch", True)}
    assert not [t for t in smoke if t.framework == "mxnet" and (t.precision == "fp16" or t.compile)]


def test_new_studies_show_and_plan_on_the_cli() -> None:
    for name in [*PYTORCH_VARIANTS, "resnet50_frameworks_today"]:
        trials = spec.load(name).trials("smoke")
        out = run_cli("show", name, "--scale", "smoke", timeout=120)
        assert out.returncode == 0 and f"scale smoke: {len(trials)} trials" in out.stdout, out.stderr
    out = run_cli("plan", "resnet50_frameworks_today", "--scale", "smoke", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert all(t.trial_id in out.stdout for t in spec.load("resnet50_frameworks_today").trials("smoke"))


def test_keras_resnet50_matches_seed_000() -> None:
    trials = spec.load("keras_mxnet_vs_tf_resnet50").trials("full")
    assert len(trials) == 2 * 5 * 2
    assert axis(trials, "num_gpus") == {1, 2, 4, 8, 16}
    assert axis(trials, "batch_per_gpu") == {32} and axis(trials, "seed") == {1337}
    assert axis(trials, "epochs") == {10, 100} and axis(trials, "model") == {"resnet50_v1"}


def test_keras_inception_matches_seed_000() -> None:
    trials = spec.load("keras_mxnet_vs_tf_inception_v3").trials("full")
    assert len(trials) == 2 * 5 * 2
    assert axis(trials, "image_size") == {299} and axis(trials, "epochs") == {5, 25}
    assert axis(trials, "num_gpus") == {1, 2, 4, 8, 16} and axis(trials, "batch_per_gpu") == {32}


def test_lr_scaling_matches_seed_001() -> None:
    trials = spec.load("resnet50_lr_scaling").trials("full")
    grid = [t for t in trials if t.lr_rule == "linear"]
    assert len(grid) == 2 * 4 * 4 * 2  # framework x GPUs x batch/GPU x warm-up variant
    assert axis(grid, "num_gpus") == {1, 2, 4, 8} and axis(grid, "batch_per_gpu") == {64, 128, 256, 512}
    assert axis(grid, "warmup_epochs") == {0, 2} and axis(trials, "epochs") == {12}
    for t in grid:  # the linear scaling rule from 0.05 at a global batch of 128
        assert t.lr == pytest.approx(0.05 * t.batch_per_gpu * t.num_gpus / 128)
    fixed = {(t.framework, t.num_gpus, t.batch_per_gpu, t.lr)
             for t in trials if t.lr_rule == "fixed"}
    for control in [(1, 512, 0.4), (8, 512, 3.2), (4, 128, 0.2), (8, 64, 0.05), (2, 256, 0.1)]:  # the study's rows
        assert ("mxnet", *control) in fixed and ("tensorflow", *control) in fixed
    assert axis(trials, "model") == {"resnet50_cifar_v2"}  # pre-activation, as their symbols/resnet.py


def test_cifar10_conv_matches_seed_002() -> None:
    trials = spec.load("cifar10_conv_mgpu").trials("full")
    assert Counter((t.num_gpus, t.batch_per_gpu) for t in trials) == {(1, 128): 2, (2, 64): 2, (3, 43): 2}
    assert axis(trials, "epochs") == {10} and axis(trials, "model") == {"cifar10_conv"}
    # Neon's rate, 0.01 at 128, by the linear rule: the seed's lr 0.1 kills this net (benchmarks/cifar10_conv_collapse.py).
    assert {(t.global_batch, t.lr, t.lr_rule) for t in trials} == {(128, 0.01, "linear"), (129, 0.0100781250, "linear")}


def test_tf_cnn_benchmarks_matches_seed_004() -> None:
    trials = spec.load("tf_cnn_benchmarks").trials("full")
    assert len(trials) == 2 * 3 * 2 * 4 * 3  # model x data x batch x GPUs x (MXNet, TF replicated, TF PS)
    assert Counter((t.framework, t.variable_update) for t in trials) == {
        ("mxnet", "replicated"): 48, ("tensorflow", "replicated"): 48, ("tensorflow", "parameter_server"): 48}
    assert axis(trials, "model") == {"resnet50_v1", "inception_v3"}
    assert axis(trials, "data") == {"synthetic", "cifar10", "imagenet"}
    assert axis(trials, "batch_per_gpu") == {32, 64} and axis(trials, "num_gpus") == {1, 2, 4, 8}
    assert axis(trials, "warmup_steps") == {10} and axis(trials, "steps_per_epoch") == {110}


def test_poseidon_distributed_matches_seed_003() -> None:
    trials = spec.load("poseidon_distributed").trials("full")
    modes = Counter((t.framework, t.kvstore, t.variable_update) for t in trials)
    assert modes == {("mxnet", "dist_sync", "replicated"): 8, ("mxnet", "dist_async", "replicated"): 8,
                     ("mxnet", "device", "replicated"): 2, ("tensorflow", "device", "replicated"): 8,
                     ("tensorflow", "device", "parameter_server"): 8}
    assert axis(trials, "nodes") == {1, 2, 4, 8} and axis(trials, "gpus_per_node") == {1}
    assert all(t.num_gpus == t.nodes for t in trials)  # one GPU per node, as the study
    assert axis(trials, "model") == {"alexnet", "inception_v3"}
    # The linear scaling rule: lr grows with the nodes' global batch.
    assert {t.nodes: t.lr for t in trials} == {1: 0.01, 2: 0.02, 4: 0.04, 8: 0.08}


def test_smoke_keeps_every_axis_of_the_full_grid() -> None:
    for sweep in spec.list_sweeps():
        full, smoke = sweep.trials("full"), sweep.trials("smoke")
        for key in ("framework", "num_gpus", "batch_per_gpu", "lr", "model", "data", "nodes", "kvstore",
                    "variable_update", "precision", "compile"):
            if len(axis(full, key)) > 1:
                assert len(axis(smoke, key)) > 1, (sweep.name, key)


def test_trial_ids_are_stable_hashes_of_the_config() -> None:
    a = spec.load("resnet50_lr_scaling").trials("smoke")
    b = spec.load("resnet50_lr_scaling").trials("smoke")
    assert [t.trial_id for t in a] == [t.trial_id for t in b]
    # A hash of the config alone: the same on every machine and in every run (the value pins the formula,
    # so that runs stored by earlier versions keep their ids).
    assert TrialConfig("mxnet", "resnet8_cifar", num_gpus=2, batch_per_gpu=8, epochs=1, lr=0.1).trial_id == "f5539eee0c"
    assert TrialConfig.from_dict({**a[0].to_dict(), "seed": 99}).trial_id != a[0].trial_id


def test_settings_added_later_keep_older_trial_ids_at_their_defaults() -> None:
    # The id above was stored before precision and xla (now compile) existed: at their defaults it stays.
    old = TrialConfig("mxnet", "resnet8_cifar", num_gpus=2, batch_per_gpu=8, epochs=1, lr=0.1)
    assert TrialConfig.from_dict(old.to_dict()).trial_id == "f5539eee0c"
    assert old.precision == "tf32" and old.compile is False
    ids = {TrialConfig.from_dict({**old.to_dict(), **change}).trial_id
           for change in [{"precision": "fp32"}, {"precision": "bf16"}, {"precision": "fp16"}, {"compile": True}]}
    assert len(ids) == 4 and "f5539eee0c" not in ids


def test_a_trial_stored_with_xla_keeps_its_id_under_compile() -> None:
    # A TensorFlow trial of a run stored while the setting was `xla` (its config as Tune and run.json kept it):
    # its id, pinned as it was computed then (sha1 of the config with "xla": true), is today's.
    stored = {"framework": "tensorflow", "model": "resnet8_cifar", "num_gpus": 1, "batch_per_gpu": 8, "epochs": 1,
              "lr": 0.1, "xla": True}
    cfg = TrialConfig.from_dict(stored)
    assert cfg.compile is True and cfg.compiler == "xla" and cfg.trial_id == "3f8bcb7788"
    assert TrialConfig.from_dict(cfg.to_dict()).trial_id == "3f8bcb7788"  # stored today, as `compile`
    assert TrialConfig.from_dict({**stored, "xla": False}).trial_id == TrialConfig.from_dict(
        {k: v for k, v in stored.items() if k != "xla"}).trial_id  # off: left out, as before it existed


def test_precision_and_compile_axes_expand_and_xla_is_compiles_old_name(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(GOOD.replace("[mxnet]", "[tensorflow]").replace(
        "batch_per_gpu: [8]}", "batch_per_gpu: [8], precision: [fp32, tf32, fp16, bf16], xla: [false, true]}"))
    trials = spec.load(str(path)).trials("full")
    assert len(trials) == 8 and len({t.trial_id for t in trials}) == 8
    assert axis(trials, "precision") == {"fp32", "tf32", "fp16", "bf16"} and axis(trials, "compile") == {False, True}
    # The same sweep with today's name: the same trials, the same ids.
    path.write_text(path.read_text().replace("xla:", "compile:"))
    assert [t.trial_id for t in spec.load(str(path)).trials("full")] == [t.trial_id for t in trials]
    # One axis for both frameworks' compilers.
    path.write_text(path.read_text().replace("[tensorflow]", "[tensorflow, pytorch]"))
    both = spec.load(str(path)).trials("full")
    assert {(t.framework, t.compiler) for t in both} == {("tensorflow", None), ("tensorflow", "xla"),
                                                          ("pytorch", None), ("pytorch", "inductor")}


GOOD = """\
description: "test"
fixed: {model: resnet8_cifar, epochs: 1, lr: 0.1}
grid: {framework: [mxnet], num_gpus: [1], batch_per_gpu: [8]}
"""

BAD_SPECS = [
    ("unknown top key", GOOD + "colour: blue\n", "unknown key 'colour'"),
    ("unknown setting", GOOD.replace("lr: 0.1", "lr: 0.1, lr_scheme: cosine"), "fixed.lr_scheme: unknown setting 'lr_scheme'"),
    ("lr <= 0", GOOD.replace("lr: 0.1", "lr: 0"), "fixed.lr: expected a number in (0"),
    ("lr wrong type", GOOD.replace("lr: 0.1", "lr: fast"), "fixed.lr: expected a number"),
    ("batch < 1", GOOD.replace("batch_per_gpu: [8]", "batch_per_gpu: [8, 0]"), "grid.batch_per_gpu[1]: expected an integer >= 1 and <= 65536, or max, got 0"),
    ("gpus < 1", GOOD.replace("num_gpus: [1]", "num_gpus: [-2]"), "grid.num_gpus[0]: expected an integer >= 1"),
    ("gpus as text", GOOD.replace("num_gpus: [1]", "num_gpus: ['2']"), "grid.num_gpus[0]: expected an integer >= 1 and <= 4096, got '2'"),
    ("epochs < 1", GOOD.replace("epochs: 1", "epochs: 0"), "epochs: 0 trains nothing; it goes with batch_per_gpu: max"),
    ("batch maxx", GOOD.replace("batch_per_gpu: [8]", "batch_per_gpu: [maxx]"), "grid.batch_per_gpu[0]: expected an integer >= 1 and <= 65536, or max, got 'maxx'"),
    ("max range lo > hi", GOOD.replace("epochs: 1", "epochs: 1, max_batch_range: [64, 8]"), "fixed.max_batch_range: expected [lo, hi]: two integers with 1 <= lo <= hi"),
    ("unknown framework", GOOD.replace("[mxnet]", "[torch]"), "grid.framework[0]: expected one of mxnet, tensorflow"),
    ("unknown model", GOOD.replace("resnet8_cifar", "resnet7_cifar"), "fixed.model: expected a model"),
    ("empty grid axis", GOOD.replace("batch_per_gpu: [8]", "batch_per_gpu: []"), "grid.batch_per_gpu: expected a non-empty list"),
    ("empty grid", 'description: "x"\ngrid: {}\n', "expected at least one trial"),
    ("malformed yaml", GOOD + "grid: [unclosed\n", "malformed YAML at line"),
    ("not a mapping", "- a\n- b\n", "expected a mapping of sweep settings"),
    ("key twice", GOOD + "grid: {framework: [tensorflow]}\n", "malformed YAML at line 4, column 1: 'grid' is given twice"),
    ("setting twice", GOOD.replace("lr: 0.1", "lr: 0.1, lr: 0.2"), "line 2, column 51: 'lr' is given twice"),
    ("no description", GOOD.replace('description: "test"\n', ""), "description: expected"),
    ("missing required", GOOD.replace("epochs: 1, ", ""), "epochs: expected a value in fixed, grid or include"),
    ("no lr rule", GOOD.replace("lr: 0.1", "seed: 1"), "lr: expected lr, or base_lr and base_batch"),
    ("bad scale", GOOD + "scales: {tiny: {}}\n", "scales: unknown scale 'tiny'"),
    ("bad scale override", GOOD + "scales: {smoke: {fixed: {epochs: -1}}}\n", "scales.smoke.fixed.epochs: expected an integer >= 0"),
    ("bad early stopping", GOOD + "early_stopping: {grace_period: 0}\n", "early_stopping.grace_period: expected an integer >= 1"),
    ("warm-up too long", GOOD.replace("lr: 0.1", "lr: 0.1, warmup_epochs: 3"), "warmup_epochs: expected fewer than epochs"),
    ("unsafe name", GOOD + "name: ../../etc\n", "name: expected letters, digits"),
    ("engine-only key", GOOD.replace("lr: 0.1", "lr: 0.1, lr_rule: linear"), "unknown setting 'lr_rule' (set by the engine)"),
    ("gpus both ways", GOOD.replace("lr: 0.1", "lr: 0.1, gpus_per_node: 1"), "give num_gpus (the trial's GPUs in all) or gpus_per_node, not both"),
    ("gpus uneven over nodes", GOOD.replace("num_gpus: [1]", "num_gpus: [3]").replace("lr: 0.1", "lr: 0.1, nodes: 2, kvstore: dist_sync"),
     "num_gpus: expected a multiple of nodes (2) to spread evenly, got 3"),
    ("nodes < 1", GOOD.replace("lr: 0.1", "lr: 0.1, nodes: 0"), "fixed.nodes: expected an integer >= 1"),
    ("mxnet across nodes, local kvstore", GOOD.replace("lr: 0.1", "lr: 0.1, nodes: 2, num_gpus: 2").replace("num_gpus: [1], ", ""),
     "kvstore: an MXNet trial on 2 nodes needs dist_sync or dist_async, got device"),
    ("mxnet with variable_update", GOOD.replace("lr: 0.1", "lr: 0.1, variable_update: parameter_server"),
     "variable_update: a TensorFlow setting"),
    ("tensorflow with a dist kvstore", GOOD.replace("[mxnet]", "[tensorflow]").replace("lr: 0.1", "lr: 0.1, kvstore: dist_async"),
     "kvstore: dist_async is MXNet's"),
    ("unknown variable_update", GOOD.replace("[mxnet]", "[tensorflow]").replace("lr: 0.1", "lr: 0.1, variable_update: ring"),
     "fixed.variable_update: expected one of replicated, parameter_server"),
    ("unknown precision", GOOD.replace("lr: 0.1", "lr: 0.1, precision: fp8"),
     "fixed.precision: expected one of fp32, tf32, fp16, bf16, got 'fp8'"),
    ("xla not a bool", GOOD.replace("[mxnet]", "[tensorflow]").replace("lr: 0.1", "lr: 0.1, xla: 'yes'"),
     "fixed.compile: expected true or false"),
    ("xla and compile", GOOD.replace("lr: 0.1", "lr: 0.1, xla: true, compile: true"),
     "fixed: xla is the old name of compile: give one of them"),
    ("mxnet with xla", GOOD.replace("lr: 0.1", "lr: 0.1, xla: true"), "compile: MXNet has no graph compiler"),
    ("pytorch with a dist kvstore", GOOD.replace("[mxnet]", "[pytorch]").replace("lr: 0.1", "lr: 0.1, kvstore: dist_sync"),
     "kvstore: dist_sync is MXNet's; PyTorch trials run DistributedDataParallel"),
    ("pytorch with parameter servers", GOOD.replace("[mxnet]", "[pytorch]").replace(
        "lr: 0.1", "lr: 0.1, variable_update: parameter_server"), "variable_update: a TensorFlow setting; PyTorch"),
    # A value given twice in an axis made its trials once, without a word (issue 40): refused, naming axis and value.
    ("grid value twice", GOOD.replace("num_gpus: [1]", "num_gpus: [1], seed: [1, 2, 1]"),
     "grid.seed: expected each value once, got 1 twice"),
    ("grid number twice in two spellings", GOOD.replace("num_gpus: [1]", "num_gpus: [1], lr_decay_factor: [0.1, 1e-1]"),
     "grid.lr_decay_factor: expected each value once, got 0.1 twice"),
    ("grid list twice", GOOD.replace("num_gpus: [1]", "num_gpus: [1], lr_decay_epochs: [[1], [2], [1]]"),
     "grid.lr_decay_epochs: expected each value once, got [1] twice"),
    ("include value twice", GOOD + "include:\n  - {num_gpus: [2, 2]}\n", "include[0].num_gpus: expected each value once, got 2 twice"),
    ("scale's grid value twice", GOOD + "scales: {smoke: {grid: {seed: [3, 3]}}}\n",
     "scales.smoke.grid.seed: expected each value once, got 3 twice"),
]


@pytest.mark.parametrize("case,text,expected", BAD_SPECS, ids=[c[0] for c in BAD_SPECS])
def test_bad_spec_fails_with_one_line(case: str, text: str, expected: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        spec.load(str(path))
    assert str(path) in str(err.value) and expected in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_good_spec_loads(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    assert len(spec.load(str(path)).trials("full")) == 1


def test_scientific_notation_is_a_number(tmp_path: Path) -> None:
    path = tmp_path / "sci.yaml"
    path.write_text(GOOD.replace("lr: 0.1", "lr: 1e-3, weight_decay: 5E-4"))
    config = spec.load(str(path)).trials("full")[0]
    assert config.lr == 0.001 and config.weight_decay == 0.0005


@pytest.mark.parametrize("case", ["malformed yaml", "unknown model", "lr <= 0", "grid value twice"])
def test_bad_spec_through_the_cli_writes_nothing(case: str, tmp_path: Path) -> None:
    text = next(t for c, t, _ in BAD_SPECS if c == case)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    results = tmp_path / "results"
    out = run_cli(str(path), "--results", str(results), timeout=120)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and str(path) in out.stderr
    assert "Traceback" not in out.stderr and not results.exists()


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(GOOD.encode() + b"# caf\xe9\n")
    with pytest.raises(SpecError, match=r"latin.yaml: not UTF-8"):
        spec.load(str(latin))
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    with pytest.raises(SpecError, match=r"folder.yaml: not a regular file"):
        spec.load(str(folder))
    with pytest.raises(SpecError, match=r"missing.yaml: no such file"):
        spec.load(str(tmp_path / "missing.yaml"))


def test_a_typo_in_a_key_is_answered_with_the_names_close_to_it(tmp_path: Path) -> None:
    """Not every one of the 30-odd settings (issue 40): the close ones, in one short line; all of them only where
    none is close."""
    cases = [(GOOD.replace("lr: 0.1", "lr: 0.1, bach_per_gpu: 8"),
              "fixed.bach_per_gpu: unknown setting 'bach_per_gpu' (did you mean batch_per_gpu?)"),
             (GOOD.replace("num_gpus: [1]", "num_gpu: [1]"), "grid.num_gpu[0]: unknown setting 'num_gpu' (did you mean num_gpus?)"),
             (GOOD + "target_accuracy: 0.75\n", "unknown key 'target_accuracy' (did you mean target_acc?)")]
    path = tmp_path / "typo.yaml"
    for text, line in cases:
        path.write_text(text)
        with pytest.raises(SpecError) as err:
            spec.load(str(path))
        assert str(err.value) == f"{path}: {line}"
    path.write_text(GOOD)
    out = run_cli("show", str(path), "--set", "warmup=1", timeout=60)
    assert out.returncode == 2 and out.stderr == \
        "error: --set warmup=1: unknown setting 'warmup' (did you mean warmup_steps or warmup_epochs?)\n", out.stderr
    path.write_text(GOOD + "colour: blue\n")  # nothing close: every key
    with pytest.raises(SpecError, match=r"unknown key 'colour' \(expected one of description, early_stopping, "):
        spec.load(str(path))


def test_an_unknown_setting_far_from_all_is_a_short_line_naming_where_all_are_listed(tmp_path: Path) -> None:
    """The settings grow with every issue; a message listing them all outgrew one short line in CI, whose paths are
    longer than here. It lists what fits and names the page that lists every one (which must)."""
    from sweep import settings

    path = tmp_path / ("a" * 120) / "far.yaml"
    path.parent.mkdir()
    path.write_text(GOOD.replace("lr: 0.1", "lr: 0.1, " + "q" * 300 + ": 1"))
    with pytest.raises(SpecError) as err:
        spec.load(str(path))
    assert len(str(err.value)) < 600 - len("error: ") and str(err.value).endswith(f"in all: {settings.LISTED_IN}))")
    page = (Path(__file__).parents[1] / settings.LISTED_IN).read_text()
    assert [name for name in settings.CHECKS if name not in page] == []


def test_set_takes_xla_as_compiles_old_name() -> None:
    from sweep import overrides
    from sweep.errors import SpecError

    assert overrides.parse(["xla=true"]) == {"compile": True} == overrides.parse(["compile=true"])
    with pytest.raises(SpecError, match="compile is set twice"):
        overrides.parse(["xla=true", "compile=false"])
    with pytest.raises(SpecError, match="xla is the old name of compile"):
        overrides.parse(["compile=true", "xla=true"])


def test_rows_stored_with_an_xla_column_read_as_compile(tmp_path: Path) -> None:
    # Rows as the engine writes them, with the column under the name it had before compile: `xla`.
    import pyarrow.parquet as pq

    from sweep import store
    run = store.RunStore.create(tmp_path, store.RunMeta("s", "r", "smoke", "s.yaml", "", None, True, ["a", "b", "c"]),
                                "description: x\n")
    for trial, value in (("a", True), ("b", False), ("c", None)):
        run.write_epoch({"run_id": "r", "trial_id": trial, "epoch": 0, "framework": "tensorflow", "compile": value})
    for path in run.epochs_dir.glob("*.parquet"):
        table = pq.read_table(path)
        pq.write_table(table.rename_columns(["xla" if n == "compile" else n for n in table.column_names]), path)
    rows = run.epochs().set_index("trial_id")
    assert "xla" not in rows.columns
    assert rows.loc["a", "compile"] and not rows.loc["b", "compile"] and not rows.loc["c", "compile"]  # absent: its default
