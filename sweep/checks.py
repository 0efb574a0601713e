"""Before any trial: can each framework the sweep uses train on each node, in its environment?

One Ray task per (node with GPUs, framework), pinned to the node (NodeAffinitySchedulingStrategy) and
started in the framework's environment (sweep/environments.py), runs trainables.probe.check: the
framework's import, its build, one training step on one of the node's GPUs (on a CPU device where
GPUs are emulated), and builds each model the sweep names outside the engine's zoo (a zoo's, or the user's
own: docs/models.md) with one forward pass. "Framework" here is what a trial runs (trainables.config.runs_as):
framework keras is checked once per backend its trials use ("keras/jax"), in that backend's environment, and its
check names Keras's version and the backend's ("3.15.0 on jax 0.10.2"). The driver imports no framework for it.
From the checks:
- a model the loop cannot train: the run refused in one line (model_refusal), before any trial;
- the table printed before the run, and the records kept in run.json (sweep/store.py, Session.checks);
- trials whose framework runs on no node that fits them: infeasible, with the reason;
- frameworks that run on some nodes only: their trials' bundles carry a label selector on Ray's own
  node label (ray.io/node-id in(...)), so that Ray places them on those nodes and nowhere else.
An embedded Ray's nodes are all this machine: there the frameworks that run in the driver's own Python
are checked in that Python without Ray (start_here), while Ray starts, as the task would check them.
"""
from __future__ import annotations

import os
import platform
import threading
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from sweep import limits
from sweep.cluster import Node, infeasible
from sweep.environments import Environment, made_by, made_environment, of, with_hint
from trainables import zoo
from trainables.config import TrialConfig
from trainables.failure import first_line
from trainables.probe import NO_ANSWER, TIMEOUT_ENV, FrameworkCheck, check, first_gpu, interpreter_problem, step_timeout_s

NODE_LABEL = "ray.io/node-id"  # every Ray node carries it, with its id
# How long the driver waits for a check beyond the node's own bound on the check's child (probe.step_timeout_s,
# $SWEEP_CHECK_TIMEOUT_S): a minute for Ray to start the task's worker, and ten more where Ray builds or pulls the
# environment on first use (pip, uv, image_uri: Ray gives up after 10 minutes, runtime_env's setup_timeout_seconds).
STARTING_S = {"default": 60, "py_executable": 60, "pip": 660, "uv": 660, "image_uri": 660}
# framework -> the (model, image side) pairs of its trials whose model is named outside the engine's zoo.
Models = dict[str, tuple[tuple[str, int, int], ...]]  # framework -> (model, input side, classes)


def start_here(frameworks: list[str], envs: dict[str, Environment], emulated: bool, models: Models | None = None,
               code: str | None = None) -> dict[str, Future[FrameworkCheck]]:
    """Start the checks of the frameworks that run in the driver's Python (no environment of their own) on
    this machine, each in a thread waiting on its check's process: an embedded Ray's every node is this
    machine and this Python, and a check (a framework's import and one step, seconds) overlaps Ray's start.
    Frameworks with an environment are checked by Ray (it builds or starts their environment). models: each
    framework's models named outside the engine's zoo (named_models); code: run --code DIR, their folder."""
    started = {}
    for fw in frameworks:
        if of(envs, fw) is None:
            future: Future[FrameworkCheck] = Future()
            threading.Thread(target=_settle, args=(future, fw, emulated, (models or {}).get(fw, ()), code),
                             daemon=True, name=f"check-{fw}").start()  # daemon: never holds up an exit
            started[fw] = future
    return started


def _settle(future: Future[FrameworkCheck], framework: str, emulated: bool, models: tuple[tuple[str, int], ...],
            code: str | None) -> None:
    try:
        future.set_result(check(framework, "", emulated, None if emulated else first_gpu(), models, code))
    except BaseException as e:  # noqa: BLE001 - handed to the waiting driver, which says it as the check's failure
        future.set_exception(e)


