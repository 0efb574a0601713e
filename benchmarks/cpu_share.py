"""Who takes the cores while a trial's ranks train? Each process's share of a core, sampled from /proc.

  .venv/bin/python benchmarks/cpu_share.py -- .venv/bin/python -m sweep ONE_TRIAL.yaml --results DIR --scale full
  .venv/bin/python benchmarks/cpu_share.py -- torchrun --standalone --nproc_per_node 2 benchmarks/torch_ddp_peer.py ...

It runs the command and reads every process's CPU time (/proc/PID/stat) every --interval seconds. The
window it reports is the intervals in which the ranks (processes whose command line holds --ranks: the
engine's `TrialWorker` actors, the plain program's `torch_ddp_peer`) used at least --busy cores together,
that is, the steady training, not the start-up or validation around it. For each process it prints the
share of one core it took in that window (100% is a whole core), the ranks' and everything else's sum.
On a machine whose cores the ranks fill, everything else's share is what they lose (benchmarks/README.md,
"PyTorch on 1 and 2 devices"). Linux only.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="TrialWorker,torch_ddp_peer",
                   help="comma-separated: a process whose command line holds one of these is a rank")
    p.add_argument("--busy", type=float, default=1.5, help="cores the ranks use together in the window (default 1.5)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    p.add_argument("--top", type=int, default=20, help="processes listed")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    return p.parse_args(argv)


def sample() -> dict[int, tuple[int, str]]:
    """pid -> (CPU ticks so far, command line) of every process readable now."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
        out[int(entry.name)] = (int(fields[11]) + int(fields[12]), line or stat[stat.index("(") + 1:stat.rindex(")")])
    return out


Samples = list[tuple[float, dict[int, tuple[int, str]]]]  # (monotonic time, sample()) in time order


def tally(samples: Samples, ranks: list[str], busy: float,
          me: int | None = None) -> tuple[float, float, Counter[int], dict[int, str]]:
    """The window: the intervals between samples in which the ranks' CPU time grew by at least `busy` cores.

    Returns the window's seconds, the seconds sampled, each process's CPU seconds in the window (pid ->
    seconds) and its command line. A process first seen at an interval's end started in it: all its CPU time
    so far counts there (a rank that starts and spins between two samples is no less busy for it); one that
    ends between two samples loses its last interval's. Whether a process is a rank is read from its command
    line at the interval's end. `me`, this script, counts nowhere: its own command line holds the ranks'
    marker when --ranks is given, and its sampling is no rank's work."""
    used: Counter[tuple[int, str]] = Counter()
    window = 0.0
    for (t0, before), (t1, after) in zip(samples, samples[1:]):
        ticks = {pid: after[pid][0] - (before[pid][0] if pid in before else 0) for pid in after if pid != me}
        names = {pid: after[pid][1] for pid in ticks}
        rank_cores = sum(n for pid, n in ticks.items() if any(r in names[pid] for r in ranks)) / TICK / (t1 - t0)
        if rank_cores < busy:
            continue
        window += t1 - t0
        for pid, n in ticks.items():
            if n:
                used[(pid, names[pid])] += n / TICK  # a rank's name changes with its call: keyed by pid too
    by_pid: Counter[int] = Counter()
    names: dict[int, str] = {}
    for (pid, name), seconds in used.items():
        by_pid[pid] += seconds
        names.setdefault(pid, name)
    sampled = samples[-1][0] - samples[0][0] if samples else 0.0
    return window, sampled, by_pid, names


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("cpu_share: give the command to run after --", file=sys.stderr)
        return 2
    ranks = [r for r in args.ranks.split(",") if r]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples: Samples = []
    while proc.poll() is None:
        samples.append((time.monotonic(), sample()))
        time.sleep(args.interval)
    window, sampled, by_pid, names = tally(samples, ranks, args.busy, me=os.getpid())
    if not window:
        print(f"cpu_share: the ranks ({', '.join(ranks)}) never used {args.busy} cores together (exit {proc.returncode})")
        return 1
    print(f"window: {window:.2f} s of {sampled:.2f} s sampled in which the ranks used >= {args.busy} cores; "
          "share of one core per process:")
    for pid, seconds in by_pid.most_common(args.top):
        print(f"  {100 * seconds / window:6.2f}%  {pid:>7}  {' '.join(names[pid].split())[:100]}")
    is_rank = {pid: any(r in names[pid] for r in ranks) for pid in by_pid}
    rank_share = sum(s for pid, s in by_pid.items() if is_rank[pid]) / window
    other_share = sum(s for pid, s in by_pid.items() if not is_rank[pid]) / window
    print(f"ranks {100 * rank_share:.1f}%, every other process {100 * other_share:.1f}% (of one core; exit {proc.returncode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
