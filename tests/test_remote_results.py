"""--results as a pyarrow filesystem URI: an S3 server on this machine (moto), the real CLI, Parquet on it."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from conftest import ROOT, EngineRuns, run_cli

from sweep import location, store

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3_uri() -> str:
    """s3://sweeps/results on a local S3 endpoint; this process and every CLI run get its credentials."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    try:
        pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", region="us-east-1",
                          allow_bucket_creation=True).create_dir("sweeps")
        yield f"s3://sweeps/results?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    finally:
        server.stop()
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def test_a_run_store_on_s3_writes_and_reads_every_row_once(s3_uri: str, engine_runs: EngineRuns) -> None:
    """An engine-made run written again through the store onto S3, row by row as its trials wrote it."""
    local = store.RunStore(engine_runs.run_dir(1))
    meta, spec_text = local.meta, local.spec_text
    a, b = sorted((row for tid in meta.trials for row in local.trial_epochs(tid)), key=lambda r: r["num_gpus"])
    summary_a = next(r for r in local.trial_rows() if r["trial_id"] == a["trial_id"])
    results = location.at(s3_uri)
    run = store.RunStore.create(results, meta, spec_text)
    run.write_epoch({**a, "images_per_sec": 1.0})
    run.write_epoch(a)  # epoch 0 replayed: the later row replaces it
    run.record_start(a["trial_id"])
    run.compact({a["trial_id"]})
    run.write_epoch(b)
    run.finish_trial(summary_a, run.trial_epochs(a["trial_id"]))
    again = store.RunStore(location.at(str(run.dir)))  # as a trial process opens it, from text
    assert again.meta == meta and again.spec_text == spec_text and again.attempts(a["trial_id"]) == 1
    epochs = again.epochs()
    assert sorted(zip(epochs.trial_id, epochs.epoch)) == sorted([(a["trial_id"], 0), (b["trial_id"], 0)])
    assert epochs.set_index("trial_id").loc[a["trial_id"], "images_per_sec"] == a["images_per_sec"]
    assert again.finished() == {a["trial_id"]: "completed"}
    assert [p.name for p in store.run_dirs(results, "tiny_mxnet")] == [meta.run_id]
    assert len(store.read_runs(s3_uri, "tiny_mxnet")) == 2


def test_a_uri_pyarrow_cannot_open_is_one_line_and_exit_2(tmp_path: Path) -> None:
    out = run_cli(str(ROOT / "tests" / "sweeps" / "tiny_mxnet.yaml"), "--results", "nosuchscheme://bucket/x", timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().startswith("error: --results nosuchscheme://bucket/x") and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    # The same for status, and for a report's run or --results, and for a URI that names no bucket.
    for args in (["status", str(ROOT / "tests" / "sweeps" / "tiny_mxnet.yaml"), "--results", "s3://"],
                 ["report", "nosuchscheme://bucket/x/run"], ["report", "tiny_mxnet", "--results", "s3://"]):
        out = run_cli(*args, timeout=120)
        assert out.returncode == 2 and "Traceback" not in out.stderr, (args, out.stderr[-2000:])
        assert len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)


@pytest.mark.slow  # ~21 s here: the unreachable stores' own timeouts
def test_a_store_it_cannot_reach_or_write_is_one_line_and_exit_2_before_ray_starts(tmp_path: Path) -> None:
    sweep = str(ROOT / "tests" / "sweeps" / "tiny_mxnet.yaml")
    endpoint = "?endpoint_override=127.0.0.1:1&scheme=http&region=us-east-1"  # nothing listens on port 1
    unreachable = "s3://sweeps/results" + endpoint
    a_file = tmp_path / "a_file"
    a_file.write_text("in the way of --results")
    cases = [  # (what the one line says, the command)
        ("cannot read results there (When getting information", [sweep, "--results", unreachable]),
        ("cannot read results there (When getting information", ["status", sweep, "--results", unreachable]),
        ("cannot read a run there (When getting information", ["report", "s3://sweeps/results/tiny_mxnet/r1" + endpoint]),
        ("cannot read results there (a file, not a folder)", [sweep, "--results", str(a_file)]),
        ("cannot write results there (No such file or directory)", [sweep, "--results", "/proc/no/results"]),
    ]
    with ThreadPoolExecutor(len(cases)) as pool:  # at once: S3's client retries a refused connection for ~6 s
        outs = list(pool.map(lambda case: run_cli(*case[1], timeout=120, env=CREDENTIALS), cases))
    for (expected, args), out in zip(cases, outs):
        assert out.returncode == 2 and "Traceback" not in out.stderr, (args, out.stderr[-2000:])
        assert len(out.stderr.strip().splitlines()) == 1 and expected in out.stderr, (args, out.stderr)
        assert "Ray dashboard" not in out.stdout, out.stdout  # refused before Ray started
    assert a_file.read_text() == "in the way of --results"


