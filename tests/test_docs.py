"""The docs as a user runs them: every ```sh command of README.md and docs/*.md, every sweep file of a
```yaml block, every relative link, and the notebook as shipped.

The convention (docs/README.md): a ```sh block holds `python -m sweep ...` commands that this file
runs, line by line, exactly as printed, through bash, from a scratch folder (the user's working
directory) that holds a small CIFAR-10-format set in `data/` (200 test images) and links `tests/` and
`examples/` to this checkout's, so that `results/`, `data/` and `tests/sweeps/...` mean what they say. `python` on the
PATH there is this interpreter, and PYTHONPATH this checkout. A line ending in `# exit N` must exit N,
every other line 0. No GPU here: `python -m sweep resnet50_lr_scaling` runs the smoke scale, as it does
on any machine without one; that is the only substitution, and it is the engine's own.

The run commands (`python -m sweep NAME ...`) run first, once, in the order the docs give them
(module-scoped `ran`); the commands that read runs (status, runs, report) then read that run. The
notebook runs on it too, with its defaults.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
from cifar_files import write_cifar10
from conftest import ROOT

from sweep import spec
from sweep.cli import COMMANDS

sys.path.insert(0, str(ROOT / "benchmarks"))
from study_smokes import problems  # noqa: E402

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINKED = [*DOCS, ROOT / "benchmarks" / "README.md", ROOT / "search_spaces" / "README.md", ROOT / "results" / "README.md"]
# Pages other branches add (PyTorch, installation); linked from here already. Once they are merged they
# exist, and their links are checked like every other.
COMING = {ROOT / "docs" / "install.md", ROOT / "docs" / "pytorch.md"}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
EXIT = re.compile(r"#\s*exit (\d+)\s*$")
READS_RUNS = {"status", "runs", "report", "rm"}  # commands that need a run in the store


def blocks(kind: str) -> list[tuple[str, str]]:
    """(page, body) of every fenced block of that kind, in page order."""
    return [(path.relative_to(ROOT).as_posix(), m.group(2)) for path in DOCS
            for m in FENCE.finditer(path.read_text()) if m.group(1) == kind]


def commands() -> list[tuple[str, str]]:
    """(page, command line) of every ```sh block, continuation lines joined."""
    out = []
    for page, body in blocks("sh"):
        for line in body.replace("\\\n", " ").splitlines():
            if line.strip() and not line.strip().startswith("#"):
                out.append((page, line.strip()))
    return out


def subcommand(line: str) -> str:
    words = shlex.split(line, comments=True)
    first = words[3] if len(words) > 3 else ""
    return first if first in COMMANDS else "run"


ALL = commands()
RUNS = [(page, line) for page, line in ALL if subcommand(line) == "run"]
CHEAP = [(page, line) for page, line in ALL if subcommand(line) not in READS_RUNS | {"run"}]
READING = [(page, line) for page, line in ALL if subcommand(line) in READS_RUNS]


def shell(workdir: Path, line: str, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PATH=f"{workdir / 'bin'}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    env.pop("SWEEP_DATA_DIR", None)
    return subprocess.run(["bash", "-c", line], cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env)


def expected_exit(line: str) -> int:
    found = EXIT.search(line)
    return int(found.group(1)) if found else 0


def check(out: subprocess.CompletedProcess, line: str) -> None:
    want = expected_exit(line)
    assert out.returncode == want, f"{line}\nexit {out.returncode}, expected {want}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    if want == 2:  # a refusal is one line, never a traceback
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's working directory: data/, tests/ (this checkout's), and `python` on the PATH."""
    work = tmp_path_factory.mktemp("docs")
    write_cifar10(work / "data", train_per_file=100, test=200)
    (work / "tests").symlink_to(ROOT / "tests")
    (work / "examples").symlink_to(ROOT / "examples")  # docs/models.md's networks, as a checkout has them
    (work / "bin").mkdir()
    shim = work / "bin" / "python"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')  # a symlink would lose the venv
    shim.chmod(0o755)
    return work


PRINTED: dict[str, str] = {}  # run command -> what it printed (`ran`)


@pytest.fixture(scope="module")
def ran(workdir: Path) -> Path:
    """Every run command of the docs, once, in their order (the README's first run first)."""
    assert RUNS, "the docs show no run"
    for page, line in RUNS:
        out = shell(workdir, line, timeout=1200)
        check(out, f"{page}: {line}")
        PRINTED[line] = out.stdout
    return workdir


def test_the_docs_follow_the_convention() -> None:
    assert len(ALL) >= 20 and READING and CHEAP
    for page, line in ALL:
        assert line.startswith("python -m sweep"), f"{page}: a ```sh block holds sweep commands only: {line}"
    # The front page's two commands are exactly what CI runs (.ci/run), so the README says them as CI does.
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    for command in ('python3.11 -m venv .venv && .venv/bin/pip install -e ".[cpu,test]"', '.venv/bin/python -m pytest -n 4 -m "not heavy"\n'):
        assert command in ci and command in readme


