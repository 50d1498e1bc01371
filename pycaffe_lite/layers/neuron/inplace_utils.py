"""A base for element-wise layers whose backward pass reads the bottom data.

When such a layer runs in place (top 0 is bottom 0), the forward pass overwrites x with y, and a
backward pass reading "the bottom" would see y. Caffe gets this wrong for several layers (BNLL,
Log, Power, Clip, ...). Layers derived from :class:`BottomKeepingNeuronLayer` keep a copy of x
during an in-place forward pass and read it back in backward, so in-place use is always correct.
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
        # Follow the current mode if it changed between the passes.
        on_host = type(saved) is np.ndarray
        if backend.mode() == backend.CPU and not on_host:
            saved = backend.to_host(saved)
        elif backend.mode() == backend.GPU and on_host:
            saved = backend.to_device(saved)
        return saved
