"""A trial that spans processes and nodes: its workers and servers as Ray actors in its placement group.

Such a trial's placement group has one bundle per node, STRICT_SPREAD, and an empty head bundle: the
Tune trainable holds no resources and only coordinates (sweep/runner.py: trial_resources). Into
bundle i go, all started into the trial's placement group so that Ray accounts for them:

- MXNet (kvstore dist_sync / dist_async): a TrialWorker with the bundle's GPUs and CPUs, running
  trainables.loop.TrialLoop on its slice of every global batch; an MXNet server as a RoleProcess;
  and, in bundle 0, the scheduler. The DMLC environment tells each process its role.
- TensorFlow, replicated, and Keras on tensorflow: a TrialWorker per node under MultiWorkerMirroredStrategy (TF_CONFIG).
- Keras on jax: a TrialWorker per node, the processes of one JAX program (KERAS_DISTRIBUTION_*: Keras's multi-host
  start, jax.distributed.initialize, the coordinator on the first worker's node).
- TensorFlow, parameter_server: a worker server (with the GPUs) and a parameter server (on CPU, as
  in study 004) per node, both RoleProcesses; a TrialWorker holding no resources runs the loop as
  ParameterServerStrategy's coordinator, TensorFlow's "chief".
- PyTorch, and Keras on torch, on several GPUs (one node or several): a TrialWorker per GPU, each with one GPU
  and its share of the bundle's CPUs, under DistributedDataParallel; torch's env:// rendezvous (MASTER_ADDR and the
  port of the store rank 0's actor opened, RANK, WORLD_SIZE, LOCAL_RANK) in each one's environment.
- A one-node trial whose framework has its own environment (sweep/environments.py): one TrialWorker
  (one per GPU for PyTorch), as the trainable runs in the driver's environment.

Every actor starts in the framework's environment (Ray's runtime_env), and so do the server processes
the RoleProcesses start (with the actor's interpreter).

The actors are owned by the trainable: when it ends, however it ends, they end, and each RoleProcess's
child dies with it (PR_SET_PDEATHSIG). A worker or server that dies fails the trial at once, with its
name, and Tune's FailureConfig retries it from its last checkpoint.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from trainables.config import TrialConfig, ddp_timeout_s
from trainables.failure import plain_errors
from trainables.loop import Devices, Report, Shard, TrialLoop, checkpoint_epoch, end_epoch, open_rendezvous
from trainables.measure import total_over_workers

EXIT_GRACE_S = 2.0  # a worker's process ends this long after Ray's own exit, whatever threads it still runs


class WorkerLost(RuntimeError):
    """A worker or server process of a distributed trial ended while the trial ran."""


class RankTimedOut(RuntimeError):
    """A rank of a PyTorch trial still busy with a call the process group's timeout after it should have ended."""


RAY_WORKER_PORTS_END = 20_000  # Ray gives its workers ports from 10002 to 19999 (`ray start`'s defaults)


def ephemeral_ports() -> range:
    """The kernel's range for ports it picks itself: bind(0), and the local end of every outgoing connection."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


def _bound_port(port: int) -> int | None:
    """The port a socket bound to `port` (0: one the kernel picks) got, let go at once; None where it was taken."""
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return None
        return s.getsockname()[1]


def _free_address() -> str:
    """This node's address and a port free on it, for a framework's own cluster spec (TF_CONFIG, MXNet's scheduler).

    Drawn at random between Ray's worker ports and the kernel's ephemeral range, not found by bind(0): the kernel
    hands ports of that range to every new connection (Ray's, gloo's), so a port found free there and let go can
    be a connection's before the framework binds it (a PyTorch rank's port was taken so: EADDRINUSE). Outside it
    only another explicit choice can take it. A random source of its own: a trial may have seeded `random`."""
    choices = range(RAY_WORKER_PORTS_END, ephemeral_ports().start)
    drawn = (_bound_port(p) for p in random.SystemRandom().sample(choices, min(64, len(choices))))
    port = next((p for p in drawn if p), None) or _bound_port(0)  # no room below the range: the kernel's pick
    return f"{ray.util.get_node_ip_address()}:{port}"


def _die_with_parent() -> None:
    """In a RoleProcess's child: SIGKILL it when the actor's process dies, however that dies."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


