"""The CPU of one command and of every process it starts, by kind of process (issue 46): what an engine run costs its
host beside the trials' own work (Ray's start, its dashboard and agents, the framework checks, the driver).

Runs the command with a tag in its environment, which every process it starts inherits (Ray's raylet, workers and
agents included), and reads each tagged process's CPU time (utime + stime) from /proc five times a second. A process
that lives under 0.2 s is missed. Linux only.

    .venv/bin/python benchmarks/run_cpu.py -- .venv/bin/python -m sweep ONE_TRIAL.yaml --emulate-gpus 1 --dashboard off
"""
from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from pathlib import Path

from suite_cpu import TICK, kind

TAG = "SWEEP_RUN_CPU"


def look(tag: bytes, seen: dict[tuple[int, int], list | None]) -> None:
    """Each of the command's processes' CPU ticks so far, by (pid, start time): [kind, ticks]. Its processes: those with
    the tag, and the children of those (Ray's dashboard starts its modules with an environment of its own)."""
    ours = {pid for (pid, _), known in seen.items() if known is not None}
    for entry in sorted(os.listdir("/proc"), key=lambda e: int(e) if e.isdigit() else 0):  # parents first, mostly
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            key, ticks = (int(entry), int(fields[19])), int(fields[11]) + int(fields[12])
            if key not in seen:
                if int(fields[1]) not in ours and tag not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                    seen[key] = None  # not ours: not read again
                    continue
                seen[key] = ["?", 0]
                ours.add(key[0])
            if seen[key] is not None:
                # The kind from the latest command line: Ray's workers retitle themselves (`ray::NAME`) once they run.
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
                seen[key] = [kind(argv) if any(argv) else seen[key][0], max(ticks, seen[key][1])]
        except (OSError, ValueError, IndexError):
            continue


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="+", help="the command, after --")
    args = parser.parse_args()
    tag = f"{TAG}={os.getpid()}"
    seen: dict[tuple[int, int], list] = {}
    t0 = time.time()
    proc = subprocess.Popen(args.command, env={**os.environ, TAG: str(os.getpid())})
    while proc.poll() is None:
        look(tag.encode(), seen)
        time.sleep(0.2)
    look(tag.encode(), seen)  # what outlived the command (a process Ray left to stop on its own)
    by_kind, count = collections.Counter(), collections.Counter()
    for what, ticks in filter(None, seen.values()):
        by_kind[what] += ticks / TICK
        count[what] += 1
    print(f"\nexit {proc.returncode} after {time.time() - t0:.1f} s; CPU {sum(by_kind.values()):.1f} s "
          f"in {sum(count.values())} processes")
    for what, cpu in by_kind.most_common():
        print(f"  {cpu:7.1f} s  {count[what]:4d}  {what}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
