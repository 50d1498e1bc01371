"""The solvers' update of every parameter in one CUDA launch, its coefficients read on the device.

For each learnable parameter, one kernel does what :meth:`SGDSolver.apply_update` does with
``normalize``, ``regularize``, ``compute_update_value`` and ``Net.update``:

    g = diff * norm                                 (norm = 1 / iter_size)
    g += decay * (l1 ? sign(data) : data)           (when decay != 0)
    <the rule, updating its history in place>       (formulas below, as in the NumPy rules)
    diff = <the update value>;  data -= diff

All the parameters go in one launch: a table of device pointers (data, diff, histories), a
table of chunks (parameter, first element) that the blocks share out, and a *coefficient
table* in device memory: ``[norm, the rule's coefficients..., each parameter's rate]``. The
solver computes the coefficients on the host exactly as the NumPy code does (float32 rounding
included) and copies the table up before the launch; the kernel reads nothing else from the
host, so a CUDA graph that captured it replays each iteration with that iteration's rates.

With ``ok`` (a 0-d device boolean) the launch changes nothing where it is False: a captured
iteration whose loss is not finite, or whose labels failed their check, leaves the weights and
histories as the eager iteration (which stops before its update) does.

Arrays other than CuPy's (the simulated device), or with the kernels off, take
:func:`_update_generic`: the same arithmetic as array operations on device scalars.
"""

import numpy as np

from ...backend import get_array_module
from ._util import RawModuleCache, is_cupy, kernels_enabled, kernel_dtype

#: elements of one parameter a block updates (a chunk of the launch's table)
CHUNK = 1 << 14

#: rule -> (its coefficients' names, its histories' names, its body in CUDA C)
RULES = {
    # SGD: history = momentum * history + rate * g; diff = history
    "SGD": (("momentum",), ("history",), """
        history = momentum * history + rate * g;
        diff = history;"""),
    # Nesterov: h' = momentum * h + rate * g; diff = (1 + momentum) * h' - momentum * h
    "Nesterov": (("momentum", "one_plus_momentum"), ("history",), """
        const T previous = history;
        history = momentum * history + rate * g;
        diff = history * one_plus_momentum - previous * momentum;"""),
    # AdaGrad: history += g^2; diff = rate * g / (sqrt(history) + delta)
    "AdaGrad": (("delta",), ("history",), """
        history += g * g;
        diff = g / (sqrt(history) + delta) * rate;"""),
    # RMSProp: history = decay_rms * history + (1 - decay_rms) * g^2;
    #          diff = rate * g / (sqrt(history) + delta)
    "RMSProp": (("delta", "rms_decay", "one_minus_rms"), ("history",), """
        history = history * rms_decay + g * g * one_minus_rms;
        diff = g / (sqrt(history) + delta) * rate;"""),
    # AdaDelta: gh = m * gh + (1 - m) * g^2; g *= sqrt((uh + delta) / (gh + delta));
    #           uh = m * uh + (1 - m) * g^2; diff = rate * g
    "AdaDelta": (("delta", "momentum", "keep"), ("grad_history", "update_history"), """
        grad_history = grad_history * momentum + g * g * keep;
        g *= sqrt((update_history + delta) / (grad_history + delta));
        update_history = update_history * momentum + g * g * keep;
        diff = g * rate;"""),
    # Adam: m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g^2;
    #       diff = step * m / (sqrt(v) + eps), step = rate * correction (rate is that product)
    "Adam": (("beta1", "one_minus_beta1", "beta2", "one_minus_beta2", "eps"), ("m", "v"), """
        m = m * beta1 + g * one_minus_beta1;
        v = v * beta2 + g * g * one_minus_beta2;
        diff = m / (sqrt(v) + eps) * rate;"""),
}

_KERNEL = """
extern "C" __global__ void update_%(rule)s(
        const long long* chunks, int nchunks, const long long* sizes,
        const unsigned long long* ptrs, int n, const T* table, const T* decays, int l1,
        const bool* ok) {
    if (ok != 0 && !*ok) return;
    const T norm = table[0];
%(coefficients)s
    for (int c = blockIdx.x; c < nchunks; c += gridDim.x) {
        const int p = (int)chunks[2 * c];
        const long long start = chunks[2 * c + 1];
        const long long end = min(start + %(chunk)d, sizes[p]);
        T* const data_p = (T*)ptrs[p];
        T* const diff_p = (T*)ptrs[n + p];
%(states)s
        const T rate = table[%(ncoef)d + 1 + p];
        const T decay = decays[p];
        for (long long j = start + threadIdx.x; j < end; j += blockDim.x) {
            const T data = data_p[j];
            T& diff = diff_p[j];
%(refs)s
            T g = diff * norm;
            if (decay != T(0)) g += decay * (l1 ? T((data > T(0)) - (data < T(0))) : data);
%(body)s
            data_p[j] = data - diff;
        }
    }
}
"""


def _source():
    parts = []
    for rule, (coefs, states, body) in RULES.items():
        parts.append(_KERNEL % {
            "rule": rule.lower(), "chunk": CHUNK, "ncoef": len(coefs), "body": body,
            "coefficients": "\n".join("    const T %s = table[%d];" % (c, k + 1)
                                      for k, c in enumerate(coefs)),
            "states": "\n".join("        T* const %s_p = (T*)ptrs[%d * n + p];" % (s, k + 2)
                                for k, s in enumerate(states)),
            "refs": "\n".join("            T& %s = %s_p[j];" % (s, s) for s in states)})
    return "".join(parts)


_MODULE = RawModuleCache(_source(), ["update_" + r.lower() for r in RULES])


