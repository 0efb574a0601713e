"""Where the test suite's CPU goes, test by test (issue 46): on two cores under `-n 4` the suite is bound by its sum of
CPU, so that sum, not a test's wall time, says what a change to the suite saves.

Runs pytest (the README's arguments, or those after `--`) with this file as a plugin that notes when each test starts,
and reads every process's CPU time (utime + stime) from /proc each second. A process's CPU goes to the pytest process
that started it, as the SWEEP_TEST_PROCESS tag of tests/conftest.py says (Ray's processes and the trials' included),
and there to the test that ran at that second. Prints the CPU by kind of process, by test file and the heaviest tests.
A process that lives under a second is missed. Linux only.

    .venv/bin/python benchmarks/suite_cpu.py --top 40                    # the README's suite, -n 4
    .venv/bin/python benchmarks/suite_cpu.py --top 10 -- -q tests/test_resume.py
"""
from __future__ import annotations

import argparse
import bisect
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDER = "SUITE_CPU_DIR"  # where each pytest process notes its tests' starts
TAG = b"SWEEP_TEST_PROCESS="
TICK = os.sysconf("SC_CLK_TCK")


# -- the plugin, in each pytest process (`-p suite_cpu`) ---------------------------------------------------------------
def pytest_runtest_protocol(item: object, nextitem: object) -> None:
    """In the process that runs the test (an xdist worker, not its controller, which reports the tests too)."""
    folder = os.environ.get(FOLDER)
    if folder:
        with open(Path(folder) / f"{os.getpid()}.jsonl", "a") as f:
            f.write(json.dumps({"t": time.time(), "test": item.nodeid}) + "\n")


# -- the sampler and the tables, in this script's process ------------------------------------------------------------
# (what a command line holds, the kind of process it is), first match wins.
KINDS = (("gcs_server", "ray gcs"), ("raylet", "ray raylet"), ("dashboard/dashboard.py", "ray dashboard"),
         ("ray-dashboard-", "ray dashboard"), ("'ray.dashboard", "ray dashboard"),  # its modules, their forkserver
         ("dashboard/agent.py", "ray agents"), ("runtime_env/agent", "ray agents"), ("monitor.py", "ray monitors"),
         ("trainables.probe", "framework checks"), ("ray::TrialWorker", "trial workers"),
         ("ray::SweepTrial", "trials (Tune's actors)"), ("ray::", "ray workers"), ("default_worker.py", "ray workers"),
         ("-m sweep", "sweep drivers"), ("-m pytest", "pytest"))  # an xdist worker: by its note (sample)


def kind(argv: list[str]) -> str:
    """What a process is, from its command line: the programs by their name, the others by their arguments (Ray's
    workers retitle themselves `ray::NAME` once they run something; a raylet's workers name it in theirs)."""
    program = os.path.basename(argv[0]) if argv else "?"
    for marker, name in KINDS:
        if marker == program or (marker not in ("gcs_server", "raylet") and marker in " ".join(argv)):
            return name
    return f"other ({program})"


def sample(stop: threading.Event, folder: Path, charged: list[tuple[float, str, str, float]]) -> None:
    """Each second, (time, tag, kind, CPU-s since the last look) for every tagged process that used some. A pytest
    process tags itself once it runs, and /proc shows the environment it started with (an xdist worker's holds its
    controller's tag): it is its own by its note's name."""
    seen: dict[int, list] = {}  # pid -> [start time, tag, kind, CPU ticks so far]
    while not stop.is_set():
        now = time.time()
        for noted in folder.glob("*.jsonl"):
            known = seen.get(int(noted.stem))
            if known is not None and known[1] != noted.stem:
                # What it took so far (imports, collection) is charged before the first test: below where it was not
                # charged yet, under its controller's tag (no test) where it was.
                known[1], known[2], known[3] = noted.stem, "pytest", -1 if known[1] is None else known[3]
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                fields = stat[stat.rindex(")") + 2:].split()
                ticks, started = int(fields[11]) + int(fields[12]), int(fields[19])
                known = seen.get(int(entry))
                if known is not None and known[0] == started and known[2] == "ray workers":  # retitled since?
                    known[2] = kind(Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0"))
                if known is None or known[0] != started:
                    environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
                    tag = next((v[len(TAG):].decode() for v in environ if v.startswith(TAG)), None)
                    argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
                    known = seen[int(entry)] = [started, tag, kind(argv), ticks if tag is None else 0]
                if known[3] == -1:  # charged before its first test
                    charged.append((0.0, known[1], known[2], ticks / TICK))
                elif known[1] is not None and ticks > known[3]:
                    charged.append((now, known[1], known[2], (ticks - known[3]) / TICK))
                known[3] = ticks
            except (OSError, ValueError, IndexError):
                continue
        stop.wait(max(0.0, 1 - (time.time() - now)))


def tables(charged: list[tuple[float, str, str, float]], folder: Path, top: int) -> list[str]:
    starts: dict[str, list[tuple[float, str]]] = {}
    for noted in folder.glob("*.jsonl"):
        starts[noted.stem] = sorted((r["t"], r["test"]) for r in map(json.loads, noted.read_text().splitlines()))
    by_kind, by_test, by_file = collections.Counter(), collections.Counter(), collections.Counter()
    for t, tag, what, cpu in charged:
        by_kind[what] += cpu
        tests = starts.get(tag, [])
        i = bisect.bisect_right(tests, (t, "\uffff")) - 1
        test = tests[i][1] if i >= 0 else "(before the first test: imports, collection, session fixtures)"
        by_test[test] += cpu
        by_file[test.split("::")[0]] += cpu
    lines = [f"CPU of the tests' processes: {sum(by_kind.values()):.0f} s", "", "by kind of process:"]
    lines += [f"  {cpu:8.1f} s  {name}" for name, cpu in by_kind.most_common()]
    lines += ["", "by test file:"] + [f"  {cpu:8.1f} s  {name}" for name, cpu in by_file.most_common(top)]
    lines += ["", f"the {top} heaviest tests:"] + [f"  {cpu:8.1f} s  {name}" for name, cpu in by_test.most_common(top)]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="arguments after -- go to pytest (default: -n 4, the README's)")
    parser.add_argument("--top", type=int, default=30, help="how many files and tests to list (default 30)")
    parser.add_argument("pytest_args", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="suite-cpu-") as folder:
        env = {**os.environ, FOLDER: folder,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))}
        charged: list[tuple[float, str, str, float]] = []
        stop = threading.Event()
        sampler = threading.Thread(target=sample, args=(stop, Path(folder), charged), daemon=True)
        sampler.start()
        t0 = time.time()
        code = subprocess.call([sys.executable, "-m", "pytest", "-p", "suite_cpu", *(args.pytest_args or ["-n", "4"])],
                               cwd=ROOT, env=env)
        stop.set()
        sampler.join()
        print(f"\npytest exited {code} after {time.time() - t0:.0f} s")
        print("\n".join(tables(charged, Path(folder), args.top)))
    return code


if __name__ == "__main__":
    sys.exit(main())