@ray.remote(max_restarts=0, max_concurrency=2)  # wait() blocks in one thread while stop() can run
class RoleProcess:
    """A framework's server role (MXNet scheduler or server, TensorFlow ps or worker server) as a child process."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def free_address(self) -> str:
        return _free_address()

    def placement(self) -> tuple[str, list[str]]:
        """(node id, GPU ids) Ray gave this role."""
        return ray.get_runtime_context().get_node_id(), [str(i) for i in ray.get_gpu_ids()]

    def start(self, module: str, env: dict[str, str]) -> int:
        self.proc = subprocess.Popen([sys.executable, "-m", module], env={**os.environ, **env},
                                     preexec_fn=_die_with_parent)
        return self.proc.pid

    def wait(self) -> int:
        """Returns when the child exits: the coordinator's watch on this role."""
        return self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# exit() must run while epoch() is blocked (not in a PyTorch rank: Group.worker)
@ray.remote(max_restarts=0, max_concurrency=2)
class TrialWorker:
    """One worker of a data-parallel trial: the shared loop on its node's devices and its slice of each batch."""

    def __init__(self, emulated: bool) -> None:
        self.devices = Devices.of([str(i) for i in ray.get_gpu_ids()], emulated)
        self.node_id = ray.get_runtime_context().get_node_id()
        self.loop: TrialLoop | None = None
        self.rendezvous: Any = None  # rank 0 of a PyTorch trial: its open rendezvous store

    def free_address(self) -> str:
        return _free_address()

    def torch_rendezvous(self) -> str:
        """Rank 0 of a PyTorch trial: its node's address and the port of the rendezvous store it opened there,
        held until its process group takes the store over (trainables.pytorch.backend.open_rendezvous)."""
        host = ray.util.get_node_ip_address()
        self.rendezvous, port = open_rendezvous("pytorch", host)
        return f"{host}:{port}"

    @plain_errors
    def start(self, trial: dict[str, Any], env: dict[str, str], data_dir: str | None,
              restore: dict[str, bytes] | None, shard: Shard, devices: Devices | None = None) -> int:
        """devices: the ones the loop drives from here (a coordinator's are its workers'); default: this actor's."""
        os.environ.update(env)  # the framework reads its cluster (TF_CONFIG, DMLC_*) from here
        self.devices = devices or self.devices
        cfg = TrialConfig.from_dict(trial)
        with tempfile.TemporaryDirectory() as path:
            if restore:
                _write_files(path, restore)
            self.loop = TrialLoop(cfg, self.devices, data_dir, path if restore else None, shard=shard)
        return os.getpid()

    @plain_errors
    def epoch(self, epoch: int) -> dict[str, Any]:
        return {**self.loop.run_epoch(epoch), "ray_node_id": self.node_id}

    def exit(self, graceful: bool) -> None:
        """End this process now. A worker blocked in a collective or a push whose peer died does not
        always end on ray.kill (TensorFlow ignores SIGTERM; measured here, MXNet workers outlived it): such
        a worker (graceful False) ends at once. A trial's only worker, which took part in no framework
        cluster (a framework in its own environment), and the workers of a PyTorch or TensorFlow trial that
        ended well (their collectives all returned with their last step) end through Ray's own exit, so that
        the raylet knows the exit was meant: an os._exit made it print "A worker died or was killed ... the
        OOM killer" after every such trial, though all ended well. (The workers of an MXNet dist kvstore
        outlive Ray's exit and ray.kill alike, their parameter servers stopped: those keep the hard exit.)"""
        if not graceful:
            os._exit(0)
        threading.Timer(EXIT_GRACE_S, os._exit, args=(0,)).start()  # whatever threads outlive Ray's exit
        ray.actor.exit_actor()

    @plain_errors
    def checkpoint(self) -> dict[str, bytes]:
        """The backend's state, as files (the coordinator writes them where Tune wants them)."""
        with tempfile.TemporaryDirectory() as path:
            self.loop.backend.save(path)
            return _read_files(path)


