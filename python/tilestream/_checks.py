"""Argument checks of the public calls. Each wrong argument raises TypeError (wrong kind) or
ValueError (right kind, value out of range) with one sentence naming the argument, what it got and
what it takes, before anything reaches the native module (whose own conversion errors would be
pybind11's signature dumps). Limits that depend on the problem (a grid too small, a budget too
tight...) are the library's, with its messages."""

import numbers
import operator

import numpy as np

INDEX_MIN, INDEX_MAX = -(2**63), 2**63 - 1  # tilestream::index_t
INT_MIN, INT_MAX = -(2**31), 2**31 - 1  # C++ int
SIZE_MAX = 2**64 - 1  # std::size_t


def kind_of(value):
    return "None" if value is None else type(value).__name__


def integer(value, name, low=INDEX_MIN, high=INDEX_MAX):
    """An int (or numpy integer) within [low, high]; bool is refused."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {kind_of(value)}") from None
    if not low <= value <= high:
        raise ValueError(f"{name} = {value} is out of range (from {low} to {high})")
    return value


def real(value, name):
    """A real number as a Python float (a finite int beyond float's range is refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {kind_of(value)}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name} = {value} is beyond the range of a float (about 1.8e308)") from None


def number(value, name):
    """A real or complex number (Python's or numpy's) as a Python float or complex."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Complex):
        raise TypeError(f"{name} must be a number (real or complex), got {kind_of(value)}")
    if isinstance(value, numbers.Real):
        return real(value, name)
    return complex(value)


def text(value, name, examples):
    """A string; `examples` says which, for the message."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string such as {examples}, got {kind_of(value)}")
    return value


def spec(devices):
    """A device spec string from a string or a list of items."""
    if isinstance(devices, str):
        return devices
    if isinstance(devices, (list, tuple)) and devices and all(isinstance(d, str) for d in devices):
        return ",".join(devices)
    raise TypeError(f"devices must be a spec string such as 'all', 'cpu:2' or 'cuda:0,cpu' (or a list of "
                    f"such items), got {kind_of(devices)}")


def budget(memory_budget, parse_bytes):
    """None, or bytes from an int or a string such as '8MiB' (parsed by `parse_bytes`)."""
    if memory_budget is None:
        return None
    if isinstance(memory_budget, str):
        memory_budget = parse_bytes(memory_budget)
    elif isinstance(memory_budget, (bool, np.bool_)) or not isinstance(memory_budget, numbers.Integral):
        raise TypeError(f"memory_budget must be a number of bytes (int) or a string such as '8MiB', "
                        f"got {kind_of(memory_budget)}")
    if memory_budget < 1:
        raise ValueError(f"memory_budget must be at least 1 byte, got {memory_budget}")
    if memory_budget > SIZE_MAX:
        raise ValueError(f"memory_budget = {memory_budget} is out of range (at most {SIZE_MAX} bytes)")
    return int(memory_budget)


def progress_callable(progress, bar):
    """None, the bar (progress=True), or the caller's callable (done, total)."""
    if progress is None or progress is False:
        return None
    if progress is True:
        return bar()
    if not callable(progress):
        raise TypeError(f"progress must be a callable (done, total), True or None, got {kind_of(progress)}")
    return progress
