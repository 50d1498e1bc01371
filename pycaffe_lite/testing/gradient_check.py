"""Numerical gradient checking with Caffe's semantics.

The objective is ½·Σ top² over every top (so each top's diff is its data), or a single top
element for the exhaustive check. Central differences of ``stepsize`` are compared to the
analytic backward with a relative tolerance: ``|analytic - numeric| <= threshold * max(1,
|analytic|, |numeric|)``. Points within ``kink_range`` of ``kink`` (e.g. 0 for ReLU) are
skipped. The random generator is re-seeded before every forward, so layers that draw random
numbers (Dropout) see the same draws in every evaluation.
"""

import numpy as np

from .. import backend


class GradientCheckError(AssertionError):
    pass


class GradientChecker:
    def __init__(self, stepsize=1e-2, threshold=1e-3, seed=1701, kink=0.0, kink_range=-1.0):
        self.stepsize = stepsize
        self.threshold = threshold
        self.seed = seed
        self.kink = kink
        self.kink_range = kink_range

    # -- public API ------------------------------------------------------------------------
    def check_gradient(self, layer, bottom, top, check_bottom=None, check_params=True,
                       setup=True):
        """½Σtop² objective over all tops."""
        if setup:
            layer.SetUp(bottom, top)
        self._check(layer, bottom, top, check_bottom, check_params, -1, -1)

    def check_gradient_exhaustive(self, layer, bottom, top, check_bottom=None,
                                  check_params=True, setup=True):
        """One check per top element, the objective being that element alone."""
        if setup:
            layer.SetUp(bottom, top)
        self._forward(layer, bottom, top)
        for t, blob in enumerate(top):
            for i in range(blob.count):
                self._check(layer, bottom, top, check_bottom, check_params, t, i)

    # -- implementation --------------------------------------------------------------------
    def _forward(self, layer, bottom, top):
        backend.set_random_seed(self.seed)
        layer.Forward(bottom, top)

    def _objective(self, top, top_id, top_index):
        if top_id < 0:
            loss = 0.0
            for blob in top:
                d = blob.data.astype(np.float64)
                loss += 0.5 * float((d * d).sum())
                blob.diff[...] = blob.data
            return loss
        for blob in top:
            blob.diff[...] = 0
        flat = top[top_id].data.reshape(-1)
        top[top_id].diff.reshape(-1)[top_index] = 1
        return float(flat[top_index])

    def _check(self, layer, bottom, top, check_bottom, check_params, top_id, top_index):
        if check_bottom is None:
            checked = list(range(len(bottom)))
        elif isinstance(check_bottom, int):
            checked = [check_bottom] if check_bottom >= 0 else []
        else:
            checked = list(check_bottom)
        blobs = [("bottom %d" % i, bottom[i]) for i in checked]
        if check_params:
            blobs += [("param %d" % i, b) for i, b in enumerate(layer.blobs)]
        propagate_down = [i in checked for i in range(len(bottom))]

        for b in layer.blobs:
            b.diff[...] = 0
        self._forward(layer, bottom, top)
        self._objective(top, top_id, top_index)
        layer.Backward(top, propagate_down, bottom)
        analytic = [b.diff.copy() for _, b in blobs]

        for (what, blob), computed in zip(blobs, analytic):
            data = blob.data.reshape(-1)
            comp = computed.reshape(-1)
            for i in range(blob.count):
                feature = float(data[i])
                orig = data[i]
                data[i] = orig + self.stepsize
                self._forward(layer, bottom, top)
                pos = self._objective(top, top_id, top_index)
                data[i] = orig - self.stepsize
                self._forward(layer, bottom, top)
                neg = self._objective(top, top_id, top_index)
                data[i] = orig
                estimated = (pos - neg) / (2.0 * self.stepsize)
                if self.kink - self.kink_range <= abs(feature) <= self.kink + self.kink_range:
                    continue
                a = float(comp[i])
                scale = max(abs(a), abs(estimated), 1.0)
                if abs(a - estimated) > self.threshold * scale:
                    raise GradientCheckError(
                        "%s of layer '%s' (%s): element %d (value %g): analytic gradient %.6g, "
                        "numerical %.6g (objective %s)"
                        % (what, layer.name, layer.type, i, feature, a, estimated,
                           "sum of squares" if top_id < 0 else "top %d[%d]" % (top_id, top_index)))
        # leave the layer in its forward state for callers that inspect it
        self._forward(layer, bottom, top)
