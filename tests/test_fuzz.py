"""Property tests (hypothesis): whatever a sweep file or a command line holds, the answer is a result or
one line and exit 2, never a traceback, in bounded time and memory.

- the spec loader, over raw bytes, YAML-shaped text (anchors, aliases, tags, flow and block syntax) and
  YAML trees built around a valid sweep: a Sweep or a one-line SpecError, nothing else;
- the CLI (`sweep.cli.main`, in this process), over command lines built from its own commands, options,
  the shipped sweeps and tests/hostile/, and random tokens: exit 0 or 2 with at most one line on stderr,
  or the point where Ray would start (patched to stop there: Ray itself is not what is fuzzed).

The address space of this process is capped while they run, so a case that expands without bound fails
as a MemoryError here instead of eating the machine. Example counts are bounded for CI (a few seconds
each); SWEEP_FUZZ_SCALE=N runs N times as many (a deeper search by hand).
"""
from __future__ import annotations

import contextlib
import io
import os
import resource
from pathlib import Path

import psutil
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sweep import cli, spec
from sweep.settings import CHECKS
from sweep.errors import SpecError

HOSTILE = sorted(str(p) for p in (Path(__file__).resolve().parent / "hostile").iterdir())
HEADROOM = 1536 << 20  # bytes of address space each example may add to what the process has
SCALE = int(os.environ.get("SWEEP_FUZZ_SCALE", "1"))
# No deadline: on a loaded two-core machine one example can take seconds for load alone; the
# address-space cap (capped_memory) and the tests' own bounds stop a runaway expansion instead.
FAST = settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def capped_memory():
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = psutil.Process().memory_info().vms + HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def loads_or_one_line(text: str) -> None:
    try:
        sweep = spec.parse(text, Path("fuzz.yaml"))
    except SpecError as e:
        message = str(e)
        assert message.split(": ", 1)[0].endswith("fuzz.yaml") and "\n" not in message and len(message) < 2000, message
        return
    assert sweep.trials("smoke") and sweep.trials("full")


# --- the loader -----------------------------------------------------------------------------------

@FAST
@given(data=st.binary(max_size=2000))
def test_any_bytes(data: bytes, tmp_path_factory) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "fuzz.yaml"
    path.write_bytes(data)
    try:
        spec.load(str(path))
    except SpecError as e:
        assert "\n" not in str(e)


YAML_ALPHABET = st.sampled_from(list("[]{}:,-&*!|>'\"#%@?~ \n\t.0123456789eE+abxyz_") +
                                ["&a ", "*a", "<<: ", "!!int ", "!!str ", "!!float ", "!!python/object ", "\n  ",
                                 "description: x\n", "fixed: ", "grid: ", "seed: ", "lr: ", "epochs: ", "- "])


@FAST
@given(text=st.lists(YAML_ALPHABET, max_size=120).map("".join))
def test_yaml_shaped_text(text: str) -> None:
    loads_or_one_line(text)


SETTING_VALUES = {"framework": ["mxnet", "tensorflow"], "model": ["resnet8_cifar", "cifar10_conv", "alexnet"],
                  "kvstore": ["device", "dist_sync"], "variable_update": ["replicated", "parameter_server"],
                  "data": ["synthetic", "cifar10"]}
KEYS = sorted(spec.TOP_KEYS | set(CHECKS) | spec.SECTION_KEYS | set(spec.SCALES) | set(spec.EARLY_STOPPING_KEYS))
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70), st.floats(),
                    st.text(max_size=12), st.sampled_from([v for vs in SETTING_VALUES.values() for v in vs]),
                    st.integers(min_value=0, max_value=16))
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=8), st.integers(-3, 3))
trees = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(keys, inner, max_size=4)), max_leaves=24)
GOOD = {"description": "fuzz", "fixed": {"framework": "mxnet", "model": "resnet8_cifar", "epochs": 1, "lr": 0.1},
        "grid": {"num_gpus": [1, 2], "batch_per_gpu": [8]}}


