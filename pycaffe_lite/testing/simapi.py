"""The simulated device held to the real CuPy 14 API.

``gpu_api/cupy14.json`` is written by ``tools/cupy_api_reference.py`` from the real CuPy: the
names in ``cupy`` and its submodules, the attributes of ``cupy.ndarray``, the methods of its
ufuncs and, where CuPy's functions expose them, their parameter names. The simulated device
asks this module before it hands out a NumPy name, so GPU code that CI only runs on the
simulated device fails here as it would on a GPU: a name CuPy lacks raises AttributeError, a
keyword argument CuPy's function does not take raises TypeError.
"""
import functools
import json
import os

import numpy as np

_HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_api")


@functools.lru_cache(maxsize=None)
def api(name="cupy14.json"):
    with open(os.path.join(_HERE, name)) as f:
        return json.load(f)


def _module(where):
    return api()[where]


def check_name(where, name):
    """Raise AttributeError as CuPy would when module ``where`` (e.g. ``cupy.linalg``) lacks
    ``name``; return the recorded entry."""
    entry = _module(where).get(name)
    if entry is None:
        raise AttributeError("module '%s' has no attribute '%s' (not in CuPy %s)"
                             % (where, name, api()["version"]))
    return entry


def check_ndarray(name):
    entry = _module("cupy.ndarray").get(name)
    if entry is None:
        raise AttributeError("'cupy.ndarray' object has no attribute '%s' (not in CuPy %s)"
                             % (name, api()["version"]))
    return entry


def check_ufunc_method(ufunc_name, method):
    if method != "__call__" and method not in api()["ufunc"]:
        raise AttributeError("'cupy._core._kernel.ufunc' object (%s) has no attribute '%s'"
                             % (ufunc_name, method))


def check_function(func, kwargs):
    """A NumPy function called on a device array: CuPy's ``__array_function__`` runs CuPy's
    function of that name, and NumPy raises TypeError where CuPy has none."""
    where = "cupy" + func.__module__[len("numpy"):] if func.__module__.startswith("numpy") else ""
    if where not in api():
        return
    entry = api()[where].get(func.__name__)
    if entry is None:
        raise TypeError("no implementation found for 'numpy.%s' on types that implement "
                        "__array_function__: %s has no %s" % (func.__name__, where, func.__name__))
    check_keywords(where + "." + func.__name__, entry, kwargs)


def check_keywords(what, entry, kwargs):
    """TypeError for a keyword argument the recorded signature in ``entry`` does not take."""
    params = entry.get("params") if entry else None
    if not kwargs or params is None or "**" in params:
        return
    bad = sorted(set(kwargs) - set(params))
    if bad:
        raise TypeError("%s() got an unexpected keyword argument '%s' (CuPy %s takes %s)"
                        % (what, bad[0], api()["version"], ", ".join(params) or "none"))


class _DeviceRandom:
    """``xp.random``: a device-side random stream (its own generator, as CuPy's is separate from
    NumPy's). As in CuPy, the float functions take ``dtype`` float32 or float64 only, and
    ``rand``/``random``/``random_sample`` draw in that precision, in [0, 1)."""

    def __init__(self, dev):
        self._dev = dev
        self.seed()

    def seed(self, seed=None):
        # Philox, not NumPy's default PCG64: one seed must not give the host's numbers here,
        # as it does not on a GPU (cuRAND's XORWOW)
        self._gen = np.random.Generator(np.random.Philox(seed))

    def _out(self, values, dtype):
        values = np.asarray(values)
        if dtype is not None:
            values = values.astype(dtype)
        return self._dev._wrap(values, scalars=True)

    @staticmethod
    def _float(dtype):
        dtype = np.dtype(dtype)
        if dtype.char not in "fd":  # CuPy's message
            raise TypeError("cupy.random only supports float32 and float64")
        return dtype

    def rand(self, *size, dtype=float):
        return self.random_sample(size or None, dtype)

    def random_sample(self, size=None, dtype=float):
        # drawn in float32 itself: a float64 draw rounded to float32 can be 1.0
        return self._out(self._gen.random(size, dtype=self._float(dtype)), None)

    random = random_sample

    def uniform(self, low=0.0, high=1.0, size=None, dtype=float):
        return self._out(self._gen.uniform(low, high, size), self._float(dtype))

    def normal(self, loc=0.0, scale=1.0, size=None, dtype=float):
        return self._out(self._gen.normal(loc, scale, size), self._float(dtype))

    def standard_normal(self, size=None, dtype=float):
        return self._out(self._gen.standard_normal(size), self._float(dtype))

    def randint(self, low, high=None, size=None, dtype=int):
        if high is None:
            low, high = 0, low
        return self._out(self._gen.integers(low, high, size), dtype)