def cpu_share(cpus: int, gpus: int) -> float:
    """One GPU's share of a bundle's CPUs, as Ray takes it: whole CPUs from 1 up, else a fraction rounded
    down to Ray's 1/10,000 (so that the shares of all the bundle's GPUs never add up to more than it holds)."""
    if cpus >= gpus:
        return float(cpus // gpus)
    return math.floor(cpus / gpus * 10_000) / 10_000


def _read_files(path: str) -> dict[str, bytes]:
    out = {}
    for name in os.listdir(path):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = f.read()
    return out


def _write_files(path: str, files: dict[str, bytes]) -> None:
    for name, blob in files.items():
        with open(os.path.join(path, name), "wb") as f:
            f.write(blob)


CAUSE_GRACE_S = 2.0  # how long a worker's error waits for a peer's death that may have caused it


def _cause(error: ray.exceptions.RayError, others: list[ray.ObjectRef]) -> ray.exceptions.RayError:
    """A worker's error, or the death of another worker that caused it: a rank whose peer was killed fails
    in its collective ("Connection closed by peer") a moment before Ray reports the death; the row names the death."""
    if isinstance(error, ray.exceptions.RayActorError) or not others:
        return error
    done, _ = ray.wait(others, num_returns=len(others), timeout=CAUSE_GRACE_S)
    for ref in done:
        try:
            ray.get(ref)
        except ray.exceptions.RayActorError as death:
            return death
        except ray.exceptions.RayError:
            pass
    return error


class Group:
    """The actors of one distributed trial: started into its bundles, watched, and stopped together."""

    def __init__(self, cfg: TrialConfig, runtime_env: dict[str, Any] | None) -> None:
        self.cfg = cfg
        self.env = {"runtime_env": runtime_env} if runtime_env else {}  # None: the driver's Python, as the trainable
        self.pg = ray.util.get_current_placement_group()
        self.actors: list[Any] = []  # all of them, to kill at the end
        self.workers: list[Any] = []  # TrialWorkers
        self.roles: list[Any] = []  # (RoleProcess, name)
        self.watch: dict[ray.ObjectRef, str] = {}  # each role's wait(): ready means that process ended
        self.stuck: set[int] = set()  # PyTorch ranks still in a call when the trial failed: stop() waits for no exit

    def _at(self, bundle: int) -> PlacementGroupSchedulingStrategy:
        return PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=bundle)

    def worker(self, bundle: int, emulated: bool, with_devices: bool = True, one_gpu: bool = False) -> Any:
        """A TrialWorker; with_devices: it takes the bundle's GPUs and CPUs (else it drives others', as a coordinator);
        one_gpu: one of the bundle's GPUs and that GPU's share of its CPUs (a process per GPU, as PyTorch's)."""
        cfg = self.cfg
        resources = {"num_cpus": cfg.cpus, "num_gpus": cfg.gpus_per_node} if with_devices else {"num_cpus": 0}
        if one_gpu:
            # A PyTorch rank runs its calls in its process's main thread (max_concurrency 1). An actor that runs
            # them on a thread of its own leaves the main thread in Ray's task loop, which wakes every 10 ms to
            # check for signals (measured: 105 wakeups a second beside the training thread, /proc/PID/task).
            # No rank's exit() has to overtake a call: stop() waits only for ranks whose calls returned, and
            # ray.kill ends the others (a PyTorch rank ends on it).
            resources = {"num_cpus": cpu_share(cfg.cpus, cfg.gpus_per_node), "num_gpus": 1, "max_concurrency": 1}
        actor = TrialWorker.options(**resources, scheduling_strategy=self._at(bundle), **self.env).remote(emulated)
        self.actors.append(actor)
        self.workers.append(actor)
        return actor

    def role(self, bundle: int, name: str, with_devices: bool = False) -> Any:
        """A RoleProcess; with_devices: it takes the bundle's GPUs and CPUs (a TensorFlow worker server)."""
        cfg = self.cfg
        options = {"num_cpus": cfg.cpus, "num_gpus": cfg.gpus_per_node} if with_devices else {"num_cpus": 0}
        actor = RoleProcess.options(**options, scheduling_strategy=self._at(bundle), **self.env).remote()
        self.actors.append(actor)
        self.roles.append((actor, name))
        return actor

    def start_roles(self, starts: list[tuple[Any, str, str, dict[str, str]]]) -> None:
        """Start each (actor, name, module, env) child process, then watch it."""
        self.get([actor.start.remote(module, env) for actor, _, module, env in starts])
        for actor, name, _, _ in starts:
            self.watch[actor.wait.remote()] = name

    def _lost(self, ref: ray.ObjectRef) -> None:
        try:
            why = f"exited with code {ray.get(ref)}"
        except ray.exceptions.RayError as e:
            why = f"died ({type(e).__name__})"
        raise WorkerLost(f"{self.watch[ref]} of the trial {why}; its other workers and servers were stopped")

    def get(self, refs: list[ray.ObjectRef]) -> list[Any]:
        """ray.get, failing at once when a watched process ends meanwhile (its peers would wait for ever).

        A PyTorch trial of several ranks also fails when a rank hangs where no peer waits for it in a collective
        (whose timeout would fail the peer): still busy the process group's timeout after the first of the
        ranks returned from the same call (rank 0 validates while the others are done), or after a call to
        rank 0 alone (its checkpoint) was made."""
        pending = list(refs)
        bound = ddp_timeout_s() if self.cfg.process_per_gpu and len(self.workers) > 1 else None
        deadline = time.monotonic() + bound if bound is not None and len(refs) == 1 else None
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(pending + list(self.watch), num_returns=1, timeout=left)
            if not ready:
                self.stuck = {refs.index(ref) for ref in pending}  # a call to rank 0 alone: {0}
                ranks = ", ".join(map(str, sorted(self.stuck)))
                raise RankTimedOut(f"rank {ranks} of the trial timed out: still busy {bound:.0f} s (SWEEP_DDP_TIMEOUT_S) "
                                   "after it should have ended, with no peer waiting for it; the trial's workers were stopped")
            if ready[0] in self.watch:
                self._lost(ready[0])
            pending.remove(ready[0])
            try:
                ray.get(ready[0])  # a worker's error (or death) ends the trial here
            except ray.exceptions.RayError as error:
                cause = _cause(error, pending)
                if bound is not None:  # a rank still busy once its peer failed and the grace passed: hung, or soon failing
                    self.stuck = {refs.index(ref) for ref in pending if not ray.wait([ref], timeout=0)[0]}
                raise cause from None
            if bound is not None and deadline is None:
                deadline = time.monotonic() + bound  # the others are one call behind it at most
        return ray.get(refs)

    def stop(self, ended_well: bool) -> None:
        for actor, _ in self.roles:
            try:
                ray.get(actor.stop.remote(), timeout=30)
            except ray.exceptions.RayError:
                pass  # already gone: its child went with it
        # A worker can be blocked in a collective only where the trial did not end well (a trial that ended well
        # has returned from every step); an MXNet worker of a dist kvstore blocks on its stopped servers.
        graceful = (len(self.workers) == 1 and not self.roles) or (ended_well and self.cfg.framework != "mxnet")
        exits = [actor.exit.remote(graceful) for actor in self.workers]
        # Each ends with its process: an error, at once. A stuck rank may not run exit() at all (frozen, or a
        # deadlock holding the GIL); ray.kill below ends it as it would after the wait.
        awaited = [ref for rank, ref in enumerate(exits) if rank not in self.stuck]
        ray.wait(awaited, num_returns=len(awaited), timeout=10)
        for actor in self.actors:
            ray.kill(actor, no_restart=True)