@pytest.mark.slow
def test_an_interrupted_sweep_on_s3_resumes_from_its_checkpoint_there(s3_uri: str, tmp_path: Path) -> None:
    sweep = tmp_path / "remote.yaml"
    sweep.write_text("""\
description: "one MXNet trial of eight epochs, results and checkpoints on S3"
fixed: {framework: mxnet, model: resnet8_cifar, data: synthetic, num_gpus: 1, batch_per_gpu: 16, epochs: 8,
        steps_per_epoch: 20, warmup_steps: 1, lr: 0.05}
""")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **CREDENTIALS}
    env.pop("RAY_ADDRESS", None)
    results = location.at(s3_uri)

    def epochs_done() -> int:
        runs = store.run_dirs(results, "remote")
        try:
            return len(store.RunStore(runs[-1]).epochs()) if runs else 0
        except store.StoreError:
            return 0

    proc = subprocess.Popen([sys.executable, "-m", "sweep", str(sweep), "--results", s3_uri], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 240
        # Stop the driver once two epochs (and their checkpoints) are on S3; six more leave the signal time to land.
        while epochs_done() < 2:
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read()[-3000:]
            time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "resume with" in out, out[-3000:]
    run_dir = store.run_dirs(results, "remote")[-1]
    assert run_dir.glob("tune-1/*/checkpoint_*"), "Tune's checkpoints are not on S3"

    again = run_cli(str(sweep), "--results", s3_uri, "--resume", timeout=400, env=CREDENTIALS)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    epochs = store.RunStore(run_dir).epochs().sort_values("epoch")
    assert list(epochs.epoch) == list(range(8))  # every epoch once
    resumed = epochs[epochs.attempt == 2]
    assert len(resumed) and resumed.epoch.min() >= 2, epochs[["epoch", "attempt"]]  # from the S3 checkpoint
    # The runs at hand there, looked at four ways at once (each reads only), then deleted.
    reads = {"status": ["status", str(sweep), "--results", s3_uri],
             "report": ["report", "remote", "--results", s3_uri, "--out", str(tmp_path / "report")],
             "runs": ["runs", "--results", s3_uri],
             "status --run": ["status", str(sweep), "--run", run_dir.name, "--results", s3_uri]}
    with ThreadPoolExecutor(len(reads)) as pool:
        outs = dict(zip(reads, pool.map(lambda args: run_cli(*args, timeout=300, env=CREDENTIALS), reads.values())))
    status = outs["status"]
    assert status.returncode == 0 and "1 done" in status.stdout, status.stdout + status.stderr
    report = outs["report"]
    assert report.returncode == 0, report.stdout + report.stderr
    assert (tmp_path / "report" / "report.md").is_file()
    listed = outs["runs"]
    # Other sweeps' runs share the listing (an engine-made run copied there): the columns are as wide as their names.
    assert listed.returncode == 0 and re.search(rf"^remote\s+{run_dir.name}\b", listed.stdout, re.M), listed
    assert "finished" in listed.stdout, listed
    status = outs["status --run"]
    assert status.returncode == 0 and f"run {run_dir.name} " in status.stdout, status.stdout + status.stderr
    gone = run_cli("rm", "remote", run_dir.name, "--yes", "--results", s3_uri, timeout=120, env=CREDENTIALS)
    assert gone.returncode == 0 and store.run_dirs(results, "remote") == [], gone.stdout + gone.stderr
