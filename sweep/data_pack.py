"""`python -m sweep data pack imagenet --format tfrecord|recordio`: an image folder's packed form, made once.

The driver's side. A format is written by its framework's module, trainables/<framework>/pack.py, run in the
interpreter that framework's trials use (the environment `env create` made for it, else the driver's own: MXNet
may live in an environment of its own, and this process never imports a framework). The module writes the
split files and PACKED.json into a temporary folder beside the final one, DATA_DIR/imagenet/.FORMAT-packing-*;
here its manifest is checked against the folder (each split's records plus skipped images are its files, the
classes are the scan's) and the folder renamed to DATA_DIR/imagenet/FORMAT. A stopped or failed pack leaves no
FORMAT folder, and an earlier one stays as it was until the new one is whole (then it is replaced).
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sweep import environments
from sweep.errors import UsageError
from trainables import images


@dataclass(frozen=True)
class PackFormat:
    framework: str  # whose module writes it: trainables/<framework>/pack.py, in that framework's interpreter
    reader: str  # what reads it, in words


FORMATS = {
    "tfrecord": PackFormat("tensorflow", "TensorFlow's tf.data pipeline (tf_cnn_benchmarks' TFRecord shards)"),
    "recordio": PackFormat("mxnet", "MXNet's ImageRecordIter (im2rec's .rec/.idx)"),
}
PROJECT_ROOT = Path(__file__).resolve().parent.parent  # holds sweep/ and trainables/: the module's import path


def packing_prefix(fmt: str) -> str:
    return f".{fmt}-packing-"


def interpreter(framework: str, given: str | None = None) -> list[str]:
    """The command of the framework's interpreter: `--env FRAMEWORK=PYTHON` where given (as `run` takes it; an
    interpreter only, as this machine runs the pack), else the environment `env create` made, else this Python."""
    if given is None:
        env = environments.made_environment(framework)
        return shlex.split(str(env.value)) if env is not None else [sys.executable]
    try:
        named, env = environments.parse_option(given)
    except ValueError as e:
        raise UsageError(f"--env {given}: {e}") from None
    if named != framework:
        raise UsageError(f"--env {given}: this format is written by {framework}, not {named} (--env {framework}=PYTHON)")
    if env.kind != "py_executable":
        raise UsageError(f"--env {given}: packing runs here, in an interpreter (--env {framework}=PYTHON), not in {env.kind}")
    missing = environments.missing_here(env)
    if missing is not None:
        raise UsageError(f"--env {given}: no interpreter {missing} here")
    return shlex.split(str(env.value))


def check_manifest(manifest_path: Path, folder: images.ImageFolder, fmt: str) -> dict:
    """The manifest the pack module wrote, checked against the folder; a UsageError names what is off."""
    try:
        manifest = json.loads(manifest_path.read_text())
        splits = {name: manifest["splits"][name] for name in images.SPLITS}
        counts = {name: int(entry["records"]) + len(entry["skipped"]) for name, entry in splits.items()}
        classes = tuple(manifest["classes"])
        written = manifest["format"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{manifest_path}: the pack wrote no readable manifest ({type(e).__name__})") from None
    if written != fmt:
        raise UsageError(f"{manifest_path}: format {written!r}, not {fmt!r}")
    if classes != folder.classes:
        raise UsageError(f"{manifest_path}: {len(classes)} classes packed, the folder has {len(folder.classes)}")
    for name in images.SPLITS:
        files = len(getattr(folder, name).paths)
        if counts[name] != files:
            raise UsageError(f"{manifest_path}: {name}: {counts[name]} images packed or skipped, the folder has {files}")
    return manifest


def _remove_stale(root: Path, fmt: str) -> None:
    """Temporary folders of packs that were killed (a stopped pack removes its own): one being written, or an
    earlier pack moved aside to be replaced."""
    for stale in [*root.glob(packing_prefix(fmt) + "*"), *root.glob(f".{fmt}-replaced-*")]:
        shutil.rmtree(stale, ignore_errors=True)


def _put_in_place(made: Path, final: Path) -> None:
    """Rename the whole pack to its final name; an earlier one is moved aside first and removed after."""
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}-replaced-{os.getpid()}")
        os.rename(final, old)
    os.rename(made, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def pack(data_dir: str | Path, fmt: str, python: str | None = None) -> dict:
    """Pack DATA_DIR/imagenet as `fmt` into DATA_DIR/imagenet/FMT, in the interpreter `--env` names (`python`) or
    the framework's own; the checked manifest."""
    if fmt not in FORMATS:
        raise UsageError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt}")
    framework = FORMATS[fmt].framework
    command = interpreter(framework, python)  # a bad --env: one line, before the folder is scanned
    folder = images.scan(data_dir)  # a missing or empty folder: one line, before any interpreter starts
    _remove_stale(folder.root, fmt)
    made = Path(tempfile.mkdtemp(prefix=packing_prefix(fmt), dir=folder.root))
    made.chmod(0o755)  # mkdtemp makes it private; the packed form is read as the images are
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p),
               "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
        command = [*command, "-m", f"trainables.{framework}.pack", "--folder", str(folder.root), "--out", str(made)]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            said = next((line[len("error: "):] for line in lines if line.startswith("error: ")), None)
            raise UsageError(said or f"packing as {fmt} failed in {framework}'s interpreter ({shlex.join(command[:1])}, "
                                     f"exit {done.returncode}): {lines[-1] if lines else 'no message'}")
        manifest = check_manifest(made / images.PACKED, folder, fmt)
        _put_in_place(made, folder.root / fmt)
    finally:
        shutil.rmtree(made, ignore_errors=True)  # gone already where it was put in place
    return manifest


def cmd_pack(data_dir: str, fmt: str, python: str | None = None) -> int:
    manifest = pack(data_dir, fmt, python)
    counts = ", ".join(f"{name} {entry['records']} images ({len(entry['skipped'])} skipped)"
                       for name, entry in manifest["splits"].items())
    print(f"packed {Path(data_dir) / images.FOLDER} as {fmt} for {FORMATS[fmt].reader}: "
          f"{Path(data_dir) / images.FOLDER / fmt}: {counts}")
    return 0