def run(cfg: TrialConfig, emulated: bool, data_dir: str | None, report: Report, restore_dir: str | None,
        runtime_env: dict[str, Any] | None = None) -> None:
    """Train a trial by its workers (runtime_env: their environment); report one row per epoch, totalled over them."""
    group = Group(cfg, runtime_env)
    ended_well = False
    try:
        if cfg.framework == "tensorflow" and cfg.variable_update == "parameter_server":
            _parameter_server(group, cfg, emulated, data_dir, report, restore_dir)
        else:
            _data_parallel(group, cfg, emulated, data_dir, report, restore_dir)
        ended_well = True
    finally:
        group.stop(ended_well)


def _data_parallel(group: Group, cfg: TrialConfig, emulated: bool, data_dir: str | None, report: Report,
                   restore_dir: str | None) -> None:
    """Every worker runs the loop on its slice; the framework reduces gradients among them."""
    if cfg.process_per_gpu:  # PyTorch, Keras on torch: a process per GPU
        workers = [group.worker(i, emulated, one_gpu=True) for i in range(cfg.nodes) for _ in range(cfg.gpus_per_node)]
        envs = _torch_ranks(group, cfg, workers)
    else:
        workers = [group.worker(i, emulated) for i in range(cfg.nodes)]
        envs = (_mxnet_roles(group, cfg) if cfg.kvstore.startswith("dist") else
                [{}] if cfg.nodes == 1 else  # one worker on its own
                _jax_processes(group, workers) if cfg.runs_as == "keras/jax" else
                _tensorflow_workers(group, workers))  # TensorFlow, and Keras on it
    restore = _read_files(restore_dir) if restore_dir else None  # every rank restores; rank 0's state is saved
    group.get([w.start.remote(cfg.to_dict(), env, data_dir, restore, Shard(rank, len(workers)))
               for rank, (w, env) in enumerate(zip(workers, envs))])
    _epochs(group, workers, cfg, report, restore_dir)


