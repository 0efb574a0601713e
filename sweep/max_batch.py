"""`batch_per_gpu: max` in a run: the search's rounds on the cluster, and the boundary of each configuration.

Each round is one Tune run through sweep/runner.py: the next probe of every configuration whose search is
not done (probes of different configurations run side by side as the cluster allows; one configuration's
probes run one after the other), and the training trial of every configuration whose search ended, where
the sweep trains (epochs > 0). What a round runs is read from the store's summary rows alone, so a run
that was stopped anywhere resumes without repeating a finished probe. The boundaries are a table of their
own: max_batch.parquet in the run's folder, and `report`'s max_batch table.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from sweep.batch_search import FAILED, FIT, OOM, Search, boundary, next_probe
from sweep.errors import UsageError
from sweep.schema import Status
from trainables import zoo
from trainables.config import TrialConfig

SUMMARY_FILE = "max_batch.parquet"  # in the run's folder: one row per configuration (boundaries below)
UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def memory_size_mib(text: str) -> float:
    """--emulate-gpu-memory: a size such as 2GiB, 512MiB or 1.5GB, in MiB."""
    found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]+)\s*", text)
    if not found or found.group(2).lower() not in UNITS or float(found.group(1)) <= 0:
        raise UsageError(f"--emulate-gpu-memory {text}: expected a size such as 2GiB, 512MiB or 1.5GB")
    return float(found.group(1)) * UNITS[found.group(2).lower()] / 2**20


def outcome(status: str) -> str:
    """A probe's summary status as the search reads it: it fitted (it trained; a diverged loss fitted too, the
    search measures memory), it ran out of memory, or it failed otherwise (which ends the search)."""
    if Status(status).done or status == Status.DIVERGED:
        return FIT
    return OOM if status == Status.OOM else FAILED


def boundary_probes(rows: list[dict[str, Any]]) -> set[str]:
    """The trial ids of probes that ran out of memory: what a search looks for, a result and not a failure."""
    return {r["trial_id"] for r in rows if r.get("max_batch_probe") and r["status"] == Status.OOM}


def probe_rows(search: Search, rows: list[dict[str, Any]], capacity_mib: float | None) -> dict[int, dict[str, Any]]:
    """The summary rows of the search's probes, by batch: those whose trial is exactly its probe at that batch."""
    return {r["batch_per_gpu"]: r for r in rows if r.get("max_batch_probe") == search.config_id
            and r["trial_id"] == search.probe(r["batch_per_gpu"], capacity_mib).trial_id}


def outcomes(search: Search, rows: list[dict[str, Any]], capacity_mib: float | None) -> dict[int, str]:
    return {batch: outcome(r["status"]) for batch, r in probe_rows(search, rows, capacity_mib).items()}


def next_trials(searches: list[Search], rows: list[dict[str, Any]], capacity_mib: float | None) -> list[TrialConfig]:
    """What the next round runs: each unfinished search's next probe, and the training trial (not yet ended)
    of each search that found its boundary, where the sweep trains."""
    ended = {r["trial_id"] for r in rows}
    out = []
    for search in searches:
        found = outcomes(search, rows, capacity_mib)
        batch = next_probe(found, search.lo, search.hi, search.step)
        if batch is not None:
            out.append(search.probe(batch, capacity_mib))
            continue
        result = boundary(found, search.lo, search.hi, search.step)
        train = search.training(result.fit, capacity_mib) if result.fit and result.state != "failed" else None
        if train is not None and train.trial_id not in ended:
            out.append(train)
    return out


