"""The picture of the code, checked: modules import in one direction only, and each process loads only its part.

Read from the source (every import statement, at module level or inside a function), so a change that
breaks the picture fails here, whichever path it takes. The layers, top to bottom; a module imports
from its own layer or those below it, never above:

  entry          sweep.__main__, sweep.cli
  commands       sweep.launch (run), sweep.runs (status), sweep.plan (plan), sweep.manage (runs, rm), sweep.report.* (report),
                 sweep.venvs (env), sweep.max_batch (run's largest-batch searches),
                 sweep.data_pack (data pack)
  driver         sweep.runner, sweep.console, sweep.dashboard, sweep.cluster, sweep.packing, sweep.estimates,
                 sweep.spec, sweep.settings, sweep.overrides, sweep.datasets, sweep.download, sweep.checks, sweep.gcs,
                 sweep.batch_search
  trial process  sweep.trial, sweep.workers
  store          sweep.store, sweep.schema, sweep.location, sweep.errors, sweep.terminal, sweep.environments,
                 sweep.limits, sweep.version
  frameworks     trainables.mxnet.*, trainables.tensorflow.*, trainables.pytorch.*
  trainables     trainables.loop, .data, .measure, .environment, .zoo, .config, .local, .probe, .failure, .peaks

The loop loads a framework's backend by name (importlib) inside the trial's process; no module of
sweep/ imports a framework or trainables.<framework>, and trainables/ never imports sweep/.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

LAYERS = [
    ("entry", {"sweep.__main__", "sweep.cli"}),
    ("commands", {"sweep.launch", "sweep.runs", "sweep.plan", "sweep.manage", "sweep.report", "sweep.venvs",
                  "sweep.max_batch", "sweep.data_pack"}),
    ("driver", {"sweep.runner", "sweep.console", "sweep.dashboard", "sweep.cluster", "sweep.packing", "sweep.estimates",
                "sweep.spec", "sweep.settings", "sweep.overrides", "sweep.datasets", "sweep.imagenet_like", "sweep.download", "sweep.checks", "sweep.gcs",
                "sweep.batch_search"}),
    ("trial process", {"sweep.trial", "sweep.workers"}),
    ("store", {"sweep.store", "sweep.schema", "sweep.location", "sweep.errors", "sweep.terminal", "sweep.environments",
               "sweep.limits", "sweep.version"}),
    ("frameworks", {"trainables.mxnet", "trainables.tensorflow", "trainables.pytorch", "trainables.keras"}),
    ("trainables", {"trainables.loop", "trainables.data", "trainables.images", "trainables.measure", "trainables.environment",
                    "trainables.zoo", "trainables.config", "trainables.local", "trainables.probe", "trainables.peaks",
                    "trainables.failure"}),
]
FRAMEWORKS = ("mxnet", "tensorflow", "keras", "tf_keras", "torch", "trainables.mxnet", "trainables.tensorflow", "trainables.keras",
              "trainables.pytorch")
PACKAGES = ("sweep", "trainables")


def modules() -> dict[str, Path]:
    """Every module of the two packages: dotted name -> file."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """What a module imports: project modules by their dotted names, anything else by its top name."""
    out = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package upwards
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:  # `from sweep import store` imports the module sweep.store
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in out if m}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(path, name, set(found)) - {name} for name, path in found.items()}


def layer_of(module: str) -> int:
    if module in PACKAGES:  # the packages' own __init__ files: empty, below everything
        return len(LAYERS)
    for rank, (_, members) in enumerate(LAYERS):
        if any(module == m or module.startswith(m + ".") for m in members):
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS (and to docs/layout.md)")


def project(graph: dict[str, set[str]], module: str) -> set[str]:
    return {m for m in graph[module] if m.split(".")[0] in PACKAGES}


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower_layers(graph) -> None:
    upward = []
    for module in graph:
        for target in project(graph, module):
            if target in graph and layer_of(target) < layer_of(module):
                upward.append(f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})")
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def test_no_import_cycle(graph) -> None:
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(project(graph, module) & set(graph)):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def reach(graph: dict[str, set[str]], start: str) -> set[str]:
    """Everything a module imports, directly or through project modules."""
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        for target in graph.get(module, set()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_engine_never_imports_a_framework_and_trainables_never_import_the_engine(graph) -> None:
    for module in graph:
        reached = reach(graph, module)
        if module.startswith("sweep"):
            frameworks = sorted(m for m in reached if m.startswith(FRAMEWORKS))
            assert not frameworks, f"{module} reaches {frameworks}"
        if module.startswith("trainables"):
            assert not [m for m in reached if m.startswith("sweep")], f"{module} imports the engine"


def test_the_trial_process_never_imports_driver_modules(graph) -> None:
    driver = {m for m in graph if layer_of(m) < layer_of("sweep.trial")}
    for module in ("sweep.trial", "sweep.workers"):
        assert not reach(graph, module) & driver, f"{module} reaches {sorted(reach(graph, module) & driver)}"


def test_the_checker_sees_real_imports(graph) -> None:
    """The rules above would pass on an empty graph: the graph is the real one."""
    assert "sweep.store" in graph["sweep.trial"] and "trainables.loop" in graph["sweep.trial"]
    assert "sweep.report.load" in graph["sweep.report.build"]
    assert "mxnet" in graph["trainables.mxnet.backend"] and "tensorflow" in graph["trainables.tensorflow.backend"]


def test_loading_the_driver_loads_no_framework() -> None:
    """At run time too: every driver-side module imported in one process leaves both frameworks out."""
    names = [m for m in modules() if m.startswith("sweep") and m != "sweep.__main__"]
    code = (f"import importlib, sys; [importlib.import_module(m) for m in {names!r}]; "
            "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('mxnet', 'tensorflow', 'keras')); "
            "print(loaded); sys.exit(1 if loaded else 0)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
