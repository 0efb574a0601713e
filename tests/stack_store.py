"""Write or read a run through the engine's store, in whichever interpreter runs this file
(tests/test_stacks.py runs it in both stacks: numpy 1.26 + pandas 2 + pyarrow < 25, and numpy 2 +
pandas 3 + pyarrow 26).

  python tests/stack_store.py write RUN_DIR   two trials' epoch rows and summaries, compacted as a run leaves them
  python tests/stack_store.py read RUN_DIR    what the store reads back, as one JSON line

Both print what they read (after writing, the writer reads its own run), so the test compares the
two stacks' readings of the same files.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweep import store  # noqa: E402
from sweep.schema import Status  # noqa: E402
from trainables.config import TrialConfig  # noqa: E402


def write(run_dir: Path) -> None:
    """Rows of every kind of column the store has: text, integers, floats (a NaN among them), booleans,
    lists, nulls; one trial compacted into a part file, one left in its own file."""
    import numpy
    import pandas
    import pyarrow

    run = store.RunStore(run_dir)
    run.epochs_dir.mkdir(parents=True)
    run.trials_dir.mkdir()
    for n, trial in enumerate(("t-compacted", "t-own-file")):
        config = TrialConfig(framework="mxnet", model="resnet8_cifar", num_gpus=2, batch_per_gpu=8, epochs=2,
                             lr=0.05, data="synthetic", steps_per_epoch=3, lr_decay_epochs=(1,), seed=7 + n)
        epochs = []
        for epoch in range(2):
            row = {**store.config_columns(config), "sweep": "stacks", "run_id": "r1", "trial_id": trial,
                   "epoch": epoch, "status": Status.RUNNING.value, "scale": "smoke", "data_kind": "synthetic",
                   "epoch_time_s": 1.5 + epoch, "val_time_s": None, "steady_images_per_sec": 100.25 * (epoch + 1),
                   "steady_steps": 2, "train_loss": math.nan if (n, epoch) == (1, 1) else 2.3 - epoch,
                   "val_acc": None, "peak_device_mem_mib": [12.5, 13.0], "peak_host_rss_mib": 300.0,
                   "tf32_allowed": n == 0, "reported_at": 1000.0 + epoch, "numpy_version": numpy.__version__,
                   "python_version": sys.version.split()[0], "environment": f"pandas {pandas.__version__} "
                   f"pyarrow {pyarrow.__version__}", "ray_gpu_ids": "0,1", "pid": 4242}
            run.write_epoch(row)
            epochs.append(row)
        run.finish_trial(store.summarize(trial, config, epochs, Status.COMPLETED, {"sweep": "stacks", "run_id": "r1"}),
                         epochs)
    run.compact({"t-compacted"})


def _plain(value: object) -> object:
    """A value as JSON holds it: NaN as "nan", numpy scalars and arrays as Python ones."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def read(run_dir: Path) -> dict[str, object]:
    """The run as the report reads it (pandas frames) and as the engine reads summaries (plain records)."""
    import pandas

    run = store.RunStore(run_dir)
    frames = {name: frame for name, frame in (("epochs", run.epochs()), ("trials", run.trials()))}
    out: dict[str, object] = {"trial_rows": [{k: _plain(v) for k, v in row.items()} for row in run.trial_rows()]}
    for name, frame in frames.items():
        # Missing values as None, whatever marks them in this pandas (None, NaN, pd.NA; pandas 3's text
        # columns mark them NaN): a frame cannot tell a stored NaN from a null, trial_rows above can.
        out[name] = [{k: None if pandas.api.types.is_scalar(v) and pandas.isna(v) else _plain(v) for k, v in row.items()}
                     for row in frame.to_dict("records")]
    out["finished"] = {k: v.value for k, v in run.finished().items()}
    out["gpu_hours"] = run.gpu_hours()
    return out


if __name__ == "__main__":
    command, folder = sys.argv[1], Path(sys.argv[2])
    if command == "write":
        write(folder)
    print(json.dumps(read(folder), sort_keys=True))
