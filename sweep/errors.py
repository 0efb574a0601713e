"""The errors a user can fix: each message is the one line the CLI prints before it exits with 2."""
from __future__ import annotations

from typing import Callable, TypeVar

T = TypeVar("T")


class UserError(Exception):
    """Bad input or an unusable resource, said in one line; never a traceback."""


class UsageError(UserError):
    """Options that do not fit together, or a run that cannot be started or resumed as asked."""


class SpecError(UserError):
    """A sweep file that cannot be run; the message names the file and the field."""


class StoreError(UserError):
    """A results store, run or file that cannot be read; the message names it."""


class ClusterError(UserError):
    """A Ray cluster that cannot be joined."""


class FetchError(UserError):
    """A download, check or unpack that failed."""


def read_or_refuse(read: Callable[[], T]) -> T:
    """What `read` returns; its ValueError (a setting of the environment that says its name) as a UsageError, so that
    the driver says it in one line before anything runs (trainables/config.py: env_seconds)."""
    try:
        return read()
    except ValueError as e:
        raise UsageError(str(e)) from None
