"""The Ray dashboard of a run: where it is, how to log in, and the job named after the sweep.

Every run starts one (embedded Ray, bound to 127.0.0.1 unless --dashboard-host says otherwise) or finds
the cluster's, with Ray's token authentication on; `banner` says where it is, where the token is and
where the metrics endpoint is. The job carries the sweep's name (`init_options`: the Jobs view's Name
column is the job metadata's `job_name`). The trials' actors name themselves (sweep/trial.py), and the
engine's metrics (`ray_sweep_*`) come from the trials (sweep/trial.py) and the console (sweep/console.py).
Driver-side.
"""
from __future__ import annotations

import os
from typing import Any

TOKEN_HELP = "ray get-auth-token"


def init_options(job_name: str | None) -> dict[str, Any]:
    """Extra `ray.init` arguments: the job named after the sweep (the Jobs view's Name column).

    Token authentication is Ray's own default for a local `ray.init()` (it writes ~/.ray/auth_token);
    nothing here turns it off. RAY_AUTH_MODE is read when Ray is imported, so it is not set here:
    the banner says when a user turned it off. A joined cluster decides for itself.
    """
    if not job_name:
        return {}
    from ray.job_config import JobConfig

    return {"job_config": JobConfig(metadata={"job_name": job_name, "sweep": job_name})}


def token_auth_enabled() -> bool:
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled

        return is_token_auth_enabled()
    except Exception:  # noqa: BLE001 - an older or minimal Ray: say nothing about a token
        return False


def token_source() -> str:
    """Where this driver's Ray token comes from (never the token itself)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "$RAY_AUTH_TOKEN"
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return os.environ["RAY_AUTH_TOKEN_PATH"]
    return "~/.ray/auth_token"


def metrics_urls() -> list[str]:
    """Each alive node's Prometheus endpoint, the head node's first."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("MetricsExportPort")]
    nodes.sort(key=lambda n: "node:__internal_head__" not in n.get("Resources", {}))
    return [f"http://{n['NodeManagerAddress']}:{n['MetricsExportPort']}/metrics" for n in nodes]


def banner(cluster: Any) -> list[str]:
    """The lines a run prints once Ray is up: dashboard, token, metrics endpoint."""
    lines = []
    if cluster.dashboard_url:
        if token_auth_enabled():
            auth = f"token auth on: the page asks for the token in {token_source()}, also printed by `{TOKEN_HELP}`"
        else:
            auth = "token auth is off on this cluster: anyone who reaches this port controls it"
        lines.append(f"Ray dashboard: {cluster.dashboard_url} ({auth})")
    elif cluster.embedded:  # an embedded Ray starts its dashboard or fails to start: none was asked for
        lines.append("Ray dashboard: off (--dashboard off, or $SWEEP_DASHBOARD)")
    else:
        lines.append("Ray dashboard: none on this cluster (its head started none: no ray[default] there, "
                     "or its dashboard port was taken)")
    try:
        urls = metrics_urls()
    except Exception:  # noqa: BLE001 - the banner never stops a run
        urls = []
    if urls:
        more = f", and {len(urls) - 1} more node(s)" if len(urls) > 1 else ""
        lines.append(f"Ray metrics: {urls[0]} (Prometheus format, series ray_sweep_*{more})")
    return lines
