"""A solver's per-parameter update (normalize, regularize, the rule) as one fused kernel, where
one takes the arrays: the CUDA kernels of :mod:`pycaffe_lite.ops.gpu.solver_updates` (every
rule) on CuPy arrays, the compiled host kernel of :mod:`pycaffe_lite.ops.cpu` (SGD) on NumPy
arrays. The solver's NumPy steps run where none does (:func:`takes` is False)."""

from . import cpu as _cpu
from .gpu import solver_updates as _gpu


def takes(rule, data, diff, *state):
    """Whether a fused kernel of ``rule`` computes the update of these arrays."""
    if _gpu.supported(data, diff, *state):
        return rule in _gpu.KERNELS
    return rule == "SGD" and _cpu.supported(data, diff, *state)


def update(rule, data, diff, state, norm, decay, l1, rate, coefficients):
    """Run ``rule``'s fused kernel (after :func:`takes`): ``state`` the rule's history arrays
    (updated in place), ``coefficients`` its scalars in the kernel's order; ``diff`` becomes the
    update value (``Net.update`` then does ``data -= diff``)."""
    if _gpu.supported(data, diff, *state):
        _gpu.update(rule, data, diff, state, norm, decay, l1, rate, coefficients)
    else:
        _cpu.sgd_update(diff, state[0], data, norm, decay, l1, rate, coefficients[0])
