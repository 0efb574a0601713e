"""Bounds on what a user hands the engine, checked before anything is expanded, parsed or started.

Every input is bounded at the edge so that a hostile or mistaken one costs a second and one line:
a sweep file's size, its YAML once aliases are followed, its trial count (from the grid's shape,
before expansion), each setting's range (what MXNet, TensorFlow, numpy and the Parquet store can
hold), the names that become folders under --results, and the length of any value quoted back.
"""
from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable

MAX_SPEC_BYTES = 256 << 10  # the shipped sweep files are 1-3 KB
MAX_YAML_NODES = 50_000  # scalars, lists and mappings, each alias counted as the tree it stands for
MAX_TRIALS = 10_000  # per scale, unless --max-trials says otherwise
MAX_NAME = 100  # a sweep's name is a folder; a run's folder adds a run id under it
MAX_QUOTED = 60  # characters of a value quoted back in a message
MAX_PATH_SHOWN = 300  # a path or URI given on the command line is shown whole up to this length
MAX_EMULATED_NODES = 8  # Ray nodes the embedded emulation starts on one machine
MAX_EMULATED_GPUS = 64  # fake GPUs per emulated node (each trains on as many CPU devices)

SEED_MAX = 2**32 - 1  # numpy's RandomState and MXNet's seed take 32 bits
# The largest value each integer setting may take: a real cluster's sizes with room to spare, and far
# below what the store's int64 columns hold.
INT_MAX = {
    "num_gpus": 4096,
    "gpus_per_node": 64,
    "nodes": 1024,
    "batch_per_gpu": 65536,
    "base_batch": 2**24,
    "epochs": 100_000,
    "warmup_epochs": 100_000,
    "steps_per_epoch": 10**8,
    "val_examples": 10**8,
    "warmup_steps": 10**8,
    "image_size": 4096,
    "cpus_per_trial": 1024,
    "loader_workers": 1024,
    "seed": SEED_MAX,
}
# Command-line integers: (least, most).
OPTION_RANGE = {"emulate_gpus": (1, MAX_EMULATED_GPUS), "max_concurrent": (1, 100_000), "max_failures": (0, 1000),
                "max_trials": (1, 10**6), "nodes": (1, 100_000), "gpus_per_node": (1, 1024), "cpus_per_node": (1, 100_000)}

_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxlist, _repr.maxdict, _repr.maxtuple, _repr.maxset = 3, 6, 6, 6, 6
_repr.maxstring, _repr.maxother, _repr.maxlong = MAX_QUOTED, MAX_QUOTED, 30


def quote(value: object) -> str:
    """A value as a message shows it: its repr, never longer than MAX_QUOTED characters and never
    walking more of a nested (or alias-shared) structure than that takes."""
    text = _repr.repr(value)
    return text if len(text) <= MAX_QUOTED else text[: MAX_QUOTED - 3] + "..."


def shown(value: object, width: int = MAX_QUOTED) -> str:
    """A name or text as a message shows it: as written when it is plain text of at most `width`
    characters (a path may be given more), else quoted and cut to MAX_QUOTED."""
    if isinstance(value, str) and 0 < len(value) <= width and value.isprintable() and value.strip() == value:
        return value
    return quote(value)


def one_line(text: str) -> str:
    """A message as the CLI prints it: anything that is not printable (a newline, a record separator,
    an escape sequence from a file name or an argument) written as its escape, so it stays one line."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def name_problem(name: str) -> str | None:
    """None when `name` can be one folder under --results; else what is wrong with it."""
    if not name or len(name) > MAX_NAME:
        return f"1 to {MAX_NAME} characters"
    if not all(c.isascii() and (c.isalnum() or c in "_.-") for c in name):
        return "letters, digits, '_', '.' or '-', all ASCII"
    if not name[0].isalnum():  # nor '.' or '..', which are no folder of their own
        return "a name that starts with a letter or digit"
    return None


MAX_LISTED = 160  # characters of names a message lists before it names where the whole list is


def known_names(given: object, known: Iterable[str], listed_in: str = "") -> str:
    """What a message about an unknown name adds: the known names closest to it (a typo's fix) where some are
    close, else all of them, or as many as MAX_LISTED characters hold and where the rest are listed (a list
    grows with every setting added; the message must stay one short line whatever its path adds)."""
    known = sorted(known)
    close = difflib.get_close_matches(str(given), known, n=3)
    if close:
        return f"did you mean {' or '.join(close)}?"
    if len(", ".join(known)) <= MAX_LISTED or not listed_in:
        return f"expected one of {', '.join(known)}"
    shown_names = []
    while len(", ".join(shown_names + known[len(shown_names):len(shown_names) + 1])) <= MAX_LISTED:
        shown_names.append(known[len(shown_names)])
    return f"expected one of {', '.join(shown_names)}, ... ({len(known)} in all: {listed_in})"


def count(n: float, thing: str) -> str:
    """"1 trial", "2 trials": a count as a message says it (`thing` takes an s for the plural)."""
    return f"{n:g} {thing}{'' if n == 1 else 's'}"