@pytest.fixture(scope="module")
def cheap(workdir: Path) -> dict[str, subprocess.CompletedProcess]:
    """What each command that reads no run printed: each line once (pages repeat some), two at a time (each
    is a process of its own that keeps one core busy a second or two; none writes what another reads)."""
    lines = sorted({line for _, line in CHEAP})
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(lines, pool.map(lambda line: shell(workdir, line, timeout=300), lines)))


@pytest.mark.slow  # each a fresh `python -m sweep` process: about 45 s for all on two cores, too much for the fast lane
@pytest.mark.parametrize("page,line", CHEAP, ids=[f"{p}: {c}" for p, c in CHEAP])
def test_command(cheap: dict[str, subprocess.CompletedProcess], page: str, line: str) -> None:
    check(cheap[line], f"{page}: {line}")


@pytest.mark.slow
@pytest.mark.parametrize("page,line", READING, ids=[f"{p}: {c}" for p, c in READING])
def test_command_on_the_run(ran: Path, page: str, line: str) -> None:
    check(shell(ran, line, timeout=300), f"{page}: {line}")


@pytest.mark.slow
def test_the_first_run_wrote_what_the_readme_says(ran: Path) -> None:
    (run_dir,) = sorted((ran / "results" / "resnet50_lr_scaling").glob("*/run.json"))
    run_dir = run_dir.parent
    for part in ("run.json", "sweep.yaml", "epochs", "trials"):
        assert (run_dir / part).exists(), part
    trials = pd.read_parquet(run_dir / "trials")
    assert len(trials) == 10 and set(trials.status) == {"completed"} and set(trials.device_kind) == {"cpu-emulated"}
    # The smoke scale asks for 256 validation images; the test split here has 200: the rows say 200, what was scored.
    epochs = pd.read_parquet(run_dir / "epochs")
    assert set(epochs.val_examples) == {200} and set(trials.val_examples) == {200}
    assert epochs.val_acc.notna().all()
    # A shipped study's smoke run, checked as benchmarks/study_smokes.py checks every one: each smoke trial one
    # completed summary row, every framework ran, sane rows, one parameter count per model across frameworks.
    assert problems("resnet50_lr_scaling", ran / "results") == []


@pytest.mark.slow
def test_the_first_run_printed_the_lines_the_readme_shows(ran: Path) -> None:
    """The README's sample output: its first two lines word for word (no GPU here, as on the machine that printed
    them), and its done line but for the run's folder."""
    shown = next(m.group(2) for m in FENCE.finditer((ROOT / "README.md").read_text().split("## A first run", 1)[1])
                 if m.group(1) == "text").splitlines()
    printed = PRINTED["python -m sweep resnet50_lr_scaling"].splitlines()
    assert printed[:2] == shown[:2], printed[:4]
    done = next(line for line in shown if line.startswith("done: "))
    assert any(line.startswith(done.split("; results in")[0] + "; results in ") for line in printed), printed[-4:]


@pytest.mark.slow
def test_the_models_page_trained_each_frameworks_own_network_and_two_zoo_models(ran: Path) -> None:
    """docs/models.md's run: examples/models/ through --code, on 1 and 2 emulated GPUs, beside keras: and gluon:."""
    (run_dir,) = [p.parent for p in (ran / "results" / "own_models").glob("*/run.json")]
    trials, epochs = pd.read_parquet(run_dir / "trials"), pd.read_parquet(run_dir / "epochs")
    assert set(trials.status) == {"completed"}, trials[["model", "num_gpus", "status", "error"]]
    own = epochs[epochs.model.str.endswith("_net:build")]
    assert sorted(zip(own.framework, own.model, own.num_gpus)) == sorted(
        (fw, model, gpus) for fw, model in (("mxnet", "gluon_net:build"), ("pytorch", "torch_net:build"),
                                            ("tensorflow", "keras_net:build")) for gpus in (1, 2))
    assert set(own.param_count) == {5562}  # one network, layer for layer, in each framework (docs/models.md)
    zoo_models = epochs[~epochs.model.str.endswith("_net:build")]
    assert sorted(zip(zoo_models.model, zoo_models.num_gpus)) == [  # each on 1 and 2 GPUs (issue 42)
        ("gluon:resnet18_v1", 1), ("gluon:resnet18_v1", 2), ("keras:MobileNetV2", 1), ("keras:MobileNetV2", 2)]
    assert (zoo_models.param_count > 10**6).all()
    assert epochs.val_acc.notna().all() and (epochs.image_size == 32).all()


