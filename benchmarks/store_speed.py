"""Results-store speed: the cost of writing epoch rows as trials do, and of reading a big run back.

What it does, with the real sweep.store.RunStore:

1. A template row. One real trial runs through the engine (`python -m sweep ONE_TRIAL.yaml`): the
   first trial of a sweep's smoke scale (default: resnet50_lr_scaling), on CIFAR-format data written
   by tests/cifar_files.py's writer. Its epoch row (every EPOCH_SCHEMA column filled by the engine)
   is the template, and its epoch time (training + validation) is the "real epoch" the write cost
   is set against. (--template RUN_DIR reuses a run's first epoch row instead of running one.)
2. Writing. TRIALS x EPOCHS rows (default 1,000 x 100 = 100,000) go through RunStore as a run
   writes them: per trial a fresh RunStore (a trial's own process has one), write_epoch once per
   epoch (the trial's file rewritten whole, atomically, with fsync, every epoch), then the
   driver's end of trial: trial_epochs + summarize + finish_trial. Rows vary per trial and epoch
   (config, ids, metrics), so nothing compresses unrealistically well. Only the store calls are
   timed, not making the rows. At 2-5 ms a row here, all 100,000 rows take 4-8 minutes, so by
   default the first --timed-trials (100) trials go this way, timed, and the total for all rows
   is extrapolated from them (said so in the output); the other trials' files are written once,
   whole (one finish_trial each: the same final files), so that the run read back is full size.
   --timed-trials 0 writes every row epoch by epoch and measures the total directly.
3. Reading. RunStore.epochs() and pandas.read_parquet(RUN_DIR/"epochs") on the whole run, each
   --read-repeats times (median; warm page cache: the files were just written), first with one file
   per trial (a run in progress), then after RunStore.compact() folds them into one part file, as
   the driver does at the end of each session (a finished run).

The "<1% of the sweep's time" claim is put as: a trial writes its epoch row between epochs, in its
own process, so the share of a trial's (and so of the sweep's) time spent writing is
write cost per row / (epoch time + write cost). It is shown against the measured smoke epoch and
against a full CIFAR-10 pass (50,000 images) at the smoke trial's measured images/s (an estimate,
said as such). The driver's end-of-trial cost runs in the driver, beside the trials, and is shown apart.

Run (from the repository root; about 1-1.5 minutes on a 2-core machine with the defaults):

  .venv/bin/python benchmarks/store_speed.py
  .venv/bin/python benchmarks/store_speed.py --timed-trials 0      # all 100,000 rows timed (5-10 min)
  .venv/bin/python benchmarks/store_speed.py --template results/NAME/RUN_ID   # no engine run

Writes go to a temp folder on the same file system as /tmp (here the same ext4 disk as the
repository); it is removed at the end unless --keep.
"""
from __future__ import annotations

import argparse
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import load_average, machine, run_engine, spec_settings, table, write_cifar_like

import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from sweep import spec  # noqa: E402
from sweep.schema import EPOCH_SCHEMA, Status  # noqa: E402
from sweep.store import RunMeta, RunStore, config_columns, new_run_id, summarize  # noqa: E402
from trainables.config import TrialConfig, field_names  # noqa: E402

CIFAR_TRAIN = 50_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=100, help="epoch rows per trial")
    p.add_argument("--sweep", default="resnet50_lr_scaling", help="whose first smoke trial gives the template row")
    p.add_argument("--template", type=Path, help="a run folder: take its first epoch row instead of running a trial")
    p.add_argument("--timed-trials", type=int, default=100,
                   help="trials written epoch by epoch through write_epoch, timed (0: all); the others' files "
                        "are written once, whole, so that the run is full size for the read-back")
    p.add_argument("--read-repeats", type=int, default=3)
    p.add_argument("--keep", action="store_true", help="keep the temp folder")
    return p.parse_args(argv)


def real_template(args: argparse.Namespace, tmp: Path) -> tuple[dict, dict]:
    """(epoch row, facts about the real trial) from a real engine run or from --template."""
    if args.template:
        run_dir = args.template
        source = f"first epoch row of {run_dir}"
    else:
        trial = spec.load(args.sweep).trials("smoke")[0]
        config = spec_settings(trial)
        data_dir = write_cifar_like(tmp / "cifar", train_images=5000, test_images=max(config.get("val_examples") or 256, 256))
        run = run_engine(config, data_dir, tmp / "template", name="store_speed_template")
        run_dir = next((tmp / "template" / "results" / "store_speed_template").glob("*/run.json")).parent
        source = f"{args.sweep} smoke trial {trial.trial_id} run by the engine ({run.command})"
    rows = pq.read_table(run_dir / "epochs", schema=EPOCH_SCHEMA).to_pylist()
    if not rows:
        raise SystemExit(f"{run_dir}: no epoch rows")
    rows.sort(key=lambda r: r["epoch"])
    empty = [k for k in EPOCH_SCHEMA.names if rows[0].get(k) is None]
    facts = {
        "source": source,
        "epoch_s": statistics.median(r["epoch_time_s"] + (r["val_time_s"] or 0) for r in rows),
        "train_s": statistics.median(r["epoch_time_s"] for r in rows),
        "steps": rows[0]["steps"], "global_batch": rows[0]["global_batch"],
        # the trial's rate after warm-up (the last epoch's steady figure), else its best epoch's
        "images_per_sec": rows[-1]["steady_images_per_sec"] or max(r["images_per_sec"] for r in rows),
        "model": rows[0]["model"], "framework": rows[0]["framework"],
        "empty": empty,
    }
    return rows[0], facts


