"""Yardsticks: our training loop against the frameworks' own benchmark programs, run side by side.

The frameworks' own programs measure the loops themselves. On the same model, batch, input size
and threads, our steady-state images/s should be no lower than theirs (ratio ours/theirs >= 1).
Their code is not part of this project and is never copied into it: give the path of a checkout,
and this script runs it as a subprocess beside ours.

  TensorFlow  tf_cnn_benchmarks (github.com/tensorflow/benchmarks, scripts/tf_cnn_benchmarks),
              TF1-style graph code, runs on TF 2.21 with the tf-keras package and TF_USE_LEGACY_KERAS=1
              (set by this script for their process only):
                python tf_cnn_benchmarks.py --model=resnet20 --data_name=cifar10 --batch_size=64
                  --num_warmup_batches=10 --num_batches=40 --device=cpu --data_format=NHWC
                  --num_intra_threads=1 --num_inter_threads=1 --num_gpus=1
                  --variable_update=parameter_server --local_parameter_device=cpu
                  --optimizer=momentum --momentum=0.9 --weight_decay=1e-4 --init_learning_rate=0.01
              (synthetic data: no --data_dir). Their figure: "total images/sec" (images / wall time
              of the timed steps, warm-up excluded).
              ours: tensorflow resnet20_cifar (their resnet20: v1, option-A shortcuts), synthetic,
              1 device, batch 64, 32x32, cpus_per_trial 1 (intra/inter-op threads 1, OMP_NUM_THREADS 1).
  MXNet       example/image-classification/train_cifar10.py of MXNet 1.9.1 (github.com/apache/mxnet,
              tag 1.9.1), Module API + symbols/resnet.py:
                OMP_NUM_THREADS=1 python train_cifar10.py --network resnet --num-layers 20
                  --benchmark 1 --batch-size 64 --gpus '' --num-epochs 1 --num-examples 64*(10+40+1)
                  --disp-batches 10 --image-shape 3,28,28 --lr 0.01
              run through a two-line shim that sets numpy.bool = bool first (mxnet 1.9.1 needs it with
              numpy >= 1.24), from a scratch folder holding empty data/cifar10_{train,val}.rec so that
              their script's download step is skipped (--benchmark 1 never reads them). Their figure:
              Speedometer windows of 10 batches; the windows that start before batch 10 are dropped,
              the rest combined as images / time (harmonic mean of the window speeds).
              ours: mxnet resnet20_cifar_v2 (their pre-activation resnet-20), synthetic, 1 device,
              batch 64, image_size 28, cpus_per_trial 1.

  PyTorch     benchmarks/torch_ddp_peer.py, a plain DistributedDataParallel program written for this
              (PyTorch ships no benchmark program of its own; see its docstring), under torchrun:
                OMP_NUM_THREADS=T python -m torch.distributed.run --standalone --nproc_per_node N
                  benchmarks/torch_ddp_peer.py --model resnet8_cifar --image-size 32 --batch-per-gpu 64
                  --warmup-steps 10 --steps 70 --threads T --lr 0.01 --precision fp32 --device cpu
              with T = max(1, the trial's CPUs / N), as each of the engine's PyTorch processes gets. Its figure:
              images / wall time of its timed steps, summed over the ranks.
              ours: pytorch resnet8_cifar through the engine (python -m sweep on a one-trial file,
              DDP in the engine's worker group), synthetic, N = 1 and 2 emulated devices. The peer
              builds its network with trainables/pytorch/models.py: the same layers by construction;
              the parameter counts of both sides are compared each round.

Our figure, comparable to theirs: images / wall time of an epoch that holds no warm-up step (the
second epoch's images_per_sec: steps_per_epoch=40, warmup_steps=10). Our engine's headline figure,
steady-state images/s (mean of per-step rates after warm-up), is printed beside it; it reads a few
percent higher than an images/time figure by construction (a mean of rates >= the rate of the mean).

Same model: before the rounds, benchmarks/_same_network.py builds their network with their own
code beside ours and compares parameter counts (both frameworks) and outputs with equal weights
(MXNet; their TF1 variable-scope model is compared by counts). A mismatch stops the script.

What differs is the programs, not the models (their flags cannot change this):
  - TensorFlow: theirs is TF1 graph code in a tf.compat.v1 Session; ours is Keras 3 in a tf.function
    under MirroredStrategy (one device), with a host read of loss and accuracy each step.
  - MXNet: theirs is symbolic Module.fit; ours is hybridized Gluon with autograd and a Trainer on
    kvstore 'device'. Their script builds the CIFAR variant only for image heights <= 28 (with
    --image-shape 3,32,32 it takes the ImageNet branch and raises "ValueError: no experiments done
    on num_layers 20"), so both sides run 28x28 inputs.

Get their code (outside this repository; nothing of it is committed here):

  git clone https://github.com/tensorflow/benchmarks /tmp/yardsticks/tf-benchmarks
  git clone --branch 1.9.1 --depth 1 https://github.com/apache/mxnet /tmp/yardsticks/mxnet-1.9.1
  .venv/bin/pip install --no-deps tf-keras==2.21.0   # --no-deps: tf-keras asks for the `tensorflow`
                                                     # wheel; tensorflow-cpu already provides the module

Run (from the repository root; about 3 minutes with the defaults on a 2-core machine):

  .venv/bin/python benchmarks/yardsticks.py \\
      --tf-benchmarks /tmp/yardsticks/tf-benchmarks/scripts/tf_cnn_benchmarks \\
      --mxnet-example /tmp/yardsticks/mxnet-1.9.1/example/image-classification

  .venv/bin/python benchmarks/yardsticks.py --pytorch   # PyTorch only, ~6 min

Either path may be left out to skip that framework; --pytorch adds PyTorch's rows. Other processes
loading the CPU widen the spread; the ours/theirs order flips every round, and medians are reported.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import PYTHON, child_env, load_average, machine, median, run_engine, run_raw, run_torch_peer, spread, table

SHIM = ("import os, runpy, sys, numpy; numpy.bool = bool; script = sys.argv[1]; "
        "sys.path.insert(0, os.path.dirname(script)); sys.argv = sys.argv[1:]; "
        "runpy.run_path(script, run_name='__main__')")
DISPLAY = 10  # Speedometer window (batches)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tf-benchmarks", type=Path, help="folder holding tf_cnn_benchmarks.py (or the repository root)")
    p.add_argument("--mxnet-example", type=Path,
                   help="folder holding MXNet 1.9.1's train_cifar10.py (or the repository root)")
    p.add_argument("--pytorch", action="store_true",
                   help="PyTorch's rows: ours through the engine against benchmarks/torch_ddp_peer.py on 1 and 2 devices")
    p.add_argument("--pytorch-model", default="resnet8_cifar")
    p.add_argument("--cpus-per-trial", type=int, default=1,
                   help="PyTorch: the trial's CPUs, shared by its processes (each gets max(1, CPUs / devices) threads)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=40, help="timed steps on each side (a multiple of 10)")
    p.add_argument("--warmup-steps", type=int, default=10, help="steps left out on each side (a multiple of 10)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    if args.steps % DISPLAY or args.warmup_steps % DISPLAY or args.warmup_steps < DISPLAY:
        p.error(f"--steps and --warmup-steps: multiples of {DISPLAY}, warm-up at least {DISPLAY}")
    return args


def locate(path: Path | None, name: str, below: str) -> Path | None:
    if path is None:
        return None
    for candidate in (path, path / below):
        if (candidate / name).is_file():
            return candidate.resolve()
    raise SystemExit(f"no {name} in {path} or {path / below}")


MODELS = {"tensorflow": "resnet20_cifar", "mxnet": "resnet20_cifar_v2"}  # their networks, in our zoo


def pytorch_config(args: argparse.Namespace, gpus: int) -> dict:
    return {"framework": "pytorch", "model": args.pytorch_model, "num_gpus": gpus, "batch_per_gpu": args.batch,
            "epochs": 2, "steps_per_epoch": args.steps, "warmup_steps": args.warmup_steps, "lr": 0.01,
            "data": "synthetic", "cpus_per_trial": args.cpus_per_trial, "precision": "fp32", "seed": 0}


def ours_pytorch(args: argparse.Namespace, gpus: int, work: Path) -> tuple[float, float, str, dict]:
    """Through the engine: (images/s of the warm-up-free epoch, steady images/s, command, first epoch row)."""
    run = run_engine(pytorch_config(args, gpus), None, work, name="yardstick_pytorch")
    clean = [e["images_per_sec"] for e in run.epochs if e["epoch"] >= 1]
    return median(clean), run.steady, run.command, run.epochs[0]


def theirs_pytorch(args: argparse.Namespace, gpus: int, ours_row: dict | None) -> tuple[float, str]:
    run = run_torch_peer(pytorch_config(args, gpus))
    peer = run.epochs[0]
    if ours_row is not None and (peer["param_count"], peer["threads"]) != (ours_row["param_count"], ours_row["threads"]):
        raise SystemExit(f"pytorch {gpus} dev: the peer and the engine differ: params/threads "
                         f"{peer['param_count']}/{peer['threads']} vs {ours_row['param_count']}/{ours_row['threads']}")
    return peer["images_per_sec"], run.command


def ours(framework: str, args: argparse.Namespace, image_size: int | None) -> tuple[float, float, str]:
    """(images/s of the warm-up-free epoch, steady images/s of the trial, command)."""
    config = {"framework": framework, "model": MODELS[framework], "num_gpus": 1, "batch_per_gpu": args.batch,
              "epochs": 2, "steps_per_epoch": args.steps, "warmup_steps": args.warmup_steps, "lr": 0.01,
              "data": "synthetic", "cpus_per_trial": args.threads}
    if image_size:
        config["image_size"] = image_size
    run = run_raw(config)
    clean = [e["images_per_sec"] for e in run.epochs if e["epoch"] >= 1]
    assert run.epochs[0]["threads"] == args.threads and run.epochs[0]["image_size"] == (image_size or 32)
    return median(clean), run.steady, run.command


def theirs_tf(folder: Path, args: argparse.Namespace) -> tuple[float, str]:
    cmd = [PYTHON, "tf_cnn_benchmarks.py", "--model=resnet20", "--data_name=cifar10", f"--batch_size={args.batch}",
           f"--num_warmup_batches={args.warmup_steps}", f"--num_batches={args.steps}", "--device=cpu",
           "--data_format=NHWC", f"--num_intra_threads={args.threads}", f"--num_inter_threads={args.threads}",
           "--num_gpus=1", "--variable_update=parameter_server", "--local_parameter_device=cpu",
           "--optimizer=momentum", "--momentum=0.9", "--weight_decay=1e-4", "--init_learning_rate=0.01",
           f"--display_every={DISPLAY}"]
    env = child_env(TF_USE_LEGACY_KERAS="1", OMP_NUM_THREADS=str(args.threads))
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    found = re.findall(r"total images/sec: ([0-9.]+)", out)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"tf_cnn_benchmarks failed (rc {proc.returncode}): {shlex.join(cmd)}\n{out[-3000:]}")
    if re.search(r"images/sec: [0-9.]+ .*\bnan\b", out):
        print("  note: tf_cnn_benchmarks reported a nan loss", flush=True)
    return float(found[-1]), "cd " + shlex.quote(str(folder)) + " && TF_USE_LEGACY_KERAS=1 " + \
        f"OMP_NUM_THREADS={args.threads} " + shlex.join(cmd)


def theirs_mxnet(folder: Path, args: argparse.Namespace, scratch: Path) -> tuple[float, str]:
    (scratch / "data").mkdir(parents=True, exist_ok=True)
    for name in ("cifar10_train.rec", "cifar10_val.rec"):  # their download step skips existing files
        (scratch / "data" / name).touch()
    batches = args.warmup_steps + args.steps + 1  # Speedometer's first window starts after batch 0
    script = folder / "train_cifar10.py"
    cmd = [PYTHON, "-c", SHIM, str(script), "--network", "resnet", "--num-layers", "20", "--benchmark", "1",
           "--batch-size", str(args.batch), "--gpus", "", "--num-epochs", "1",
           "--num-examples", str(args.batch * batches), "--disp-batches", str(DISPLAY),
           "--image-shape", "3,28,28", "--lr", "0.01"]
    env = child_env(OMP_NUM_THREADS=str(args.threads))
    proc = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    windows = [(int(a), float(s)) for a, s in re.findall(r"Batch \[(\d+)-\d+\]\s+Speed: ([0-9.]+) samples/sec", out)]
    kept = [s for start, s in windows if start >= args.warmup_steps]
    if proc.returncode != 0 or len(kept) != args.steps // DISPLAY:
        raise RuntimeError(f"train_cifar10.py failed or printed {len(kept)} windows (rc {proc.returncode}): "
                           f"{shlex.join(cmd)}\n{out[-3000:]}")
    harmonic = len(kept) / sum(1 / s for s in kept)
    shown = ("mkdir -p /tmp/mx-scratch/data && touch /tmp/mx-scratch/data/cifar10_train.rec "
             "/tmp/mx-scratch/data/cifar10_val.rec && cd /tmp/mx-scratch && "
             f"OMP_NUM_THREADS={args.threads} " + shlex.join(cmd))
    return harmonic, shown


def same_network(framework: str, folder: Path) -> dict:
    """benchmarks/_same_network.py's verdict on their network against ours; stops the script on a mismatch."""
    cmd = [PYTHON, str(Path(__file__).with_name("_same_network.py")), framework, str(folder)]
    proc = subprocess.run(cmd, env=child_env(TF_USE_LEGACY_KERAS="1", OMP_NUM_THREADS="1"), capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    outputs_differ = found.get("max_abs_output_diff", 0) > 1e-4 * max(1.0, found.get("output_scale", 1))
    if found["their_params"] != found["our_params"] or outputs_differ:
        raise SystemExit(f"{framework}: not the same network as theirs: {found}")
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tf_dir = locate(args.tf_benchmarks, "tf_cnn_benchmarks.py", "scripts/tf_cnn_benchmarks")
    mx_dir = locate(args.mxnet_example, "train_cifar10.py", "example/image-classification")
    if tf_dir and importlib.util.find_spec("tf_keras") is None:
        raise SystemExit("tf_cnn_benchmarks needs the tf-keras package on TF 2.21: "
                         ".venv/bin/pip install --no-deps tf-keras==2.21.0")
    if not tf_dir and not mx_dir and not args.pytorch:
        raise SystemExit("give --tf-benchmarks, --mxnet-example and/or --pytorch (see the docstring)")
    started = time.time()
    print(f"yardsticks: resnet20 CIFAR (PyTorch: {args.pytorch_model}, 1 and 2 devices, {args.cpus_per_trial} CPUs a trial), "
          f"batch {args.batch}, 1 device (CPU), {args.threads} thread(s), "
          f"{args.warmup_steps} warm-up + {args.steps} timed steps, {args.repeats} rounds")
    print(f"machine: {machine()}; load average at start: {load_average()}")
    print("reproduce: " + shlex.join([".venv/bin/python", "benchmarks/yardsticks.py",
                                      *(argv if argv is not None else sys.argv[1:])]))
    scratch = Path(tempfile.mkdtemp(prefix="yardsticks-"))
    cases = []
    if tf_dir:
        cases.append(("tensorflow", "tf_cnn_benchmarks resnet20, 32x32", None, lambda: theirs_tf(tf_dir, args)))
    if mx_dir:
        cases.append(("mxnet", "train_cifar10.py resnet-20, 28x28", 28, lambda: theirs_mxnet(mx_dir, args, scratch)))
    engine_rows: dict[str, dict] = {}  # PyTorch: the engine's last epoch row per case, for the peer's check
    for gpus in (1, 2) if args.pytorch else ():
        key = f"pytorch-{gpus}"
        cases.append((key, f"torch_ddp_peer.py {gpus} dev, 32x32", None,
                      lambda gpus=gpus, key=key: theirs_pytorch(args, gpus, engine_rows.get(key))))
        MODELS[key] = f"{args.pytorch_model} (engine)"
    for framework, _, _, _ in cases:
        if framework.startswith("pytorch"):
            continue
        print(f"same network ({framework}): {same_network(framework, tf_dir if framework == 'tensorflow' else mx_dir)}",
              flush=True)
    results = {c[0]: {"theirs": [], "ours": [], "steady": []} for c in cases}
    commands: dict[str, dict[str, str]] = {}
    for rnd in range(args.repeats):
        for i, (framework, _, size, theirs) in enumerate(cases):
            order = ("ours", "theirs") if (rnd + i) % 2 == 0 else ("theirs", "ours")
            got = {}
            for side in order:
                if side == "ours" and framework.startswith("pytorch"):
                    gpus = int(framework.split("-")[1])
                    clean, steady, cmd, engine_rows[framework] = ours_pytorch(args, gpus, scratch / f"{framework}-{rnd}")
                    results[framework]["ours"].append(clean)
                    results[framework]["steady"].append(steady)
                elif side == "ours":
                    clean, steady, cmd = ours(framework, args, size)
                    results[framework]["ours"].append(clean)
                    results[framework]["steady"].append(steady)
                else:
                    value, cmd = theirs()
                    results[framework]["theirs"].append(value)
                got[side] = cmd
            commands[framework] = got
            r = results[framework]
            print(f"  round {rnd + 1}/{args.repeats} {framework:<10} theirs {r['theirs'][-1]:7.1f}  ours {r['ours'][-1]:7.1f} "
                  f"(steady {r['steady'][-1]:.1f}) img/s  order {'/'.join(order)}, load {load_average()}", flush=True)
    rows, lines = [], []
    for framework, what, _, _ in cases:
        r = results[framework]
        ratio = median(r["ours"]) / median(r["theirs"])
        paired = median([o / t for o, t in zip(r["ours"], r["theirs"])])
        rows.append([framework, f"{what} vs our {MODELS[framework]}", f"{median(r['theirs']):.1f}", spread(r["theirs"]),
                     f"{median(r['ours']):.1f}", spread(r["ours"]), f"{median(r['steady']):.1f}", f"{ratio:.3f}",
                     f"{paired:.3f}"])
        ahead = sum(o > t for o, t in zip(r["ours"], r["theirs"]))
        lines.append(f"{framework}: ours/theirs = {ratio:.3f} -> {'no lower than theirs' if ratio >= 1 else 'LOWER than theirs'}"
                     f" (ours ahead in {ahead} of {len(r['ours'])} rounds)")
    print()
    print(table(["framework", "yardstick", "theirs img/s", "spread", "ours img/s", "spread", "ours steady",
                 "ours/theirs", "paired"], rows))
    print("\n(img/s: images / wall time of the timed steps, median over rounds; ours steady: the engine's "
          "mean-of-per-step-rates figure, for reference; spread: (max-min)/median; paired: median of per-round ratios)")
    print("\n" + "\n".join(lines))
    print(f"\nelapsed {time.time() - started:.0f} s; load average at end: {load_average()}")
    print("commands (last round):")
    for framework, cmds in commands.items():
        print(f"  {framework} theirs: {cmds['theirs']}\n  {framework} ours:   {cmds['ours']}")
    import shutil
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
