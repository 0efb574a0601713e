"""The console view of a run and the driver's gauges, fed by Tune's callbacks. Driver-side.

On a terminal one table of the running trials redrawn in place plus a bar for the whole sweep with
an ETA from measured trial durations; elsewhere (pipes, CI logs) plain lines, one per finished epoch
and one per ended trial. Epochs are numbered from 0, as the store's `epoch` column (and MXNet's logs)
number them. The driver's gauges (`ray_sweep_trials{state=done|running|failed|pending}`,
`ray_sweep_gpu_hours`) are set from here, through `ray.util.metrics`.
"""
from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from ray import tune

from sweep.schema import Status
from sweep.terminal import live_wanted
from sweep.store import gpu_hours
from sweep.trial import trial_of
from trainables.config import TrialConfig

SWEEP_TAGS = ("sweep", "run")


class SweepGauges:
    """The driver's gauges: trials by state and GPU-hours for the whole run."""

    def __init__(self, sweep: str, run: str) -> None:
        self.tags = {"sweep": sweep, "run": run}
        self.trials = self.gpu_hours = None
        try:
            from ray.util.metrics import Gauge

            self.trials = Gauge("sweep_trials", "trials of the run by state (done, running, failed, pending)",
                                tag_keys=(*SWEEP_TAGS, "state"))
            self.gpu_hours = Gauge("sweep_gpu_hours", "GPU-hours the run's trials have held", tag_keys=SWEEP_TAGS)
        except Exception:  # noqa: BLE001 - Ray not connected (tests) or metrics off
            pass

    def update(self, counts: dict[str, int], gpu_hours: float) -> None:
        if self.trials is None:
            return
        try:
            for state, n in counts.items():
                self.trials.set(n, tags={**self.tags, "state": state})
            self.gpu_hours.set(gpu_hours, tags=self.tags)
        except Exception:  # noqa: BLE001
            self.trials = None


# --- progress: what the view knows of each trial and the ETA --------------------------------------------

@dataclass
class Running:
    label: str
    config: TrialConfig
    started: float
    epoch: int = 0  # epochs finished, earlier attempts' included
    first: int | None = None  # epochs finished before this attempt (it restarted from a checkpoint)
    images_per_sec: float | None = None  # the last epoch's steady images/s (warm-up steps left out); None: none timed
    val_acc: float | None = None
    last_epoch_at: float | None = None

    def per_epoch(self) -> float | None:
        """Measured seconds per epoch of this attempt (its start-up included)."""
        done = self.epoch - (self.first or 0)
        return (self.last_epoch_at - self.started) / done if done > 0 and self.last_epoch_at else None


@dataclass
class Progress:
    total: int
    before_ok: int = 0  # ended in earlier sessions of the run
    before_failed: int = 0
    gpu_hours_before: float = 0.0
    running: dict[str, Running] = field(default_factory=dict)
    ended: dict[str, Status] = field(default_factory=dict)  # this session: trial id -> status
    durations: list[float] = field(default_factory=list)  # wall seconds of the trials that ended
    held: list[float] = field(default_factory=list)  # GPU-hours of the trials that left
    peak_running: int = 0

    def counts(self) -> dict[str, int]:
        ok = self.before_ok + sum(s.done for s in self.ended.values())
        failed = self.before_failed + sum(not s.done for s in self.ended.values())
        running = len(self.running)
        return {"done": ok, "running": running, "failed": failed, "pending": max(self.total - ok - failed - running, 0)}

    def gpu_hours(self, now: float) -> float:
        live = sum(gpu_hours(r.config.num_gpus, now - r.started) for r in self.running.values())
        return self.gpu_hours_before + sum(self.held) + live

    def leave(self, tid: str, now: float) -> Running | None:
        """A trial stops running (it ended, or Ctrl-C stopped it): its GPU time is held for good."""
        r = self.running.pop(tid, None)
        if r is not None:
            self.held.append(gpu_hours(r.config.num_gpus, now - r.started))
        return r

    def eta(self, now: float) -> float | None:
        """Seconds to the end of the sweep, from measured trial durations; None before any measurement.

        Each trial is expected to last the mean measured duration (trials that ended), or, before any
        ended, what the running ones project from their finished epochs. The work left runs on as many
        slots as the sweep has kept busy.
        """
        rates = {id(r): r.per_epoch() for r in self.running.values()}
        projected = [rates[id(r)] * r.config.epochs for r in self.running.values() if rates[id(r)]]
        samples = self.durations or projected
        if not samples:
            return None
        mean = sum(samples) / len(samples)
        left_running = []
        for r in self.running.values():
            rate = rates[id(r)]
            if rate:
                left = rate * (r.config.epochs - r.epoch) - (now - r.last_epoch_at)
            else:
                left = mean - (now - r.started)
            left_running.append(max(left, 0.0))
        pending = self.counts()["pending"]
        slots = max(self.peak_running, len(self.running), 1)
        work = sum(left_running) + pending * mean
        return max(max(left_running, default=0.0), work / slots)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def rate(images_per_sec: float | None) -> str:
    """Images/s with enough digits to tell a slow trial from a stopped one (0.042, 3.7, 1234)."""
    if images_per_sec is None:
        return "-"
    return f"{images_per_sec:.0f}" if images_per_sec >= 100 else f"{images_per_sec:.3g}"