def run_rounds(searches: list[Search], first: list[TrialConfig], capacity_mib: float | None,
               rows: Callable[[], list[dict[str, Any]]], run_round: Callable[[list[TrialConfig], int], int | None],
               print_line: Callable[[str], None] = print) -> int | None:
    """Round after round until every search is done (and its training trial ran); the signal that stopped a
    round, if one did. `first` joins the first round (the sweep's other trials, those a resume must finish)."""
    ran: set[str] = set()
    number = 0
    while True:
        number += 1
        trials = {t.trial_id: t for t in (first if number == 1 else [])}
        trials.update({t.trial_id: t for t in next_trials(searches, rows(), capacity_mib)})
        todo = [t for tid, t in trials.items() if tid not in ran]  # one that ran and left no row: for a resume
        if not todo:
            return None
        probes = sum(1 for t in todo if t.max_batch_probe)
        print_line(f"max batch search, round {number}: {probes} probe{'' if probes == 1 else 's'}"
                   + (f", {len(todo) - probes} other trial{'' if len(todo) - probes == 1 else 's'}" if len(todo) > probes else "")
                   + ": " + ", ".join(f"{t.framework} {t.model} batch {t.batch_per_gpu}" for t in todo))
        ran.update(t.trial_id for t in todo)
        if stopped := run_round(todo, number):
            return stopped


def boundaries(searches: list[Search], rows: list[dict[str, Any]], capacity_mib: float | None) -> list[dict[str, Any]]:
    """One row per configuration: what its search found, from its probes' summary rows."""
    ended = {r["trial_id"]: r for r in rows}
    out = []
    for search in searches:
        probes = probe_rows(search, rows, capacity_mib)
        found = boundary({b: outcome(r["status"]) for b, r in probes.items()}, search.lo, search.hi, search.step)
        fit = probes.get(found.fit) if found.fit else None
        failed = next((r for r in probes.values() if outcome(r["status"]) == FAILED), None)
        train = search.training(found.fit, capacity_mib) if found.fit and found.state != "failed" else None
        values = search.values
        out.append({
            "config_id": search.config_id, "framework": values["framework"], "model": values["model"],
            "num_gpus": values["num_gpus"], "precision": values.get("precision", "tf32"),
            "compile": values.get("compile", False), "image_size": values.get("image_size") or zoo.default_image_size(values["model"]),
            "state": found.state, "max_batch": found.fit, "max_batch_mem_mib": _memory(fit),
            "max_batch_images_per_sec": fit["steady_images_per_sec"] if fit else None,
            "first_oom_batch": found.fail, "probes": found.probes, "range_lo": search.lo, "range_hi": search.hi,
            "step": search.step, "emulated": _emulated(probes.values()), "capacity_mib": capacity_mib,
            "error": failed["error"] if failed else None,
            "train_batch": train.batch_per_gpu if train else None,
            "train_status": ended[train.trial_id]["status"] if train and train.trial_id in ended else None,
        })
    return out


SHOWN = {"framework": "framework", "model": "model", "num_gpus": "gpus", "precision": "precision",
         "image_size": "image", "state": "state", "max_batch": "max batch", "max_batch_mem_mib": "its MiB/device",
         "max_batch_images_per_sec": "its images/s", "first_oom_batch": "first oom", "probes": "probes",
         "emulated": "emulated", "capacity_mib": "capacity MiB", "train_batch": "trains at", "train_status": "training"}


def frame(rows: list[dict[str, Any]]) -> Any:
    """The boundaries as the run prints them and `report` writes them (max_batch.csv): the usual columns."""
    import pandas as pd

    table = pd.DataFrame(rows, columns=list(SHOWN)).rename(columns=SHOWN)
    return table.round({"its MiB/device": 1, "its images/s": 1, "capacity MiB": 1})


def _memory(row: dict[str, Any] | None) -> float | None:
    """Per device: the emulated devices' measured memory, or the most a real GPU held."""
    if row is None:
        return None
    if row.get("emulated_device_mem_mib") is not None:
        return row["emulated_device_mem_mib"]
    return max(row["peak_device_mem_mib"]) if row.get("peak_device_mem_mib") else None


def _emulated(rows: Any) -> bool | None:
    kinds = {r.get("device_kind") for r in rows} - {None}
    return None if not kinds else "cpu-emulated" in kinds
