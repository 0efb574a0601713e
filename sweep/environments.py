"""Per-framework environments: where a framework's trials (and its check, sweep/checks.py) run.

An environment is one of Ray's own runtime_env fields, named per framework in a sweep file's
`environments:` section or with `--env` on the command line:

  environments:
    mxnet: {py_executable: /opt/mxnet-cu124/bin/python}   # an interpreter on every node (a venv, a source build)
    mxnet: {image_uri: nvcr.io/nvidia/mxnet:24.06-py3}    # a container image (Ray runs its workers in podman)
    mxnet: {pip: ["mxnet-cu117==1.9.1"]}                    # Ray installs these over the driver's packages
    mxnet: {uv: ["mxnet==1.9.1", "numpy<2"]}                # the same, installed by uv
  (each may add env_vars: {NAME: value}, e.g. LD_LIBRARY_PATH for a framework's CUDA libraries)

  --env mxnet=/opt/mxnet/bin/python      the interpreter (py_executable)
  --env 'mxnet={image_uri: nvcr.io/nvidia/mxnet:24.06-py3}'   any of the forms above, as YAML

A trial's environment goes by what it runs (trainables.config.runs_as): its framework, and for framework
keras its backend with it ("keras/jax"), as each Keras backend is another framework underneath. One rule
chooses it: the environment named for the trial's framework (`environments:`, then --env; one named for keras
holds for all three backends), else the one `python -m sweep env create FRAMEWORK` made for the driver's
interpreter (sweep/venvs.py) for what the trial runs (MADE_FOR: MXNet's for mxnet; Keras's, which holds JAX
alone, for keras on jax where the driver's Python has no jax of its own), else the driver's Python. So keras
trials on tensorflow and torch run where the driver's Python is unless an environment is named for keras. Both the
trial's workers and their framework servers (sweep/workers.py) start in the environment; its rows name it (`environment`) and
the interpreter that ran (`python_executable`). This module is plain data: it runs in the driver and
in each trial's coordinator.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import platform
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sweep.errors import UsageError
from sweep.limits import shown
from trainables import zoo
from trainables.config import FRAMEWORKS, KERAS_BACKENDS, runs_as

if TYPE_CHECKING:
    from trainables.probe import FrameworkCheck

KINDS = ("py_executable", "pip", "uv", "image_uri")
# Where `env create` puts its environments: $SWEEP_ENVS, else the user's data folder.
ROOT_VAR = "SWEEP_ENVS"
MARKER = "sweep-env.json"  # written last by `env create`: the environment is complete
CREATABLE = ("mxnet", "keras")  # frameworks `env create` makes an environment for
# What each made environment runs, by the name trials go by (runs_as), and the module that, where the driver's own
# Python imports it, runs there instead (None: the made environment is used wherever it exists). Keras's holds JAX
# alone (numpy 2; no TensorFlow, no torch): keras trials on the other backends never run in it.
MADE_FOR: dict[str, tuple[str, str | None]] = {"mxnet": ("mxnet", None), "keras": ("keras/jax", "jax")}
# The extra that installs what runs under a name into the driver's Python, where it is not the name itself.
EXTRAS = {"keras/tensorflow": "tensorflow", "keras/torch": "pytorch"}
EXPECTED = ("a mapping with one of py_executable (an interpreter), pip or uv (a list of requirements), "
            "image_uri (a container image), and optionally env_vars")


@dataclass(frozen=True)
class Environment:
    kind: str  # one of KINDS: the runtime_env field
    value: str | tuple[str, ...]  # the interpreter or image; the requirements of pip and uv
    env_vars: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One line, as tables and rows show it: `py_executable /opt/mx/bin/python`."""
        value = " ".join(self.value) if isinstance(self.value, tuple) else self.value
        return f"{self.kind} {value}" + "".join(f" {k}={v}" for k, v in sorted(self.env_vars.items()))

    def runtime_env(self, code_root: str | None) -> dict[str, Any]:
        """Ray's runtime_env for it.

        Another interpreter does not see the driver's packages: it gets this project's code through
        PYTHONPATH (the folder that holds sweep/ and trainables/), which the framework servers and
        checks that its workers start as child processes inherit. pip and uv environments are layered
        over the driver's interpreter and see the project already; an image must contain it.
        """
        env_vars = dict(self.env_vars)
        if self.kind == "py_executable" and code_root:
            env_vars["PYTHONPATH"] = os.pathsep.join(p for p in (env_vars.get("PYTHONPATH"), code_root) if p)
        env: dict[str, Any] = {self.kind: list(self.value) if isinstance(self.value, tuple) else self.value}
        return {**env, "env_vars": env_vars} if env_vars else env

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Environment:
        value = raw["value"]
        return cls(raw["kind"], tuple(value) if isinstance(value, list) else value, dict(raw.get("env_vars") or {}))


