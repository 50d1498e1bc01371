"""A solver's per-parameter update (normalize, regularize, the rule) as one fused kernel, where
one takes the arrays: the compiled host kernel of :mod:`pycaffe_lite.ops.cpu` (SGD) on NumPy
arrays. The solver's NumPy steps run where none does (:func:`takes` is False).

:func:`update_all` runs the update of every parameter and ``data -= diff`` in one compiled call
(SGD, Nesterov and Adam on NumPy arrays of one float type: :func:`takes_all`), with the same
values bit for bit. On the device, every rule's update of all the parameters is one launch
whose coefficients live in device memory: :mod:`pycaffe_lite.ops.gpu.solver_updates`
(:func:`device_tables`, :func:`device_upload`, :func:`device_update_all`).
"""

from ..backend import get_array_module
from . import cpu as _cpu
from .gpu import solver_updates as _gpu


#: the rules :func:`update` computes, one parameter at a time: SGD alone (Nesterov's and Adam's
#: compiled update exists only for all the params at once, :func:`update_all`)
PER_PARAM_RULES = ("SGD",)


def takes(rule, data, diff, *state):
    """Whether a fused host kernel of ``rule`` computes the update of these arrays."""
    return rule in PER_PARAM_RULES and rule in ONE_PASS_RULES and \
        _cpu.supported(data, diff, *state)


def update(rule, data, diff, state, norm, decay, l1, rate, coefficients):
    """Run ``rule``'s fused kernel (after :func:`takes`): ``state`` the rule's history arrays
    (updated in place), ``coefficients`` its scalars in the kernel's order; ``diff`` becomes the
    update value (``Net.update`` then does ``data -= diff``)."""
    if rule not in PER_PARAM_RULES:
        raise ValueError("no per-parameter kernel computes the %s update" % rule)
    _cpu.sgd_update(diff, state[0], data, norm, decay, l1, rate, coefficients[0])


#: the rules :func:`update_all` computes
ONE_PASS_RULES = tuple(_cpu.UPDATE_RULES)


def takes_all(rule, datas, diffs, state):
    """Whether one compiled call computes the update of all these params (``state``: one list
    of arrays per history of the rule) and applies it."""
    if rule not in ONE_PASS_RULES:
        return False
    return _cpu.supported(*datas, *diffs, *[a for arrays in state for a in arrays])


def update_all(rule, datas, diffs, state, norm, decays, l1, rates, coefficients):
    """:func:`update` of every param (``decays`` and ``rates`` one per param, ``coefficients``
    the rule's scalars, as for :func:`update`), then ``data -= diff`` (``Net.update``), in one
    call (after :func:`takes_all`)."""
    _cpu.solver_update_all(rule, diffs, state, datas, rates, decays, norm, l1, coefficients)


#: the rules :func:`device_update_all` computes
DEVICE_RULES = tuple(_gpu.RULES)


def device_takes(rule, datas, diffs, state):
    """Whether :func:`device_update_all` takes these device arrays (one float type)."""
    return rule in DEVICE_RULES and bool(datas) and \
        _gpu.supported(*datas, *diffs, *[a for arrays in state for a in arrays])


def device_tables(rule, datas, diffs, state, decays):
    """The constant tables of ``rule``'s device update of these arrays (see ``ops.gpu``)."""
    return _gpu.Tables(get_array_module(datas[0]), rule, datas, diffs, state, decays)


device_tables_key = _gpu.tables_key
device_upload = _gpu.upload
device_update_all = _gpu.update_all
