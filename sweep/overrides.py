"""`--set key=value`: one trial setting changed from the command line, for every trial of the sweep.

A value is written as in a sweep file (YAML: `lr=1e-3`, `lr_decay_epochs=[30,60]`, `image_size=null`)
and checked by the sweep file's own checks (sweep/settings.py CHECKS); a setting given this way replaces
the file's value in `fixed`, every grid axis of that name (the axis collapses to the one value) and
every include entry. The values are part of a run's identity: run.json records them, and a resume
with other values is refused unless --force (sweep/launch.py).
"""
from __future__ import annotations

import dataclasses
import json
import shlex
from typing import Any

import yaml

from sweep import limits, settings, spec
from sweep.errors import SpecError
from sweep.spec import Sweep
from trainables.config import TrialConfig


def parse(texts: list[str] | None) -> dict[str, Any]:
    """The --set options as settings, each checked alone; a bad one is a SpecError naming it."""
    out: dict[str, Any] = {}
    for given in texts or []:
        key, sep, raw = given.partition("=")
        text = _short(given)  # as messages show it
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"--set {text}: expected key=value (for example --set lr=0.1)")
        try:
            key = settings.renamed(key, f"--set {text}", out)  # xla: compile's old name
        except ValueError as e:
            raise SpecError(str(e)) from None
        if key in out:
            raise SpecError(f"--set {text}: {key} is set twice")
        if key not in settings.CHECKS:
            hint = " (set by the engine)" if key in settings.DERIVED else ""
            raise SpecError(f"--set {text}: unknown setting '{key}'{hint} ({limits.known_names(key, settings.CHECKS, settings.LISTED_IN)})")
        try:
            value = spec.yaml_value(raw)
        except yaml.YAMLError as e:
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise SpecError(f"--set {text}: malformed value: {problem}") from None
        except RecursionError:  # brackets nested thousands deep
            raise SpecError(f"--set {text}: malformed value: nested too deep") from None
        expected = settings.CHECKS[key](value)
        if expected:
            got = "nothing" if not raw.strip() else _short(repr(value))  # `--set lr=`: YAML reads an empty value as null
            raise SpecError(f"--set {text}: expected {expected}, got {got}")
        out[key] = value
    return out


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def apply(sweep: Sweep, overrides: dict[str, Any]) -> Sweep:
    """The sweep with these settings over every trial. What only a whole trial can tell is checked by
    `trials`, at the scale that is asked for (the file alone was valid at both)."""
    return dataclasses.replace(sweep, overrides=dict(overrides)) if overrides else sweep


def trials(sweep: Sweep, scale: str) -> list[TrialConfig]:
    """The trials of one scale; a problem that only the --set values made is named after them and the scale,
    since a --set is checked against the scale that runs (the other may accept it)."""
    try:
        return sweep.trials(scale)
    except SpecError as e:
        if not sweep.overrides:
            raise
        problem = str(e).removeprefix(f"{sweep.path}: ")
        raise SpecError(f"{options(sweep.overrides)}: {problem} (at scale {scale})") from None


def value_text(value: Any) -> str:
    """A value as --set takes it back (JSON is YAML's flow style: lists, null, true)."""
    if isinstance(value, str):
        return value if spec.yaml_value(value) == value else json.dumps(value)
    return repr(value) if isinstance(value, float) else json.dumps(value)


def options(overrides: dict[str, Any]) -> str:
    """The --set options that give these settings, shell-quoted, by name (as run.json keeps them): for messages
    and commands to copy."""
    return " ".join(f"--set {shlex.quote(f'{k}={value_text(v)}')}" for k, v in sorted(overrides.items()))