def make_config(template: dict, i: int, rng: random.Random, epochs: int) -> TrialConfig:
    values = {k: template[k] for k in field_names()}
    values.update({"framework": ("mxnet", "tensorflow")[i % 2], "num_gpus": rng.choice([1, 2, 4, 8]),
                   "batch_per_gpu": rng.choice([64, 128, 256, 512]), "seed": i, "epochs": epochs,
                   "nodes": 1, "gpus_per_node": None})
    values["lr"] = 0.05 * values["num_gpus"] * values["batch_per_gpu"] / 128
    return TrialConfig.from_dict(values)


def make_row(template: dict, trial: TrialConfig, run_id: str, tid: str, epoch: int, rng: random.Random) -> dict:
    """A row like the template's, with this trial's config and plausible, varying measurements."""
    config = config_columns(trial)
    rate = rng.uniform(200, 4000)
    acc = min(0.95, 0.1 + 0.8 * (1 - 0.96 ** epoch) + rng.uniform(-0.02, 0.02))
    return {**template, **config, "run_id": run_id, "trial_id": tid, "epoch": epoch, "status": "running",
            "lr_applied": config["lr"],
            "epoch_time_s": 50_000 / rate, "val_time_s": rng.uniform(1, 5), "images_per_sec": rate * 0.97,
            "steady_images_per_sec": rate, "steady_images_per_sec_stderr": rate * rng.uniform(0.001, 0.01),
            "steady_jitter": rate * rng.uniform(0.005, 0.03), "steady_steps": config["steps_per_epoch"] or 390,
            "train_loss": rng.uniform(0.05, 2.3), "train_acc": acc + 0.03, "val_acc": acc,
            "peak_host_rss_mib": rng.uniform(900, 3000), "pid": 10_000 + rng.randrange(50_000),
            "ray_gpu_ids": ",".join(str(g) for g in range(config["num_gpus"])),
            "peak_device_mem_mib": None if template["peak_device_mem_mib"] is None else
            [rng.uniform(1000, 9000) for _ in range(config["num_gpus"])],
            "reported_at": time.time()}


