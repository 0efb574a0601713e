"""Hostile input through the real CLI: one line, exit 2, nothing written, in bounded time and memory.

tests/hostile/ holds sweep files a careless or hostile user could hand the engine (each says what it is
in its description). Every one goes through `python -m sweep show FILE` and `python -m sweep run FILE`
in a process whose address space is capped, so that a regression that expands a billion-laughs file
or a 10^7-trial grid fails here in seconds instead of eating the machine.
"""
from __future__ import annotations

import http.server
import os
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, SWEEPS, EngineRuns, copy_run

from sweep import store
from sweep.schema import Status

HOSTILE = Path(__file__).resolve().parent / "hostile"
CORPUS = sorted(HOSTILE.iterdir())
MEMORY = 3 << 30  # address space of each CLI process: far above what it needs, far below a runaway
SECONDS = 30  # per command, of CPU time (each takes about a second), and of waiting on nothing (see cli)


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    resource.setrlimit(resource.RLIMIT_CPU, (SECONDS, SECONDS + 5))  # a runaway: SIGXCPU, then SIGKILL
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # and no core file in the project for it


def _cpu_seconds(process: psutil.Process) -> float | None:
    """CPU time so far of a process and its live descendants; None once it has ended."""
    try:
        return sum(sum(p.cpu_times()[:2]) for p in (process, *process.children(recursive=True)))
    except psutil.Error:
        return None


def _kill_all(process: psutil.Process) -> None:
    try:
        family = [process, *process.children(recursive=True)]
    except psutil.Error:
        family = [process]
    for p in family:
        try:
            p.kill()
        except psutil.Error:
            pass


