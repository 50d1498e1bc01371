"""In-place safety for layers whose passes read a bottom that is also their top.

When such a layer runs in place (top i is bottom i), the forward pass overwrites x with y, and a
backward pass reading "the bottom" would see y. Caffe gets this wrong for several layers (BNLL,
Log, Power, Clip, ...). Layers derived from :class:`BottomKeepingNeuronLayer` keep a copy of x
during an in-place forward pass and read it back in backward, so in-place use is always correct.

Layers that are not element-wise but keep their bottom's shape for some parameters
(Convolution, Pooling, LRN, InnerProduct, ...) read a bottom while they write the top that is
the same blob (a convolution's output position reads a window of input positions), and their
backward writes the bottom's diff, which is the top's. :class:`InPlaceInputs` gives them the
same safety for any pair of bottom and top: the forward computes from a copy of an overwritten
bottom, kept for the backward, which also reads a copy of the top's diff.
"""

import numpy as np

from ... import backend
from ...backend import get_array_module
from ...layer import NeuronLayer


class BottomKeepingNeuronLayer(NeuronLayer):
    """NeuronLayer with in-place safe access to the bottom data.

    ``forward`` reads x with :meth:`forward_input` and ``backward`` with :meth:`backward_input`;
    out of place both are simply the bottom's data, in place the first saves a copy that the
    second returns.
    """

    _bottom_copy = None

    def forward_input(self, bottom, top):
        """x for the forward pass; in place, a saved copy (safe to read while y is written)."""
        x = bottom[0].read_data()
        if top[0] is not bottom[0]:
            self._bottom_copy = None
            return x
        xp = get_array_module(x)
        saved = self._bottom_copy
        if (saved is None or saved.shape != x.shape or saved.dtype != x.dtype
                or get_array_module(saved) is not xp):
            saved = xp.empty_like(x)
        saved[...] = x
        self._bottom_copy = saved
        return saved

    def backward_input(self, bottom, top):
        """x for the backward pass: the bottom data, or the copy saved by an in-place forward."""
        if top[0] is not bottom[0]:
            return bottom[0].read_data()
        saved = self._bottom_copy
        if saved is None or saved.shape != bottom[0].shape:
            raise self.error(f"in-place backward on a blob of shape {bottom[0].shape} needs an "
                             "in-place forward pass on it first (the bottom data was overwritten "
                             "by the top)")
        return _current_mode(saved)


def _current_mode(array):
    """``array`` in the current mode's kind (the mode may change between the passes)."""
    on_host = type(array) is np.ndarray
    if backend.mode() == backend.CPU and not on_host:
        return backend.to_host(array)
    if backend.mode() == backend.GPU and on_host:
        return backend.to_device(array)
    return array


class InPlaceInputs:
    """A mixin for layers that may run in place without being element-wise.

    ``forward`` reads bottom ``i`` with :meth:`forward_input`, and ``backward`` reads it with
    :meth:`backward_input` and top ``i``'s diff with :meth:`backward_top_diff`. Out of place
    these are the blobs' own arrays; in place (``top[i] is bottom[i]``) the forward reads a
    copy of the bottom, which the backward reads back, and the backward reads a copy of the
    top's diff (it writes the bottom's diff, the same array). A layer that changes its
    bottom's shape cannot run in place at all (the net refuses it, see
    :mod:`pycaffe_lite.net`)."""

    _in_place_inputs = None

    @staticmethod
    def in_place(bottom, top, i=0):
        """Whether bottom ``i`` is also top ``i``."""
        return i < len(top) and i < len(bottom) and top[i] is bottom[i]

    def forward_input(self, bottom, top, i=0):
        """Bottom ``i``'s data for the forward pass; in place, a copy kept for the backward."""
        x = bottom[i].read_data()
        if self._in_place_inputs is None:
            self._in_place_inputs = {}
        if not self.in_place(bottom, top, i):
            self._in_place_inputs.pop(i, None)
            return x
        saved = self._in_place_inputs.get(i)
        if (saved is None or saved.shape != x.shape or saved.dtype != x.dtype
                or get_array_module(saved) is not get_array_module(x)):
            saved = get_array_module(x).empty_like(x)
        saved[...] = x
        self._in_place_inputs[i] = saved
        return saved

    def backward_input(self, bottom, top, i=0):
        """Bottom ``i``'s data for the backward pass: the blob's, or the copy an in-place
        forward kept."""
        if not self.in_place(bottom, top, i):
            return bottom[i].read_data()
        saved = (self._in_place_inputs or {}).get(i)
        if saved is None or saved.shape != bottom[i].shape:
            raise self.error(f"in-place backward on a blob of shape {bottom[i].shape} needs an "
                             "in-place forward pass on it first (the bottom data was overwritten "
                             "by the top)")
        return _current_mode(saved)

    def backward_top_diff(self, top, bottom, i=0):
        """Top ``i``'s diff for the backward pass; in place, a copy (the bottom's diff, which
        the backward writes, is the same array)."""
        dy = top[i].read_diff()
        return dy.copy() if self.in_place(bottom, top, i) else dy
