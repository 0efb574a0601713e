"""Sweep files: load, validate once, expand into trials.

A sweep file (YAML) holds:
  name, description, study       what it is and which study (docs/studies.md) it reproduces
  fixed: {key: value}            settings shared by every trial
  grid: {key: [values]}          axes; the trials are their cartesian product
  include: [{key: value|[values]}]  extra trials (controls); axes an entry leaves out take every grid value
  scales: {smoke: {...}, full: {...}}  per-scale overrides of fixed / grid / include
  target_acc: float              accuracy target for time-to-accuracy reports
  early_stopping: {grace_period, reduction_factor}  Ray Tune's ASHA on val_acc (off by default)
  environments: {framework: {py_executable | pip | uv | image_uri: ...}}  where a framework runs (sweep/environments.py)
The top level is the full scale; `scales.<scale>` replaces the keys it names. Any TrialConfig field can
be fixed or an axis. Without `lr`, a trial's lr comes from the linear scaling rule
(base_lr x global_batch / base_batch).
"""
from __future__ import annotations

import itertools
import math
import os
import re
import stat
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sweep import environments, limits
from sweep.batch_search import Search
from sweep.environments import Environment
from sweep.errors import SpecError
from sweep.limits import quote, shown
from sweep.settings import CHECKS, DERIVED, LISTED_IN, REQUIRED, SEARCH_CHECKS, integer, number, renamed
from trainables import zoo
from trainables.config import RENAMED, TrialConfig, field_names

SPEC_DIR = Path(__file__).resolve().parent.parent / "search_spaces"
SCALES = ("smoke", "full")
TOP_KEYS = {"name", "description", "study", "fixed", "grid", "include", "scales", "target_acc", "early_stopping",
            "environments"}
LEGACY_KEYS = {"seed_ref": "study"}  # the old names, still read in sweep files stored with earlier runs
EARLY_STOPPING_KEYS = {"grace_period": 1, "reduction_factor": 2}  # key -> smallest value
SECTION_KEYS = {"fixed", "grid", "include"}


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads 1e-4 as text; sweep files mean a number (lr, weight_decay), as YAML 1.2 does.

    A key given twice in one mapping is refused: PyYAML would keep the last silently, and half a sweep is lost.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may be overridden, by design
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # SafeLoader refuses it below, in its own words
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"{quote(key)} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._composed = 0  # nodes composed so far, each alias counted as the whole tree it stands for
        self._sizes: dict[int, int] = {}  # id(node) -> its size so counted, once its composition ended

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        """Count the document as the composer builds it, aliases expanded, and stop at the limit.

        PyYAML shares an alias's value by reference, so a few hundred bytes of nested aliases (the
        "billion laughs") compose at once into a structure whose walk (validation, a repr in a message)
        never ends; and pure-Python PyYAML takes about a second per 50,000 values. Counting here
        stops both where the limit is reached, before anything walks the structure.
        """
        if self.check_event(yaml.AliasEvent):
            target = self.anchors.get(self.peek_event().anchor)
            if target is not None:
                if id(target) not in self._sizes:  # its anchor's composition has not ended: it is inside it
                    raise _TooBig("an alias that contains itself", self.peek_event().start_mark)
                self._grow(self._sizes[id(target)])
            return super().compose_node(parent, index)
        before = self._composed
        self._grow(1)
        node = super().compose_node(parent, index)
        self._sizes[id(node)] = self._composed - before
        return node

    def _grow(self, nodes: int) -> None:
        self._composed += nodes
        if self._composed > limits.MAX_YAML_NODES:
            raise _TooBig(f"more than {limits.MAX_YAML_NODES:,} values once its aliases are expanded",
                          self.peek_event().start_mark)

    def construct_document(self, node: yaml.Node) -> Any:
        try:
            return super().construct_document(node)
        except (ValueError, IndexError, TypeError, OverflowError) as e:  # PyYAML's own, on `!!int ` and the like
            raise yaml.constructor.ConstructorError(
                None, None, f"a value its tag cannot read ({type(e).__name__}: {quote(str(e))})", node.start_mark) from None


class _TooBig(yaml.MarkedYAMLError):
    def __init__(self, problem: str, mark: yaml.Mark) -> None:
        super().__init__(problem=problem, problem_mark=mark)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))




