"""framework: keras (issue 43), step 1: the zoo's networks built from backend-agnostic Keras 3 layers
(trainables/keras/models.py), the same definitions trainables/tensorflow/models.py builds on TensorFlow's fused
batch norm. Parameter counts as the other frameworks' (tests/test_models.py: CASES), on each Keras backend here."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from test_models import BATCH, CASES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Run in a fresh interpreter: KERAS_BACKEND is read once, when keras is first imported.
COUNT = """
import json, sys
import keras
from trainables.keras import models
out = {}
for name, size in json.loads(sys.argv[1]).items():
    model = models.build(name, size)
    x = keras.random.uniform((2, size, size, 3))
    logits = model(x, training=True)  # a training-mode forward pass: the batch norm's moments on this backend
    out[name] = [models.count_params(model), list(logits.shape), keras.backend.backend()]
print(json.dumps(out))
"""


def _counts(backend: str, cases: dict[str, tuple[int, int]]) -> dict[str, list]:
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=ROOT)
    sizes = {name: size for name, (size, _) in cases.items()}
    done = subprocess.run([sys.executable, "-c", COUNT, json.dumps(sizes)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "torch", "jax"])
def test_parameter_counts_match_the_other_frameworks(backend: str) -> None:
    if importlib.util.find_spec({"torch": "torch"}.get(backend, backend)) is None:
        pytest.skip(f"{backend} is not installed in this environment (framework: keras on {backend} needs it)")
    counts = _counts(backend, CASES)
    for name, (_, expected) in CASES.items():
        count, shape, ran_on = counts[name]
        assert ran_on == backend
        assert count == expected, name
        assert shape == [2, 10], name


# Every shape jax.random.normal is asked for while ResNet-8 is built twice from one seed, and what the kernels hold.
JAX_KERNELS = """
import json, jax, keras, numpy as np
asked, normal = set(), jax.random.normal
jax.random.normal = lambda key, shape=(), *a, **k: asked.add(tuple(shape)) or normal(key, shape, *a, **k)
from trainables.keras import models
keras.utils.set_random_seed(0)
first = models.build("resnet8_cifar", 32)
keras.utils.set_random_seed(0)
again = models.build("resnet8_cifar", 32)
kernels = [np.asarray(w.value) for w in first.weights if len(w.shape) in (2, 4)]
print(json.dumps({"asked": sorted(asked), "shapes": sorted({k.shape for k in kernels}),
                  "same": all(np.array_equal(a, b) for a, b in zip(first.get_weights(), again.get_weights())),
                  "std": [[float(k.std()), float(np.sqrt(2 / np.prod(k.shape[:-1]))), k.size] for k in kernels]}))
"""


@pytest.mark.slow  # JAX and Keras imported: ~5 s
def test_jax_draws_every_kernel_with_one_program_and_he_et_als_std() -> None:
    """On JAX the kernels' gaussian is drawn in blocks of one size (trainables/keras/models.py: JaxHeNormal): XLA
    compiles a program per shape drawn, which took ResNet-8's build 10 CPU-s. One seed builds the same weights, each
    kernel with std sqrt(2 / fan_in) as the other frameworks'."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed in this environment (framework: keras on jax needs it)")
    done = subprocess.run([sys.executable, "-c", JAX_KERNELS], env=dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=ROOT),
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found["shapes"]) >= 5 and found["asked"] == [[1 << 16]], found["asked"]
    assert found["same"]
    for std, expected, size in found["std"]:
        assert std == pytest.approx(expected, rel=0.1 if size >= 400 else 0.3), (std, expected, size)


def test_agnostic_layers_compute_as_the_fused_ones() -> None:
    """The backend-agnostic batch norm and shortcut give the TensorFlow-fused model's outputs, in training mode
    (batch moments) and after it (moving statistics): one network, the two parts swapped."""
    import keras

    from trainables.keras import models as keras_models
    from trainables.tensorflow import models as tf_models

    name, (size, expected) = "resnet8_cifar", CASES["resnet8_cifar"]
    keras.utils.set_random_seed(0)
    fused, plain = tf_models.build(name, size), keras_models.build(name, size)
    assert int(fused.count_params()) == keras_models.count_params(plain) == expected
    plain.set_weights(fused.get_weights())  # same layers made in the same order: the weights line up
    x = np.random.default_rng(0).random((BATCH, size, size, 3), dtype=np.float32)
    np.testing.assert_allclose(np.asarray(plain(x, training=True)), np.asarray(fused(x, training=True)), atol=1e-4)
    for a, b in zip(plain.get_weights(), fused.get_weights()):  # moving statistics updated alike
        np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(np.asarray(plain(x, training=False)), np.asarray(fused(x, training=False)), atol=1e-4)


