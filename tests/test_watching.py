"""Watching a sweep live (sweep/console.py, sweep/dashboard.py, the trials' labels and gauges in
sweep/trial.py): the console view, then a real sweep watched from outside.

The end-to-end test runs tests/sweeps/watch_mxnet.yaml on an embedded Ray and, while its two trials
train, asks the dashboard's REST API (with Ray's token, and without: 401), the state API (the actors'
reprs name the trials), the Jobs API (the job carries the sweep's name), the metrics endpoint
(ray_sweep_* series with the trial tags) and a headless Chromium (the Actors page, its text and a
screenshot). Then it stops the sweep with Ctrl-C.
"""
from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from cifar_files import write_cifar10
from conftest import ROOT, SETS, SWEEPS, TINY, EngineRuns, copy_run, started_here
from ray.tune.experiment import Trial

from sweep import console, dashboard, spec
from sweep import overrides
from sweep.runner import RunPlan
from sweep.schema import Status
from sweep.store import RunStore
from sweep.trial import TrialRuntime, labelled_trainable
from trainables.config import TrialConfig

SWEEP = str(SWEEPS / "watch_mxnet.yaml")
TRIALS = spec.load(SWEEP).trials("smoke")
RUNTIME = TrialRuntime(run_dir="unused", data_dir=None, emulated=True, columns={"sweep": "watch_mxnet", "run_id": "r1"},
                       label_axes=spec.label_axes(TRIALS))


# --- a terminal, as far as the live view uses one -----------------------------------------------------

def screen(data: str) -> list[str]:
    """What a terminal shows after `data`: text, newlines, CSI n F (up n lines, column 0), CSI J."""
    lines, row = [""], 0
    for token in re.split(r"(\x1b\[\d*[A-Za-z]|\n)", data):
        if not token:
            continue
        csi = re.fullmatch(r"\x1b\[(\d*)([A-Za-z])", token)
        if csi:
            assert csi.group(2) in "FJ", f"unexpected escape {token!r}"
            if csi.group(2) == "F":
                row = max(row - int(csi.group(1) or 1), 0)
            else:
                del lines[row + 1:]
                lines[row] = ""
        elif token == "\n":
            row += 1
            if row == len(lines):
                lines.append("")
        else:
            lines[row] += token
    return lines[:-1] if lines[-1] == "" else lines


@pytest.fixture
def fresh_store(engine_runs: EngineRuns, tmp_path: Path) -> RunStore:
    """An engine-made run with its rows taken out: a run as it is before any trial ended."""
    folder = copy_run(engine_runs, 1, tmp_path)
    for table in ("trials", "epochs"):
        shutil.rmtree(folder / table)
        (folder / table).mkdir()
    return RunStore(folder)


def plan_of(trials: list[TrialConfig], run: RunStore, total: int | None = None, sweep: str = SWEEP,
            runtime: TrialRuntime = RUNTIME) -> RunPlan:
    """What the runner hands the view: the engine's own RunPlan over a real store."""
    return RunPlan(sweep=spec.load(sweep), trials=trials, total=total or len(trials), store=run, runtime=runtime,
                   max_concurrent=None, max_failures=0, session=1)


def tune_trial(t: TrialConfig, runtime: TrialRuntime = RUNTIME) -> Trial:
    """A Tune trial as Tune's callbacks get it (a stub: no trainable registered, nothing started)."""
    return Trial("SweepTrial", config={"trial": t.to_dict(), "runtime": runtime}, stub=True)


def result(epoch: int, images: float | None = 123.4, acc: float | None = 0.5) -> dict[str, Any]:
    """An epoch's metrics as a trial reports them: `images` its steady images/s; over the whole epoch, its warm-up
    steps in, far fewer (a probe's 4 steps read 85-457 img/s on an H100 beside a steady 4,424)."""
    return {"epoch": epoch, "steady_images_per_sec": images, "images_per_sec": 7.0, "epoch_time_s": 2.5, "val_acc": acc}


# --- units ----------------------------------------------------------------------------------------------

def test_the_trial_actor_class_asks_for_the_trials_reservation() -> None:
    """(Its live actors' reprs, the trials' labels, are read from Ray's state API in the dashboard test below.)"""
    t = TRIALS[0]
    config = {"trial": t.to_dict(), "runtime": RUNTIME}
    cls = labelled_trainable(lambda c: ("pg", c["trial"]["num_gpus"]))
    # Ray records an actor's repr when the actor class itself defines __repr__.
    assert "__repr__" in cls.__dict__ and cls.__qualname__ == "SweepTrial"
    assert cls.default_resource_request(config) == ("pg", 1)