def _epochs(group: Group, workers: list[Any], cfg: TrialConfig, report: Report, restore_dir: str | None,
            columns: dict[str, Any] | None = None) -> None:
    """Each epoch of the started workers, totalled into one row (with `columns`), then its checkpoint."""
    start = checkpoint_epoch(restore_dir) + 1 if restore_dir else 0

    def save(path: str) -> None:  # the first worker's state stands for all (they hold the same weights)
        _write_files(path, group.get([workers[0].checkpoint.remote()])[0])

    for epoch in range(start, cfg.epochs):
        metrics = total_over_workers(group.get([w.epoch.remote(epoch) for w in workers]))
        if not end_epoch({**metrics, **(columns or {})}, epoch, save, report):
            return


def _mxnet_roles(group: Group, cfg: TrialConfig) -> list[dict[str, str]]:
    """MXNet's parameter-server cluster: a scheduler, one server per node; the workers' DMLC environment."""
    scheduler = group.role(0, "MXNet scheduler")
    servers = [group.role(i, f"MXNet server {i}") for i in range(cfg.nodes)]
    address = ray.get(scheduler.free_address.remote())
    host, port = address.rsplit(":", 1)
    common = {"DMLC_PS_ROOT_URI": host, "DMLC_PS_ROOT_PORT": port, "DMLC_NUM_SERVER": str(cfg.nodes),
              "DMLC_NUM_WORKER": str(cfg.nodes)}
    module = "trainables.mxnet.server"
    group.start_roles([(scheduler, "MXNet scheduler", module, {**common, "DMLC_ROLE": "scheduler"})] +
                      [(s, f"MXNet server {i}", module, {**common, "DMLC_ROLE": "server"}) for i, s in enumerate(servers)])
    return [{**common, "DMLC_ROLE": "worker"} for _ in range(cfg.nodes)]


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int) -> str:
    """TensorFlow's TF_CONFIG for one task: the whole cluster ({job: [host:port]}) and which task this is."""
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def _tensorflow_workers(group: Group, workers: list[Any]) -> list[dict[str, str]]:
    """MultiWorkerMirroredStrategy's TF_CONFIG for each worker, from the addresses they found free."""
    addresses = group.get([w.free_address.remote() for w in workers])
    return [{"TF_CONFIG": tf_config({"worker": addresses}, "worker", rank)} for rank in range(len(workers))]


