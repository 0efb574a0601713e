"""The benchmark scripts (benchmarks/): their helpers agree with the engine; each script starts.

The benchmarks themselves take minutes and are run by hand (benchmarks/README.md); these checks
take seconds.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import _common  # noqa: E402
from sweep import spec  # noqa: E402
from sweep.schema import Status  # noqa: E402
from sweep.store import summarize  # noqa: E402
from trainables.config import TrialConfig  # noqa: E402


def test_trial_steady_is_the_summary_rows_figure() -> None:
    epochs = [
        {"steady_images_per_sec": 100.0, "steady_steps": 30, "epoch_time_s": 2.0, "val_acc": None,
         "peak_device_mem_mib": None, "peak_host_rss_mib": 1.0, "train_acc": None},
        {"steady_images_per_sec": 130.0, "steady_steps": 40, "epoch_time_s": 1.5, "val_acc": None,
         "peak_device_mem_mib": None, "peak_host_rss_mib": 1.0, "train_acc": None},
    ]
    config = TrialConfig("mxnet", "resnet8_cifar", num_gpus=1, batch_per_gpu=64, epochs=2, lr=0.1)
    summary = summarize("t", config, epochs, Status.COMPLETED, {})
    assert _common.trial_steady(epochs) == pytest.approx(summary["steady_images_per_sec"])


def test_spec_settings_give_the_same_trial() -> None:
    """A resolved trial written back as a one-trial sweep file is the same trial (same id)."""
    for item in spec.list_sweeps():
        sweep = spec.load(item.name)
        for trial in sweep.trials("smoke")[:3]:
            text = _common.sweep_yaml("one", _common.spec_settings(trial))
            again = spec.parse(text, Path("one.yaml")).trials("full")
            assert [t.trial_id for t in again] == [trial.trial_id]


def test_packing_benchmark_trials_are_engine_trials() -> None:
    """Its trials get the engine's resource request and order, as a sweep's would."""
    import packing_makespan
    from sweep import packing
    from sweep.runner import trial_resources

    trials, seconds = packing_makespan.make_trials(1.0)
    assert [trial_resources({"trial": t.to_dict()}).bundles for t in trials[:1]] == [[{"CPU": 1, "GPU": 1}]]
    ordered, _, makespan = packing.order(trials, seconds, [8, 8], [64, 64])
    assert makespan < packing.simulate(trials, seconds, [8, 8], [64, 64])


SCRIPTS = ["engine_vs_raw.py", "yardsticks.py", "store_speed.py", "packing_makespan.py",
           "estimates.py", "soak.py", "gpu_yardsticks.py", "learnability.py",
           "cifar10_conv_collapse.py", "gpu_torch_yardsticks.py", "torch_ddp_peer.py",
           "input_pipeline.py", "max_batch.py", "torch_step_ab.py", "cpu_share.py",
           "mxnet_record_loader.py", "imagenet_loader.py", "tf_imagenet_loader.py",
           "jax_peer.py", "keras_peer.py", "keras_yardsticks.py", "suite_cpu.py", "run_cpu.py"]


@pytest.mark.slow  # every script's --help, their imports in one interpreter: ~8 s
@pytest.mark.parametrize("script", SCRIPTS)
def test_script_help(script: str, scripts_help: dict[str, dict]) -> None:
    got = scripts_help[script]
    assert got["code"] == 0, got["error"]
    assert "usage" in got["stdout"]


# Each script's `SCRIPT --help`, run as `python SCRIPT` runs it (runpy, as __main__, argv and sys.path[0] as a
# script gets them), all in one interpreter: a process per script paid its framework's import each time, 5-23 s
# a script on a loaded machine (issue 46); here torch, TensorFlow and MXNet are imported once.
_HELP_ALL = """
import contextlib, io, json, runpy, sys, traceback
folder, names, found = sys.argv[1], sys.argv[2:], {}
sys.path.insert(0, folder)
for name in names:
    out, code, error = io.StringIO(), 0, ""
    sys.argv = [f"{folder}/{name}", "--help"]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(f"{folder}/{name}", run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        code, error = 1, traceback.format_exc()
    found[name] = {"code": code, "stdout": out.getvalue(), "error": error}
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def scripts_help() -> dict[str, dict]:
    proc = subprocess.run([sys.executable, "-c", _HELP_ALL, str(ROOT / "benchmarks"), *SCRIPTS], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cpu_share_tally_keeps_the_intervals_the_ranks_fill() -> None:
    """The window and the shares, from samples made up here: no process runs, so no load can move them."""
    import cpu_share

    t = cpu_share.TICK
    # Cores used in each 0.5 s interval by rank 11, rank 12, the driver 20, an idle parent 30 and the script
    # itself 40 (whose command line holds the marker, as `--ranks TrialWorker` puts it there): start-up, three
    # busy intervals (the ranks at 1.6, 1.8, 2.0 cores together), then rank 11 is no rank any more (its command
    # line at the interval's end says so) and the ranks are at 0.6 cores, the script at 1.2.
    per_interval = [(0.1, 0.1, 0.5, 0, 0.2), (0.8, 0.8, 0.1, 0, 0.2), (0.9, 0.9, 0.1, 0, 0.2),
                    (1.0, 1.0, 0.2, 0, 0.2), (1.0, 0.6, 0.5, 0, 1.2)]
    samples, totals = [], [0.0] * 5
    for i in range(len(per_interval) + 1):
        names = ["ray::TrialWorker.train" if i < 5 else "ray::IDLE", "ray::TrialWorker.validate",
                 "python -m sweep one.yaml", "sh -c wait", "cpu_share.py --ranks TrialWorker -- python -m sweep"]
        samples.append((0.5 * i, {pid: (round(totals[k] * t), names[k]) for k, pid in enumerate((11, 12, 20, 30, 40))}))
        if i < len(per_interval):
            totals = [total + 0.5 * cores for total, cores in zip(totals, per_interval[i])]
    samples[4][1][50] = (t // 2, "late")  # started in a busy interval: all its CPU time counts there
    samples[5][1][60] = (t // 2, "later")  # started in one the window leaves out
    window, sampled, seconds, names = cpu_share.tally(samples, ["TrialWorker"], busy=1.5, me=40)
    assert window == pytest.approx(1.5) and sampled == pytest.approx(2.5)
    assert seconds[11] == pytest.approx(0.5 * 2.7) and seconds[12] == pytest.approx(0.5 * 2.7)
    assert seconds[20] == pytest.approx(0.5 * 0.4) and seconds[50] == pytest.approx(0.5)
    assert 30 not in seconds and 40 not in seconds and 60 not in seconds  # idle; the script itself; not busy
    assert names[11] == "ray::TrialWorker.train" and names[20] == "python -m sweep one.yaml"
    assert cpu_share.tally(samples, ["TrialWorker"], busy=2.1, me=40)[0] == 0  # never that busy: no window
    assert cpu_share.tally(samples, ["TrialWorker"], busy=0.1, me=40)[0] == pytest.approx(2.5)


def test_cpu_share_finds_the_busy_rank_and_its_window(tmp_path: Path) -> None:
    """The script on real processes: a rank (its command line holds the marker) spins a fixed amount of work,
    then sleeps, under an idle parent shell. Whatever the machine's load, the window is the spin, not the sleep
    after it, and holds the CPU time the rank says it used, and the parent takes next to nothing of it.

    Nothing here is an absolute share of a core or a fixed time: on a loaded machine the spin gets what the
    scheduler gives it, and the script waits its turn to sample. So the window's threshold is a tick of the
    rank's in 10 s (--busy 0.001); the rank sleeps as long as its spin took (1.5 s at least), so that the
    script samples that sleep several times however slowly it samples; and what is checked is the rank's CPU
    time and its spin's wall time as the rank itself measured them (dash: no interpreter's start-up)."""
    report = tmp_path / "rank.txt"
    rank = ('read up0 _ < /proc/uptime; i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; read up1 _ < /proc/uptime; '
            'rest=$(( ${up1%.*}${up1#*.} - ${up0%.*}${up0#*.} )); [ $rest -ge 150 ] || rest=150; '  # centiseconds
            'echo "$$ $up0 $up1 $rest" > "$1"; times >> "$1"; sleep "$((rest / 100)).$((rest % 100 / 10))$((rest % 10))"')
    parent = 'idle_parent=1; sh -c "$0" "spinning-$1" "$2"; exit $?'  # the marker is in the rank's command line only
    mark = f"rank-{uuid.uuid4().hex[:12]}"  # this run's: another run's rank beside it is none of this one's ranks
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu_share.py"), "--ranks", f"spinning-{mark}",
                           "--busy", "0.001", "--interval", "0.2", "--top", "100000", "--",
                           "sh", "-c", parent, rank, mark, str(report)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)  # a guard: 2 s idle, 2 min at load 70
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pid, up0, up1, rest, user, system = report.read_text().split()[:6]  # `times`: the rank's own CPU time
    spin_wall, rest = float(up1) - float(up0), int(rest) / 100
    rank_cpu = sum(float(m) * 60 + float(s) for m, s in (re.fullmatch(r"([0-9]+)m([0-9.]+)s", x).groups()
                                                        for x in (user, system)))
    window, sampled = map(float, re.findall(r"^window: ([0-9.]+) s of ([0-9.]+) s sampled", proc.stdout, re.M)[0])
    lines = re.findall(r"^ +([0-9.]+)% +([0-9]+)  (.*)$", proc.stdout, re.M)  # share, pid, command line (cut)
    shares = {cmd: float(share) for share, _, cmd in lines}
    rank_shares = [float(share) for share, line_pid, _ in lines if line_pid == pid]
    assert len(rank_shares) == 1, (pid, proc.stdout)
    ranks = float(re.findall(r"^ranks ([0-9.]+)%", proc.stdout, re.M)[0])
    assert ranks == pytest.approx(rank_shares[0], abs=0.1), proc.stdout  # the ranks' sum is the one rank
    # The rank's CPU time in the window is all of the rank's, as it counted it (ticks are 10 ms).
    assert rank_shares[0] * window / 100 == pytest.approx(rank_cpu, abs=0.03 + 0.02 * rank_cpu), (rank_cpu, proc.stdout)
    # The window is the spin and the intervals at its ends, not the sleep after it: left out, the window would
    # be all the time sampled.
    assert window <= sampled - rest / 2, (spin_wall, rest, proc.stdout)
    parent_share = sum(share for cmd, share in shares.items() if "idle_parent" in cmd)
    assert parent_share <= 0.05 * rank_shares[0], proc.stdout  # relative: the parent only waits
    assert not any("cpu_share.py" in cmd for cmd in shares), proc.stdout  # the script leaves itself out


def test_gpu_yardsticks_reads_tf_cnn_benchmarks_closing_figure() -> None:
    import gpu_yardsticks

    log = (ROOT / "tests/logs/tf_cnn_benchmarks_cpu.log").read_text()  # a real run's output
    assert gpu_yardsticks.parse_total_images_per_sec(log) == 250.34  # not a per-step "images/sec" line
    assert gpu_yardsticks.parse_total_images_per_sec("Running warm up\nnan loss") is None
    cells = gpu_yardsticks.grid([64, 256], list(gpu_yardsticks.CELLS))
    assert [c.label for c in cells][:2] == ["b64 fp32", "b64 fp16"] and len(cells) == 8
    assert gpu_yardsticks.theirs_command(cells[3], 20, 100)[-2:] == ["--use_fp16", "--xla"]


def test_gpu_yardsticks_refuses_without_a_gpu_in_one_line(tmp_path: Path) -> None:
    from trainables.environment import real_gpu_count

    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_yardsticks.py"), "--tf-benchmarks",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    if real_gpu_count() == 0:
        assert "no GPU here" in proc.stderr


@pytest.mark.slow
# Heavy (issue 46: ~27 CPU-s): TensorFlow's side of a GPU session against tf_cnn_benchmarks, which the GPU machine lent
# here cannot run (it has no TensorFlow). CI runs its figure's reader and its refusal (above), and
# PyTorch's engine side, the one a lent GPU runs (test_gpu_torch_yardsticks_engine_side_on_emulated_devices).
@pytest.mark.heavy
def test_gpu_yardsticks_engine_side_on_emulated_devices(tmp_path: Path) -> None:
    """Our half of the grid through `python -m sweep` (real Ray, real Parquet), shrunk to run on a CPU."""
    import gpu_yardsticks

    cells = gpu_yardsticks.grid([4], ["fp32", "XLA"])
    ours, command = gpu_yardsticks.run_ours(cells, 1, 2, tmp_path, extra=["--emulate-gpus", "1"],
                                            model="resnet8_cifar", image_size=32)
    assert set(ours) == {"b4 fp32", "b4 XLA"} and all(v and v > 0 for v in ours.values()), ours
    assert "-m sweep" in command
    theirs = {"b4 fp32": 250.34, "b4 XLA": None}
    text = gpu_yardsticks.table(cells, theirs, ours)
    ratio = text.splitlines()[-1]
    assert f"{ours['b4 fp32'] / 250.34:.2f}x" in ratio and ratio.endswith("| - |")


def test_gpu_torch_yardsticks_refuses_without_a_gpu_in_one_line() -> None:
    from trainables.environment import real_gpu_count

    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_torch_yardsticks.py"), "--precisions", "fp8"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    if real_gpu_count() == 0:
        assert "no GPU here" in proc.stderr


def test_gpu_torch_yardsticks_grid_and_table() -> None:
    import gpu_torch_yardsticks as g

    cells = g.grid([64, 256], list(g.PRECISIONS), [False, True])
    assert len(cells) == 16 and [c.label for c in cells[:2]] == ["b64 fp32", "b64 fp32 compile"]
    ours = {cells[0].label: 98.0, cells[1].label: None}
    text = g.table(cells[:2], {cells[0].label: 100.0, cells[1].label: 120.0}, ours)
    assert text.splitlines()[2] == "| b64 fp32 | 100 | 98 | 0.980x |" and text.splitlines()[3].endswith("| none | - |")
    assert "938 img/s" in g.best_against_published(cells[:2], ours)  # fp32 is set beside the TF32 figure


def test_torch_peer_runs_the_trials_steps_and_threads() -> None:
    """The plain program's flags follow the trial: its timed steps are the engine's (epochs x steps - warm-up),
    its threads each PyTorch process's share of the trial's CPUs (trainables/pytorch/backend.py)."""
    config = {"framework": "pytorch", "model": "resnet8_cifar", "num_gpus": 2, "batch_per_gpu": 16, "epochs": 2,
              "steps_per_epoch": 30, "warmup_steps": 10, "data": "synthetic", "cpus_per_trial": 4, "precision": "bf16",
              "compile": True}
    cmd, env = _common.torch_peer_command(config)
    flags = dict(zip(cmd[cmd.index("--model")::2], cmd[cmd.index("--model") + 1::2]))
    assert "--nproc_per_node=2" in cmd and cmd[-1] == "--compile"
    assert (flags["--steps"], flags["--warmup-steps"], flags["--threads"], env["OMP_NUM_THREADS"]) == ("50", "10", "2", "2")
    assert (flags["--precision"], flags["--image-size"], flags["--batch-per-gpu"]) == ("bf16", "32", "16")
    with pytest.raises(ValueError):
        _common.torch_peer_command({**config, "data": "cifar10"})


@pytest.mark.slow  # torchrun and two torch processes: ~5 s
def test_torch_peer_trains_under_torchrun_on_two_processes() -> None:
    """The plain DDP program, tiny: two gloo ranks, one JSON line summing their figures, our model's count."""
    from trainables.pytorch.models import build, count_params

    config = {"framework": "pytorch", "model": "resnet8_cifar", "num_gpus": 2, "batch_per_gpu": 4, "epochs": 1,
              "steps_per_epoch": 4, "warmup_steps": 2, "data": "synthetic", "image_size": 16, "cpus_per_trial": 2,
              "precision": "fp32"}
    run = _common.run_torch_peer(config, timeout=300)
    line = run.epochs[0]
    assert (line["world_size"], line["steady_steps"], line["threads"], line["layout"]) == (2, 2, 1, "NCHW")  # auto, on CPUs
    assert line["param_count"] == count_params(build("resnet8_cifar", 16))
    assert run.steady == pytest.approx(sum(r["steady_images_per_sec"] for r in line["ranks"])) and run.steady > 0


@pytest.mark.slow
def test_torch_step_ab_times_both_steps_in_the_same_two_ranks() -> None:
    """benchmarks/torch_step_ab.py, tiny: both steps run on one process group, rank 0 says their ratio."""
    torchrun = Path(sys.executable).with_name("torchrun")
    out = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node", "2", str(ROOT / "benchmarks" / "torch_step_ab.py"),
                          "--blocks", "4", "--steps", "5", "--batch-per-gpu", "4", "--image-size", "16"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    found = re.search(r"2 rank\(s\), 4 timed steps each: median step ours ([\d.]+) ms, plain ([\d.]+) ms; "
                      r"plain/ours ([\d.]+)", out.stdout)
    assert found, out.stdout
    ours, plain, ratio = map(float, found.groups())
    assert ours > 0 and plain > 0 and ratio == pytest.approx(plain / ours, abs=0.002)


@pytest.mark.slow
def test_gpu_torch_yardsticks_engine_side_on_emulated_devices(tmp_path: Path) -> None:
    """Our half of the PyTorch grid through `python -m sweep` (real Ray, real Parquet), shrunk to run on a CPU."""
    import gpu_torch_yardsticks as g
    import gpu_yardsticks

    cells = g.grid([4], ["fp32", "bf16"], [False])
    ours, command = gpu_yardsticks.run_ours(cells, 1, 2, tmp_path, extra=["--emulate-gpus", "1"], framework="pytorch",
                                            model="resnet8_cifar", image_size=16, cpus_per_trial=1)
    assert set(ours) == {"b4 fp32", "b4 bf16"} and all(v and v > 0 for v in ours.values()), ours


@pytest.mark.slow
def test_idle_ray_holds_an_embedded_ray_with_its_dashboard_for_the_block_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """engine_vs_raw.py --beside-ray: the Ray the raw side runs beside is a sweep's (GCS, raylet, dashboard),
    up while the block runs and stopped after it, leaving none of its processes behind."""
    import psutil

    monkeypatch.setattr(_common, "IDLE_RAY_SETTLE_S", 0.0)

    def ray_processes() -> dict[str, psutil.Process]:
        found = {}
        for p in psutil.Process().children(recursive=True):
            try:
                command = " ".join(p.cmdline())
                found.update({part: p for part in ("gcs_server", "raylet", "dashboard.py") if part in command})
            except psutil.Error:
                pass
        return found

    with _common.idle_ray(1):
        held = ray_processes()
        assert set(held) == {"gcs_server", "raylet", "dashboard.py"}
    assert not [name for name, p in held.items() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _jax_python() -> str | None:
    """An interpreter with JAX and Keras 3: this one, else the environment `env create keras` made; None: neither."""
    import importlib.util

    from sweep import environments

    if importlib.util.find_spec("jax") and importlib.util.find_spec("keras"):
        return sys.executable
    made = environments.made_environment("keras")
    return str(made.value) if made else None


@pytest.mark.slow  # each peer imports JAX and compiles its step: 19-21 s apiece in the fast lane beside other work
@pytest.mark.parametrize("peer", ["jax_peer.py", "keras_peer.py"])
def test_the_jax_and_keras_peers_train_and_print_their_figure(peer: str) -> None:
    """Each peer trains resnet8_cifar data parallel on 2 host devices and prints its one JSON line: the
    network's trainable parameters are the engine's (trainables/tensorflow/models.py: 75,290), the loss finite."""
    import json
    import math

    python = _jax_python()
    if python is None:
        pytest.skip("no JAX here and no environment made by `python -m sweep env create keras`")
    proc = subprocess.run([python, str(ROOT / "benchmarks" / peer), "--devices", "2", "--batch-per-gpu", "8",
                           "--warmup-steps", "1", "--steps", "2"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, proc.stdout
    assert lines[0]["params"] == 75290 and lines[0]["devices"] == 2 and lines[0]["timed_steps"] == 2
    assert lines[0]["steady_images_per_sec"] > 0 and math.isfinite(lines[0]["loss"])
    bad = subprocess.run([python, str(ROOT / "benchmarks" / peer), "--model", "vgg16"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "expected resnet<6n+2>_cifar or resnet50_v1" in bad.stderr


@pytest.mark.slow  # a pytest run of one test that runs a framework check: ~10 s
def test_suite_cpu_charges_a_tests_child_processes_to_that_test() -> None:
    """The check the kept-check test runs is a child of a child of pytest (trainables.probe): its CPU, like the pytest
    process's own, goes to that test; what pytest did before its first test goes to a line of its own."""
    test = "tests/test_frameworks.py::test_a_passing_check_is_kept_for_the_rest_of_a_test_run_and_only_there"
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "suite_cpu.py"), "--top", "3", "--",
                          "-q", "-p", "no:randomly", "-p", "no:cacheprovider", test],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "SWEEP_KEPT_CHECKS": ""})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    charged = {name: float(cpu) for cpu, name in re.findall(r"^ +([\d.]+) s  (.+)$", out.stdout, re.M)}
    assert charged.get("framework checks", 0) > 1 and charged.get(test, 0) > 1, out.stdout
    assert "(before the first test: imports, collection, session fixtures)" in charged, out.stdout


# A command's child burns ~1 CPU-s, then starts a grandchild with an environment of its own (as Ray's dashboard starts
# its modules) that burns as much.
BURNS = """
import subprocess, sys, time
start = time.process_time()
while time.process_time() - start < 1.0:
    pass
if sys.argv[1:] == ["child"]:
    subprocess.run([sys.executable, __file__, "grandchild"], env={})
"""


def test_run_cpu_counts_a_commands_children_and_their_children(tmp_path: Path) -> None:
    burns = tmp_path / "burns.py"
    burns.write_text(BURNS)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_cpu.py"), "--", sys.executable, "-c",
                          f"import subprocess, sys; subprocess.run([sys.executable, {str(burns)!r}, 'child'])"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    total, processes = re.search(r"CPU ([\d.]+) s in (\d+) processes", out.stdout).groups()
    # The command, its child, the child's child; ~1 CPU-s without the last (the CPU of a process's last 0.2 s is lost).
    assert float(total) > 1.5 and int(processes) == 3, out.stdout
