"""TensorFlow's cluster description (TF_CONFIG) for a trial's worker, parameter-server and chief tasks."""
from __future__ import annotations

import json


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int) -> str:
    """TF_CONFIG of one task: the whole cluster ({job: [host:port]}) and which task this process is."""
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})
