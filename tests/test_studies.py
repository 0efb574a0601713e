"""The studies in the repository (issue 40): docs/studies.md says what each is and where it comes from, holds
the figures the report compares with (the same as sweep/report/seeds.py's), every shipped sweep names one of
them, and nothing the project ships points outside it (`../shared/...`) for what it cites."""
from __future__ import annotations

import re
import subprocess

from conftest import ROOT

from sweep import spec
from sweep.report import seeds

STUDIES = ROOT / "docs" / "studies.md"


def test_the_readme_links_the_studies_page_which_names_each_study_and_its_source() -> None:
    assert "](docs/studies.md)" in (ROOT / "README.md").read_text()
    text = STUDIES.read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| (\d{3}) \|.*$", text, re.M)}
    assert sorted(rows) == sorted(seeds.STUDIES)
    for number, (file, words) in seeds.STUDIES.items():
        assert f"| {number} | {words} | `{file}` |" in rows[number], number
    for source in ("Profiling results", "beeva-poc-mxnet", "CIFAR 10 Conv MGPU Benchmark Neon vs. MXNet",
                   "petuum/poseidon", "https://www.tensorflow.org/performance/benchmarks"):
        assert source in text, source


def test_the_memory_figures_the_report_uses_are_the_pages() -> None:
    """seeds.STUDY_000_MEMORY, which the largest-batch table sets beside a run's, against docs/studies.md's
    tables (each a copy of study 000's "Reduce Randomization" rows, tests/test_max_batch.py checks the document)."""
    text = STUDIES.read_text()
    models = {"resnet50_v1": "ResNet-50, CIFAR-10", "inception_v3": "Inception-v3, CIFAR-10"}
    for (framework, model), figures in seeds.STUDY_000_MEMORY.items():
        section = text[text.index(models[model]):]
        header = re.search(r"^\| backend \|(.*)\|$", section, re.M).group(1)
        gpus = [int(g) for g in re.findall(r"GPU \((\d+)\)", header)]
        backend = {"mxnet": "MXNet", "tensorflow": "TensorFlow"}[framework]
        row = re.search(rf"^\| {backend} \|(.*)\|$", section, re.M).group(1)
        assert dict(zip(gpus, (float(v) for v in row.split("|")))) == figures, (framework, model)


def test_every_shipped_sweep_names_a_study_of_the_page() -> None:
    files = {file for file, _ in seeds.STUDIES.values()}
    for sweep in spec.list_sweeps():
        assert sweep.study in files, f"{sweep.name}: study {sweep.study} is not one of docs/studies.md's"


def test_nothing_the_project_ships_points_outside_it() -> None:
    """The docs, notebooks, sweep files and code cite what the repository holds: no `../shared/...` path, and
    none of the workplace's notes (DESIGN.md, GPU.md) by name."""
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    found = []
    for name in tracked:
        path = ROOT / name
        if name.startswith("tests/") or path.suffix not in {".md", ".py", ".ipynb", ".yaml", ".sh", ".txt"} \
                or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if re.search(r"\.\./shared\b|\b(DESIGN|GPU)\.md\b", line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