def steady_rate(images_per_sec: float | None) -> str:
    """An epoch's steady images/s as its line prints it: the figure the store and the tables keep (warm-up steps
    left out), never the epoch's whole-time rate, which a short epoch's warm-up drags far below it."""
    return "no steady img/s (no step after the warm-up)" if images_per_sec is None else f"{rate(images_per_sec)} img/s"


# --- the console ------------------------------------------------------------------------------------------

class _Region:
    """A block of lines at the bottom of a terminal, redrawn in place; other lines scroll above it."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.height = 0
        self.lines: list[str] = []

    def _erase(self) -> str:
        return f"\x1b[{self.height}F\x1b[J" if self.height else ""  # to the block's first line, clear below

    def draw(self, lines: list[str], above: list[str] = ()) -> None:
        width, rows = shutil.get_terminal_size((120, 40))
        if len(lines) > max(rows - 1, 3):
            keep = max(rows - 2, 2)
            lines = lines[:keep - 1] + [f"  ... {len(lines) - keep} more"] + lines[-1:]
        lines = [line[:max(width - 1, 20)] for line in lines]
        if not above and lines == self.lines:
            return  # nothing moved: no repaint
        self.out.write(self._erase() + "".join(f"{line}\n" for line in above) + "".join(f"{line}\n" for line in lines))
        self.out.flush()
        self.height, self.lines = len(lines), lines


class _Stdout:
    """sys.stdout while the live view is up: whole lines others print go above the view."""

    def __init__(self, view: SweepView, real: TextIO) -> None:
        self.view, self.real, self.partial = view, real, ""

    def write(self, text: str) -> int:
        self.partial += text
        *lines, self.partial = self.partial.split("\n")
        for line in lines:
            self.view.log(line)
        return len(text)

    def flush(self) -> None:
        self.real.flush()

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.real.fileno()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class SweepView(tune.Callback):
    """The console view of a run and the driver's gauges, fed by Tune's callbacks.

    `ended(config, status, why)` is called by whoever decides a trial's final status (the runner's
    summary callback); a trial Tune stops without one (Ctrl-C) goes back to pending.
    Use as a context manager around `Tuner.fit()`.
    """

    REFRESH_S = 0.5

    def __init__(self, plan: Any, print_line: Callable[[str], None] = print, out: TextIO | None = None,
                 live: bool | None = None) -> None:
        self.plan = plan
        self.print = print_line
        self._out = out
        self._live = live
        self.sweep = plan.sweep.name
        ids = {t.trial_id for t in plan.trials}
        self.progress = Progress(total=plan.total)
        self._before(ids)
        self.started_at = time.time()
        self._region: _Region | None = None
        self._saved_stdout: TextIO | None = None
        self._gauges: SweepGauges | None = None
        self._last_draw = self._last_tick = 0.0
        self._drawing = False
        self._queued: list[str] = []

    def _before(self, this_session: set[str]) -> None:
        """Trials the run ended in its earlier sessions (not run again now): counts and GPU-hours."""
        finished = self.plan.store.finished()
        earlier = {t: s for t, s in finished.items() if t not in this_session}
        self.progress.before_ok = sum(s.done for s in earlier.values())
        self.progress.before_failed = len(earlier) - self.progress.before_ok
        self.progress.gpu_hours_before = self.plan.store.gpu_hours()

    def __getstate__(self) -> dict[str, Any]:  # Tune pickles its callbacks with the Tuner
        state = self.__dict__.copy()
        for key in ("_out", "_region", "_saved_stdout", "_gauges"):
            state[key] = None
        return state

    # context: the live region and sys.stdout while Tune runs

    def __enter__(self) -> SweepView:
        out = self._out or sys.stdout
        live = live_wanted(out) if self._live is None else self._live
        run = str(self.plan.runtime.columns["run_id"])
        self._gauges = SweepGauges(self.sweep, run)
        if live:
            self._region = _Region(out)
            if out is sys.stdout:
                self._saved_stdout, sys.stdout = sys.stdout, _Stdout(self, out)
            self.refresh(force=True)
        self._update_gauges()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.running_left()
        self._update_gauges()
        if self._region:
            self.refresh(force=True)
        if self._saved_stdout is not None:
            sys.stdout, self._saved_stdout = self._saved_stdout, None
        self._region = None

    # output

    def log(self, line: str) -> None:
        """A line that stays: printed plainly, or above the live view."""
        if self._region is None:
            self.print(line)
            return
        if self._drawing:  # e.g. a signal handler printing while the view draws
            self._queued.append(line)
            return
        self._draw([line])

    def refresh(self, force: bool = False) -> None:
        now = time.time()
        if self._region is None or (not force and now - self._last_draw < self.REFRESH_S):
            return
        self._draw([])

    def _draw(self, above: list[str]) -> None:
        self._drawing = True
        try:
            self._region.draw(self.render(time.time()), above)
            self._last_draw = time.time()
        finally:
            self._drawing = False
        if self._queued:
            queued, self._queued = self._queued, []
            self._draw(queued)

    def render(self, now: float) -> list[str]:
        """The live view: one row per running trial, then the bar of the whole sweep."""
        p = self.progress
        rows = [("trial", "epochs done", "img/s", "val_acc", "time")]
        for r in sorted(p.running.values(), key=lambda r: r.started):
            rows.append((r.label, f"{r.epoch}/{r.config.epochs}", rate(r.images_per_sec),
                         _num(r.val_acc, ".3f"), _clock(now - r.started)))
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        lines = []
        if len(rows) > 1:
            for row in rows:
                lines.append("  " + row[0].ljust(widths[0]) + "  "
                             + "  ".join(cell.rjust(w) for cell, w in zip(row[1:], widths[1:])))
        c = p.counts()
        ended = c["done"] + c["failed"]
        bar_width = 30
        filled = int(bar_width * ended / p.total) if p.total else bar_width
        bar = "#" * filled + "-" * (bar_width - filled)
        eta = p.eta(now) if ended < p.total else 0.0
        lines.append(f"[{bar}] {ended}/{p.total} trials  {c['running']} running  {c['failed']} failed  "
                     f"{c['pending']} pending  elapsed {_clock(now - self.started_at)}  ETA {_clock(eta)}")
        return lines

    def _update_gauges(self) -> None:
        if self._gauges is not None:
            self._gauges.update(self.progress.counts(), self.progress.gpu_hours(time.time()))

    # Tune's callbacks

    def _label(self, config: TrialConfig) -> str:
        return self.plan.runtime.describe(config)

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        config = trial_of(trial.config)
        now = time.time()
        self.progress.running[config.trial_id] = Running(trial.config["runtime"].label(config), config, now)
        self.progress.peak_running = max(self.progress.peak_running, len(self.progress.running))
        self._update_gauges()
        self.refresh(force=True)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        config = trial_of(trial.config)
        r = self.progress.running.get(config.trial_id)
        if r is None or "epoch" not in result or result["epoch"] + 1 <= r.epoch:
            return  # not ours, or a repeated last result
        if r.first is None:
            r.first = result["epoch"]
        r.epoch, r.last_epoch_at = result["epoch"] + 1, time.time()
        r.images_per_sec, r.val_acc = result.get("steady_images_per_sec"), result.get("val_acc")
        if self._region is None:  # epochs count from 0, as the store's epoch column
            acc = f", val_acc {r.val_acc:.3f}" if r.val_acc is not None else ""
            self.print(f"  {self._label(config)}  epoch {result['epoch']} ({r.epoch} of {config.epochs} done): "
                       f"{steady_rate(r.images_per_sec)}, {result['epoch_time_s']:.1f} s{acc}")
        self.refresh(force=True)

    def ended(self, config: TrialConfig, status: Status, why: str | None = None) -> None:
        """A trial's final status, as the store records it: counted, and one line that stays."""
        now = time.time()
        r = self.progress.leave(config.trial_id, now)
        if r is not None:
            self.progress.durations.append(now - r.started)
        self.progress.ended[config.trial_id] = status
        k = self.progress.before_ok + self.progress.before_failed + len(self.progress.ended)
        line = f"[{k}/{self.plan.total}] {self._label(config)}: {status.label}" + (f" ({why})" if why else "")
        if self._region is None and k < self.plan.total:
            line += f"; sweep ETA {_clock(self.progress.eta(now))}"
        self.log(line)
        self._update_gauges()

    def _left(self, trial: Any) -> None:
        """A trial Tune ended without a final status (stopped by Ctrl-C): it is pending again."""
        if self.progress.leave(trial_of(trial.config).trial_id, time.time()) is not None:
            self._update_gauges()
            self.refresh(force=True)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._left(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._left(trial)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        now = time.time()
        if now - self._last_tick >= self.REFRESH_S:  # the ETA and GPU-hours move on their own
            self._last_tick = now
            self._update_gauges()
            self.refresh(force=True)

    def running_left(self) -> None:
        """At the end: trials still listed as running were stopped (Ctrl-C, abort)."""
        now = time.time()
        for tid in list(self.progress.running):
            self.progress.leave(tid, now)
