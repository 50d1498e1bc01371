"""GELU: y = x * Phi(x), Phi the standard normal distribution (beyond BVLC Caffe; MXNet's
``LeakyReLU(act_type='gelu')``, the erf form)."""

import math

from ...backend import get_array_module
from ...registry import register_layer
from .inplace_utils import BottomKeepingNeuronLayer

# erfc(z) ~ t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), z >= 0: the Chebyshev fit of Numerical
# Recipes (2nd ed., 6.2), fractional error below 1.2e-7 everywhere. P's coefficients, t^0 up.
_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
         -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def normal_cdf(xp, x):
    """Phi(x) = erfc(-x / sqrt(2)) / 2, to a relative error below 1.2e-7 in both tails.

    Evaluated in float64 whatever ``x``'s type (and returned so): the fit's polynomial nearly
    cancels at small |x| (its terms sum to about 1e-3 from coefficients of about 1), so in
    float32 it loses up to 8e-6 of relative accuracy; float64 keeps the fit's own error, and
    the caller's one rounding to float32 is the only one left."""
    x = x.astype(xp.float64, copy=False)
    z = xp.abs(x) * (1 / math.sqrt(2))
    t = 1 / (1 + 0.5 * z)
    poly = xp.full_like(t, _ERFC[-1])
    for coeff in _ERFC[-2::-1]:
        poly *= t
        poly += coeff
    half_erfc = 0.5 * t * xp.exp(poly - z * z)  # Phi(-|x|)
    return xp.where(x >= 0, 1 - half_erfc, half_erfc)


@register_layer("GELU")
class GELULayer(BottomKeepingNeuronLayer):
    """The Gaussian error linear unit in its exact (erf) form, as MXNet's LeakyReLU gelu and
    PyTorch's ``gelu(approximate='none')`` compute it.

    Bottoms: x (any shape). Tops: y, same shape; may be computed in place (a copy of x is kept
    for the backward pass).
    Params: none.

    Forward: ``y = x * Phi(x)``, ``Phi(x) = (1 + erf(x / sqrt(2))) / 2`` from a fit of erfc
    with relative error below 1.2e-7 (NumPy has no erf), evaluated in float64 and rounded
    once to the blob's type, so both tails keep float32's precision.
    Backward: ``dx = dy * (Phi(x) + x * exp(-x^2 / 2) / sqrt(2 pi))``.
    """

    def forward(self, bottom, top):
        x = self.forward_input(bottom, top)
        xp = get_array_module(x)
        xp.multiply(x, normal_cdf(xp, x), out=top[0].write_data())

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self.backward_input(bottom, top)
        xp = get_array_module(x)
        wide = x.astype(xp.float64, copy=False)
        pdf = xp.exp(-0.5 * wide * wide) * (1 / math.sqrt(2 * math.pi))
        dx = bottom[0].write_diff()
        dx[...] = top[0].read_diff() * (normal_cdf(xp, wide) + wide * pdf)