@st.composite
def sweep_trees(draw) -> dict:
    """A valid sweep with a few of its settings, sections or keys replaced by anything."""
    doc = yaml.safe_load(yaml.safe_dump(GOOD))
    for _ in range(draw(st.integers(0, 4))):
        where = draw(st.sampled_from(["top", "fixed", "grid", "include", "scales"]))
        key, value = draw(keys), draw(trees)
        if where == "top":
            doc[key] = value
        elif where == "include":
            if not isinstance(doc.get("include"), list):  # an earlier draw may have set it to anything
                doc["include"] = []
            doc["include"].append({key: value})
        elif where == "scales":
            doc["scales"] = {draw(st.sampled_from([*spec.SCALES, "x"])): {draw(st.sampled_from(["fixed", "grid"])): {key: value}}}
        elif isinstance(doc.get(where), dict):
            doc[where][draw(st.sampled_from(sorted(CHECKS)) | keys)] = [value] if where == "grid" and draw(st.booleans()) else value
    return doc


@settings(max_examples=200 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=sweep_trees())
def test_yaml_trees_around_a_valid_sweep(doc: dict) -> None:
    try:
        text = yaml.safe_dump(doc)
    except yaml.YAMLError:
        return
    loads_or_one_line(text)


# --- the command line -----------------------------------------------------------------------------

class RayWouldStart(Exception):
    """Raised where `run` would start Ray: every check before it has passed."""


def _no_ray(*args, **kwargs):
    raise RayWouldStart


OPTIONS = {
    "--scale": st.sampled_from(["smoke", "full", "huge", ""]),
    "--address": st.sampled_from(["garbage", "127.0.0.1:1", "ray://h:1", "[::1]:99999", "h:p", ":", "localhost:0",
                                  "h:\u00b2", "a\x00b:1", "x" * 300 + ":1", "a..b:1", "-:1", "localhost:65536"]),
    "--emulate-gpus": st.integers(-2**66, 2**66).map(str),
    "--max-concurrent": st.integers(-3, 2**40).map(str),
    "--max-failures": st.integers(-3, 2**40).map(str),
    "--max-trials": st.integers(-3, 2**66).map(str),
    "--resume": st.sampled_from(["", "latest", "../x", "20200101-000000-abcd", "a" * 300]),
    "--data-dir": st.sampled_from(["/nonexistent", "/dev/null", ""]),
    "--dashboard-host": st.sampled_from(["127.0.0.1", "", "::"]),
    "--target-acc": st.floats().map(str),
    "--out": st.sampled_from(["/proc/x", ""]),
    "--against": st.sampled_from(["nope", ""]),
}
FLAGS = ["--skip-infeasible", "--retry-failed", "--force", "--help", "-h"]
targets = st.one_of(st.sampled_from(["resnet50_lr_scaling", "tf_cnn_benchmarks", "poseidon_distributed", "nope", "",
                                     "-", "/", "../x.yaml"]), st.sampled_from(HOSTILE), st.text(max_size=20))


@st.composite
def command_lines(draw) -> list[str]:
    argv = [draw(st.sampled_from([*cli.COMMANDS, "", "bogus"]))] if draw(st.booleans()) else []
    argv += [draw(targets)] if draw(st.integers(0, 4)) else []
    for _ in range(draw(st.integers(0, 4))):
        choice = draw(st.integers(0, 3))
        if choice == 0:
            argv.append(draw(st.sampled_from(FLAGS)))
        elif choice == 1:
            option = draw(st.sampled_from(sorted(OPTIONS)))
            argv += [option, draw(OPTIONS[option])]
        else:
            argv.append(draw(st.text(max_size=12)))
    return argv


@settings(max_examples=60 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(argv=command_lines())
def test_any_command_line(argv: list[str], tmp_path: Path, monkeypatch) -> None:
    from sweep import cluster

    monkeypatch.setattr(cluster, "start", _no_ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # Wherever a store is named, it is this test's: a random --results is overridden (the last one counts).
    if argv and argv[0] in ("run", "status", "report") or argv[:1] and argv[0] not in cli.COMMANDS:
        argv = [*argv, "--results", str(tmp_path / "results")]
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = cli.main(argv)
        except RayWouldStart:
            return
        except SystemExit as e:  # --help
            code = e.code
    lines = err.getvalue().strip().splitlines()
    assert code in (0, 2), (argv, code, err.getvalue()[-2000:])
    assert code == 0 or (len(lines) == 1 and lines[0].startswith("error: ")), (argv, err.getvalue()[-2000:])
    assert "Traceback" not in err.getvalue()
