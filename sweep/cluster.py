"""Ray: start an embedded local cluster or join an existing one; check trials against node capacity."""
from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from sweep.errors import ClusterError
from sweep.limits import count
from trainables.config import DDP_TIMEOUT_ENV
from trainables.probe import TIMEOUT_ENV as CHECK_TIMEOUT_ENV

# Environment of every trial and check process: quiet TensorFlow logs on each worker; the driver's settings that
# they read (SWEEP_DDP_TIMEOUT_S: how long a PyTorch rank waits for its peers, trainables/config.py;
# SWEEP_CHECK_TIMEOUT_S: how long a framework check's child may take, trainables/probe.py).
TRIAL_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore::DeprecationWarning",
             **{k: os.environ[k] for k in (DDP_TIMEOUT_ENV, CHECK_TIMEOUT_ENV) if k in os.environ}}


@dataclass(frozen=True)
class Node:
    node_id: str
    address: str
    cpus: float
    gpus: float
    accelerator: str | None = None  # the GPU model as Ray names it (resource accelerator_type:H100); None: not said


def _accelerator(resources: dict[str, float]) -> str | None:
    return next((k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")), None)


@dataclass(frozen=True)
class Cluster:
    embedded: bool
    nodes: list[Node]
    dashboard_url: str | None
    emulated_nodes: Any = None  # the ray.cluster_utils.Cluster of an embedded multi-node emulation

    @property
    def total_gpus(self) -> float:
        return sum(n.gpus for n in self.nodes)


def start(address: str | None, num_gpus: int, dashboard_host: str | None = "127.0.0.1", job_name: str | None = None,
          nodes: int = 1, emulated: bool = False, code: str | None = None) -> Cluster:
    """Join `address` (or RAY_ADDRESS), else start a local Ray with `num_gpus` (fake where emulated), with its
    dashboard on `dashboard_host` (None: none, `--dashboard off`).

    nodes > 1 (embedded, emulated only): as many Ray nodes on this machine, each with `num_gpus`, so
    that trials spanning nodes run here as they would on a cluster. code: `--code DIR`, the job's
    working_dir: Ray uploads the folder once and every node's workers (every trial, check and rank, in
    every framework's environment) start in their node's copy of it, on their PYTHONPATH.
    """
    import ray

    from sweep import dashboard

    runtime_env: dict[str, Any] = {"env_vars": TRIAL_ENV, **({"working_dir": code} if code else {})}
    if not sys.stdout.isatty():  # the lines Ray prints in the driver (raylet's) carry no colour codes into logs
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    address = address or os.environ.get("RAY_ADDRESS")
    if emulated and not address:
        # Ray ties GPUs to CUDA_VISIBLE_DEVICES and refuses fake ones where it names none (a user hiding
        # the GPUs with CUDA_VISIBLE_DEVICES=""); emulated trials hide every GPU in their own process.
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    watch = dashboard.init_options(job_name)  # the job carries the sweep's name (dashboard, Jobs)
    if address:  # checked by sweep.gcs.check_address before anything else starts
        context = ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level=logging.ERROR,
                           **watch)
        return Cluster(embedded=False, nodes=alive_nodes(), dashboard_url=_url(context))
    # Ray logs a dashboard that fails to start in many lines, then raises it: the one line below says it.
    services_log = logging.getLogger("ray._private.services")
    level = services_log.level
    services_log.setLevel(logging.CRITICAL)
    try:
        return retried_if_timed_out(lambda: _embedded(num_gpus, nodes, dashboard_host, runtime_env, watch))
    except Exception as e:  # noqa: BLE001 - whatever Ray raised (a dashboard with no port it can bind, ...)
        # What it started is stopped by Ray's own exit handlers (shutdown_at_exit) as the CLI exits. Its message
        # may be the last lines of the dashboard's log, headed by the log's path: their last error, else that head.
        lines = [line.strip() for line in str(e).splitlines() if line.strip()] or [type(e).__name__]
        errors = [line for line in lines if re.match(r"\w*(Error|Exception): ", line)]
        said = (errors[-1] if errors else lines[0]).removeprefix("Exception: ").rstrip(":")
        where = f"dashboard on {dashboard_host}" if dashboard_host is not None else "no dashboard"
        raise ClusterError(f"could not start the embedded Ray ({where}): {said[:300]}") from None
    finally:
        services_log.setLevel(level)


RAY_START_TIMED_OUT = "timed out during startup"  # Ray's words where its raylet did not register in time
T = TypeVar("T")


def retried_if_timed_out(start: Callable[[], T], starts: int = 3) -> T:
    """start() (a new Ray node on this machine, or several), again where Ray's start timed out, at most `starts` times:
    Ray gives a started raylet 30 s to register with its GCS (ray/_private/node.py, no setting), which runs out where
    many busy processes share the cores (twice in a row once, at a load of 20 on two cores). What a timed-out start
    began is stopped before the next."""
    for _ in range(starts - 1):
        before = _rays_processes()
        try:
            return start()
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception there
            if RAY_START_TIMED_OUT not in str(e):
                raise
            _stop(_rays_processes() - before)
    return start()  # the last: what it raises is the caller's


# Ray starts as many idle workers as the node has CPUs once the first driver connects, for tasks with the default
# runtime environment. No trial, rank or check of a sweep is one (their runtime_env has the trials' variables): each
# such worker imported Ray (~0.6 CPU-s) and idled until Ray stopped.
NO_IDLE_WORKERS = {"prestart_worker_first_driver": False}


def _embedded(num_gpus: int, nodes: int, dashboard_host: str | None, runtime_env: dict[str, Any], watch: dict[str, Any]) -> Cluster:
    """A new local Ray with this driver connected: one node, or `nodes` (an emulated multi-node cluster)."""
    import ray

    # None: no dashboard. Ray still runs its API server's minimal part (one process) and each node's agents (metrics).
    dashboard = {"include_dashboard": dashboard_host is not None, "dashboard_host": dashboard_host or "127.0.0.1"}

    if nodes > 1:
        from ray.cluster_utils import Cluster as LocalNodes

        node = {"num_cpus": os.cpu_count(), "num_gpus": num_gpus, "object_store_memory": 512 * 2**20}
        # dashboard_port None, as ray.init passes it: the dashboard binds 8265 or the next free port of
        # Ray's 50 retries. Left out, RayParams' default (8265, no retry) fails where 8265 is taken.
        local = LocalNodes(initialize_head=True, head_node_args={
            **node, **dashboard, "dashboard_port": None, "_system_config": NO_IDLE_WORKERS})
        for _ in range(nodes - 1):
            local.add_node(**node)
        local.wait_for_nodes()
        context = ray.init(address=local.address, runtime_env=runtime_env, log_to_driver=False,
                           logging_level=logging.ERROR, **watch)
        return Cluster(embedded=True, nodes=alive_nodes(), dashboard_url=_url(context), emulated_nodes=local)
    # address="local" always starts a new cluster, never a stale one from /tmp/ray.
    context = ray.init(address="local", num_gpus=num_gpus, **dashboard, runtime_env=runtime_env, log_to_driver=False,
                       logging_level=logging.ERROR, _system_config=NO_IDLE_WORKERS, **watch)
    return Cluster(embedded=True, nodes=alive_nodes(), dashboard_url=_url(context))


def _rays_processes() -> set[int]:
    """This process's children that are Ray's (its GCS, raylet, dashboard, monitors: programs in Ray's package), as
    /proc tells; none where there is no /proc. A check's child, also this process's, is not among them."""
    import ray

    package, found = os.path.dirname(ray.__file__), set()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat[stat.rindex(")") + 2:].split()[1]) == os.getpid() and \
                    package in Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace"):
                found.add(int(entry))
        except (OSError, ValueError):
            continue
    return found