def _jax_processes(group: Group, workers: list[Any]) -> list[dict[str, str]]:
    """JAX's multi-process start, as Keras reads it (keras.distribution.initialize, trainables/keras/backend.py): the
    coordinator's address, found free on the first worker's node, the process count and each one's id."""
    coordinator = group.get([workers[0].free_address.remote()])[0]
    return [{"KERAS_DISTRIBUTION_JOB_ADDRESSES": coordinator, "KERAS_DISTRIBUTION_NUM_PROCESSES": str(len(workers)),
             "KERAS_DISTRIBUTION_PROCESS_ID": str(rank)} for rank in range(len(workers))]


def _torch_ranks(group: Group, cfg: TrialConfig, workers: list[Any]) -> list[dict[str, str]]:
    """torch's env:// rendezvous for each rank (node by node, GPU by GPU): rank 0's address and its store's port."""
    if len(workers) == 1:
        return [{}]  # one process: no process group
    host, port = group.get([workers[0].torch_rendezvous.remote()])[0].rsplit(":", 1)
    return [{"MASTER_ADDR": host, "MASTER_PORT": port, "RANK": str(rank), "WORLD_SIZE": str(len(workers)),
             "LOCAL_RANK": str(rank % cfg.gpus_per_node), "LOCAL_WORLD_SIZE": str(cfg.gpus_per_node)}
            for rank in range(len(workers))]


def _parameter_server(group: Group, cfg: TrialConfig, emulated: bool, data_dir: str | None, report: Report,
                      restore_dir: str | None) -> None:
    """ParameterServerStrategy: worker and ps servers per node, and the coordinator that runs the loop."""
    workers = [group.role(i, f"TensorFlow worker {i}", with_devices=True) for i in range(cfg.nodes)]
    servers = [group.role(i, f"TensorFlow parameter server {i}") for i in range(cfg.nodes)]
    coordinator = group.worker(0, emulated, with_devices=False)
    addresses = group.get([a.free_address.remote() for a in workers + servers + [coordinator]])
    nodes, gpu_ids = zip(*group.get([w.placement.remote() for w in workers]))
    cluster = {"chief": addresses[-1:], "worker": addresses[:cfg.nodes], "ps": addresses[cfg.nodes:-1]}
    device_env = {"SWEEP_EMULATED_DEVICES": str(cfg.gpus_per_node), "CUDA_VISIBLE_DEVICES": ""} if emulated else {}
    module = "trainables.tensorflow.server"
    group.start_roles(
        [(w, f"TensorFlow worker {i}", module, {"TF_CONFIG": tf_config(cluster, "worker", i), **device_env})
         for i, w in enumerate(workers)] +
        [(s, f"TensorFlow parameter server {i}", module, {"TF_CONFIG": tf_config(cluster, "ps", i),
                                                          "CUDA_VISIBLE_DEVICES": ""})
         for i, s in enumerate(servers)])
    # The coordinator computes nothing (its node's GPUs are others'): its devices are the workers'.
    devices = Devices("cpu-emulated" if emulated else "gpu", cfg.num_gpus, tuple(";".join(ids) for ids in gpu_ids))
    chief = {"TF_CONFIG": tf_config(cluster, "chief", 0), "CUDA_VISIBLE_DEVICES": ""}
    restore = _read_files(restore_dir) if restore_dir else None
    group.get([coordinator.start.remote(cfg.to_dict(), chief, data_dir, restore, Shard(), devices)])
    spread = {"ray_node_id": ";".join(nodes), "ray_gpu_ids": ";".join(",".join(ids) for ids in gpu_ids)}
    _epochs(group, [coordinator], cfg, report, restore_dir, spread)
