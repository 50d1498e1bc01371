"""ENet's spatial dropout (``spatial_dropout.SpatialDropoutLayer``, a Python layer), built in.

ENet's training and deploy nets name it as a Python layer::

    layer { name: "drop1_0_3" type: "Python" bottom: "x" top: "y"
            python_param { module: "spatial_dropout" layer: "SpatialDropoutLayer"
                           param_str: "{'phase': 'TEST', 'p': '0.01'}" } }

When no ``spatial_dropout`` module can be imported, the Python layer uses this class.
"""

import numpy as np

from ... import backend
from ...backend import get_array_module
from ...layer import Layer
from .python_param_str import parse_param_str


class SpatialDropoutLayer(Layer):
    """Dropout of whole feature maps, as ENet's layer computes it.

    The phase comes from ``param_str`` (``'phase'``), not from the net. TRAIN: each map
    ``(n, c)`` is kept with probability ``1 - p`` and scaled by ``1 / (1 - p)``, else zeroed;
    TEST: every value is scaled by ``1 / (1 - p)`` (as ENet's layer does).
    Backward: the same factors on the top gradient.

    Bottoms: x ``(N, C, ...)``. Tops: y, x's shape.
    Params: ``python_param { param_str: "{'phase': 'TEST' | 'TRAIN', 'p': '0.01'}" }``
    (``0 < p < 1``).
    """

    draws_random = True

    def setup(self, bottom, top):
        params = parse_param_str(self, getattr(self, "param_str", "") or
                                 self.layer_param.python_param.param_str)
        try:
            self.p = float(params["p"])
            self.train = str(params["phase"]) == "TRAIN"
        except (KeyError, TypeError, ValueError) as exc:
            raise self.error("param_str needs 'phase' ('TRAIN' or 'TEST') and 'p' (a number), "
                             "got %r" % params) from exc
        if not 0 < self.p < 1:
            raise self.error("param_str p must be between 0 and 1, got %g" % self.p)
        if len(bottom) != 1 or len(top) != 1:
            raise self.error("spatial dropout takes 1 bottom and 1 top, got %d and %d"
                             % (len(bottom), len(top)))
        self.factor = None

    def reshape(self, bottom, top):
        if bottom[0].num_axes < 2:
            raise self.error("input must be (N, C, ...), got shape %s" % (bottom[0].shape,))
        if top[0] is not bottom[0]:
            top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        xp = get_array_module(x)
        scale = x.dtype.type(1.0 / (1.0 - self.p))
        if self.train:
            n, c = x.shape[:2]
            keep = backend.random_uniform((n, c), np.float32, xp) >= self.p
            self.factor = (keep * scale).astype(x.dtype).reshape((n, c) + (1,) * (x.ndim - 2))
        else:
            self.factor = scale
        top[0].write_data()[...] = x * self.factor

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].write_diff()[...] = top[0].read_diff() * self.factor
