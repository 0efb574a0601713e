"""What each setting of a trial may hold: one check per TrialConfig field, run once at the edge.

The spec loader (sweep/spec.py) applies them to sweep files and `--set` (sweep/overrides.py) to its
values. Each check returns None when a value is fine, else what was expected, which the caller turns
into its one-line error.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from sweep import batch_search, limits
from trainables import zoo
from trainables.config import DATA_KINDS, DECODES, FRAMEWORKS, KERAS_BACKENDS, KVSTORES, PRECISIONS, RENAMED, VARIABLE_UPDATES, field_names


def integer(lo: int, hi: int, allow_none: bool = False) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if v is None and allow_none:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            return f"an integer >= {lo} and <= {hi}" + (" or null" if allow_none else "")
        return None
    return check


def _setting_int(name: str, lo: int, allow_none: bool = False) -> Callable[[Any], str | None]:
    return integer(lo, limits.INT_MAX[name], allow_none)


def number(lo: float, hi: float = math.inf, lo_open: bool = False, hi_open: bool = False) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        ok = ok and (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
        if not ok:
            left = "(" if lo_open else "["
            right = ")" if hi_open else "]"
            return f"a number in {left}{lo}, {hi}{right}"
        return None
    return check


def _choice(options: tuple[str, ...]) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        return None if v in options else "one of " + ", ".join(options)
    return check


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "true or false"


def _model(v: Any) -> str | None:
    return None if isinstance(v, str) and zoo.is_known_form(v) else "a model: " + zoo.model_names_help()


def _epoch_list(v: Any) -> str | None:
    top = limits.INT_MAX["epochs"]
    if isinstance(v, list) and all(isinstance(e, int) and not isinstance(e, bool) and 1 <= e <= top for e in v):
        return None
    return f"a list of epoch numbers >= 1 and <= {top}"


def _batch_or_max(v: Any) -> str | None:
    """A per-GPU batch, or `max`: the largest that fits, searched for (sweep/batch_search.py)."""
    return None if v == "max" or _setting_int("batch_per_gpu", 1)(v) is None else \
        f"an integer >= 1 and <= {limits.INT_MAX['batch_per_gpu']}, or max"


def _batch_range(v: Any) -> str | None:
    top = limits.INT_MAX["batch_per_gpu"]
    expected = f"[lo, hi]: two integers with 1 <= lo <= hi <= {top}"
    if not isinstance(v, list) or len(v) != 2 or any(integer(1, top)(b) for b in v):
        return expected
    return None if v[0] <= v[1] else expected


# The settings of a largest-batch search (`batch_per_gpu: max`): the sweep's, not a trial's.
SEARCH_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "max_batch_range": _batch_range,
    "max_batch_step": _setting_int("batch_per_gpu", 1),
    "max_batch_margin": number(0, 1, lo_open=True),
    "max_batch_steps": integer(2, 1000),
}
assert set(SEARCH_CHECKS) == set(batch_search.DEFAULTS), "every setting of a search needs a check and a default"

LISTED_IN = "docs/sweep-files.md"  # where a message about an unknown setting sends the reader for all of them
CHECKS: dict[str, Callable[[Any], str | None]] = {
    "framework": _choice(FRAMEWORKS),
    "model": _model,
    "num_gpus": _setting_int("num_gpus", 1),
    "batch_per_gpu": _batch_or_max,
    "epochs": _setting_int("epochs", 0),  # 0: the largest-batch search alone (spec.py refuses it otherwise)
    "lr": number(0, lo_open=True),
    "base_lr": number(0, lo_open=True),
    "base_batch": _setting_int("base_batch", 1),
    "warmup_epochs": _setting_int("warmup_epochs", 0),
    "lr_decay_epochs": _epoch_list,
    "lr_decay_factor": number(0, 1, lo_open=True),
    "momentum": number(0, 1, hi_open=True),
    "weight_decay": number(0),
    "data": _choice(DATA_KINDS),
    "image_size": _setting_int("image_size", 8, allow_none=True),
    "steps_per_epoch": _setting_int("steps_per_epoch", 1, allow_none=True),
    "val_examples": _setting_int("val_examples", 1, allow_none=True),
    "warmup_steps": _setting_int("warmup_steps", 0),
    "seed": _setting_int("seed", 0),
    "cpus_per_trial": _setting_int("cpus_per_trial", 1, allow_none=True),
    "kvstore": _choice(KVSTORES),
    "nodes": _setting_int("nodes", 1),
    "gpus_per_node": _setting_int("gpus_per_node", 1),
    "variable_update": _choice(VARIABLE_UPDATES),
    "precision": _choice(PRECISIONS),
    "compile": _bool,
    "loader_workers": _setting_int("loader_workers", 0, allow_none=True),
    "decode": _choice(DECODES),
    "keras_backend": _choice(KERAS_BACKENDS),
    **SEARCH_CHECKS,
}
# Set by the engine, never by a sweep file.
DERIVED = {"lr_rule", "cpus_per_gpu", "max_batch_probe", "memory_capacity_mib"}
assert set(CHECKS) - set(SEARCH_CHECKS) | DERIVED == set(field_names()), "every TrialConfig field needs a check"


def renamed(key: str, where: str, given: dict[str, Any]) -> str:
    """A setting's name today (RENAMED: `xla` is `compile`); a ValueError when `given` names it both ways."""
    new = RENAMED.get(key)
    if new and new in given:
        raise ValueError(f"{where}: {key} is the old name of {new}: give one of them")
    return new or key


REQUIRED = ("framework", "model", "batch_per_gpu", "epochs")  # and num_gpus or gpus_per_node