# Step 2: the Keras trainable (trainables/keras/backend.py), through the loop, on each backend.

def _python(backend: str) -> str | None:
    """An interpreter with Keras 3 and the backend: this one, else (jax: it needs numpy >= 2) the environment
    `python -m sweep env create keras` made; None: neither."""
    if importlib.util.find_spec(backend) and importlib.util.find_spec("keras"):
        return sys.executable
    if backend != "jax":
        return None
    from sweep import environments

    made = environments.made_environment("keras")
    return str(made.value) if made else None


def _needs(backend: str) -> str:
    python = _python(backend)
    if python is None:
        pytest.skip(f"no interpreter with Keras 3 and {backend} here (jax: `python -m sweep env create keras` makes one)")
    return python


def _child_env() -> dict[str, str]:
    """A trial's process: no inherited backend, thread count or XLA flags; the project on the path."""
    drop = ("KERAS_BACKEND", "XLA_FLAGS", "JAX_PLATFORMS", "OMP_NUM_THREADS", "RAY_ADDRESS")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}


def _trial(backend: str, config: dict, *args: str) -> subprocess.Popen:
    """One keras trial's loop (python -m trainables.local) on emulated devices, in a process of its own."""
    cfg = {**config, "framework": "keras", "keras_backend": backend}
    return subprocess.Popen([_needs(backend), "-m", "trainables.local", json.dumps(cfg), "--emulate", *args], cwd=ROOT,
                            env=_child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _rows(process: subprocess.Popen, timeout: float = 600) -> list[dict]:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def learnable(tmp_path_factory: pytest.TempPathFactory):
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import learnability

    return learnability, learnability.write_data(tmp_path_factory.mktemp("learnable"))


@pytest.mark.slow
# Heavy in lane 1 (issue 46): CI runs the 1-GPU case in lane 2 (.ci/run names it), whose driver holds all three backends;
# on 2 GPUs, CI checks the step of 2 devices exactly (test_two_devices_take_the_step_of_one_...).
@pytest.mark.heavy
@pytest.mark.parametrize("gpus", [1, 2])
def test_a_keras_trial_learns_on_each_backend(learnable, gpus: int) -> None:
    """resnet8_cifar on the learnable CIFAR-format set (benchmarks/learnability.py: its recipe and bar, 0.8; chance
    is 0.1), through the loop on each backend at once, on 1 and 2 emulated GPUs (torch: 1; on 2 it runs a process per
    GPU, through the sweep: test_keras_on_torch_learns_as_ranks_across_two_nodes); what the rows say of the
    arithmetic and the network."""
    learnability, data_dir = learnable
    config = {**learnability.config("resnet8_cifar", "keras"), "num_gpus": gpus}
    backends = ("tensorflow", "torch", "jax") if gpus == 1 else ("tensorflow", "jax")
    runs = {b: _trial(b, config, "--data-dir", str(data_dir)) for b in backends if _python(b)}
    assert "tensorflow" in runs  # .venv has it: at least one backend is always tested here
    for backend, process in runs.items():
        rows = _rows(process)
        assert [r["epoch"] for r in rows] == [0, 1], backend
        last = rows[-1]
        assert last["val_acc"] > learnability.BAR, (backend, [r["val_acc"] for r in rows])
        assert last["data_kind"] == "real" and last["val_examples"] == learnability.VAL_IMAGES
        assert last["framework_version"].startswith(f"keras 3.") and f" {backend} " in last["framework_version"] + " "
        assert last["param_count"] == CASES["resnet8_cifar"][1]
        assert last["model_gflops_per_image"] > 0 and last["computed_precision"] == "fp32"
        assert last["compiler"] == ("xla" if backend == "jax" else None)  # JAX compiles every step
        assert last["peak_device_mem_mib"] is None and last["emulated_device_mem_mib"] > 0


# Three steps of cifar10_conv (no batch norm: per-device statistics would differ) on 8 fixed images, the lr cut before
# the third, and the scoring of 5 images (3 on one device, 2 and a padding image on the other): tests/test_data_parallel.py
STEPS = """
import json, sys
import numpy as np
from trainables.config import TrialConfig
from trainables.loop import Devices, load_backend
gpus, out = int(sys.argv[1]), sys.argv[2]
cfg = TrialConfig(framework="keras", keras_backend=sys.argv[3], model="cifar10_conv", num_gpus=gpus,
                  batch_per_gpu=8 // gpus, epochs=1, lr=0.1, weight_decay=0.01, seed=3)
backend = load_backend(cfg, Devices.of([str(i) for i in range(gpus)], emulated=True), 32)
rng = np.random.default_rng(7)
x, y = rng.random((8, 32, 32, 3), dtype=np.float32), rng.integers(0, 10, 8)
before = backend.model.get_weights()
steps = [backend.train_step(backend.put(x, y), lr) for lr in json.loads(sys.argv[4])]
logits = backend.logits(x[:5])
np.savez(out, *before, *backend.model.get_weights())
print(json.dumps({"steps": steps, "scored": backend.eval_step(backend.put(x[:5], y[:5])),
                  "right": int((logits.argmax(1) == y[:5]).sum())}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_two_devices_take_the_step_of_one_on_the_same_global_batch(backend: str, tmp_path) -> None:
    """Data parallel as Keras does it (a MirroredStrategy; DataParallel over XLA host devices): the gradients are the
    mean over the global batch, weight decay is added once, an lr change applies alike; validation scores each image
    once however the batch splits."""
    from test_data_parallel import CLOSE, LRS, relative_differences

    python, found = _needs(backend), {}
    for gpus in (1, 2):
        done = subprocess.run([python, "-c", STEPS, str(gpus), str(tmp_path / f"{gpus}.npz"), backend, json.dumps(LRS)],
                              cwd=ROOT, env=_child_env(), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        with np.load(tmp_path / f"{gpus}.npz") as saved:
            arrays = [saved[f"arr_{i}"] for i in range(len(saved.files))]
        found[gpus] = json.loads(done.stdout.strip().splitlines()[-1]), arrays[:len(arrays) // 2], arrays[len(arrays) // 2:]
    (one, one_before, one_after), (two, two_before, two_after) = found[1], found[2]
    assert max(relative_differences(one_before, one_after, two_before, two_after)) < CLOSE
    for a, b in zip(one["steps"], two["steps"]):
        assert a[1:] == b[1:] == [b[1], 8] and a[0] == pytest.approx(b[0], rel=1e-5)
    assert one["scored"] == two["scored"] == [one["right"], 5]


# keras_backend torch on 2 GPUs: two processes, a rank each, under one gloo process group (as sweep/workers.py starts
# a trial's ranks); each trains its half of the same 8 fixed images; rank 0 also scores 5 images alone (no collective).
PROCESSES = """
import hashlib, json, os, sys
import numpy as np
from trainables.config import TrialConfig
from trainables.loop import Devices, load_backend
backend_name, rank, count, nodes, out, lrs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
cfg = TrialConfig(framework="keras", keras_backend=backend_name, model="cifar10_conv", num_gpus=count, nodes=nodes,
                  batch_per_gpu=8 // count, epochs=1, lr=0.1, weight_decay=0.01, seed=3)
backend = load_backend(cfg, Devices.of([str(rank)], emulated=True), 32)
rng = np.random.default_rng(7)
x, y = rng.random((8, 32, 32, 3), dtype=np.float32), rng.integers(0, 10, 8)
part = slice(rank * 8 // count, (rank + 1) * 8 // count)
before = backend.model.get_weights()
poisoned = os.environ.get("POISON_RANK_STEP")  # "RANK:STEP": that rank's images are NaN in that step
steps = [backend.train_step(backend.put(x[part] * (np.nan if poisoned == f"{rank}:{step}" else 1), y[part]), lr)
         for step, lr in enumerate(json.loads(lrs))]
if rank == 0:
    np.savez(out, *before, *backend.model.get_weights())
weights = hashlib.sha1(b"".join(w.tobytes() for w in backend.model.get_weights())).hexdigest()
print(json.dumps({"steps": steps, "weights": weights, "right": int((backend.logits(x[:5]).argmax(1) == y[:5]).sum()),
                  "scored": backend.eval_step(backend.put(x[:5], y[:5])) if rank == 0 else None}))
"""


def _processes(backend: str, nodes: int, out: str, lrs: list[float], envs: list[dict[str, str]],
               script: str = PROCESSES) -> list[dict]:
    """PROCESSES (or another script of its arguments: SHARDED) as one trial's processes on this machine, one per entry
    of envs (what each is told of the others), on `nodes` nodes; in PROCESSES each drives one emulated GPU. Their JSON
    lines."""
    count = len(envs)
    procs = [subprocess.Popen([_needs(backend), "-c", script, backend, str(rank), str(count), str(nodes), out,
                               json.dumps(lrs)], cwd=ROOT, text=True, env={**_child_env(), **env},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for rank, env in enumerate(envs)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    return [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]


def _ranks(world: int, out: str, lrs: list[float], poison: str = "") -> list[dict]:
    """keras on torch as `world` ranks on one node (one: no process group), torch's env:// rendezvous in their
    environment."""
    from test_pytorch import free_port

    env = {"SWEEP_DDP_TIMEOUT_S": "60", "POISON_RANK_STEP": poison}
    if world > 1:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world))
    return _processes("torch", 1, out, lrs, [{**env, **({"RANK": str(r)} if world > 1 else {})} for r in range(world)])


def _check_two_take_the_step_of_one(one: list[dict], two: list[dict], tmp_path) -> None:
    """One process's trained weights (tmp_path/1.npz) are two processes' (2.npz) to float tolerance; each of the two
    counted its own half of every step's images, and their sums make the one's; the same all-reduced gradient was
    applied by both; the first of the two validated alone, as the one did."""
    from test_data_parallel import CLOSE, relative_differences

    (one,) = one
    found = {}
    for n in (1, 2):
        with np.load(tmp_path / f"{n}.npz") as saved:
            arrays = [saved[f"arr_{i}"] for i in range(len(saved.files))]
        found[n] = arrays[:len(arrays) // 2], arrays[len(arrays) // 2:]
    assert max(relative_differences(*found[1], *found[2])) < CLOSE
    for whole, *halves in zip(one["steps"], *(p["steps"] for p in two)):
        assert [h[2] for h in halves] == [4, 4] and whole[2] == 8
        assert sum(h[0] for h in halves) == pytest.approx(whole[0], rel=1e-5)
        assert sum(h[1] for h in halves) == whole[1]
    assert two[0]["weights"] == two[1]["weights"]
    assert two[0]["scored"] == one["scored"] == [one["right"], 5]


@pytest.mark.slow  # Keras on torch imported in three processes: ~30 s
def test_two_torch_ranks_take_the_step_of_one_process_on_the_same_global_batch(tmp_path) -> None:
    """keras_backend torch on 2 GPUs: a rank each, the Keras model in DistributedDataParallel. The gradients are the mean
    over the global batch (DDP averages the ranks' means), weight decay is added once, an lr change applies alike; each
    rank counts its own images, and the two ranks' loss sums make the one process's."""
    from test_data_parallel import LRS

    _check_two_take_the_step_of_one(_ranks(1, str(tmp_path / "1.npz"), LRS), _ranks(2, str(tmp_path / "2.npz"), LRS),
                                    tmp_path)


@pytest.mark.slow  # Keras on torch imported in two processes: ~20 s
def test_every_torch_rank_sees_a_non_finite_loss_in_the_same_step(tmp_path) -> None:
    """Rank 1's images are NaN in step 1, rank 0's finite: both ranks report a NaN loss in step 1 (the flag rides on
    the gradients' all-reduce, trainables/pytorch/backend.py's hook), so that the loops of both stop at the same step
    (a rank that stopped alone would leave the other in the next step's all-reduce until the timeout)."""
    import math

    from test_data_parallel import LRS

    ranks = _ranks(2, str(tmp_path / "2.npz"), LRS, poison="1:1")
    assert [math.isfinite(r["steps"][0][0]) for r in ranks] == [True, True]
    assert [math.isnan(r["steps"][1][0]) for r in ranks] == [True, True]


# keras_backend jax or tensorflow on 2 nodes x 1 GPU: a worker per node (as sweep/workers.py starts them: TF_CONFIG, or
# JAX's multi-process start), each training its half of the same 8 fixed images; the first worker also scores 5 images
# alone (no collective), as the loop's first worker validates.
def _workers(backend: str, nodes: int, out: str, lrs: list[float], script: str = PROCESSES) -> list[dict]:
    """keras on `backend` as `nodes` workers on this machine, one per node, each told its cluster as sweep/workers.py
    tells it."""
    from test_pytorch import free_port

    from sweep.workers import tf_config

    addresses = [f"127.0.0.1:{free_port()}" for _ in range(nodes)]

    def cluster(rank: int) -> dict[str, str]:
        if nodes == 1:
            return {}
        if backend == "tensorflow":
            return {"TF_CONFIG": tf_config({"worker": addresses}, "worker", rank)}
        return {"KERAS_DISTRIBUTION_JOB_ADDRESSES": addresses[0], "KERAS_DISTRIBUTION_NUM_PROCESSES": str(nodes),
                "KERAS_DISTRIBUTION_PROCESS_ID": str(rank)}

    return _processes(backend, nodes, out, lrs, [cluster(rank) for rank in range(nodes)], script)


@pytest.mark.slow  # Keras imported in three processes: ~25 s
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_two_workers_take_the_step_of_one_on_the_same_global_batch(backend: str, tmp_path) -> None:
    """keras_backend tensorflow (MultiWorkerMirroredStrategy) and jax (one JAX program over two processes, gloo's
    collectives on the CPU) across 2 nodes: the gradients are the mean over the global batch, weight decay is added
    once, an lr change applies alike; each worker counts its own images, and the two workers' sums make the one
    worker's; the first worker scores alone, as one worker does."""
    from test_data_parallel import LRS

    _check_two_take_the_step_of_one(_workers(backend, 1, str(tmp_path / "1.npz"), LRS),
                                    _workers(backend, 2, str(tmp_path / "2.npz"), LRS), tmp_path)


# A jax trial on 2 emulated GPUs (one process driving both, or 2 nodes x 1 GPU: _workers' arguments, each of the `count`
# processes driving 2 // count devices), its steps called as a Ray actor calls them (sweep/workers.py): on a thread
# other than the one that built the Backend (Keras keeps its distribution per thread). What the compiled steps compute
# on, as XLA lays it out (jax.debug.inspect_array_sharding on the network's outputs, as StepCounts is traced), and where
# put() leaves the batch: each array's shards, as images per device.
SHARDED = """
import json, sys
from concurrent.futures import ThreadPoolExecutor
import jax
import numpy as np
from trainables.config import TrialConfig
from trainables.loop import Devices, load_backend
rank, count, nodes = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cfg = TrialConfig(framework="keras", keras_backend="jax", model="cifar10_conv", num_gpus=2, nodes=nodes,
                  batch_per_gpu=4, epochs=1, lr=0.1, seed=3)
backend = load_backend(cfg, Devices.of([str(i) for i in range(2 // count)], emulated=True), 32)
outputs, placed = [], []
count_step = backend.counts.update_state

def update_state(y_true, y_pred, sample_weight=None):  # in the step being traced: y_pred's layout as XLA compiles it
    rows = y_pred.shape[0]
    jax.debug.inspect_array_sharding(y_pred, callback=lambda s: outputs.append(
        {"rows": rows, "devices": len(s.device_set), "rows_per_device": s.shard_shape(tuple(y_pred.shape))[0]}))
    return count_step(y_true, y_pred, sample_weight)

def steps():
    rng = np.random.default_rng(7)
    x, y = rng.random((8, 32, 32, 3), dtype=np.float32), rng.integers(0, 10, 8)
    part = slice(rank * 8 // count, (rank + 1) * 8 // count)  # this process's images of the global batch
    batch = backend.put(x[part], y[part])
    placed.extend(sorted(s.data.shape[0] for s in t.addressable_shards) for t in batch)
    backend.train_step(batch, 0.1)
    if count == 1:  # the trial's scoring step too (across nodes the first worker scores alone, outside its steps)
        backend.eval_step(backend.put(x[:5], y[:5]))  # 5 images, padded to 6

backend.counts.update_state = update_state
with ThreadPoolExecutor(1) as actor:  # its calls on a thread of their own
    actor.submit(steps).result()
print(json.dumps({"outputs": outputs, "placed": placed}))
"""


@pytest.mark.slow  # Keras on JAX imported in three processes: 99 s the two at a load average of 7-12 on 2 cores
@pytest.mark.parametrize("nodes", [1, 2])
def test_jax_steps_called_from_another_thread_compute_on_the_batch_sharded_over_the_trials_devices(nodes: int,
                                                                                                    tmp_path) -> None:
    """keras_backend jax on 2 emulated GPUs, on one node and across two, its steps called from a thread of their own (a
    Ray actor's): each step computes on the global batch split over the trial's 2 devices (the DataParallel's layout),
    and put() lays each array of the batch out on the devices it computes on, a device's share of the images on each
    (across nodes, each process its own images on its one device). Seen failing: a step outside the DataParallel's scope
    (_run) across nodes takes a process's 4 images for the whole batch; on one node, before put() laid the batch out,
    it computed on the whole batch on each device (rows_per_device 8); a batch put on the first device alone ([8])."""
    found = _workers("jax", nodes, str(tmp_path / "unused.npz"), [0.1], script=SHARDED)
    train = {"rows": 8, "devices": 2, "rows_per_device": 4}
    if nodes == 1:
        (one,) = found
        assert one["outputs"] == [train, {"rows": 6, "devices": 2, "rows_per_device": 3}]  # the padded scoring batch
        assert one["placed"] == [[4, 4]] * 3  # images, labels, weights: 4 on each device, not 8 on the first
    else:
        assert [p["outputs"] for p in found] == [[train], [train]]
        assert [p["placed"] for p in found] == [[[4]] * 3] * 2


TORCH_RANKS_SWEEP = """
name: keras_torch_ranks
description: "keras on torch, 2 GPUs across two nodes: a rank each"
fixed: {{framework: keras, keras_backend: torch, num_gpus: 2, nodes: 2, {fixed}}}
scales: {{smoke: {{}}, full: {{}}}}
"""


@pytest.fixture(scope="module")
def two_nodes():
    from conftest import two_node_cluster

    yield from two_node_cluster({"num_cpus": 2, "num_gpus": 2})


@pytest.mark.slow
@pytest.mark.heavy
def test_keras_on_torch_learns_as_ranks_across_two_nodes(learnable, two_nodes, tmp_path) -> None:
    """keras_backend torch on 2 emulated GPUs through `python -m sweep` on a real two-node Ray cluster: a rank per GPU
    (sweep/workers.py, as PyTorch's), one on each node; the trial learns the learnable set (the recipe's global batch,
    split over the ranks) past benchmarks/learnability.py's bar, and its rows list both ranks. Two ranks on one node
    run the same code placed otherwise; their step is checked exactly, against one process, by
    test_two_torch_ranks_take_the_step_of_one_process_on_the_same_global_batch, so this test no longer also trains a
    one-node trial (it doubled the test's CPU: issue 46)."""
    import pandas as pd
    import yaml
    from conftest import run_cli

    from sweep import store

    learnability, data_dir = learnable
    recipe = learnability.config("resnet8_cifar", "keras")
    fixed = {k: v for k, v in recipe.items() if k not in ("framework", "num_gpus", "batch_per_gpu")}
    fixed["batch_per_gpu"] = recipe["batch_per_gpu"] // 2  # the recipe's global batch
    sweep = tmp_path / "keras_torch_ranks.yaml"
    sweep.write_text(TORCH_RANKS_SWEEP.format(fixed=yaml.safe_dump(fixed, default_flow_style=True).strip()[1:-1]))
    results = tmp_path / "results"
    out = run_cli(str(sweep), "--address", two_nodes.address, "--data-dir", str(data_dir), "--results", str(results),
                  "--scale", "full", timeout=1800)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    folder = store.run_dirs(results, "keras_torch_ranks")[-1]
    trials, epochs = pd.read_parquet(folder / "trials"), pd.read_parquet(folder / "epochs")
    assert set(trials.status) == {"completed"} and list(trials.nodes) == [2]
    for row in epochs.itertuples():
        assert len(row.ray_gpu_ids.split(";")) == 2  # a process (a row part) per GPU, each with one
        assert len(set(row.ray_node_id.split(";"))) == 2  # one rank on each node
        assert " torch " in row.framework_version and row.device_kind == "cpu-emulated"
        assert row.val_examples == learnability.VAL_IMAGES and row.computed_precision == "fp32"
    last = epochs.sort_values("epoch").groupby("trial_id").tail(1)
    assert (last.val_acc > learnability.BAR).all(), epochs[["nodes", "epoch", "train_loss", "val_acc"]]


NODES_SWEEP = """
name: keras_nodes
description: "keras on {backend}, 2 GPUs across two nodes: a worker per node"
fixed: {{framework: keras, keras_backend: {backend}, num_gpus: 2, nodes: 2, {fixed}}}
scales: {{smoke: {{}}, full: {{}}}}
"""


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_keras_on_tensorflow_and_jax_learns_across_two_nodes(learnable, two_nodes, backend: str, tmp_path) -> None:
    """keras_backend tensorflow (MultiWorkerMirroredStrategy, TF_CONFIG) and jax (JAX's multi-process start, Keras's
    DataParallel over both processes' devices) on 2 emulated GPUs, one on each node of a real two-node Ray cluster,
    through `python -m sweep`: the trial learns the learnable set (the recipe's global batch, split over the workers)
    past benchmarks/learnability.py's bar, and its rows list both workers' nodes. jax runs in the environment `env
    create keras` made where this Python has no jax."""
    import pandas as pd
    import yaml
    from conftest import run_cli

    from sweep import store

    _needs(backend)
    learnability, data_dir = learnable
    recipe = learnability.config("resnet8_cifar", "keras")
    fixed = {k: v for k, v in recipe.items() if k not in ("framework", "num_gpus", "batch_per_gpu")}
    fixed["batch_per_gpu"] = recipe["batch_per_gpu"] // 2  # the recipe's global batch
    sweep = tmp_path / "keras_nodes.yaml"
    sweep.write_text(NODES_SWEEP.format(backend=backend,
                                        fixed=yaml.safe_dump(fixed, default_flow_style=True).strip()[1:-1]))
    results = tmp_path / "results"
    out = run_cli(str(sweep), "--address", two_nodes.address, "--data-dir", str(data_dir), "--results", str(results),
                  "--scale", "full", timeout=1800)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    folder = store.run_dirs(results, "keras_nodes")[-1]
    trials, epochs = pd.read_parquet(folder / "trials"), pd.read_parquet(folder / "epochs")
    assert list(trials.status) == ["completed"] and list(trials.nodes) == [2]
    for row in epochs.itertuples():
        assert len(set(row.ray_node_id.split(";"))) == 2  # a worker on each node
        assert f" {backend} " in row.framework_version and row.device_kind == "cpu-emulated"
        assert row.val_examples == learnability.VAL_IMAGES and row.computed_precision == "fp32"
    last = epochs.sort_values("epoch").tail(1)
    assert (last.val_acc > learnability.BAR).all(), epochs[["epoch", "train_loss", "train_acc", "val_acc"]]


PRECISIONS = """
import json, sys
from trainables.config import TrialConfig
from trainables.loop import Devices, load_backend
out = {}
for precision in ("fp32", "bf16", "fp16"):
    cfg = TrialConfig(framework="keras", keras_backend=sys.argv[1], model="resnet8_cifar", num_gpus=1, batch_per_gpu=4,
                      epochs=1, lr=0.01, precision=precision)
    backend = load_backend(cfg, Devices.of(["0"], emulated=True), 32)
    before = backend.compute_dtype()
    loss, _, images = backend.train_step(backend.synthetic(), 0.01)
    out[precision] = [before, backend.compute_dtype(), backend.precision_columns()["loss_scale"], images]
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "torch", "jax"])
def test_precision_policies_are_observed_and_fp16_scales_its_loss(backend: str) -> None:
    """Keras's mixed_bfloat16 and mixed_float16 policies: what the network's output came in, read off the step; fp16
    with Keras's dynamic loss scale (from 2^15), recorded."""
    done = subprocess.run([_needs(backend), "-c", PRECISIONS, backend], cwd=ROOT, env=_child_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "fp32": [None, "float32", None, 4], "bf16": [None, "bfloat16", None, 4], "fp16": [None, "float16", 2.0**15, 4]}


@pytest.mark.slow
def test_a_resumed_keras_trial_continues_exactly(tmp_path) -> None:
    """Weights, batch-norm statistics and the optimizer's state (momentum, step count, loss scale) checkpointed: epoch
    1 after a restore is epoch 1 of a trial that never stopped."""
    config = {"model": "resnet8_cifar", "num_gpus": 1, "batch_per_gpu": 8, "steps_per_epoch": 3, "lr": 0.05,
              "warmup_steps": 0, "precision": "fp16", "data": "synthetic"}
    straight = _trial("tensorflow", {**config, "epochs": 2})
    first = _trial("tensorflow", {**config, "epochs": 1}, "--checkpoint-dir", str(tmp_path / "ckpt"))
    straight, _ = _rows(straight), _rows(first)
    resumed = _rows(_trial("tensorflow", {**config, "epochs": 2}, "--restore", str(tmp_path / "ckpt")))
    assert [r["epoch"] for r in resumed] == [1]
    assert resumed[0]["train_loss"] == straight[1]["train_loss"]
    assert resumed[0]["loss_scale"] == straight[1]["loss_scale"]


def test_keras_names_its_compiler_by_backend() -> None:
    """jit_compile is XLA on JAX (always: JAX compiles every step) and TensorFlow; none on torch (refused)."""
    from trainables.config import TrialConfig

    def compiler(backend: str, compile: bool) -> str | None:
        return TrialConfig(framework="keras", keras_backend=backend, model="resnet8_cifar", num_gpus=1,
                           batch_per_gpu=8, epochs=1, lr=0.1, compile=compile).compiler

    assert [compiler(b, False) for b in ("jax", "tensorflow", "torch")] == ["xla", None, None]
    assert [compiler(b, True) for b in ("jax", "tensorflow", "torch")] == ["xla", "xla", None]


KERAS_SWEEP = """
name: keras_refused
description: "what framework keras refuses"
fixed: {{framework: keras, model: resnet8_cifar, batch_per_gpu: 8, epochs: 1, lr: 0.1, {setting}}}
scales: {{smoke: {{}}, full: {{}}}}
"""


@pytest.mark.parametrize("setting, says", [
    ("num_gpus: 1, data: imagenet", "data: imagenet runs in pytorch, mxnet, tensorflow only so far, not in keras"),
    ("num_gpus: 1, kvstore: dist_sync", "kvstore and variable_update are MXNet's and TensorFlow's"),
    ("keras_backend: torch, num_gpus: 1, compile: true", "compile: Keras's jit_compile runs for keras on jax (always)"),
    ("keras_backend: tensorflow, num_gpus: 2, compile: true", "and on tensorflow on one GPU so far, not on tensorflow with 2"),
])
def test_what_keras_cannot_run_yet_is_refused_in_one_line(setting: str, says: str) -> None:
    from pathlib import Path

    from sweep import spec
    from sweep.errors import SpecError

    with pytest.raises(SpecError) as err:
        spec.parse(KERAS_SWEEP.format(setting=setting), Path("keras_refused.yaml")).trials("smoke")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_compile_on_jax_is_accepted_at_any_gpu_count() -> None:
    """JAX compiles every step: compile: true asks for nothing more, on 1 GPU or 2 (only torch, and tensorflow on
    several GPUs, are refused above)."""
    from pathlib import Path

    from sweep import spec

    for gpus in (1, 2):
        (trial,) = spec.parse(KERAS_SWEEP.format(setting=f"keras_backend: jax, num_gpus: {gpus}, compile: true"),
                              Path("keras_jit.yaml")).trials("smoke")
        assert trial.compiler == "xla" and trial.num_gpus == gpus


def test_a_refused_keras_sweep_exits_2_with_one_line(tmp_path) -> None:
    from conftest import run_cli

    path = tmp_path / "keras_refused.yaml"
    path.write_text(KERAS_SWEEP.format(setting="keras_backend: torch, num_gpus: 1, compile: true"))
    done = run_cli("plan", str(path), timeout=120)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "compile: Keras's jit_compile runs for" in done.stderr


def test_keras_on_torch_runs_a_rank_per_gpu_on_one_node_or_several() -> None:
    """keras_backend torch on several GPUs is accepted, on one node and across two, and runs as the engine's PyTorch
    trials do: distributed, a process per GPU (sweep/workers.py); on one GPU, or on jax and tensorflow, one process."""
    from pathlib import Path

    from sweep import spec

    def trials(setting: str) -> list:
        return spec.parse(KERAS_SWEEP.format(setting=setting), Path("keras_ranks.yaml")).trials("smoke")

    (one_node,) = trials("keras_backend: torch, num_gpus: 2")
    (two_nodes,) = trials("keras_backend: torch, num_gpus: 2, nodes: 2")
    assert one_node.process_per_gpu and one_node.distributed and (one_node.nodes, one_node.gpus_per_node) == (1, 2)
    assert two_nodes.distributed and (two_nodes.nodes, two_nodes.gpus_per_node) == (2, 1)
    (one_gpu,) = trials("keras_backend: torch, num_gpus: 1")
    assert one_gpu.process_per_gpu and not one_gpu.distributed
    for backend in ("jax", "tensorflow"):
        (other,) = trials(f"keras_backend: {backend}, num_gpus: 2")
        assert not other.process_per_gpu and not other.distributed


def test_keras_on_jax_and_tensorflow_runs_a_worker_per_node_across_nodes() -> None:
    """keras_backend jax and tensorflow across nodes are accepted: a worker per node (sweep/workers.py), not a process
    per GPU."""
    from pathlib import Path

    from sweep import spec

    for backend in ("jax", "tensorflow"):
        (trial,) = spec.parse(KERAS_SWEEP.format(setting=f"keras_backend: {backend}, num_gpus: 4, nodes: 2"),
                              Path("keras_nodes.yaml")).trials("smoke")
        assert trial.distributed and not trial.process_per_gpu and (trial.nodes, trial.gpus_per_node) == (2, 2)


@pytest.mark.slow  # Keras and TensorFlow imported here: 12 s
def test_a_keras_process_keeps_the_backend_it_first_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keras reads KERAS_BACKEND once: a trial on another backend than the one this process imported fails in one
    line, before anything is built; one on the same backend goes ahead."""
    import keras  # this process's: tensorflow, Keras's default (conftest sets no KERAS_BACKEND)

    from trainables.config import TrialConfig
    from trainables.keras import prepare
    from trainables.loop import Devices

    here = keras.backend.backend()
    other = next(b for b in ("jax", "tensorflow", "torch") if b != here)
    monkeypatch.setenv("KERAS_BACKEND", here)  # restored after the test: prepare sets it

    def cfg(backend: str) -> TrialConfig:
        return TrialConfig(framework="keras", keras_backend=backend, model="resnet8_cifar", num_gpus=1,
                           batch_per_gpu=8, epochs=1, lr=0.1)

    with pytest.raises(ValueError, match=f"keras_backend {other}: this process imported Keras on {here} already"):
        prepare(cfg(other), Devices("cpu-emulated", 1, ("0",)))
    prepare(cfg(here), Devices("cpu-emulated", 1, ("0",)))
    assert os.environ["KERAS_BACKEND"] == here