def test_the_job_carries_the_sweep_name() -> None:
    options = dashboard.init_options("watch_mxnet")
    assert options["job_config"].metadata["job_name"] == "watch_mxnet"
    assert dashboard.init_options(None) == {}


def test_plain_output_is_one_line_per_epoch_and_per_ended_trial(fresh_store: RunStore) -> None:
    lines: list[str] = []
    a, b = TRIALS
    with console.SweepView(plan_of(TRIALS, fresh_store), lines.append, live=False) as view:
        view.on_trial_start(0, [], tune_trial(a))
        view.on_trial_start(0, [], tune_trial(b))
        view.on_trial_result(0, [], tune_trial(a), result(0))
        view.on_trial_result(0, [], tune_trial(a), result(0))  # Tune repeats a trial's last result
        for _ in range(20):
            view.on_step_end(0, [])
        view.ended(a, Status.COMPLETED)
        view.on_trial_complete(0, [], tune_trial(a))
        view.on_trial_result(0, [], tune_trial(b), result(0, 0.042, None))  # a slow trial is not "0 img/s"
        view.ended(b, Status.FAILED, "ValueError: boom")
    # Epochs count from 0, as the store's epoch column does.
    assert lines[0] == "  mxnet resnet8_cifar gpus=1 batch=8 lr=0.05  epoch 0 (1 of 30 done): 123 img/s, 2.5 s, val_acc 0.500"
    assert lines[1].startswith("[1/2] mxnet resnet8_cifar gpus=1 batch=8 lr=0.05: completed; sweep ETA ")
    assert lines[2] == "  mxnet resnet8_cifar gpus=1 batch=16 lr=0.05  epoch 0 (1 of 30 done): 0.042 img/s, 2.5 s"
    assert lines[3] == "[2/2] mxnet resnet8_cifar gpus=1 batch=16 lr=0.05: failed (ValueError: boom)"
    assert len(lines) == 4
    assert view.progress.counts() == {"done": 1, "running": 0, "failed": 1, "pending": 0}


def test_an_epoch_without_a_step_after_its_warm_up_prints_no_rate(fresh_store: RunStore) -> None:
    lines: list[str] = []
    a, _ = TRIALS
    with console.SweepView(plan_of(TRIALS, fresh_store), lines.append, live=False) as view:
        view.on_trial_start(0, [], tune_trial(a))
        view.on_trial_result(0, [], tune_trial(a), result(0, None, None))  # every step was warm-up
    assert lines == ["  mxnet resnet8_cifar gpus=1 batch=8 lr=0.05  epoch 0 (1 of 30 done): "
                     "no steady img/s (no step after the warm-up), 2.5 s"]


def test_live_view_redraws_one_table_in_place(monkeypatch: pytest.MonkeyPatch, fresh_store: RunStore) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("LINES", "40")
    out = io.StringIO()
    a, b = TRIALS
    view = console.SweepView(plan_of(TRIALS, fresh_store, total=3), out=out, live=True)
    with view:
        view.on_trial_start(0, [], tune_trial(a))
        view.on_trial_start(0, [], tune_trial(b))
        for epoch in range(5):
            view.on_trial_result(0, [], tune_trial(a), result(epoch, 100.0 + epoch, 0.25))
            view.on_trial_result(0, [], tune_trial(b), result(epoch, 50.0))
        shown = screen(out.getvalue())
        assert len(shown) == 4, shown  # header, two trials, the bar: epochs did not scroll
        assert shown[0].split() == ["trial", "epochs", "done", "img/s", "val_acc", "time"]
        row = next(line for line in shown if f"watch_mxnet-{a.trial_id}" in line)
        assert "gpus=1 batch=8 lr=0.05" in row and " 5/30 " in row and " 104 " in row and "0.250" in row
        assert re.match(r"\[-+\] 0/3 trials  2 running  0 failed  1 pending  elapsed \d+:\d\d  ETA \d+:\d\d$", shown[-1])
        view.ended(a, Status.COMPLETED)
        view.on_trial_complete(0, [], tune_trial(a))
    shown = screen(out.getvalue())
    assert shown[0] == "[1/3] mxnet resnet8_cifar gpus=1 batch=8 lr=0.05: completed"  # stays, above the view
    assert not any("epoch" in line for line in shown)
    assert shown[-1].startswith("[##########--------------------] 1/3 trials  0 running  0 failed  2 pending")


