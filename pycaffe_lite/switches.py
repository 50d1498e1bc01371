"""The environment variables that turn a feature on or off (``PYCAFFE_LITE_FOLD=0`` and the
like), all read the same way by :func:`switch`."""

import logging
import os

OFF = ("0", "false", "no", "off")
ON = ("1", "true", "yes", "on")


def switch(name, default=True):
    """Whether the environment variable ``name`` turns its feature on: ``default`` where it is
    unset or empty; off for 0, false, no or off, on for 1, true, yes or on (any case); any
    other value keeps ``default``, with a warning naming the variable."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if value.lower() in OFF:
        return False
    if value.lower() in ON:
        return True
    logging.getLogger("pycaffe_lite").warning(
        "%s=%r is none of %s; it is ignored (the feature stays %s)", name, value,
        ", ".join(ON + OFF), "on" if default else "off")
    return default


# The blocked kernels' instruction sets (``PYCAFFE_LITE_BLOCKED_ISA``) and the float32 lanes
# of each; here, not in ops/cpu/blocked.py, so that a bad value is known without loading it.
BLOCKED_ISAS = {"avx512": 16, "avx2": 8}


# The most threads a count in the environment may ask for: more is a typo (each thread is
# started when a call is large enough to give it work, and reserves its own stack), and more
# than a C int cannot reach OpenBLAS at all.
MAX_THREADS = 1024


def thread_count(name, value):
    """The whole number of threads that the environment variable ``name`` holding ``value``
    names (OpenMP's list form for ``OMP_NUM_THREADS``: its first value), or None where it is
    not a whole number. Its reader ignores one under 1 or over :data:`MAX_THREADS`."""
    value = value.strip()
    try:
        return int(value.split(",")[0] if name == "OMP_NUM_THREADS" else value)
    except ValueError:
        return None


def flag(value, where, allow_none=False):
    """``value`` as the bool a switch function (``where``, e.g. ``set_cuda_graph``) sets: True or
    False, 1 or 0, NumPy's booleans; None too where ``allow_none`` (the automatic choice). Any
    other value (a string such as ``"off"``, which ``bool()`` would read as True) is a TypeError
    naming the function."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool):
        return value
    try:
        import numpy as np

        if isinstance(value, np.bool_):
            return bool(value)
    except ImportError:  # pragma: no cover - NumPy is a dependency
        pass
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise TypeError("%s takes True or False%s, got %r" % (
        where, " (or None: the automatic choice)" if allow_none else "", value))
