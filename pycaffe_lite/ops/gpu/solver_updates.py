"""The solvers' per-parameter update as one fused CUDA kernel per rule (ElementwiseKernels).

Each kernel does, for one learnable parameter, what :meth:`SGDSolver.apply_update` does with
``normalize``, ``regularize`` and ``compute_update_value`` in separate NumPy steps:

    g = diff * norm                                 (norm = 1 / iter_size)
    g += decay * (l1 ? sign(data) : data)           (when decay != 0)
    <the rule, updating its history in place>       (formulas below, as in the NumPy rules)
    diff = <the update value>                       (Net.update then does data -= diff)

The scalar coefficients are computed by the caller exactly as the NumPy code computes them
(float32 rounding included) and passed by value: the kernels read nothing from the host and the
host reads nothing back. Results agree with NumPy to float rounding (the GPU may fuse a
multiply-add); ``sign`` of NaN is 0 here, NaN in NumPy.
"""

import numpy as np

from ._util import LazyKernel, on_gpu

_ARGS = "T data, T norm, T decay, int32 l1, T rate"
_GRAD = """
    T g = diff * norm;
    if (decay != T(0)) g += decay * (l1 ? T((data > T(0)) - (data < T(0))) : data);
"""


#: rule -> (input parameters, output parameters, operation) of its ElementwiseKernel
SPECS = {}


def _kernel(name, extra_in, out, body):
    SPECS[name] = (_ARGS + extra_in, out, _GRAD + body)

    def build(cp):
        return cp.ElementwiseKernel(_ARGS + extra_in, out, _GRAD + body,
                                    "pycaffe_lite_" + name.lower())
    return LazyKernel(build)


# SGD: history = momentum * history + rate * g; diff = history
_sgd = _kernel("SGD", ", T momentum", "T diff, T history", """
    history = momentum * history + rate * g;
    diff = history;
""")

# Nesterov: h' = momentum * h + rate * g; diff = (1 + momentum) * h' - momentum * h
_nesterov = _kernel("Nesterov", ", T momentum, T one_plus_momentum", "T diff, T history", """
    const T previous = history;
    history = momentum * history + rate * g;
    diff = history * one_plus_momentum - previous * momentum;
""")

# AdaGrad: history += g^2; diff = rate * g / (sqrt(history) + delta)
_adagrad = _kernel("AdaGrad", ", T delta", "T diff, T history", """
    history += g * g;
    diff = g / (sqrt(history) + delta) * rate;
""")

# RMSProp: history = decay_rms * history + (1 - decay_rms) * g^2;
#          diff = rate * g / (sqrt(history) + delta)
_rmsprop = _kernel("RMSProp", ", T delta, T rms_decay, T one_minus_rms", "T diff, T history", """
    history = history * rms_decay + g * g * one_minus_rms;
    diff = g / (sqrt(history) + delta) * rate;
""")

# AdaDelta: gh = m * gh + (1 - m) * g^2; g *= sqrt((uh + delta) / (gh + delta));
#           uh = m * uh + (1 - m) * g^2; diff = rate * g
_adadelta = _kernel("AdaDelta", ", T delta, T momentum, T keep",
                    "T diff, T grad_history, T update_history", """
    grad_history = grad_history * momentum + g * g * keep;
    g *= sqrt((update_history + delta) / (grad_history + delta));
    update_history = update_history * momentum + g * g * keep;
    diff = g * rate;
""")

# Adam: m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g^2;
#       diff = step * m / (sqrt(v) + eps), step = rate * correction (rate is that product here)
_adam = _kernel("Adam", ", T beta1, T one_minus_beta1, T beta2, T one_minus_beta2, T eps",
                "T diff, T m, T v", """
    m = m * beta1 + g * one_minus_beta1;
    v = v * beta2 + g * g * one_minus_beta2;
    diff = m / (sqrt(v) + eps) * rate;
""")

KERNELS = {"SGD": _sgd, "Nesterov": _nesterov, "AdaGrad": _adagrad, "RMSProp": _rmsprop,
           "AdaDelta": _adadelta, "Adam": _adam}


def supported(*arrays):
    """CuPy float32/float64 arrays of one dtype."""
    return on_gpu(*arrays) and len({a.dtype for a in arrays}) == 1 and \
        arrays[0].dtype.kind == "f"


def update(rule, data, diff, state, norm, decay, l1, rate, coefficients):
    """Run rule ``rule``'s kernel on one parameter: ``state`` its history arrays (updated in
    place), ``coefficients`` the rule's scalars in the kernel's order; ``diff`` becomes the
    update value."""
    dt = data.dtype.type
    scalars = [dt(norm), dt(decay), np.int32(1 if l1 else 0), dt(rate)]
    KERNELS[rule](data, *scalars, *[dt(c) for c in coefficients], diff, *state)