def test_live_view_keeps_other_prints_above_it(monkeypatch: pytest.MonkeyPatch, fresh_store: RunStore) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.delenv("SWEEP_PROGRESS", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    with console.SweepView(plan_of(TRIALS, fresh_store)) as view:
        view.on_trial_start(0, [], tune_trial(TRIALS[0]))
        print("interrupted: stopping the running trials", flush=True)
    assert sys.stdout is terminal
    shown = screen(terminal.getvalue())
    assert shown[0] == "interrupted: stopping the running trials"
    assert shown[-1].startswith("[---") and "0 running" in shown[-1]  # a stopped trial is pending again
    monkeypatch.setenv("SWEEP_PROGRESS", "plain")
    assert not console.live_wanted(terminal)


def test_eta_comes_from_measured_trial_durations() -> None:
    now = 1000.0
    p = console.Progress(total=1)
    assert p.eta(now) is None  # nothing measured yet
    two, one = (TrialConfig("mxnet", "resnet8_cifar", num_gpus=n, batch_per_gpu=8, epochs=3, lr=0.1) for n in (2, 1))
    a = console.Running("a", two, started=now - 5, epoch=1, first=0, last_epoch_at=now - 1)
    p.running["a"] = a
    assert p.eta(now) == pytest.approx(4 * 2 - 1)  # 4 s per epoch measured, 2 epochs to go, 1 s into the next
    p.total = 6
    p.running["b"] = console.Running("b", one, started=now - 2)
    p.ended = {"x": Status.COMPLETED, "y": Status.FAILED}
    p.durations = [10.0, 20.0]
    p.peak_running = 2
    # a: 7 s left; b: the mean duration (15 s) less its 2 s; 2 pending trials of 15 s; on 2 slots.
    assert p.eta(now) == pytest.approx((7 + 13 + 2 * 15) / 2)
    assert p.counts() == {"done": 1, "running": 2, "failed": 1, "pending": 2}
    p.gpu_hours_before, p.held = 0.5, [1.0]
    assert p.gpu_hours(now) == pytest.approx(0.5 + 1 + (2 * 5 + 1 * 2) / 3600)


def test_a_resumed_run_counts_the_trials_of_its_earlier_sessions(engine_runs: EngineRuns, tmp_path: Path) -> None:
    """The engine's first run (the 1-GPU trial completed, the 2-GPU one infeasible), resumed with --retry-failed:
    this session runs the infeasible trial again; the completed one counts as done, with its GPU-hours."""
    folder = copy_run(engine_runs, 0, tmp_path)
    sweep = overrides.apply(spec.load(TINY), overrides.parse(SETS[1::2]))
    ran, infeasible = sorted(sweep.trials("smoke"), key=lambda t: t.num_gpus)
    rows = pq.read_table(folder / "trials").to_pylist()  # the rows the engine wrote, read without the store
    assert {r["trial_id"]: r["status"] for r in rows} == {ran.trial_id: "completed", infeasible.trial_id: "infeasible"}
    runtime = TrialRuntime(run_dir=str(folder), data_dir=None, emulated=True,
                           columns={"sweep": "tiny_mxnet", "run_id": engine_runs.run_ids[0]},
                           label_axes=spec.label_axes(sweep.trials("smoke")))
    view = console.SweepView(RunPlan(sweep=sweep, trials=[infeasible], total=2, store=RunStore(folder), runtime=runtime,
                                     max_concurrent=None, max_failures=0, session=2), live=False)
    assert view.progress.counts() == {"done": 1, "running": 0, "failed": 0, "pending": 1}
    held = sum(r["gpu_hours"] or 0 for r in rows)
    assert held > 0 and view.progress.gpu_hours(0) == pytest.approx(held)


# --- a real sweep, watched from outside ---------------------------------------------------------------------

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)\{(?P<labels>.*)\} (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of one metric in Prometheus text format: (labels, value)."""
    found = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m and m["name"] == name:
            found.append((dict(LABEL.findall(m["labels"])), float(m["value"])))
    return found


def ray_token() -> str:
    """The token Ray uses here, read where Ray reads it."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"]
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token").read_text().strip()


def get(url: str, token: str | None = None, timeout: float = 20) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def poll(what: str, check: Any, timeout: float, every: float = 1.0) -> Any:
    deadline = time.time() + timeout
    last: Any = None
    while time.time() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {str(last)[:2000]})")