def run(nodes: list[Node], frameworks: list[str], envs: dict[str, Environment], code_root: str | None,
        emulated: bool | None, here: dict[str, Future[FrameworkCheck]] | None = None,
        models: Models | None = None) -> list[FrameworkCheck]:
    """Check every framework on every node that has GPUs (trials need them; the others never get one).
    here: checks already started on this machine (start_here), which stand for every node of an embedded Ray.
    models: each framework's models named outside the engine's zoo (named_models), built on every node."""
    import ray

    targets = [(node, fw) for node in nodes if node.gpus >= 1 for fw in frameworks]
    found: dict[tuple[str, str], FrameworkCheck] = {}
    for fw, future in (here or {}).items():
        try:
            result = future.result()  # bounded: the check's process has probe.step_timeout_s()
        except Exception as e:  # noqa: BLE001
            result = FrameworkCheck.failed("", fw, f"the check failed: {type(e).__name__}: {first_line(str(e))}")
        for node in (node for node, f in targets if f == fw):
            found[(node.node_id, fw)] = replace(result, node_id=node.node_id)
    # An interpreter Ray cannot start workers with makes Ray retry for ever: try it first, in the
    # driver's environment on the same node.
    interpreters = [(node, fw) for node, fw in targets
                    if (env := of(envs, fw)) and env.kind == "py_executable" and (node.node_id, fw) not in found]
    # The driver's Python is the cluster's, to the level Ray requires (it refuses a driver otherwise).
    versions = (ray.__version__, platform.python_version(), os.environ.get("RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL", "patch"))
    refs = {ray.remote(interpreter_problem).options(**_on(node)).remote(str(of(envs, fw).value), *versions): (node, fw)
            for node, fw in interpreters}
    for (node, fw), problem in _gather(refs, wait_s("default")).items():
        if problem is not None:
            found[(node.node_id, fw)] = FrameworkCheck.failed(node.node_id, fw, problem, hostname=node.address,
                                                              python=str(of(envs, fw).value))
    task = ray.remote(check)
    refs = {}
    for node, fw in targets:
        if (node.node_id, fw) in found:
            continue
        env = of(envs, fw)
        options = {**_on(node), "num_gpus": 0.01}  # a GPU id, shared: the checks of a node run side by side
        if env:
            options["runtime_env"] = env.runtime_env(code_root)
        refs[task.options(**options).remote(fw, node.node_id, emulated, None, (models or {}).get(fw, ()))] = (node, fw)
    timeout = max((wait_s(env.kind if (env := of(envs, fw)) else "default") for _, fw in targets), default=0)
    for (node, fw), result in _gather(refs, timeout).items():
        found[(node.node_id, fw)] = result if isinstance(result, FrameworkCheck) else FrameworkCheck.failed(
            node.node_id, fw, result, hostname=node.address)
    return [with_hint(found[(node.node_id, fw)], envs) for node, fw in targets]


def wait_s(kind: str) -> float:
    """How long the driver waits for a check in an environment of this kind ("default": the node's own Python)."""
    return step_timeout_s() + STARTING_S[kind]


def _on(node: Node) -> dict[str, Any]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node.node_id, soft=False), "num_cpus": 0,
            "max_retries": 0}


def _gather(refs: dict[Any, tuple[Node, str]], timeout_s: float) -> dict[tuple[Node, str], Any]:
    """Each task's result; a task that failed or did not answer in time gives its reason (a string)."""
    import ray

    ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
    out: dict[tuple[Node, str], Any] = {}
    for ref in ready:
        try:
            out[refs[ref]] = ray.get(ref)
        except ray.exceptions.RuntimeEnvSetupError as e:
            out[refs[ref]] = f"its environment could not be set up: {first_line(str(e))}"
        except ray.exceptions.RayError as e:
            out[refs[ref]] = f"the check's process failed: {type(e).__name__}: {first_line(str(e))}"
    for ref in late:
        ray.cancel(ref, force=True)
        out[refs[ref]] = (f"{NO_ANSWER} {timeout_s:g} s (its node's GPUs busy, or its environment still starting; "
                          f"{TIMEOUT_ENV} gives a busy node longer)")
    return out


def named_models(trials: list[TrialConfig], data_dir: str | None = None) -> Models:
    """What each framework's check builds besides its own step: every zoo model and network of the user's own that
    a trial trains, at each input side and class count it trains at (docs/models.md): an image folder's classes for
    data: imagenet (counted once here, only where such a model trains on one), CIFAR-10's 10 otherwise."""
    out: dict[str, dict[tuple[str, int, int], None]] = {}
    folder_classes = None
    for t in trials:
        if zoo.named(t.model) is None:
            continue
        classes = zoo.NUM_CLASSES
        if t.data == "imagenet" and data_dir:
            if folder_classes is None:
                from trainables import images

                folder_classes = len(images.scan(data_dir).classes)
            classes = folder_classes
        out.setdefault(t.runs_as, {})[(t.model, t.image_size or zoo.default_image_size(t.model), classes)] = None
    return {fw: tuple(triples) for fw, triples in out.items()}


def model_refusal(checks: list[FrameworkCheck]) -> str | None:
    """The first model that a framework's check could not build or run (one line, with the close names of an
    unknown zoo name), or None. A model is the sweep's, not a node's: one node's refusal refuses the run."""
    for c in checks:
        for problem in c.model_problems or ():
            known = problem.get("known")
            source, _, given = str(problem["model"]).partition(":")
            listed_in = zoo.ZOO_PACKAGES.get(source, f"module {source}")  # where the whole list is, if it is long
            hint = f" ({limits.known_names(given, known, listed_in)})" if known else ""
            where = f" (checked on node {c.hostname or '?'} {c.node_id[:8]}, {c.framework})" if c.node_id else ""
            return f"{problem['message']}{hint}{where}"
    return None