def code_root() -> str | None:
    """The folder holding this project's packages, for interpreters that lack them; None where the
    project is installed into site-packages (that folder would hand the driver's packages to them all)."""
    root = Path(__file__).resolve().parent.parent
    return None if root.name in ("site-packages", "dist-packages") else str(root)


def parse(value: Any) -> Environment:
    """One framework's environment from a sweep file (or --env's YAML); ValueError says what was expected."""
    if not isinstance(value, dict) or not value:
        raise ValueError(f"expected {EXPECTED}")
    unknown = sorted(set(map(str, value)) - set(KINDS) - {"env_vars"})
    if unknown:
        raise ValueError(f"unknown key '{unknown[0]}' (expected one of {', '.join(KINDS)}, env_vars)")
    kinds = [k for k in KINDS if k in value]
    if len(kinds) != 1:
        raise ValueError(f"expected exactly one of {', '.join(KINDS)}" + (f", got {' and '.join(kinds)}" if kinds else ""))
    kind = kinds[0]
    raw = value[kind]
    if kind in ("pip", "uv"):
        if not isinstance(raw, list) or not raw or not all(isinstance(r, str) and r.strip() for r in raw):
            raise ValueError(f"{kind}: expected a non-empty list of requirements (\"mxnet==1.9.1\"), got {raw!r}")
        parsed: str | tuple[str, ...] = tuple(r.strip() for r in raw)
    else:
        if not isinstance(raw, str) or not raw.strip():
            raise ValueError(f"{kind}: expected a non-empty text, got {raw!r}")
        parsed = raw.strip()
        if kind == "py_executable" and "/" in shlex.split(parsed)[0] and not os.path.isabs(shlex.split(parsed)[0]):
            raise ValueError(f"py_executable: expected an absolute path (every node resolves it alike), got {raw!r}")
        if kind == "image_uri" and any(c.isspace() for c in parsed):
            raise ValueError(f"image_uri: expected an image name without spaces, got {raw!r}")
    env_vars = value.get("env_vars", {})
    if not isinstance(env_vars, dict) or not all(isinstance(k, str) and k and isinstance(v, (str, int, float))
                                                 and not isinstance(v, bool) for k, v in env_vars.items()):
        raise ValueError(f"env_vars: expected a mapping of NAME: value, got {env_vars!r}")
    return Environment(kind, parsed, {k: str(v) for k, v in env_vars.items()})


def parse_section(value: Any) -> dict[str, Environment]:
    """A sweep file's `environments:` section (None: none): framework -> environment; ValueError names the part."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of framework ({', '.join(FRAMEWORKS)}) to an environment")
    out = {}
    for framework, env in value.items():
        if framework not in FRAMEWORKS:
            raise ValueError(f"unknown framework '{framework}' (expected one of {', '.join(FRAMEWORKS)})")
        try:
            out[framework] = parse(env)
        except ValueError as e:
            raise ValueError(f"{framework}: {e}") from None
    return out


def parse_option(text: str) -> tuple[str, Environment]:
    """`--env FRAMEWORK=PYTHON` or `--env 'FRAMEWORK={image_uri: ...}'`; ValueError says what is wrong."""
    framework, eq, value = text.partition("=")
    framework, value = framework.strip(), value.strip()
    if not eq or not value:
        raise ValueError("expected FRAMEWORK=PYTHON or FRAMEWORK={image_uri: ...} (a YAML mapping)")
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework '{framework}' (expected one of {', '.join(FRAMEWORKS)})")
    if value.startswith("{"):
        try:
            mapping = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise ValueError(f"malformed YAML: {getattr(e, 'problem', None) or str(e).splitlines()[0]}") from None
        return framework, parse(mapping)
    # An interpreter: a relative path is this shell's, made absolute so that every worker finds it.
    words = shlex.split(value)
    if "/" in words[0]:
        words[0] = os.path.abspath(words[0])
    return framework, parse({"py_executable": shlex.join(words)})


def envs_root() -> Path:
    """The folder holding the environments `env create` makes ($SWEEP_ENVS, else $XDG_DATA_HOME/sweep/envs)."""
    if os.environ.get(ROOT_VAR):
        return Path(os.environ[ROOT_VAR]).expanduser().absolute()
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "sweep" / "envs"


def interpreter() -> str:
    """The driver's very interpreter (a venv's base Python): every environment made for it is a venv of it."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def env_dir(framework: str) -> Path:
    """Where `env create FRAMEWORK` puts the environment for this interpreter: one per framework and
    interpreter (its path and version), as Ray's workers need the driver's Python."""
    key = hashlib.sha256(interpreter().encode()).hexdigest()[:8]
    return envs_root() / f"{framework}-py{platform.python_version()}-{key}"