def _stop(pids: set[int]) -> None:
    """Kills and reaps these children; the workers of a killed raylet die with it (Ray ties them to it)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def _url(context: Any) -> str | None:
    """The dashboard's URL as Ray reports it (the port it bound); None where the cluster runs none."""
    url = context.dashboard_url
    return f"http://{url}" if url else None


def alive_nodes() -> list[Node]:
    import ray

    return [Node(n["NodeID"], n["NodeManagerAddress"], n["Resources"].get("CPU", 0), n["Resources"].get("GPU", 0),
                 _accelerator(n["Resources"])) for n in ray.nodes() if n["Alive"]]


def stop(cluster: Cluster) -> None:
    import ray

    ray.shutdown()
    if cluster.emulated_nodes is not None:
        cluster.emulated_nodes.shutdown()


def infeasible(requests: dict[str, tuple[int, int, int]], nodes: list[Node]) -> dict[str, str]:
    """Trials whose bundles fit too few nodes, with the reason.

    A request is (CPUs, GPUs, nodes): that many CPUs and GPUs on each of `nodes` different nodes.
    """
    out = {}
    for trial, (cpus, gpus, spread) in requests.items():
        fitting = sum(1 for n in nodes if n.cpus >= cpus and n.gpus >= gpus)
        if fitting >= spread:
            continue
        if spread == 1:
            biggest = max(((n.gpus, n.cpus) for n in nodes), default=(0, 0))
            has = count(biggest[0], "GPU") + (f", {count(biggest[1], 'CPU')}" if math.isfinite(biggest[1]) else "")
            out[trial] = f"needs {count(gpus, 'GPU')} and {count(cpus, 'CPU')} on one node; the largest node has {has}"
        else:
            out[trial] = (f"needs {spread} nodes with {count(gpus, 'GPU')} and {count(cpus, 'CPU')} each; "
                          f"{fitting} of the cluster's {count(len(nodes), 'node')} {'has' if fitting == 1 else 'have'} that")
    return out

