"""The errors a user can fix: each message is the one line the CLI prints before it exits with 2."""
from __future__ import annotations


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