def env_python(folder: Path) -> Path:
    return folder / "bin" / "python"


def made_marker(folder: Path) -> dict[str, Any] | None:
    """What `env create` recorded of a complete environment; None where it is not (yet) complete or unreadable."""
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def made_environment(framework: str) -> Environment | None:
    """The environment `env create` made for this framework and this interpreter, if it is complete."""
    folder = env_dir(framework)
    if framework not in CREATABLE or made_marker(folder) is None:
        return None
    return Environment("py_executable", str(env_python(folder)))


def missing_here(env: Environment) -> str | None:
    """The interpreter of a py_executable environment when this machine has none by that name (a path that is
    not an executable file, a name not on PATH); None otherwise, and for the other kinds, which Ray makes."""
    if env.kind != "py_executable":
        return None
    program = shlex.split(str(env.value))[0]
    return None if shutil.which(program) else program


def made_environments() -> dict[str, Environment]:
    """The environments `env create` made that trials use, by the name of what runs in them (MADE_FOR)."""
    out = {}
    for framework, (name, unless) in MADE_FOR.items():
        env = made_environment(framework)
        if env is not None and not (unless and driver_has(unless)):
            out[name] = env
    return out


def every_name() -> list[str]:
    """What trials can run, by the names their environments go by (runs_as): each framework, keras once per backend."""
    return [runs_as(fw, backend) for fw in FRAMEWORKS for backend in (KERAS_BACKENDS if fw == "keras" else ("",))]


def driver_has(module: str) -> bool:
    """Whether the driver's Python has this top-level module, found without importing it."""
    return importlib.util.find_spec(module) is not None


def made_by(name: str) -> str | None:
    """The framework whose `env create` makes the environment for trials of this name (runs_as); None: none does."""
    return next((fw for fw, (made_name, _) in MADE_FOR.items() if made_name == name), None)


def of(envs: dict[str, Environment], name: str) -> Environment | None:
    """The environment of trials of this name (runs_as) among chosen()'s; None: the driver's Python. chosen() keys
    an environment named in the sweep file or by --env by its framework, a made one by the name it serves."""
    return envs.get(name) or envs.get(name.partition("/")[0])


def origin(name: str, env: Environment | None) -> str:
    """Where trials of this name (runs_as) run, in words: their environment and where that came from."""
    if env is None:
        return "the driver's Python"
    framework = made_by(name)
    made = made_environment(framework) if framework else None
    return env.describe() + (f" (made by `python -m sweep env create {framework}`)" if env == made else "")


def with_hint(check: FrameworkCheck, envs: dict[str, Environment]) -> FrameworkCheck:
    """A framework (or Keras backend) missing from the driver's Python, with no environment of its own: its check
    names the command that makes one (or the install)."""
    if check.ok or of(envs, check.runs_as) or " is not installed for " not in (check.reason or ""):
        return check
    return dataclasses.replace(check, reason=f"{check.reason}; {fix(check.runs_as)}")


def fix(name: str) -> str:
    """How to get what runs under this name (runs_as) where it is missing: make its environment, else install it."""
    framework = made_by(name)
    return (f"make it an environment of its own: python -m sweep env create {framework}" if framework else
            f"install it: pip install -e '.[{EXTRAS.get(name, name)}]'")


def backend_refusal(names: list[str], envs: dict[str, Environment]) -> str | None:
    """Why keras trials cannot run here (one line), before Ray starts: a backend (runs_as "keras/jax") with no
    environment whose module the driver's Python lacks, where an embedded Ray runs every trial in that Python.
    None where each can run."""
    for name in names:
        backend = name.partition("/")[2]
        if not backend or of(envs, name) is not None or driver_has(backend):
            continue
        return (f"keras_backend {backend}: {backend} is not installed for {sys.executable} and no environment is named "
                f"for keras (environments:, --env); {fix(name)}")
    return None


