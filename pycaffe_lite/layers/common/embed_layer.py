"""Embed: look up learned vectors by integer index (a one-hot InnerProduct, done by lookup)."""

import numpy as np

from ...backend import get_array_module, to_host
from ...layer import Layer, defer_check
from ...registry import register_layer
from .common_utils import setup_weight_and_bias


@register_layer("Embed")
class EmbedLayer(Layer):
    """Learned embeddings: each bottom value is the index of a row of the weight table.

    Bottoms: indices, any shape, holding integers (stored as floats) in ``[0, input_dim)``; a
    value that is not such an integer is an error naming it. No gradient flows to it.
    Tops: y of shape ``indices.shape + (num_output,)``: ``y[..., :] = W[index] (+ b)``.
    Params: ``embed_param { num_output (required, > 0), input_dim (required, > 0), bias_term
    (true), weight_filler (constant 0), bias_filler (constant 0) }``.
    Blobs: weights of shape (input_dim, num_output) (transposed relative to InnerProduct);
    bias of shape (num_output,) when ``bias_term``.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.embed_param
        self.num_output = int(p.num_output)
        self.input_dim = int(p.input_dim)
        self.bias_term = p.bias_term
        if self.num_output <= 0:
            raise self.error("embed_param.num_output must be > 0, got %d" % self.num_output)
        if self.input_dim <= 0:
            raise self.error("embed_param.input_dim must be > 0, got %d" % self.input_dim)
        setup_weight_and_bias(self, p, (self.input_dim, self.num_output))

    def reshape(self, bottom, top):
        top[0].reshape(bottom[0].shape + (self.num_output,))

    def _indices(self, bottom, check=True):
        """The bottom's values as a flat integer index array, after checking them (inside a
        captured forward the check is deferred, :func:`defer_check`, and a bad value gathers
        row 0 until it is read; the backward, whose forward checked the same values, does not
        check again: a bad value is row 0 there too)."""
        x = bottom.read_data().reshape(-1)
        xp = get_array_module(x)
        bad = ~((x >= 0) & (x < self.input_dim) & (xp.floor(x) == x))
        if not x.size:
            return x.astype(xp.intp)
        if not check:
            return xp.where(bad, 0, x).astype(xp.intp)
        failed = bad.any()
        if xp is not np and defer_check(failed, lambda: self._check_values(to_host(x))):
            return xp.where(bad, 0, x).astype(xp.intp)
        if bool(failed):
            self._check_values(to_host(x))
        return x.astype(xp.intp)

    def _check_values(self, x):
        """Raise the error for the first value of host ``x`` that is not an index."""
        bad = ~((x >= 0) & (x < self.input_dim) & (np.floor(x) == x))
        if bad.any():
            pos = int(bad.argmax())
            raise self.error("bottom value %r at flat position %d is not an integer index in "
                             "[0, input_dim=%d)" % (float(x[pos]), pos, self.input_dim))

    def forward(self, bottom, top):
        idx = self._indices(bottom[0])
        y = top[0].write_data().reshape(idx.size, self.num_output)
        xp = get_array_module(y)
        xp.take(self.blobs[0].read_data(), idx, axis=0, out=y)
        if self.bias_term:
            y += self.blobs[1].read_data()

    def allow_force_backward(self, bottom_index):
        return False  # the input holds indices: no gradient, even with force_backward

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            raise self.error("cannot backpropagate to the Embed input (bottom 0 holds indices); "
                             "set propagate_down: false for it")
        need_w = self.param_propagate_down[0]
        need_b = self.bias_term and self.param_propagate_down[1]
        if not (need_w or need_b):
            return
        dy = top[0].read_diff().reshape(-1, self.num_output)
        if need_w:
            idx = self._indices(bottom[0], check=False)
            dw = self.blobs[0].write_diff()
            xp = get_array_module(dw)
            xp.add.at(dw, idx, dy)  # repeated indices accumulate
        if need_b:
            db = self.blobs[1].write_diff()
            db += dy.sum(axis=0)
