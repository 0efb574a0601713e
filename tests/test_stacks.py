"""The two stacks the engine runs on read each other's results: Parquet written under numpy 1.26 +
pandas 2 + pyarrow < 25 reads the same under numpy 2 + pandas 3 + pyarrow 26, and the other way round.

The other stack is another interpreter: $SWEEP_OTHER_PYTHON (CI's two lanes name each other's venv,
.ci/run), else the MXNet environment `env create mxnet` made for this interpreter where it holds the
other numpy (a numpy-2 driver's MXNet environment holds numpy 1.26, pandas 2 and pyarrow 24). Without
one the test is skipped, except under CI, where a skip would hide that the check never ran: there it fails.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy
import pytest
import stack_store
from conftest import ROOT

from sweep import environments

HELPER = ROOT / "tests" / "stack_store.py"


def _numpy_major(python: str) -> int | None:
    out = subprocess.run([python, "-c", "import numpy; print(numpy.__version__)"], capture_output=True, text=True,
                         timeout=120)
    return int(out.stdout.split(".")[0]) if out.returncode == 0 else None


def other_stack() -> str:
    """An interpreter of the other numpy major version, or a skip (a failure under CI) saying why none is here."""
    ours = int(numpy.__version__.split(".")[0])
    candidates = [os.environ.get("SWEEP_OTHER_PYTHON")]
    made = environments.made_environment("mxnet")
    candidates.append(str(made.value) if made else None)
    for python in filter(None, candidates):
        if _numpy_major(python) not in (None, ours):
            return python
    why = (f"no interpreter with the other stack (this one has numpy {numpy.__version__}): set SWEEP_OTHER_PYTHON, "
           "or run `python -m sweep env create mxnet` from a numpy-2 interpreter")
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def _in(python: str, command: str, run_dir: Path) -> dict:
    out = subprocess.run([python, str(HELPER), command, str(run_dir)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _versions(python: str) -> str:
    out = subprocess.run([python, "-c", "import numpy, pandas, pyarrow; print(numpy.__version__, pandas.__version__, "
                          "pyarrow.__version__)"], capture_output=True, text=True, timeout=120)
    return out.stdout.strip()


def test_a_run_written_by_the_other_stack_reads_the_same_here_and_back(tmp_path: Path) -> None:
    other = other_stack()
    there = tmp_path / "written_there"
    read_there = _in(other, "write", there)  # the other stack writes a run and reads it back
    assert read_there == json.loads(json.dumps(stack_store.read(there), sort_keys=True)), _versions(other)
    # The files really came from the other stack (its versions are in the rows it wrote).
    assert read_there["epochs"][0]["numpy_version"] != numpy.__version__
    here = tmp_path / "written_here"
    stack_store.write(here)
    mine = json.loads(json.dumps(stack_store.read(here), sort_keys=True))
    assert _in(other, "read", here) == mine, _versions(other)
    # Both runs hold what was written: two completed trials, both compacted and own files read.
    assert mine["finished"] == {"t-compacted": "completed", "t-own-file": "completed"}
    assert [r["epoch"] for r in mine["epochs"]] == [0, 1, 0, 1]
    assert [r["peak_device_mem_mib"] for r in mine["trial_rows"]] == [[12.5, 13.0]] * 2
