"""Every `--set` form the README shows, over a sweep file with fixed, grid, include and scales sections,
against trials written out here by hand (never computed with the code under test)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sweep import overrides, spec
from trainables.config import TrialConfig

SWEEP = """description: "--set forms"
fixed: {framework: mxnet, model: resnet8_cifar, epochs: 4, lr: 0.1, batch_per_gpu: 8, num_gpus: 1, data: synthetic,
        image_size: 40}
grid: {seed: [1, 2]}
include:
  - {num_gpus: 2, batch_per_gpu: 16}
scales:
  smoke:
    fixed: {epochs: 1}
    include:
      - {batch_per_gpu: 32}
"""
NODES = """description: "two nodes of two GPUs"
fixed: {framework: mxnet, model: resnet8_cifar, epochs: 1, lr: 0.1, batch_per_gpu: 8, data: synthetic,
        nodes: 2, gpus_per_node: 2, kvstore: dist_sync}
"""


def trial(**changed) -> TrialConfig:
    """The sweep file's fixed settings, as written above, with `changed` over them."""
    return TrialConfig(**{"framework": "mxnet", "model": "resnet8_cifar", "epochs": 4, "lr": 0.1, "batch_per_gpu": 8,
                          "num_gpus": 1, "data": "synthetic", "image_size": 40, **changed})


def trials(tmp_path: Path, scale: str, *sets: str, text: str = SWEEP) -> list[TrialConfig]:
    path = tmp_path / "forms.yaml"
    path.write_text(text)
    # As the CLI expands them (overrides.trials): a problem only the --set values made is named after them.
    return overrides.trials(overrides.apply(spec.load(str(path)), overrides.parse(list(sets))), scale)


def test_without_set_the_file_gives_its_own_trials(tmp_path: Path) -> None:
    assert trials(tmp_path, "full") == [trial(seed=1), trial(seed=2), trial(num_gpus=2, batch_per_gpu=16, seed=1),
                                        trial(num_gpus=2, batch_per_gpu=16, seed=2)]
    assert trials(tmp_path, "smoke") == [trial(epochs=1, seed=1), trial(epochs=1, seed=2),
                                         trial(epochs=1, batch_per_gpu=32, seed=1), trial(epochs=1, batch_per_gpu=32, seed=2)]


def test_a_fixed_setting_replaces_the_scales_section_too(tmp_path: Path) -> None:
    assert trials(tmp_path, "smoke", "epochs=3") == [trial(epochs=3, seed=1), trial(epochs=3, seed=2),
                                                     trial(epochs=3, batch_per_gpu=32, seed=1),
                                                     trial(epochs=3, batch_per_gpu=32, seed=2)]


def test_a_setting_replaces_every_include_entrys_value(tmp_path: Path) -> None:
    assert trials(tmp_path, "full", "batch_per_gpu=4") == [
        trial(batch_per_gpu=4, seed=1), trial(batch_per_gpu=4, seed=2),
        trial(num_gpus=2, batch_per_gpu=4, seed=1), trial(num_gpus=2, batch_per_gpu=4, seed=2)]
    # At the smoke scale the scale's include entry becomes the grid's own trials: each trial once.
    assert trials(tmp_path, "smoke", "batch_per_gpu=4") == [trial(epochs=1, batch_per_gpu=4, seed=1),
                                                            trial(epochs=1, batch_per_gpu=4, seed=2)]


def test_a_grid_axis_collapses_to_the_one_value(tmp_path: Path) -> None:
    assert trials(tmp_path, "full", "seed=7") == [trial(seed=7), trial(num_gpus=2, batch_per_gpu=16, seed=7)]


def test_a_list_and_null(tmp_path: Path) -> None:
    assert trials(tmp_path, "full", "lr_decay_epochs=[1,3]", "image_size=null", "seed=1") == [
        trial(lr_decay_epochs=(1, 3), image_size=None, seed=1),
        trial(num_gpus=2, batch_per_gpu=16, lr_decay_epochs=(1, 3), image_size=None, seed=1)]


def test_base_lr_and_base_batch_replace_the_files_lr(tmp_path: Path) -> None:
    """lr = base_lr x global batch / base_batch: 0.2 x 8 / 64 and 0.2 x 32 / 64."""
    linear = {"lr_rule": "linear", "base_lr": 0.2, "base_batch": 64}
    assert trials(tmp_path, "full", "base_lr=0.2", "base_batch=64", "seed=1") == [
        trial(lr=0.025, seed=1, **linear), trial(num_gpus=2, batch_per_gpu=16, lr=0.1, seed=1, **linear)]


def test_num_gpus_replaces_gpus_per_node_and_the_other_way_round(tmp_path: Path) -> None:
    base = {"framework": "mxnet", "model": "resnet8_cifar", "epochs": 1, "lr": 0.1, "batch_per_gpu": 8,
            "data": "synthetic", "nodes": 2, "kvstore": "dist_sync"}
    assert trials(tmp_path, "full", text=NODES) == [TrialConfig(**base, num_gpus=4, gpus_per_node=2)]
    assert trials(tmp_path, "full", "num_gpus=2", text=NODES) == [TrialConfig(**base, num_gpus=2, gpus_per_node=1)]
    assert trials(tmp_path, "full", "gpus_per_node=3", text=NODES) == [TrialConfig(**base, num_gpus=6, gpus_per_node=3)]


@pytest.mark.parametrize("given, line", [
    (["epochs=0"], "--set epochs=0: epochs: 0 trains nothing; it goes with batch_per_gpu: max"),
    (["batch_per_gpu=maxx"], "--set batch_per_gpu=maxx: expected an integer >= 1 and <= 65536, or max, got 'maxx'"),
    (["max_batch_range=[64,8]"], "--set max_batch_range=[64,8]: expected [lo, hi]: two integers with 1 <= lo <= hi"),
    (["lr_decay_epochs=[1,"], "--set lr_decay_epochs=[1,: malformed value"),
    (["num_gpus=3"], "--set num_gpus=3: "),  # 3 GPUs on 2 nodes: only the whole trial tells
])
def test_a_bad_form_names_its_option(given: list[str], line: str, tmp_path: Path) -> None:
    from sweep.errors import SpecError

    with pytest.raises(SpecError) as caught:
        trials(tmp_path, "full", *given, text=NODES)
    assert str(caught.value).startswith(line), str(caught.value)
