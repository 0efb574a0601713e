"""Ray: start an embedded local cluster or join an existing one; check trials against node capacity."""
from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

# Environment of every trial process: quiet TensorFlow logs on each worker.
TRIAL_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore::DeprecationWarning"}


@dataclass(frozen=True)
class Node:
    node_id: str
    address: str
    cpus: float
    gpus: float


@dataclass(frozen=True)
class Cluster:
    embedded: bool
    nodes: list[Node]
    dashboard_url: str | None

    @property
    def total_gpus(self) -> float:
        return sum(n.gpus for n in self.nodes)


def start(address: str | None, num_gpus: int, dashboard_host: str = "127.0.0.1", job_name: str | None = None) -> Cluster:
    """Join `address` (or RAY_ADDRESS), else start a local Ray with `num_gpus` (fake where emulated)."""
    import ray

    from sweep import monitor

    runtime_env: dict[str, Any] = {"env_vars": TRIAL_ENV}
    address = address or os.environ.get("RAY_ADDRESS")
    watch = monitor.init_options(job_name)  # the job carries the sweep's name (dashboard, Jobs)
    if address:
        _check_reachable(address)
        context = ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level=logging.ERROR,
                           **watch)
    else:
        # address="local" always starts a new cluster, never a stale one from /tmp/ray.
        context = ray.init(address="local", num_gpus=num_gpus, include_dashboard=True,
                           dashboard_host=dashboard_host, runtime_env=runtime_env, log_to_driver=False,
                           logging_level=logging.ERROR, **watch)
    url = context.dashboard_url
    return Cluster(embedded=not address, nodes=alive_nodes(), dashboard_url=f"http://{url}" if url else None)


class ClusterError(Exception):
    """A cluster that cannot be joined; the message is the one line the user sees."""


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds on an address nothing listens at: ray.init would retry for minutes."""
    if address == "auto":
        return  # Ray finds the cluster this machine belongs to, or says it cannot
    if address.startswith("ray://"):
        raise ClusterError(f"--address {address}: Ray Client addresses are not supported; give the GCS address HOST:PORT")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"--address {address}: expected HOST:PORT of the cluster's head (ray start --head prints it)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ClusterError(f"--address {address}: no Ray cluster answers there ({e.strerror or e})") from None


def alive_nodes() -> list[Node]:
    import ray

    return [Node(n["NodeID"], n["NodeManagerAddress"], n["Resources"].get("CPU", 0), n["Resources"].get("GPU", 0))
            for n in ray.nodes() if n["Alive"]]


def stop(cluster: Cluster) -> None:
    import ray

    ray.shutdown()


def infeasible(requests: dict[str, tuple[int, int]], nodes: list[Node]) -> dict[str, str]:
    """Trials whose (CPUs, GPUs) bundle fits no single node, with the reason."""
    out = {}
    for trial, (cpus, gpus) in requests.items():
        if not any(n.cpus >= cpus and n.gpus >= gpus for n in nodes):
            biggest = max(((n.gpus, n.cpus) for n in nodes), default=(0, 0))
            out[trial] = f"needs {gpus} GPUs and {cpus} CPUs on one node; the largest node has {biggest[0]:g} GPUs, {biggest[1]:g} CPUs"
    return out