def cli(*args: str, timeout: float = SECONDS, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """`python -m sweep ARGS` with capped memory; the result and the CPU seconds it used.

    CPU time, not wall time: on a loaded two-core machine a command can wait seconds for a core (at load
    60, a second's work takes half a minute), but the work a regression adds (expanding a huge file, a
    huge grid) shows in its own CPU time whatever the load. So is what stops a command that never ends:
    one that works for ever is killed at SECONDS of CPU time (RLIMIT_CPU), one that waits for ever (on a
    pipe, a peer that never answers) when its CPU time has not moved for `timeout` seconds; either is a
    failure. A command waiting for a core still gets one now and then, so neither stop depends on the load."""
    full_env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    full_env.update(env or {})
    proc = subprocess.Popen([sys.executable, "-m", "sweep", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full_env, preexec_fn=_cap_memory)
    process = psutil.Process(proc.pid)
    with ThreadPoolExecutor(2) as readers:
        reads = readers.submit(proc.stdout.read), readers.submit(proc.stderr.read)
        used, moved = _cpu_seconds(process), time.monotonic()
        while wait(reads, timeout=0.5).not_done:
            now = _cpu_seconds(process)
            if now is not None and now != used:
                used, moved = now, time.monotonic()
            elif time.monotonic() - moved > timeout:  # waits on what never comes (or ended, its pipes held open)
                _kill_all(process)
                raise TimeoutError(f"sweep {' '.join(args)}: no CPU time used for {timeout} s, and not ended")
        texts = reads[0].result(), reads[1].result()
    _, status, usage = os.wait4(proc.pid, 0)  # reaped here, with its own resource usage
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = subprocess.CompletedProcess(proc.args, proc.returncode, *texts)
    return out, usage.ru_utime + usage.ru_stime


def assert_one_line_exit_2(out: subprocess.CompletedProcess, *expected: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, (out.returncode, out.stdout[-1000:], out.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr[-2000:]
    assert len(lines[0]) < 600, lines[0]  # values quoted in messages are cut
    for text in expected:
        assert text in lines[0], lines[0]


def test_the_corpus_is_there() -> None:
    assert len(CORPUS) >= 25 and (HOSTILE / "...yaml") in CORPUS


@pytest.mark.slow
def test_every_hostile_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Each file through `show` and `run`, one process each, four at a time (2 cores: CPU-bound, ~15 s)."""
    results = tmp_path / "results"
    commands = [(path, [command, str(path)] + (["--results", str(results)] if command == "run" else []))
                for path in CORPUS for command in ("show", "run")]
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda c: cli(*c[1]), commands))
    for (path, args), (out, seconds) in zip(commands, outcomes):
        assert_one_line_exit_2(out, path.name)
        assert seconds < SECONDS, (args, seconds)
    assert not results.exists()


def test_what_the_corpus_cases_say() -> None:
    """The reason each of the issue's cases gives (the parametrized test checks only the shape)."""
    expect = {
        "huge_grid.yaml": "10,000,000 trials at scale smoke, more than the limit of 10,000 (--max-trials N raises it)",
        "billion_laughs.yaml": "more than 50,000 values once its aliases are expanded",
        "alias_loop.yaml": "an alias that contains itself",
        "deep_nesting.yaml": "nested too deeply",
        "seed_2_64.yaml": "grid.seed[0]: expected an integer >= 0 and <= 4294967295, got 18446744073709551616",
        "long_name.yaml": "name: expected 1 to 100 characters",
        "...yaml": "the file name makes the sweep's name '..'",
        "huge_batch.yaml": "fixed.batch_per_gpu: expected an integer >= 1 and <= 65536",
        "many_gpus.yaml": "fixed.num_gpus: expected an integer >= 1 and <= 4096",
        "long_value.yaml": "...",
    }
    for name, text in expect.items():
        out, _ = cli("show", str(HOSTILE / name))
        assert_one_line_exit_2(out, text)


def test_max_trials_raises_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "wide.yaml"
    path.write_text('description: "120 trials"\n'
                    "fixed: {framework: mxnet, model: resnet8_cifar, epochs: 1, lr: 0.1, num_gpus: 1}\n"
                    "grid: {seed: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], batch_per_gpu: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}\n")
    out, _ = cli("show", str(path), "--max-trials", "100")
    assert_one_line_exit_2(out, "grid: 120 trials at scale smoke, more than the limit of 100")
    out, _ = cli("show", str(path), "--max-trials", "120", "--scale", "full")
    assert out.returncode == 0 and "scale full: 120 trials" in out.stdout, out.stderr
    out, _ = cli("show", str(path), "--max-trials", "0")
    assert_one_line_exit_2(out, "--max-trials: expected an integer >= 1")


def test_a_file_too_big_or_not_a_file(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text('description: "x"\n' + "# padding\n" * 120_000)  # 1.2 MB
    out, seconds = cli("show", str(big))
    assert_one_line_exit_2(out, "larger than 262,144 bytes")
    assert seconds < 10  # CPU seconds: refused by its size, not parsed
    many = tmp_path / "many.yaml"  # under the size limit, 125,000 values: refused when the 50,001st is composed
    many.write_text('description: "x"\ngrid: {seed: [' + ",".join(["1"] * 125_000) + "]}\n")
    out, seconds = cli("show", str(many))
    assert_one_line_exit_2(out, "at line 2, column 100001: more than 50,000 values")
    assert seconds < 10  # CPU seconds: refused as the limit is crossed, not after composing every value
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # opening it would block until a writer comes: refused before it is opened
    out, _ = cli("show", str(fifo))
    assert_one_line_exit_2(out, "not a regular file")
    out, _ = cli("show", "/dev/zero")
    assert_one_line_exit_2(out, "/dev/zero: not a regular file")


def test_emulating_more_nodes_than_a_machine_holds_is_refused_before_ray(tmp_path: Path) -> None:
    path = tmp_path / "wide_nodes.yaml"
    path.write_text('description: "16 nodes"\nfixed: {framework: mxnet, model: resnet8_cifar, epochs: 1, lr: 0.1, '
                    "nodes: 16, gpus_per_node: 1, kvstore: dist_sync, batch_per_gpu: 8, data: synthetic}\n")
    results = tmp_path / "results"
    out, seconds = cli(str(path), "--results", str(results))
    assert_one_line_exit_2(out, "trials span up to 16 nodes; the embedded Ray emulates at most 8")
    assert not results.exists() and seconds < SECONDS


def test_resume_of_a_run_id_that_is_no_folder_name(tmp_path: Path) -> None:
    out, _ = cli(str(SWEEPS / "tiny_mxnet.yaml"), "--resume", "../../etc", "--results", str(tmp_path / "r"))
    assert_one_line_exit_2(out, "--resume: expected a run id")


def test_help_lists_every_exit_code() -> None:
    for args in (["--help"], ["run", "--help"]):
        out, _ = cli(*args)
        assert out.returncode == 0, out.stderr
        codes = out.stdout.split("exit codes:")[1]
        for code in ("0", "1", "2", "75", "130", "143"):
            assert f"\n  {code} " in codes, (code, codes)


# --- --address: what answers there -----------------------------------------------------------------

class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_port():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.fixture
def silent_port():
    """A port that accepts connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield listener.getsockname()[1]
    listener.close()


# "silent" waits out the GCS check's own timeout (~5 s): the full suite's.
@pytest.mark.parametrize("kind", ["http", pytest.param("silent", marks=pytest.mark.slow), "garbage", "unknown host",
                                  "from RAY_ADDRESS"])
def test_an_address_that_is_not_a_ray_gcs_is_one_line_within_seconds(kind: str, http_port, silent_port, tmp_path: Path) -> None:
    address, says = {
        "http": (f"127.0.0.1:{http_port}", "an HTTP server answers there, not a Ray GCS (the dashboard's port, 8265?"),
        "silent": (f"127.0.0.1:{silent_port}", "does not answer as a Ray GCS within"),
        "garbage": ("garbage", "--address garbage: expected HOST:PORT"),
        "unknown host": ("no-such-host.invalid:6379", "no Ray cluster answers there"),
        "from RAY_ADDRESS": ("127.0.0.1:1", "RAY_ADDRESS 127.0.0.1:1: no Ray cluster answers there (Connection refused)"),
    }[kind]
    results = tmp_path / "results"
    env = {"RAY_ADDRESS": address} if kind == "from RAY_ADDRESS" else {}
    given = [] if kind == "from RAY_ADDRESS" else ["--address", address]
    # No --scale and no CIFAR-10 under --data-dir: the address is still what is reported, being checked first.
    out, _ = cli(str(SWEEPS / "tiny_mxnet.yaml"), *given, "--results", str(results),
                       "--data-dir", str(tmp_path / "no_data"), env=env)
    assert_one_line_exit_2(out, says)
    # No wall-clock bound (it would count Python's start on a loaded machine): a wait for ever ends at cli's
    # timeout (a failure), and the "silent" line says the probe's own 4 s limit was what stopped it.
    assert not results.exists()


def test_grpcs_own_info_lines_stay_off_the_drivers_stderr(http_port, tmp_path: Path) -> None:
    # gRPC writes some events at INFO whatever its tracers say: a GOAWAY from a GCS going away once put its line beside
    # the driver's one line for a lost cluster (test_lost_cluster.py, in CI). GRPC_TRACE has it write one at once, its
    # list of tracers, as the driver's probe of the address (an HTTP server here) starts gRPC.
    out, _ = cli(str(SWEEPS / "tiny_mxnet.yaml"), "--address", f"127.0.0.1:{http_port}", "--results",
                 str(tmp_path / "results"), env={"GRPC_TRACE": "http"})
    assert_one_line_exit_2(out, "an HTTP server answers there, not a Ray GCS")


# --- the store keeps a row whatever a value is -------------------------------------------------------

def test_a_summary_with_a_value_the_store_cannot_hold_is_still_written(engine_runs: EngineRuns, tmp_path: Path) -> None:
    """The class of bug behind `seed: [2^64]` (a trial that failed at its first step, whose summary row then
    overflowed pyarrow): the row lands, that column null, the trial failed with the reason. The rows are an
    engine-made run's, with the seed edited."""
    run = store.RunStore(copy_run(engine_runs, 1, tmp_path))
    summary = min(run.trial_rows(), key=lambda r: r["num_gpus"])
    tid = summary["trial_id"]
    epochs = run.trial_epochs(tid)
    run.finish_trial({**summary, "seed": 2**64, "status": "failed", "error_type": "ValueError",
                      "error": "Seed must be between 0 and 2**32 - 1"}, epochs)
    assert run.finished()[tid] == Status.FAILED
    row = pq.read_table(run.trials_dir / f"{tid}.parquet").to_pylist()[0]
    assert row["seed"] is None and row["num_gpus"] == 1 and row["error_type"] == "ValueError"
    assert row["error"] == "Seed must be between 0 and 2**32 - 1; values not storable in column seed"
    assert row["wall_time_s"] == summary["wall_time_s"]  # the other columns as the engine wrote them
    # And a completed trial's summary with such a value turns failed: it cannot be told apart from the others.
    run.finish_trial({**summary, "seed": 2**64}, epochs)
    assert run.finished()[tid] == Status.FAILED
    assert pq.read_table(run.trials_dir / f"{tid}.parquet").to_pylist()[0]["error_type"] == "UnstorableValue"


def test_the_git_commit_is_the_projects_own_or_none(tmp_path: Path) -> None:
    """Issue 40: a copy of the project inside another repository (a bundle unpacked in some checkout) recorded that
    repository's commit. Only a project folder that is its work tree's top names a commit."""
    def git(*args: str, cwd: Path) -> str:
        out = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, capture_output=True,
                             text=True, timeout=60, check=True)
        return out.stdout.strip()

    outer, project = tmp_path / "outer", tmp_path / "outer" / "copy"
    (project / "sweep").mkdir(parents=True)
    for name in ("__init__.py", "version.py"):
        shutil.copy(ROOT / "sweep" / name, project / "sweep" / name)
    code = "import sweep.version as v; print(v.git_commit())"

    def recorded() -> str:
        out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(project)})
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    git("init", "-q", cwd=outer)
    git("add", ".", cwd=outer)
    git("commit", "-q", "-m", "the repository around the copy", cwd=outer)
    assert recorded() == "None"  # not the outer repository's commit
    git("init", "-q", cwd=project)  # the project's own repository
    git("add", ".", cwd=project)
    git("commit", "-q", "-m", "the project", cwd=project)
    assert recorded() == git("rev-parse", "--short=12", "HEAD", cwd=project)
    (project / "sweep" / "__init__.py").write_text("# changed\n")
    assert recorded() == git("rev-parse", "--short=12", "HEAD", cwd=project) + "-dirty"


def test_the_engine_version_is_the_source_trees_own(tmp_path: Path) -> None:
    """A checkout on PYTHONPATH, installed or not, names its own version: importlib.metadata would name
    the installed copy's (here 0.1.0 from the shared venv), or raise where none is installed."""
    (tmp_path / "sweep").mkdir()
    for name in ("__init__.py", "version.py"):
        shutil.copy(ROOT / "sweep" / name, tmp_path / "sweep" / name)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "sweep"\nversion = "9.8.7"\n')
    code = "import sweep.version as v; print(v.engine_version())"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "9.8.7", out.stdout + out.stderr
    (tmp_path / "pyproject.toml").unlink()  # an installed copy: the distribution's metadata, or "unknown"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0 and out.stdout.strip() not in ("", "9.8.7"), out.stdout + out.stderr