def test_every_sweep_file_in_the_docs_loads(tmp_path: Path) -> None:
    shown = blocks("yaml")
    assert len(shown) >= 2
    for i, (page, body) in enumerate(shown):
        sweep = spec.parse(body, tmp_path / f"example_{i}.yaml")  # a SpecError names the page's mistake
        assert sweep.trials("smoke") and sweep.trials("full"), page


def test_every_relative_link_resolves() -> None:
    for page in LINKED:
        text = FENCE.sub("", page.read_text())
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if path in COMING and not path.exists():
                continue
            assert path.exists(), f"{page.relative_to(ROOT)}: broken link {target}"


def test_the_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 160
    for page in ("docs/README.md", "docs/cli.md", "docs/install.md", "docs/pytorch.md", "benchmarks/README.md"):
        assert f"]({page}" in text, page


# --- the notebook, as shipped --------------------------------------------------------------------------

@pytest.mark.slow
def test_the_notebook_runs_as_shipped_on_the_first_run(ran: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """notebooks/analysis.ipynb with its own defaults (RUN_DIR, AGAINST and TARGET_ACC None), from a
    notebooks/ folder beside the results/ of the README's first run: it finds that run, takes the sweep
    file's target (0.75), and says how to compare. Then AGAINST set to the run itself: the compare cell
    prints no environment difference and a table of ratios."""
    import nbformat
    from nbclient import NotebookClient

    spec_dir = tmp_path / "jupyter" / "kernels" / "sweep-docs"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "sweep docs", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    folder = ran / "notebooks"
    folder.mkdir(exist_ok=True)
    shutil.copy(ROOT / "notebooks" / "analysis.ipynb", folder / "analysis.ipynb")

    def execute(parameters: str | None = None) -> list[str]:
        notebook = nbformat.read(folder / "analysis.ipynb", as_version=4)
        if parameters:
            (cell,) = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
            cell.source += "\n" + parameters
        NotebookClient(notebook, kernel_name="sweep-docs", timeout=180,
                       resources={"metadata": {"path": str(folder)}}).execute()
        return ["".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/markdown", "")) +
                        str(o.get("data", {}).get("text/plain", "")) for o in c.get("outputs", []))
                for c in notebook.cells if c.cell_type == "code"]

    shipped = execute()
    everything = "\n".join(shipped)
    assert "target accuracy: 0.75" in everything  # the sweep file's target_acc, stored with the run
    tta = next(out for out in shipped if "Time to accuracy" in out or "time_to_target" in out or "no target" in out)
    assert "no target" not in tta and "0.75" in tta
    assert shipped[-1].strip() == "set AGAINST to a second run folder to compare"
    assert "Throughput, speedup and efficiency" in everything and "speedup(n) = images/s(n) / images/s(1)" in everything
    (run_dir,) = sorted((ran / "results" / "resnet50_lr_scaling").iterdir())
    compared = execute(f"AGAINST = {str(run_dir)!r}")
    assert "no environment difference" in compared[-1] and "B / A" in compared[-1]


@pytest.mark.slow
def test_the_first_runs_plots_name_its_lrs_and_draw_only_real_efficiency_lines(ran: Path) -> None:
    """The accuracy-vs-lr plot has a tick per lr the run tried (it had one, 10^-1, for 0.025-0.4), and the
    efficiency plot draws no group that has only its 1-GPU point (each was one dot at 100%)."""
    from sweep import report

    (run_dir,) = sorted((ran / "results" / "resnet50_lr_scaling").iterdir())
    run = report.load_run(run_dir)
    figures = report.trial_figures(run.trials, run.epochs)
    long = report.scaling(figures)
    axis = report.plot_val_acc_vs_lr(figures, run.emulated).axes[0]
    lrs = sorted(figures.lr.unique())
    assert len(lrs) >= 3 and [float(t) for t in axis.get_xticks()] == pytest.approx(lrs)
    assert [t.get_text() for t in axis.get_xticklabels()] == [f"{lr:g}" for lr in lrs]
    efficiency = report.plot_efficiency(long, run.emulated).axes[0]
    drawn = [line for line in efficiency.get_lines() if line.get_label() != "ideal (100%)"]
    with_scaling = long[long.efficiency.notna()].groupby("speed_group").num_gpus.nunique()
    assert len(drawn) == (with_scaling > 1).sum() and all(len(line.get_xdata()) > 1 for line in drawn)