def supported(*arrays):
    """Device arrays of one float dtype (CuPy's, or the simulated device's)."""
    if not arrays or any(a is None or type(a).__module__.startswith("numpy") for a in arrays):
        return False
    return len({a.dtype for a in arrays}) == 1 and arrays[0].dtype.kind == "f"


def tables_key(datas, diffs, state):
    """What the tables of a launch depend on: the address and size of every array."""
    return tuple((a.data.ptr, a.size) for group in (datas, diffs) + tuple(state) for a in group)


class Tables:
    """The launch's constant tables for one set of arrays (``key``: :func:`tables_key`):
    pointers, chunks, sizes, the parameters' decays; and the coefficient table's buffer, sized
    for ``rule``'s coefficients."""

    def __init__(self, xp, rule, datas, diffs, state, decays):
        ncoef = len(RULES[rule][0])
        arrays = list(datas) + list(diffs) + [a for arrays in state for a in arrays]
        self.key = tables_key(datas, diffs, state)
        dtype = datas[0].dtype
        self.host_decays = [dtype.type(d) for d in decays]
        self.decays = xp.asarray(np.asarray(decays, dtype))
        self.table = xp.zeros(1 + ncoef + len(datas), dtype)
        self.kernel_ready = is_cupy(*arrays) and kernel_dtype(*arrays) is not None
        if self.kernel_ready:
            sizes = [int(a.size) for a in datas]
            chunks = [(p, s) for p, size in enumerate(sizes) for s in range(0, size, CHUNK)]
            self.nchunks = len(chunks)
            self.chunks = xp.asarray(np.asarray(chunks, np.int64).reshape(-1))
            self.sizes = xp.asarray(np.asarray(sizes, np.int64))
            self.ptrs = xp.asarray(np.asarray([a.data.ptr for a in arrays], np.uint64))


def upload(tables, norm, coefficients, rates):
    """Copy this iteration's ``[norm, coefficients..., rates...]`` into the coefficient table
    (from pageable host memory: the host array may be reused at once)."""
    host = np.empty(tables.table.shape, tables.table.dtype)
    host[0] = norm
    host[1:1 + len(coefficients)] = coefficients
    host[1 + len(coefficients):] = rates
    tables.table.set(host)


def update_all(rule, tables, datas, diffs, state, l1, ok=None):
    """Every parameter's update with the coefficients in ``tables.table`` (see the module's
    text); ``state``: one list of arrays per history of the rule, updated in place."""
    if tables.kernel_ready and kernels_enabled():
        function = _MODULE.function("update_" + rule.lower(), kernel_dtype(datas[0]))
        grid = min(tables.nchunks, 65535)
        if grid:
            function((grid,), (256,), (tables.chunks, np.int32(tables.nchunks), tables.sizes,
                                       tables.ptrs, np.int32(len(datas)), tables.table,
                                       tables.decays, np.int32(1 if l1 else 0),
                                       ok if ok is not None else np.uint64(0)))
        return
    _update_generic(rule, tables, datas, diffs, state, l1, ok)


def _update_generic(rule, tables, datas, diffs, state, l1, ok):
    coefs = RULES[rule][0]
    xp = get_array_module(datas[0])
    table = tables.table
    norm = table[0]
    c = {name: table[1 + k] for k, name in enumerate(coefs)}
    for i, (data, diff) in enumerate(zip(datas, diffs)):
        rate = table[1 + len(coefs) + i]
        g = diff * norm
        if tables.host_decays[i]:  # a constant of the net: the kernel's test, made here
            g = g + tables.decays[i] * (xp.sign(data) if l1 else data)
        hist = [arrays[i] for arrays in state]
        update, *new_hist = _GENERIC[rule](g, hist, c, rate, xp)
        if ok is None:
            for h, v in zip(hist, new_hist):
                h[...] = v
            diff[...] = update
            data -= update
        else:
            for h, v in zip(hist, new_hist):
                xp.copyto(h, v, where=ok)
            xp.copyto(diff, update, where=ok)
            xp.copyto(data, data - update, where=ok)


def _sgd(g, h, c, rate, xp):
    new = c["momentum"] * h[0] + rate * g
    return new, new


def _nesterov(g, h, c, rate, xp):
    previous = h[0]
    new = c["momentum"] * previous + rate * g
    return new * c["one_plus_momentum"] - previous * c["momentum"], new


def _adagrad(g, h, c, rate, xp):
    new = h[0] + g * g
    return g / (xp.sqrt(new) + c["delta"]) * rate, new


def _rmsprop(g, h, c, rate, xp):
    new = h[0] * c["rms_decay"] + g * g * c["one_minus_rms"]
    return g / (xp.sqrt(new) + c["delta"]) * rate, new


def _adadelta(g, h, c, rate, xp):
    grad_history = h[0] * c["momentum"] + g * g * c["keep"]
    g = g * xp.sqrt((h[1] + c["delta"]) / (grad_history + c["delta"]))
    update_history = h[1] * c["momentum"] + g * g * c["keep"]
    return g * rate, grad_history, update_history


def _adam(g, h, c, rate, xp):
    m = h[0] * c["beta1"] + g * c["one_minus_beta1"]
    v = h[1] * c["beta2"] + g * g * c["one_minus_beta2"]
    return m / (xp.sqrt(v) + c["eps"]) * rate, m, v


_GENERIC = {"SGD": _sgd, "Nesterov": _nesterov, "AdaGrad": _adagrad, "RMSProp": _rmsprop,
            "AdaDelta": _adadelta, "Adam": _adam}
