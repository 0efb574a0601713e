"""A trial's error as plain data, made in the process that raised it.

An exception of a framework (MXNet's MXNetError, TensorFlow's OpErrors) unpickles only where that
framework imports, and the driver imports none: Ray hands it an exception it cannot read, Tune gives
up on the whole sweep. So every error leaves a trial's process (the Tune trainable, the workers of a
distributed trial, the framework check) as a TrialError: its type's name, its first line and the
class that raised it, plain strings that unpickle anywhere.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class TrialError(Exception):
    """An error of a trial as plain data: the driver records it without importing what raised it."""

    def __init__(self, error_type: str, message: str, error_class: str) -> None:
        super().__init__(error_type, message, error_class)  # args: what pickle rebuilds it from
        self.error_type = error_type  # the exception's class name: MXNetError, ResourceExhaustedError
        self.message = message  # its first meaningful line
        self.error_class = error_class  # where it comes from: mxnet.base.MXNetError

    def __str__(self) -> str:
        return f"{self.error_type}: {self.message}"


class EmulatedOutOfMemoryError(MemoryError):
    """A trial on emulated devices took more memory per device than their capacity (--emulate-gpu-memory):
    what a GPU of that size would have refused. The driver records it as `oom`, as a real one."""


def first_line(text: str, error_type: str = "") -> str:
    """The first line that says something: MXNet's messages start with a C++ traceback header."""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("Traceback (most recent call last)", 'File "')):
            continue
        if error_type and line.startswith(f"{error_type}: "):
            line = line[len(error_type) + 2:]
        return line[:500]
    return ""


def trial_error(exc: BaseException) -> TrialError:
    """Any exception as a TrialError; one that already is one (a worker's, passed on) keeps its fields."""
    if isinstance(exc, TrialError):  # also Ray's wrapper of a remote TrialError, which reads through to it
        return TrialError(exc.error_type, exc.message, exc.error_class)
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and type(exc).__module__ == "ray.exceptions":
        # Ray's RayTaskError of a remote call (a worker's checkpoint, say): its own first line is the call's
        # coloured name and pid; the error it carries says what went wrong (OutOfDiskError: "... the local disk's
        # utilization is over capacity (95% by default)").
        return trial_error(cause)
    cls = type(exc)
    return TrialError(cls.__name__, first_line(str(exc), cls.__name__), f"{cls.__module__}.{cls.__qualname__}")


def plain_errors(method: F) -> F:
    """Whatever `method` raises leaves its process as a TrialError (the original stays its cause,
    in the traceback text that Ray and Tune keep)."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - every error becomes data
            raise trial_error(e) from e

    return wrapper  # type: ignore[return-value]
