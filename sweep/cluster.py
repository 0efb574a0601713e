"""Ray: start an embedded local cluster or join an existing one; check trials against node capacity."""
from __future__ import annotations

import logging
import math
import os
import sys
from dataclasses import dataclass
from typing import Any

from sweep.limits import count
from trainables.config import DDP_TIMEOUT_ENV

# Environment of every trial process: quiet TensorFlow logs on each worker; the driver's settings that
# trials read (SWEEP_DDP_TIMEOUT_S: how long a PyTorch rank waits for its peers, trainables/config.py).
TRIAL_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore::DeprecationWarning",
             **{k: os.environ[k] for k in (DDP_TIMEOUT_ENV,) if k in os.environ}}


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


def start(address: str | None, num_gpus: int, dashboard_host: str = "127.0.0.1", job_name: str | None = None,
          nodes: int = 1, emulated: bool = False) -> Cluster:
    """Join `address` (or RAY_ADDRESS), else start a local Ray with `num_gpus` (fake where emulated).

    nodes > 1 (embedded, emulated only): as many Ray nodes on this machine, each with `num_gpus`, so
    that trials spanning nodes run here as they would on a cluster.
    """
    import ray

    from sweep import dashboard

    runtime_env: dict[str, Any] = {"env_vars": TRIAL_ENV}
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
    elif nodes > 1:
        from ray.cluster_utils import Cluster as LocalNodes

        node = {"num_cpus": os.cpu_count(), "num_gpus": num_gpus, "object_store_memory": 512 * 2**20}
        emulated = LocalNodes(initialize_head=True, head_node_args={**node, "include_dashboard": True,
                                                                   "dashboard_host": dashboard_host})
        for _ in range(nodes - 1):
            emulated.add_node(**node)
        emulated.wait_for_nodes()
        context = ray.init(address=emulated.address, runtime_env=runtime_env, log_to_driver=False,
                           logging_level=logging.ERROR, **watch)
        url = context.dashboard_url
        return Cluster(embedded=True, nodes=alive_nodes(), dashboard_url=f"http://{url}" if url else None,
                       emulated_nodes=emulated)
    else:
        # address="local" always starts a new cluster, never a stale one from /tmp/ray.
        context = ray.init(address="local", num_gpus=num_gpus, include_dashboard=True,
                           dashboard_host=dashboard_host, runtime_env=runtime_env, log_to_driver=False,
                           logging_level=logging.ERROR, **watch)
    url = context.dashboard_url
    return Cluster(embedded=not address, nodes=alive_nodes(), dashboard_url=f"http://{url}" if url else None)


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

