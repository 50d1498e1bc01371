"""Host arrays of blobs whose values something else holds a derived copy of.

A net folded for inference (:mod:`pycaffe_lite.net_fold`) computes with copies of a
convolution's weights multiplied by the BatchNorm and Scale after it; the original blobs stay
in ``net.params`` and are read-only on the host. ``blob.data`` of such a blob is a
:class:`FrozenArray`: it reads as any NumPy array, and the first write through it (indexing
assignment, ``.flat``, an in-place operator or ufunc ``out=``, ``fill``, ``put``, ``sort``,
``np.copyto``) first calls the blob's ``on_write`` hook, which makes the values writable (the
net unfolds), then writes. BVLC's net surgery (``net.params[name][0].data[...] = w``) thus
works on a folded net as on Caffe's. A write by another path (a plain ``np.asarray`` view of
the array) still meets NumPy's read-only error: never a stale copy.
"""

import numpy as np

#: NumPy functions whose first argument is written in place
_WRITERS = frozenset([np.copyto, np.put, np.place, np.putmask, np.fill_diagonal,
                      np.put_along_axis])


def guarded(view, blob):
    """``view`` (a read-only host view of ``blob``'s data) as a :class:`FrozenArray`."""
    out = view.view(FrozenArray)
    out._blob = blob
    return out


def _plain(value):
    return value.view(np.ndarray) if isinstance(value, FrozenArray) else value


class FrozenArray(np.ndarray):
    """A blob's read-only host data that becomes writable on the first write (see the
    module's text). Views of it (slices, reshapes, ``.T``) are guarded too; results of
    arithmetic are plain arrays."""

    _blob = None

    def __array_finalize__(self, obj):
        parent = getattr(obj, "_blob", None)
        self._blob = parent if parent is not None and np.may_share_memory(self, obj) \
            else None

    def _thaw(self):
        blob = self._blob
        hook = getattr(blob, "on_write", None)
        if hook is not None:
            hook(blob)  # makes the blob's storage writable (and drops the hook)
        if not self.flags.writeable:
            self.flags.writeable = True  # NumPy refuses where the storage stays read-only

    def __setitem__(self, index, value):
        self._thaw()
        np.ndarray.__setitem__(self, index, value)

    @property
    def flat(self):
        return np.ndarray.flat.__get__(self)

    @flat.setter
    def flat(self, value):
        self._thaw()
        np.ndarray.flat.__set__(self, value)

    def fill(self, value):
        self._thaw()
        np.ndarray.fill(self, value)

    def put(self, *args, **kwargs):
        self._thaw()
        np.ndarray.put(self, *args, **kwargs)

    def sort(self, *args, **kwargs):
        self._thaw()
        np.ndarray.sort(self, *args, **kwargs)

    def partition(self, *args, **kwargs):
        self._thaw()
        np.ndarray.partition(self, *args, **kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out", ())
        for target in out:
            if isinstance(target, FrozenArray):
                target._thaw()
        if out:
            kwargs["out"] = tuple(_plain(o) for o in out)
        result = getattr(ufunc, method)(*(_plain(i) for i in inputs), **kwargs)
        if out:
            return out[0] if len(out) == 1 else out
        return result

    def __array_function__(self, func, types, args, kwargs):
        if func in _WRITERS and args and isinstance(args[0], FrozenArray):
            args[0]._thaw()
        # NumPy's own implementation (calling ``func`` again would dispatch back here when a
        # list holds a FrozenArray); a result in new memory comes back as a plain array
        result = super().__array_function__(func, types, args, kwargs)
        if isinstance(result, FrozenArray) and result._blob is None:
            result = result.view(np.ndarray)
        return result

    def __repr__(self):
        return repr(self.view(np.ndarray))

    def __str__(self):
        return str(self.view(np.ndarray))

    def __reduce__(self):
        return np.ndarray.__reduce__(self.view(np.ndarray))