class Output:
    """A process's merged output, read as it comes."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def match(self, pattern: str) -> re.Match | None:
        return next((m for line in list(self.lines) if (m := re.search(pattern, line))), None)


def chromium_binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not found:
        pytest.fail("no chromium: .ci/run installs Debian's `chromium` (apt-get install chromium)")
    return found


async def _browse(port: int, dashboard: str, token: str, page: str, wanted: list[str], png: Path,
                  timeout: float) -> str:
    """Drive the browser over the DevTools protocol: the login cookie, the page, its text, a screenshot."""
    import aiohttp

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
        ws_url = next(p["webSocketDebuggerUrl"] for p in json.loads(r.read()) if p["type"] == "page")
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url, max_msg_size=0) as ws:
        ids = iter(range(1, 1_000_000))

        async def call(method: str, **params: Any) -> dict[str, Any]:
            n = next(ids)
            await ws.send_json({"id": n, "method": method, "params": params})
            async for msg in ws:
                data = json.loads(msg.data)
                if data.get("id") == n:
                    if "error" in data:
                        raise RuntimeError(f"{method}: {data['error']}")
                    return data.get("result", {})
            raise RuntimeError("the browser closed the DevTools connection")

        # What the dashboard's token dialog does: POST /api/authenticate sets this HttpOnly cookie.
        assert (await call("Network.enable")) is not None
        ok = await call("Network.setCookie", name="ray-authentication-token", value=token, url=dashboard,
                        httpOnly=True, sameSite="Strict")
        assert ok.get("success"), ok
        await call("Emulation.setDeviceMetricsOverride", width=1600, height=1000, deviceScaleFactor=1, mobile=False)
        await call("Page.navigate", url=dashboard + page)
        deadline, text = time.time() + timeout, ""
        while time.time() < deadline:
            value = await call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                               returnByValue=True)
            text = value["result"].get("value") or ""
            if all(w in text for w in wanted):
                await asyncio.sleep(1)  # let the table settle before the picture
                break
            await asyncio.sleep(1)
        shot = await call("Page.captureScreenshot", format="png")
        png.write_bytes(base64.b64decode(shot["data"]))
        return text


def browse(dashboard: str, token: str, page: str, wanted: list[str], png: Path, timeout: float = 60) -> str:
    """Headless Chromium on a dashboard page, logged in with the token: the page's text (and png)."""
    profile = Path(tempfile.mkdtemp(prefix="chromium-"))
    log = open(profile / "chromium.log", "w")
    browser = subprocess.Popen(
        [chromium_binary(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "--window-size=1600,1000", "about:blank"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        active = profile / "DevToolsActivePort"
        poll("chromium's DevTools port", lambda: active.exists() and active.read_text().strip()
             or browser.poll() is not None and pytest.fail((profile / "chromium.log").read_text()[-2000:]),
             timeout=60, every=0.2)
        port = int(active.read_text().split()[0])
        return asyncio.run(_browse(port, dashboard, token, page, wanted, png, timeout))
    finally:
        if browser.poll() is None:
            os.killpg(browser.pid, signal.SIGKILL)  # the browser and its helper processes, only those
        browser.wait(timeout=30)
        log.close()
        shutil.rmtree(profile, ignore_errors=True)


def this_hosts_address() -> str:
    """A non-loopback IPv4 address of this machine (the one a route out would use)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.123", 9))  # UDP: no packet is sent, the kernel only picks the interface
        address = s.getsockname()[0]
    if address.startswith("127."):
        pytest.fail("this machine has no non-loopback IPv4 address to test --dashboard-host with")
    return address


def listening_elsewhere(host: str, port: int) -> list[str]:
    """The addresses other than host on which a process this test started listens on port (0.0.0.0 among them: all of
    this machine's). Asked of the sockets, not by connecting to 127.0.0.1:port: another pytest-xdist worker's Ray may
    listen there, on the dashboard port every Ray tries first (8265)."""
    import psutil

    return [f"{c.laddr.ip}:{port}" for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN
            and c.laddr.port == port and c.laddr.ip != host and c.pid is not None and started_here(c.pid)]


@pytest.mark.slow
def test_a_running_sweep_shows_in_the_dashboard_state_api_metrics_and_a_browser(tmp_path: Path) -> None:
    """Run with --dashboard-host set to this machine's own address: the dashboard listens there, not on
    127.0.0.1 (where it listens without the option)."""
    data = write_cifar10(tmp_path / "data")
    host = this_hosts_address()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for key in ("RAY_ADDRESS", "SWEEP_PROGRESS"):
        env.pop(key, None)
    labels = {t.trial_id: f"watch_mxnet-{t.trial_id} mxnet resnet8_cifar gpus=1 batch={t.batch_per_gpu} "
                          f"lr=0.05" for t in TRIALS}
    proc = subprocess.Popen([sys.executable, "-m", "sweep", SWEEP, "--results", str(tmp_path / "results"),
                             "--data-dir", str(data), "--dashboard-host", host, "--dashboard", "on"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)
    out = Output(proc)
    try:
        def started() -> re.Match | None:
            assert proc.poll() is None, "the sweep ended early:\n" + out.text[-3000:]
            return out.match(r"^Ray metrics: (http://\S+)")

        metrics_url = poll("the metrics line", started, timeout=120)[1]
        dashboard = out.match(r"^Ray dashboard: (http://\S+) \(token auth on: .*~/\.ray/auth_token")
        assert dashboard, out.text
        dashboard = dashboard[1]
        port = int(dashboard.rsplit(":", 1)[1])
        assert dashboard == f"http://{host}:{port}", dashboard  # listening where it was asked to ...
        assert listening_elsewhere(host, port) == []  # ... and only there
        token = ray_token()
        assert token not in out.text  # where the token is, never the token

        # The REST API wants the token: 401 without it.
        status, _ = get(f"{dashboard}/api/v0/actors")
        assert status == 401
        status, _ = get(f"{dashboard}/api/v0/actors", token="not-the-token")
        assert status in (401, 403)

        # The state API lists the trials' actors under their trial labels.
        def actors() -> list[dict] | None:
            code, body = get(f"{dashboard}/api/v0/actors?detail=true&limit=1000", token)
            assert code == 200, body[:500]
            found = json.loads(body)["data"]["result"]["result"]
            alive = {a["repr_name"] for a in found if a["state"] == "ALIVE"}
            return found if set(labels.values()) <= alive else None

        found = poll("both trials' actors, named", actors, timeout=90, every=2)
        assert {a["class_name"] for a in found if a["repr_name"] in labels.values()} == {"SweepTrial"}

        # The job carries the sweep's name (the Jobs view's Name column).
        code, body = get(f"{dashboard}/api/jobs/", token)
        assert code == 200
        jobs = [j for j in json.loads(body) if (j.get("metadata") or {}).get("job_name") == "watch_mxnet"]
        assert jobs and jobs[0]["status"] == "RUNNING", body[:2000]

        # The metrics endpoint shows the sweep's series with the trial tags.
        def metrics() -> str | None:
            code, text = get(metrics_url)
            assert code == 200
            images = samples(text, "ray_sweep_images_per_sec")
            running = [v for tags, v in samples(text, "ray_sweep_trials") if tags.get("state") == "running"]
            ok = all(any(tags.get("trial") == tid and v > 0 for tags, v in images) for tid in labels)
            return text if ok and running else None

        text = poll("ray_sweep_images_per_sec for both trials", metrics, timeout=90, every=2)
        for t in TRIALS:
            want = {"sweep": "watch_mxnet", "trial": t.trial_id, "framework": "mxnet", "model": "resnet8_cifar",
                    "num_gpus": "1", "batch": str(t.batch_per_gpu)}
            for name in ("ray_sweep_images_per_sec", "ray_sweep_epoch", "ray_sweep_val_acc"):
                assert any(want.items() <= tags.items() for tags, _ in samples(text, name)), (name, want)
        states = {tags["state"]: v for tags, v in samples(text, "ray_sweep_trials") if tags.get("sweep") == "watch_mxnet"}
        assert set(states) == {"done", "running", "failed", "pending"} and sum(states.values()) == len(TRIALS)
        assert [v for tags, v in samples(text, "ray_sweep_gpu_hours") if tags.get("sweep") == "watch_mxnet"][0] > 0

        # A browser, logged in with the token, sees the trials on the Actors page.
        png = tmp_path / "dashboard.png"
        page = browse(dashboard, token, "/#/actors", list(labels.values()), png)
        for label in labels.values():
            assert label in page, page[:3000]
        assert "SweepTrial" in page and "ALIVE" in page
        assert png.stat().st_size > 10_000
        try:
            shutil.copy(png, "/tmp/dashboard.png")
        except OSError:
            pass

        # Ctrl-C: the sweep stops its trials and says how to resume.
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        out.thread.join(timeout=10)
        assert proc.returncode == 130, out.text[-3000:]
        assert "interrupted" in out.text and "resume with" in out.text
        assert "\x1b[" not in out.text  # not a terminal: plain lines
        assert re.search(r"^  mxnet resnet8_cifar gpus=1 batch=8 lr=0\.05  epoch 0 \(1 of 30 done\): [\d.]+ img/s", out.text, re.M)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray it started, only those
            proc.wait(timeout=60)