def write_breakdown(df: pd.DataFrame, folder: Path, epochs: int) -> dict[str, tuple[float, float]]:
    """The steps of the store's atomic write, timed apart, for a 1-row and an EPOCHS-row file: a
    diagnostic (the figures above come from the store itself)."""
    import os

    folder.mkdir()
    first = df[df.trial_id == df.trial_id.iloc[0]].sort_values("epoch")
    out: dict[str, list[float]] = {"rows -> Arrow table (from_pylist)": [], "Parquet encoding": [],
                                   "write + fsync + rename": [], "  (the same write + rename without fsync)": []}
    for n in (1, epochs):
        rows = pa.Table.from_pandas(first.iloc[:n], schema=EPOCH_SCHEMA, preserve_index=False).to_pylist()
        times: dict[str, list[float]] = {k: [] for k in out}
        for _ in range(30):
            t0 = time.perf_counter()
            table_ = pa.Table.from_pylist(rows, schema=EPOCH_SCHEMA)
            t1 = time.perf_counter()
            sink = pa.BufferOutputStream()
            pq.write_table(table_, sink)
            payload = sink.getvalue().to_pybytes()
            t2 = time.perf_counter()
            with open(folder / ".x.tmp", "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(folder / ".x.tmp", folder / "x.parquet")
            t3 = time.perf_counter()
            with open(folder / ".y.tmp", "wb") as f:
                f.write(payload)
            os.replace(folder / ".y.tmp", folder / "y.parquet")
            t4 = time.perf_counter()
            for key, value in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                times[key].append(value)
        for key in out:
            out[key].append(statistics.median(times[key]))
    return {k: (v[0], v[1]) for k, v in out.items()}


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="store_speed-"))
    print(f"store speed: {args.trials} trials x {args.epochs} epochs = {args.trials * args.epochs:,} epoch rows")
    print(f"machine: {machine()}; load average at start: {load_average()}")
    print("reproduce: " + shlex.join([".venv/bin/python", "benchmarks/store_speed.py",
                                      *(argv if argv is not None else sys.argv[1:])]))

    template, facts = real_template(args, tmp)
    print(f"template row: {facts['source']}")
    print(f"  real epoch of that trial ({facts['framework']} {facts['model']}, {facts['steps']} steps x "
          f"{facts['global_batch']} images): {facts['train_s']:.3f} s training + validation = "
          f"{facts['epoch_s']:.3f} s (median over its epochs)")
    print(f"  columns null in the real row (so also here): {', '.join(facts['empty']) or 'none'}")

    run_dir = tmp / "results" / "store_speed" / new_run_id()
    RunStore.create(tmp / "results", RunMeta("store_speed", run_dir.name, "full", "store_speed.yaml", "", None, True, []),
                    "name: store_speed\n")
    rng = random.Random(0)
    timed_trials = min(args.timed_trials or args.trials, args.trials)
    per_epoch = [0.0] * args.epochs  # write_epoch seconds summed over the timed trials, by epoch index
    driver: list[float] = []  # the driver's end-of-trial seconds, per timed trial
    fill = 0.0
    t_all = time.perf_counter()
    base = {"sweep": "store_speed", "run_id": run_dir.name, "scale": "full"}
    for i in range(args.trials):
        config = make_config(template, i, rng, args.epochs)
        tid = config.trial_id
        rows = [make_row(template, config, run_dir.name, tid, epoch, rng) for epoch in range(args.epochs)]
        if i < timed_trials:
            store = RunStore(run_dir)  # what one trial's process holds
            for epoch, row in enumerate(rows):
                t0 = time.perf_counter()
                store.write_epoch(row)
                per_epoch[epoch] += time.perf_counter() - t0
            t0 = time.perf_counter()  # the driver, when Tune says the trial ended (sweep/runner.py)
            driver_store = RunStore(run_dir)
            epochs = driver_store.trial_epochs(tid)
            summary = summarize(tid, config, epochs, Status.COMPLETED, base)
            summary.update({"started_at": 0.0, "ended_at": 1.0, "wall_time_s": 1.0, "attempts": 1, "gpu_hours": 0.0})
            driver_store.finish_trial(summary, epochs)
            driver.append(time.perf_counter() - t0)
        else:  # the same files on disk, written once (the final state), to make the run full size for reading
            t0 = time.perf_counter()
            summary = summarize(tid, config, rows, Status.COMPLETED, base)
            summary.update({"started_at": 0.0, "ended_at": 1.0, "wall_time_s": 1.0, "attempts": 1, "gpu_hours": 0.0})
            RunStore(run_dir).finish_trial(summary, rows)
            fill += time.perf_counter() - t0
        if (i + 1) % max(1, args.trials // 10) == 0:
            print(f"  {i + 1} trials written ({time.perf_counter() - t_all:.0f} s, load {load_average()})", flush=True)
    total_rows = args.trials * args.epochs
    timed_rows = timed_trials * args.epochs
    write_s = sum(per_epoch)
    per_row = write_s / timed_rows
    files = sorted(p for p in (run_dir / "epochs").iterdir())
    size = sum(p.stat().st_size for p in files)

    # Read back, as the store and as a user does.
    read_store, df_store = timed(lambda: RunStore(run_dir).epochs(), args.read_repeats)
    read_pandas, df_pandas = timed(lambda: pd.read_parquet(run_dir / "epochs"), args.read_repeats)
    assert len(df_store) == total_rows and len(df_pandas) == total_rows, (len(df_store), len(df_pandas))
    assert df_store.trial_id.nunique() == args.trials
    # Where the time goes in RunStore.epochs(): opening files vs converting to pandas.
    t_tables, tables = timed(lambda: [pq.read_table(p, schema=EPOCH_SCHEMA) for p in files], 1)
    t_concat, _ = timed(lambda: pa.concat_tables(tables).to_pandas(), 1)
    # What the driver does at the end of each session: finished trials' files folded into one part.
    t0 = time.perf_counter()
    RunStore(run_dir).compact(set(df_store.trial_id))
    compact_s = time.perf_counter() - t0
    compacted_files = sorted(p for p in (run_dir / "epochs").iterdir())
    read_one_store, df_one = timed(lambda: RunStore(run_dir).epochs(), args.read_repeats)
    read_one_pd, df_one_pd = timed(lambda: pd.read_parquet(run_dir / "epochs"), args.read_repeats)
    assert len(df_one) == total_rows and len(df_one_pd) == total_rows, (len(df_one), len(df_one_pd))

    breakdown = write_breakdown(df_store, tmp / "breakdown", args.epochs)
    typical = facts["epoch_s"]
    full_pass = CIFAR_TRAIN / facts["images_per_sec"]
    print()
    sample = "" if timed_trials == args.trials else f" (timed sample: {timed_trials} trials)"
    write_rows = [
        ["epoch rows written through write_epoch, timed", f"{timed_rows:,}"],
        ["  their write_epoch seconds", f"{write_s:.1f}"],
        ["seconds per epoch row (mean)", f"{per_row * 1e3:.2f} ms"],
        [f"  at epoch 1 / {args.epochs // 2} / {args.epochs} (file of 1 / {args.epochs // 2} / {args.epochs} rows)",
         f"{per_epoch[0] / timed_trials * 1e3:.2f} / {per_epoch[args.epochs // 2 - 1] / timed_trials * 1e3:.2f} / "
         f"{per_epoch[-1] / timed_trials * 1e3:.2f} ms"],
        [f"total write_epoch seconds for all {total_rows:,} rows" + (" (extrapolated)" if sample else ""),
         f"{per_row * total_rows:.0f} s"],
        ["driver end-of-trial (trial_epochs+summarize+finish_trial), median per trial",
         f"{statistics.median(driver) * 1e3:.1f} ms"],
        [f"  x {args.trials} trials" + (" (extrapolated)" if sample else ""),
         f"{statistics.median(driver) * args.trials:.1f} s"],
        ["files in epochs/", f"{len(files):,} ({size / 2**20:.1f} MiB)"],
    ]
    if sample:
        write_rows.append([f"the other {args.trials - timed_trials} trials' files, one finish_trial each (not timed above)",
                           f"{fill:.1f} s"])
    print(table(["write (trial side: write_epoch; driver: end of trial)" + sample, "value"], write_rows))
    print()
    print(table(["share of a trial's time spent writing its rows", "epoch time", "share"], [
        [f"measured smoke epoch ({facts['steps']} steps x {facts['global_batch']}, +validation)", f"{typical:.3f} s",
         f"{100 * per_row / (typical + per_row):.2f}%"],
        [f"  same, largest file (epoch {args.epochs}'s write)", f"{typical:.3f} s",
         f"{100 * (per_epoch[-1] / timed_trials) / (typical + per_epoch[-1] / timed_trials):.2f}%"],
        [f"full CIFAR-10 pass at the measured {facts['images_per_sec']:.0f} img/s (estimate)", f"{full_pass:.1f} s",
         f"{100 * per_row / (full_pass + per_row):.3f}%"],
    ]))
    print()
    print(table(["read back 100k rows" if total_rows == 100_000 else f"read back {total_rows:,} rows",
                 f"median of {args.read_repeats}"], [
        [f"RunStore.epochs()  ({len(files)} files)", f"{read_store:.2f} s"],
        [f"pandas.read_parquet(RUN_DIR/'epochs')  ({len(files)} files)", f"{read_pandas:.2f} s"],
        ["  of RunStore.epochs(): opening+reading the files one by one", f"{t_tables:.2f} s"],
        ["  of RunStore.epochs(): concat + to_pandas", f"{t_concat:.2f} s"],
        [f"RunStore.compact(): {len(files)} files -> {len(compacted_files)} (once, at the session's end)",
         f"{compact_s:.2f} s"],
        [f"after compact: RunStore.epochs()  ({len(compacted_files)} file)", f"{read_one_store:.2f} s"],
        [f"after compact: pandas.read_parquet(RUN_DIR/'epochs')  ({len(compacted_files)} file)", f"{read_one_pd:.2f} s"],
    ]))
    print()
    print(table(["where a write_epoch's time goes (same steps as the store, 30 writes each)", "1 row", f"{args.epochs} rows"],
                [[k, f"{a * 1e3:.2f} ms", f"{b * 1e3:.2f} ms"] for k, (a, b) in breakdown.items()]))
    print()
    verdict_read = "under" if max(read_one_store, read_one_pd) < 1 else "OVER"
    print(f"writing: {per_row * 1e3:.2f} ms per epoch row = {100 * per_row / (typical + per_row):.2f}% of the measured "
          f"smoke epoch ({typical:.2f} s), {100 * per_row / (full_pass + per_row):.3f}% of a full CIFAR-10 epoch "
          f"at the smoke trial's rate")
    print(f"reading a finished run (compacted): RunStore.epochs() {read_one_store:.2f} s, pandas.read_parquet "
          f"{read_one_pd:.2f} s for {total_rows:,} rows -> {verdict_read} one second "
          f"(before compaction, {len(files):,} files: {read_store:.2f} s and {read_pandas:.2f} s)")
    print(f"elapsed {time.time() - started:.0f} s; load average at end: {load_average()}")
    if args.keep:
        print(f"kept: {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