def table(checks: list[FrameworkCheck], envs: dict[str, Environment], seconds: float) -> str:
    """The checks as the console shows them: one line per node and framework."""
    head = ["node", "framework", "environment", "version", "CUDA", "GPU", "python", "zoos", "check"]
    rows = [[f"{c.hostname or '?'} {c.node_id[:8]}", c.runs_as,  # keras/jax: one check per Keras backend
             _env_cell(c.runs_as, envs), c.version or "-",
             c.cuda or "-", f"{c.gpu} {c.arch}" if c.gpu else (c.device or "-"), c.python or "-",
             ",".join(c.zoos) if c.zoos else "-",
             "OK" if c.ok else f"FAILED: {c.reason}"] for c in checks]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head[:-1])] if rows else []
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths + [0])).rstrip()  # noqa: E731
    return "\n".join([f"framework checks ({seconds:.0f} s; each framework on each node, in its environment):",
                      *("  " + line(r) for r in [head] + rows)])


def _env_cell(name: str, envs: dict[str, Environment]) -> str:
    env = of(envs, name)
    if env is None:
        return "default"
    framework = made_by(name)
    return env.describe() + (" (env create)" if framework and env == made_environment(framework) else "")


def placement(checks: list[FrameworkCheck]) -> dict[str, tuple[str, ...]]:
    """framework (runs_as: keras with its backend) -> the only nodes it may run on, for those that failed on some
    nodes (not all)."""
    out = {}
    for fw in dict.fromkeys(c.runs_as for c in checks):
        ok = tuple(c.node_id for c in checks if c.runs_as == fw and c.ok)
        if ok and len(ok) < sum(1 for c in checks if c.runs_as == fw):
            out[fw] = ok
    return out


def selector(nodes: tuple[str, ...]) -> dict[str, str]:
    """A label selector that Ray's scheduler (and a placement group's bundle) matches on those nodes only."""
    return {NODE_LABEL: f"in({','.join(nodes)})"}


def unplaceable(trials: list[TrialConfig], nodes: list[Node], checks: list[FrameworkCheck]) -> dict[str, str]:
    """Trials that fit no node, with the reason: too few resources, or their framework runs on no node that fits."""
    requests = {t.trial_id: (t.cpus, t.gpus_per_node, t.nodes) for t in trials}
    out = infeasible(requests, nodes)
    for t in trials:
        failed = [c for c in checks if c.runs_as == t.runs_as and not c.ok]
        if t.trial_id in out or not failed:
            continue
        good = {c.node_id for c in checks if c.runs_as == t.runs_as and c.ok}
        usable = [n for n in nodes if n.node_id in good]
        if not usable:  # the framework's own words, as the example: "mxnet 1.9.1 (CUDA 11.7) has no kernels ..."
            out[t.trial_id] = _reasons(failed, per_node=False)
        elif infeasible({t.trial_id: requests[t.trial_id]}, usable):
            needs = (f"needs {t.nodes} nodes with {t.gpus_per_node} GPUs and {t.cpus} CPUs each" if t.nodes > 1
                     else f"needs {t.gpus_per_node} GPUs and {t.cpus} CPUs on one node")
            out[t.trial_id] = (f"{needs}; {t.runs_as} runs on {len(usable)} of the cluster's {len(nodes)} nodes "
                               f"(not on {_reasons(failed, per_node=True)})")
    return out


def gpu_decode_refusal(trials: list[TrialConfig], checks: list[FrameworkCheck]) -> str | None:
    """Why the trials that ask for `decode: gpu` cannot have it (one line), or None: their framework's check found no
    torchvision on some node (trainables/probe.py gpu_decode_problem)."""
    asked = {t.framework for t in trials if t.decode == "gpu"}
    for c in checks:
        if c.framework in asked and c.no_gpu_decode:
            count = sum(1 for t in trials if t.decode == "gpu")
            return (f"decode: gpu ({count} of {len(trials)} trials) cannot run on node {c.hostname or '?'} "
                    f"{c.node_id[:8]}: {c.no_gpu_decode}; install torchvision for that torch, or set decode: cpu")
    return None


def _reasons(failed: list[FrameworkCheck], per_node: bool) -> str:
    """The failures in one line; without per_node, the reason alone where every node gave the same."""
    reasons = list(dict.fromkeys(c.reason or "failed" for c in failed))
    if len(reasons) == 1 and not per_node:
        return reasons[0]
    return "; ".join(f"node {c.hostname or '?'} {c.node_id[:8]}: {c.reason}" for c in failed)
