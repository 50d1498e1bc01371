"""ReLU (negative slope 0), alone or after a per-channel bias (a convolution's output pass).

On host arrays where the C kernels are built, one compiled pass (:mod:`pycaffe_lite.ops.cpu`:
``bias_relu``, ``relu_backward``) with NumPy's results bit for bit (``x + b``, then
``maximum(., 0)``: a value <= 0 gives +0, NaN stays NaN; the gradient ``dy * (x > 0)``);
NumPy's or CuPy's operations otherwise.
"""

from ..backend import get_array_module
from . import cpu as _cpu


def bias_relu(x, out, bias=None, relu=True):
    """``out = max(x (+ bias[c] over axis 1 of x (N, C, ...)), 0)``, the max only when
    ``relu``; ``out`` may be ``x``. Returns ``out``."""
    if bias is None and not relu:
        if out is not x:
            out[...] = x
        return out
    if _cpu.supported(x, out, bias):
        return _cpu.bias_relu(x, out, bias, relu)
    xp = get_array_module(x)
    if bias is not None:
        xp.add(x, bias.reshape((1, -1) + (1,) * (x.ndim - 2)), out=out)
        x = out
    if relu:
        xp.maximum(x, 0, out=out)
    return out


def relu_grad(x, dy, dx):
    """``dx = dy * (x > 0)``: ReLU's gradient (``x`` may be the output: its sign is x's)."""
    if _cpu.supported(x, dy, dx):
        return _cpu.relu_backward(x, dy, dx)
    get_array_module(x).multiply(dy, x > 0, out=dx)
    return dx
