"""Dropout: zero each input with probability ``dropout_ratio`` while training."""

import numpy as np

from ... import backend
from ...backend import get_array_module
from ...layer import NeuronLayer
from ...proto import caffe_pb2
from ...registry import register_layer


@register_layer("Dropout")
class DropoutLayer(NeuronLayer):
    """Inverted dropout.

    Bottoms: x (any shape). Tops: y, same shape; may be computed in place.
    Params: ``dropout_param { dropout_ratio (0.5), in [0, 1)  scale_train (true) }``
    (``scale_train``: the Fast R-CNN fork's field, number 2).

    TRAIN: a mask keeps each element with probability ``1 - dropout_ratio``, drawn anew at
    every forward where x lives (``backend.random_uniform``: the host generator
    ``backend.rng()`` on the CPU, the device's generator on the GPU, with no upload);
    ``y = x * mask / (1 - dropout_ratio)``, or ``y = x * mask`` when ``scale_train`` is
    false. Backward applies the same mask and scale.
    TEST: ``y = x``, or ``y = x * (1 - dropout_ratio)`` when ``scale_train`` is false; with
    Bayesian SegNet's ``sample_weights_test: true``, as in TRAIN (Monte Carlo dropout).
    """

    draws_random = True

    def setup(self, bottom, top):
        param = self.layer_param.dropout_param
        ratio = float(param.dropout_ratio)
        if not 0.0 <= ratio < 1.0:
            raise self.error(f"dropout_ratio must be in [0, 1), got {ratio:g}")
        self.ratio = ratio
        self.scale = 1.0 / (1.0 - ratio)
        self.scale_train = bool(param.scale_train)
        self.sample_test = bool(param.sample_weights_test)
        self.factor = None

    def _train(self):
        return self.phase == caffe_pb2.TRAIN or self.sample_test

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        y = top[0].write_data()
        xp = get_array_module(x)
        if self._train():
            uniform = backend.random_uniform(x.shape, np.float32, xp)
            factor = (uniform >= self.ratio).astype(x.dtype)
            if self.scale_train:
                factor *= self.scale
            self.factor = factor
            xp.multiply(x, factor, out=y)
        elif self.scale_train:
            y[...] = x
        else:
            xp.multiply(x, 1.0 - self.ratio, out=y)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = top[0].read_diff()
        dx = bottom[0].write_diff()
        xp = get_array_module(dy)
        if self._train():
            if self.factor is None or self.factor.shape != dy.shape:
                raise self.error("backward in TRAIN phase needs a forward pass first (no "
                                 f"dropout mask for a top of shape {dy.shape})")
            xp.multiply(dy, self.factor, out=dx)
        elif self.scale_train:
            dx[...] = dy
        else:
            xp.multiply(dy, 1.0 - self.ratio, out=dx)