@dataclass(frozen=True)
class Sweep:
    name: str
    description: str
    study: str | None  # the study this sweep reproduces: docs/studies.md
    path: Path
    text: str  # the file as read: stored with each run, hashed to detect edits before a resume
    raw: dict[str, Any]
    target_acc: float | None
    early_stopping: dict[str, int] | None  # ASHA's grace_period and reduction_factor
    environments: dict[str, Environment] = field(default_factory=dict)  # framework -> where its trials run
    overrides: dict[str, Any] = field(default_factory=dict)  # --set key=value (sweep/overrides.py): over every trial

    def trials(self, scale: str) -> list[TrialConfig]:
        """The trials of a scale whose batch is given (all of them, unless some say `batch_per_gpu: max`)."""
        return expand(self, scale)

    def searches(self, scale: str) -> list[Search]:
        """The configurations of a scale whose batch is `max`: each a largest-batch search (sweep/batch_search.py)."""
        return _expand(self, scale)[1]


def sweep_path(name_or_path: str) -> Path:
    """A sweep name from search_spaces/, or a path to a YAML file anywhere."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        return Path(name_or_path)
    path = SPEC_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        known = ", ".join(p.stem for p in sorted(SPEC_DIR.glob("*.yaml")))
        raise SpecError(f"unknown sweep {quote(name_or_path)} (known: {known}; or give a path to a .yaml file)")
    return path


def list_sweeps() -> list[Sweep]:
    return [load(str(p)) for p in sorted(SPEC_DIR.glob("*.yaml"))]


def load(name_or_path: str, max_trials: int = limits.MAX_TRIALS) -> Sweep:
    """Read and validate a sweep file; every problem is a SpecError naming the file and the field."""
    path = sweep_path(name_or_path)
    return parse(_read(path), path, max_trials)


def _read(path: Path) -> str:
    """The file's text: a regular file (not a pipe or a device that never ends) of bounded size, UTF-8."""
    where = str(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # before opening: a pipe would block the open itself
            raise SpecError(f"{where}: not a regular file")
        with open(path, "rb") as f:
            data = f.read(limits.MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(f"{where}: no such file") from None
    except OSError as e:
        raise SpecError(f"{where}: cannot read: {e.strerror or e}") from None
    if len(data) > limits.MAX_SPEC_BYTES:
        raise SpecError(f"{where}: larger than {limits.MAX_SPEC_BYTES:,} bytes: not a sweep file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"{where}: not UTF-8 text (byte {e.start})") from None


def parse(text: str, path: Path, max_trials: int = limits.MAX_TRIALS) -> Sweep:
    """Validate a sweep file's text; `path` names it in messages (and gives the default name)."""
    where = str(path)
    if len(text) > limits.MAX_SPEC_BYTES:
        raise SpecError(f"{where}: larger than {limits.MAX_SPEC_BYTES:,} bytes: not a sweep file")
    try:
        raw = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(f"{where}: malformed YAML{at}: {problem[:200]}") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise SpecError(f"{where}: malformed YAML: nested too deeply") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: expected a mapping of sweep settings at the top level")
    for old, new in LEGACY_KEYS.items():
        if old in raw and new not in raw:
            raw[new] = raw.pop(old)
    _check_top(where, raw)
    try:
        envs = environments.parse_section(raw.get("environments"))
    except ValueError as e:
        raise SpecError(f"{where}: environments: {e}") from None
    name = raw.get("name") or path.stem
    if (problem := limits.name_problem(name)) and raw.get("name"):
        raise SpecError(f"{where}: name: expected {problem} (it names a results folder), got {quote(name)}")
    if problem:
        raise SpecError(f"{where}: the file name makes the sweep's name {quote(name)}, but a name (a results folder) "
                        f"takes {problem}: give the file a name: key")
    for scale in SCALES:  # counted from the grid's shape, before anything is expanded
        count = trial_count(raw, scale)
        if count > max_trials:
            raise SpecError(f"{where}: grid: {count:,} trials at scale {scale}, more than the limit of {max_trials:,} "
                            "(--max-trials N raises it)")
    sweep = Sweep(
        name=name,
        description=raw["description"],
        study=raw.get("study"),
        path=path.resolve(),
        text=text,
        raw=raw,
        target_acc=raw.get("target_acc"),
        early_stopping=({"grace_period": 1, "reduction_factor": 3, **raw["early_stopping"]}
                        if raw.get("early_stopping") else None),
        environments=envs,
    )
    for scale in SCALES:  # expand both scales now, so a bad override fails at load, not at run
        expand(sweep, scale)
    return sweep


def _check_top(where: str, raw: dict[str, Any]) -> None:
    unknown = sorted(set(map(str, raw)) - TOP_KEYS)
    if unknown:
        raise SpecError(f"{where}: unknown key {quote(unknown[0])} ({limits.known_names(unknown[0], TOP_KEYS)})")
    if not isinstance(raw.get("description"), str) or not raw["description"].strip():
        raise SpecError(f"{where}: description: expected a one-line text saying what the sweep reproduces")
    for key in ("name", "study"):
        if key in raw and not isinstance(raw[key], str):
            raise SpecError(f"{where}: {key}: expected a text")
    if "target_acc" in raw and number(0, 1, lo_open=True)(raw["target_acc"]):
        raise SpecError(f"{where}: target_acc: expected a number in (0, 1]")
    early = raw.get("early_stopping")
    if early is not None:
        if not isinstance(early, dict):
            raise SpecError(f"{where}: early_stopping: expected a mapping with grace_period, reduction_factor")
        for key, value in early.items():
            if key not in EARLY_STOPPING_KEYS:
                raise SpecError(f"{where}: early_stopping: unknown key {quote(key)} (expected grace_period, reduction_factor)")
            expected = integer(EARLY_STOPPING_KEYS[key], limits.INT_MAX["epochs"])(value)
            if expected:
                raise SpecError(f"{where}: early_stopping.{key}: expected {expected}, got {quote(value)}")
    _check_section(where, "", raw)
    scales = raw.get("scales", {})
    if not isinstance(scales, dict):
        raise SpecError(f"{where}: scales: expected a mapping with keys smoke, full")
    for scale, section in scales.items():
        if scale not in SCALES:
            raise SpecError(f"{where}: scales: unknown scale {quote(scale)} (expected smoke or full)")
        if not isinstance(section, dict):
            raise SpecError(f"{where}: scales.{scale}: expected a mapping with keys fixed, grid, include")
        bad = sorted(set(map(str, section)) - SECTION_KEYS)
        if bad:
            raise SpecError(f"{where}: scales.{scale}: unknown key {quote(bad[0])} (expected fixed, grid, include)")
        _check_section(where, f"scales.{scale}.", section)


def _check_value(where: str, field: str, key: str, value: Any) -> None:
    if key not in CHECKS:
        hint = " (set by the engine)" if key in DERIVED else ""
        raise SpecError(f"{where}: {field}: unknown setting {quote(key)}{hint} ({limits.known_names(key, CHECKS, LISTED_IN)})")
    expected = CHECKS[key](value)
    if expected:
        raise SpecError(f"{where}: {field}: expected {expected}, got {quote(value)}")


def _renamed_settings(where: str, prefix: str, section: dict[str, Any]) -> None:
    """Settings given by an old name (`xla`) under their name today (`compile`), in place and in order."""
    def rename(field: str, values: Any) -> Any:
        if not isinstance(values, dict) or not any(k in RENAMED for k in values):
            return values
        try:
            return {renamed(k, f"{where}: {field}", values): v for k, v in values.items()}
        except ValueError as e:
            raise SpecError(str(e)) from None

    for name in ("fixed", "grid"):
        if name in section:
            section[name] = rename(f"{prefix}{name}", section[name])
    if isinstance(section.get("include"), list):
        section["include"] = [rename(f"{prefix}include[{i}]", e) for i, e in enumerate(section["include"])]


def _check_section(where: str, prefix: str, section: dict[str, Any]) -> None:
    _renamed_settings(where, prefix, section)
    fixed = section.get("fixed", {})
    if not isinstance(fixed, dict):
        raise SpecError(f"{where}: {prefix}fixed: expected a mapping of setting: value")
    for key, value in fixed.items():
        _check_value(where, f"{prefix}fixed.{shown(key)}", key, value)
    grid = section.get("grid", {})
    if not isinstance(grid, dict):
        raise SpecError(f"{where}: {prefix}grid: expected a mapping of setting: [values]")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise SpecError(f"{where}: {prefix}grid.{shown(key)}: expected a non-empty list of values")
        for i, value in enumerate(values):
            _check_value(where, f"{prefix}grid.{shown(key)}[{i}]", key, value)
        _check_once(where, f"{prefix}grid.{shown(key)}", values)
    include = section.get("include", [])
    if not isinstance(include, list):
        raise SpecError(f"{where}: {prefix}include: expected a list of trial settings")
    for i, entry in enumerate(include):
        if not isinstance(entry, dict) or not entry:
            raise SpecError(f"{where}: {prefix}include[{i}]: expected a mapping of setting: value or [values]")
        for key, value in entry.items():
            values = value if isinstance(value, list) and key != "lr_decay_epochs" else [value]
            if not values:
                raise SpecError(f"{where}: {prefix}include[{i}].{shown(key)}: expected a value or a non-empty list")
            for v in values:
                _check_value(where, f"{prefix}include[{i}].{shown(key)}", key, v)
            _check_once(where, f"{prefix}include[{i}].{shown(key)}", values)


def _check_once(where: str, field: str, values: list[Any]) -> None:
    """An axis lists each value once: a repeat (`seed: [1, 1]`) makes the same trials again, which a sweep runs
    once, so the sweep would run fewer trials than its file seems to say, without a word."""
    seen = set()
    for value in values:  # valid values by now: scalars, or lr_decay_epochs' list of integers
        key = tuple(value) if isinstance(value, list) else value  # (1 and 1.0 are one value, as in a trial)
        if key in seen:
            raise SpecError(f"{where}: {field}: expected each value once, got {quote(value)} twice")
        seen.add(key)


def varying_axes(trials: list[TrialConfig]) -> tuple[str, ...]:
    """The settings whose value differs between the trials: what tells them apart in a table or a label.
    Derived settings are left out where they add nothing: lr_rule (lr, base_lr and base_batch tell it), and
    gpus_per_node unless nodes varies too (it is num_gpus then)."""
    varying = [name for name in field_names() if len({repr(getattr(t, name)) for t in trials}) > 1]
    redundant = {"lr_rule"} | ({"gpus_per_node"} if "nodes" not in varying else set())
    return tuple(name for name in varying if name not in redundant)


LABELLED = ("framework", "model", "num_gpus", "batch_per_gpu", "lr")  # what every trial's label names (TrialConfig.label)
ARITHMETIC = ("precision", "compile")  # named in every label where the sweep varies them


def label_axes(trials: list[TrialConfig]) -> dict[str, tuple[str, ...]]:
    """Per trial, the settings its label adds to the usual ones so that no two trials of the sweep read
    the same: those that vary among the trials sharing its framework, model, GPUs, batch and lr, and the
    arithmetic (precision, compile) wherever the sweep varies it, since it changes every figure of the trial."""
    axes = varying_axes(trials)
    groups: dict[tuple, list[TrialConfig]] = {}
    for t in trials:
        groups.setdefault(tuple(getattr(t, k) for k in LABELLED), []).append(t)
    out = {}
    for group in groups.values():
        extra = tuple(a for a in axes if a not in LABELLED and (a in ARITHMETIC or len({repr(getattr(t, a)) for t in group}) > 1))
        out.update({t.trial_id: extra for t in group})
    return out


def _product(axes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    keys = list(axes)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]


def _sections(raw: dict[str, Any], scale: str) -> tuple[dict[str, Any], dict[str, list[Any]], list[dict[str, Any]]]:
    """fixed, grid and include of one scale: the top level with the scale's overrides."""
    override = raw.get("scales", {}).get(scale, {})
    fixed = {**raw.get("fixed", {}), **override.get("fixed", {})}
    grid = {**raw.get("grid", {}), **override.get("grid", {})}
    return fixed, grid, override.get("include", raw.get("include", []))


def _entry_axes(entry: dict[str, Any]) -> dict[str, list[Any]]:
    """An include entry as its own small grid (a list is an axis, except lr_decay_epochs' own list)."""
    return {k: (v if isinstance(v, list) and k != "lr_decay_epochs" else [v]) for k, v in entry.items()}


def trial_count(raw: dict[str, Any], scale: str) -> int:
    """How many trials a scale expands to (duplicates included), from the grid's shape alone."""
    fixed, grid, include = _sections(raw, scale)
    count = math.prod(len(v) for v in grid.values()) if grid else 0
    for entry in include:
        count += (math.prod(len(v) for v in _entry_axes(entry).values())
                  * math.prod(len(v) for k, v in grid.items() if k not in entry))
    return count or (1 if fixed else 0)


def expand(sweep: Sweep, scale: str) -> list[TrialConfig]:
    """The trials of one scale, in grid order, each validated as a whole."""
    return _expand(sweep, scale)[0]


def _expand(sweep: Sweep, scale: str) -> tuple[list[TrialConfig], list[Search]]:
    """The trials of one scale with a batch, and the searches of those whose batch is `max`, in grid order."""
    fixed, grid, include = _sections(sweep.raw, scale)
    where = f"{sweep.path}"

    partials = _product(grid) if grid else []
    for entry in include:
        # An include entry is its own small grid; axes it leaves out take every grid value.
        axes = _entry_axes(entry)
        axes.update({k: v for k, v in grid.items() if k not in entry})
        partials.extend(_product(axes))
    if not partials and fixed:
        partials = [{}]
    trials: dict[str, TrialConfig] = {}
    searches: dict[str, Search] = {}
    for point in partials:
        values = _overridden({**fixed, **point}, sweep.overrides)
        search_settings = {k: values.pop(k) for k in SEARCH_CHECKS if k in values}
        if values.get("batch_per_gpu") == "max":
            search = _search(where, scale, values, search_settings)
            searches.setdefault(search.config_id, search)
            continue
        config = _resolve(where, scale, values)
        trials.setdefault(config.trial_id, config)
    if not trials and not searches:
        raise SpecError(f"{where}: grid: expected at least one trial at scale '{scale}' (empty grid and no include)")
    return list(trials.values()), list(searches.values())


def _search(where: str, scale: str, values: dict[str, Any], settings: dict[str, Any]) -> Search:
    """A configuration whose batch is `max`, checked as its first probe and its training trial would be."""
    resolved = _resolved_values(where, scale, dict(values))
    del resolved["batch_per_gpu"]
    search = Search.of(resolved, settings)
    if search.step > search.hi:
        raise SpecError(f"{where}: max_batch_step: expected at most the range's hi ({search.hi}), got {search.step}")
    search.probe(search.lo)
    search.training(search.lo)
    return search


# A setting that replaces another way of saying the same: --set num_gpus=4 drops the file's gpus_per_node,
# --set base_lr=0.2 its lr (so that the linear scaling rule applies), and the other way round.
ALTERNATIVES = {"num_gpus": ("gpus_per_node",), "gpus_per_node": ("num_gpus",), "lr": ("base_lr", "base_batch"),
                "base_lr": ("lr",), "base_batch": ("lr",)}


def _overridden(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A trial's settings with the command line's --set values over the file's."""
    dropped = {alt for key in overrides for alt in ALTERNATIVES.get(key, ()) if alt not in overrides}
    return {**{k: v for k, v in values.items() if k not in dropped}, **overrides}


def yaml_value(text: str) -> Any:
    """One value written as in a sweep file (1e-4 a number, [30, 60] a list, null None)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)


def _resolve(where: str, scale: str, values: dict[str, Any]) -> TrialConfig:
    """Fill defaults and derived values of one trial; check what only the whole trial can tell."""
    return TrialConfig.from_dict(_resolved_values(where, scale, values))


IMAGE_FOLDER_FRAMEWORKS = ("pytorch", "mxnet", "tensorflow")  # those with an input pipeline for data: imagenet (trainables/*/input.py)


def _resolved_values(where: str, scale: str, values: dict[str, Any]) -> dict[str, Any]:
    """A trial's settings with defaults and derived values filled in, checked as a whole."""
    missing = [k for k in REQUIRED if k not in values]
    if missing:
        raise SpecError(f"{where}: {missing[0]}: expected a value in fixed, grid or include (scale '{scale}')")
    values = dict(values)
    _resolve_gpus(where, scale, values)
    if "lr" not in values and ("base_lr" not in values or "base_batch" not in values):
        raise SpecError(f"{where}: lr: expected lr, or base_lr and base_batch for the linear scaling rule (scale '{scale}')")
    values.setdefault("lr", None)  # None: TrialConfig applies the linear scaling rule
    if values["epochs"] == 0 and values["batch_per_gpu"] != "max":
        raise SpecError(f"{where}: epochs: 0 trains nothing; it goes with batch_per_gpu: max (the largest-batch "
                        f"search alone) (scale '{scale}')")
    if values.get("warmup_epochs", 0) >= values["epochs"] and values.get("warmup_epochs", 0) > 0:
        raise SpecError(f"{where}: warmup_epochs: expected fewer than epochs ({values['epochs']}), got {values['warmup_epochs']}")
    _check_distribution(where, values)
    if values["framework"] == "mxnet" and values.get("compile", False):
        raise SpecError(f"{where}: compile: MXNet has no graph compiler (its graphs are fused by hybridize, "
                        f"which every MXNet trial does): set compile false for MXNet trials")
    if values.get("decode", "cpu") == "gpu" and values["framework"] != "pytorch":
        raise SpecError(f"{where}: decode: gpu decodes JPEGs with nvJPEG through torchvision, in pytorch trials only; "
                        f"{values['framework']} decodes on the CPU (decode: cpu)")
    if problem := zoo.model_framework_problem(values["model"], values["framework"]):
        raise SpecError(f"{where}: model: {problem}")
    if values.get("data") == "imagenet" and values["framework"] not in IMAGE_FOLDER_FRAMEWORKS:  # until its pipeline exists
        raise SpecError(f"{where}: data: imagenet runs in {', '.join(IMAGE_FOLDER_FRAMEWORKS)} only so far, "
                        f"not in {values['framework']}")
    return values


def _resolve_gpus(where: str, scale: str, values: dict[str, Any]) -> None:
    """num_gpus (the trial's GPUs in all) and gpus_per_node: a sweep gives one, the other follows from nodes."""
    nodes = values.get("nodes", 1)
    if "gpus_per_node" in values and "num_gpus" in values:
        raise SpecError(f"{where}: gpus_per_node: give num_gpus (the trial's GPUs in all) or gpus_per_node, not both "
                        f"(scale '{scale}')")
    if "gpus_per_node" in values:
        values["num_gpus"] = nodes * values["gpus_per_node"]
    elif "num_gpus" in values:  # TrialConfig derives gpus_per_node
        if values["num_gpus"] % nodes:
            raise SpecError(f"{where}: num_gpus: expected a multiple of nodes ({nodes}) to spread evenly, "
                            f"got {values['num_gpus']} (scale '{scale}')")
    else:
        raise SpecError(f"{where}: num_gpus: expected a value (or gpus_per_node) in fixed, grid or include (scale '{scale}')")


def _check_distribution(where: str, values: dict[str, Any]) -> None:
    """Each framework's own way to spread a trial: MXNet's kvstore, TensorFlow's variable_update, PyTorch's DDP."""
    framework, kvstore = values["framework"], values.get("kvstore", "device")
    if framework == "mxnet" and values.get("variable_update", "replicated") != "replicated":
        raise SpecError(f"{where}: variable_update: a TensorFlow setting; MXNet trials choose a kvstore "
                        f"(dist_sync or dist_async for parameter servers)")
    if framework == "mxnet" and values.get("nodes", 1) > 1 and not kvstore.startswith("dist"):
        raise SpecError(f"{where}: kvstore: an MXNet trial on {values['nodes']} nodes needs dist_sync or dist_async, "
                        f"got {kvstore}")
    if framework == "pytorch" and kvstore.startswith("dist"):
        raise SpecError(f"{where}: kvstore: {kvstore} is MXNet's; PyTorch trials run DistributedDataParallel "
                        f"(one process per GPU, on one node or several)")
    if framework == "pytorch" and values.get("variable_update", "replicated") != "replicated":
        raise SpecError(f"{where}: variable_update: a TensorFlow setting; PyTorch trials all-reduce their gradients "
                        f"(DistributedDataParallel)")
    if framework == "keras" and (kvstore != "device" or values.get("variable_update", "replicated") != "replicated"):
        raise SpecError(f"{where}: kvstore and variable_update are MXNet's and TensorFlow's; keras trials run data "
                        f"parallel as Keras does on their keras_backend")
    backend = values.get("keras_backend", "tensorflow")
    if framework == "keras" and values.get("compile", False) and (
            backend == "torch" or (backend == "tensorflow" and values["num_gpus"] > 1)):
        # Seen with Keras 3.15: torch.compile recompiles Keras's step past its cache limit (TORCH_LOGS=recompiles: at
        # Keras's own layer hooks), and on TensorFlow Keras's jit_compile wraps the cross-device reduction, whose
        # variables on the other devices XLA cannot reach.
        raise SpecError(f"{where}: compile: Keras's jit_compile runs for keras on jax (always) and on tensorflow on "
                        f"one GPU so far, not on {backend} with {values['num_gpus']}: set compile false")
    if framework == "tensorflow" and kvstore.startswith("dist"):
        raise SpecError(f"{where}: kvstore: {kvstore} is MXNet's; TensorFlow trials choose variable_update "
                        f"(replicated or parameter_server)")