def chosen(from_file: dict[str, Environment], options: list[str]) -> dict[str, Environment]:
    """The environments made by `env create`, by the name they serve (MADE_FOR), then the sweep file's and --env's
    by framework, each of which replaces what was made for that framework; a bad --env is one line."""
    named = dict(from_file)
    for text in options:
        try:
            framework, env = parse_option(text)
        except ValueError as e:
            raise UsageError(f"--env {text}: {e}") from None
        named[framework] = env
    made = {name: env for name, env in made_environments().items() if name.partition("/")[0] not in named}
    return {**made, **named}


def code_folder(given: str | None) -> str | None:
    """`--code DIR`: the folder of the models' code, made absolute; a UsageError where it is not a folder."""
    if given is None:
        return None
    folder = Path(given).expanduser()
    if not folder.is_dir():
        raise UsageError(f"--code {shown(given, 300)}: no such folder (expected the folder that holds your models' modules)")
    size = _files_size(folder, CODE_MAX_BYTES)
    if size >= CODE_MAX_BYTES:  # before Ray starts: Ray would refuse the package at the run's first trial
        raise UsageError(f"--code {shown(given, 300)}: its files hold {size / 2**20:,.0f} MiB or more, and Ray ships a folder "
                         f"of at most {CODE_MAX_BYTES / 2**20:,.0f} MiB zipped to the nodes: give a folder of the models' "
                         "modules only (weights and data elsewhere)")
    return str(folder.resolve())


def code_digest(folder: str | None) -> str | None:
    """A sha256 of the files under a --code folder (their paths and bytes): a resume notices a changed folder as it
    notices a changed sweep file. Python's bytecode caches are left out: importing the code writes them."""
    if folder is None:
        return None
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if not f.endswith(".pyc")):
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, folder).encode() + b"\0")
            try:
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(2**20), b""):
                        digest.update(block)
            except OSError:  # a dangling link or an unreadable file: its name alone counts
                continue
    return digest.hexdigest()


# Ray's largest package (its gRPC message size, ray._private.runtime_env.packaging.GCS_STORAGE_MAX_SIZE): a
# working_dir it zips and ships must be smaller. Files are counted before zipping: code compresses, so a folder of
# code under this ships; one whose files are over it holds something else.
CODE_MAX_BYTES = 512 * 2**20


def _files_size(folder: Path, stop_at: int) -> int:
    """The bytes of the files under `folder` (links not followed), counted until `stop_at` is reached."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            if total >= stop_at:
                return total
    return total


def model_sources(models: list[str], code: str | None) -> list[str]:
    """What each model named outside the engine's zoo makes its trials import, and from where, as `show` and `plan`
    print it: found without importing it (importing a module runs it; only trials do)."""
    lines = []
    for name in dict.fromkeys(models):
        found = zoo.named(name)
        if found is None:
            continue
        if found.zoo:
            where = f"{zoo.ZOO_PACKAGES[found.source]}: {found.name}, in {zoo.ZOOS[found.source]}'s environment"
        else:
            origin = _locate(found.source, code)
            where = (f"{found.source} from {origin}" + (" (--code: shipped to every node)" if code and origin and
                                                         origin.startswith(code + os.sep) else "")
                     if origin else f"{found.source}, not found here (PYTHONPATH, --code DIR): the trials' environment "
                                    "must have it")
        lines.append(f"  {name}: imports {where}")
    if not lines:
        return []
    return ["models' code (a trial imports and runs it: a sweep file that names code is as trusted as that code):",
            *lines]


def _locate(module: str, code: str | None) -> str | None:
    """The file `module` would be imported from, on the --code folder then the driver's path (not its working
    folder), without running it or its packages' __init__ (importlib.util.find_spec would run them)."""
    import importlib.machinery

    path: list[str] | None = [p for p in ([code] if code else []) + sys.path if p and p != os.getcwd()]
    spec = None
    for part in module.split("."):
        if path is None:  # a module where a package was needed
            return None
        spec = importlib.machinery.PathFinder.find_spec(part, path)
        if spec is None:
            return None
        path = list(spec.submodule_search_locations) if spec.submodule_search_locations is not None else None
    return spec.origin if spec else None
