"""The checks of ``tools/check_gpu_kernels.py`` that run the Python side of ``ops/gpu`` with CuPy
replaced by the host shim (``tools/gpu_host.py``): BatchNorm's and Scale's per-channel kernels
and the fused training chains through their Python functions, the solvers' one-launch update
(tables, coefficients, the ``ok`` flag) against the NumPy solvers, and the layers whose hot
paths dispatch to the kernels against the same layers without them.

Every check also counts the kernels' launches: a path that fell back to the generic array code
fails instead of passing by comparing that code with itself.
"""

import contextlib

import numpy as np
from gpu_host import install_shim

from pycaffe_lite import backend
from pycaffe_lite.ops import train_fused
from pycaffe_lite.ops.gpu import _util
from pycaffe_lite.ops.gpu import channels as g_ch
from pycaffe_lite.ops.gpu import fused as g_fused
from pycaffe_lite.ops.gpu import im2col as g_im2col
from pycaffe_lite.ops.gpu import lrn as g_lrn
from pycaffe_lite.ops.gpu import pooling as g_pool
from pycaffe_lite.ops.gpu import softmax_loss as g_sl
from pycaffe_lite.ops.gpu import solver_updates as g_su

DTYPES = (np.float32, np.float64)
TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-11, atol=1e-12)}


@contextlib.contextmanager
def launched(host, *names):
    """Fails unless every kernel of ``names`` ran inside the block."""
    before = {n: host.launches.get(n, 0) for n in names}
    yield
    idle = [n for n in names if host.launches.get(n, 0) == before[n]]
    if idle:
        raise AssertionError("kernels %s never ran: the generic code ran instead" % idle)


def _shim(host, modules, on_gpu_modules=()):
    return install_shim(host, (_util,) + tuple(modules), on_gpu_modules)


# ---- BatchNorm's and Scale's kernels (ops/gpu/channels.py) -------------------------------------
def check_channels(host):
    rng = np.random.default_rng(5)
    restore = _shim(host, [g_ch])
    checks = 0
    try:
        for dt in DTYPES:
            tol = TOL[dt]
            # (outer, C, inner): several blocks per channel (splits), a tail, one channel
            for shape in [(8, 3, 2100), (2, 5, 7), (3, 1, 4500)]:
                outer, c, inner = shape
                x = (rng.normal(size=shape) * 2 + 3).astype(dt)
                x64 = x.astype(np.float64)
                mean, var = np.empty(c, dt), np.empty(c, dt)
                with launched(host, "channel_sums", "finish_sums"):
                    g_ch.bn_statistics(x, mean, var)
                want_mean = x64.mean(axis=(0, 2))
                np.testing.assert_allclose(mean, want_mean, **tol)
                np.testing.assert_allclose(var, ((x64 - mean.astype(np.float64)[None, :, None])
                                                 ** 2).mean(axis=(0, 2)), **tol)
                sums = [rng.normal(size=c).astype(dt), rng.uniform(1, 2, c).astype(dt),
                        np.array([1.5], dt)]
                want = [sums[0] * 0.9 + mean, sums[1] * 0.9 + 1.25 * var, 1.5 * 0.9 + 1]
                std = np.empty(c, dt)
                with launched(host, "bn_running"):
                    g_ch.bn_running(mean, var, *sums, 0.9, 1.25, 1e-5, std)
                for got, w in zip(sums, want):
                    np.testing.assert_allclose(got, np.reshape(w, got.shape), **tol)
                np.testing.assert_allclose(std, np.sqrt(var.astype(np.float64) + 1e-5), **tol)
                gm, gs = np.empty(c, dt), np.empty(c, dt)
                with launched(host, "bn_global"):
                    g_ch.bn_global(sums[0], sums[1], sums[2], 1e-5, gm, gs)
                np.testing.assert_allclose(gm, sums[0] / sums[2][0], **tol)
                np.testing.assert_allclose(gs, np.sqrt(sums[1] / sums[2][0] + dt(1e-5)), **tol)
                zero = np.zeros(1, dt)
                g_ch.bn_global(sums[0], sums[1], zero, 1e-5, gm, gs)  # no running sums yet
                np.testing.assert_array_equal(gm, 0)
                x_norm, y = np.empty_like(x), np.empty_like(x)
                with launched(host, "bn_apply"):
                    g_ch.bn_apply(x, mean, std, x_norm, y)
                want_xn = (x64 - mean[None, :, None]) / std[None, :, None]
                np.testing.assert_allclose(x_norm, want_xn, **tol)
                np.testing.assert_array_equal(y, x_norm)
                dy = rng.normal(size=shape).astype(dt)
                dx = np.empty_like(x)
                with launched(host, "bn_backward"):
                    g_ch.bn_backward(dy, x_norm, std, False, dx)
                dy64, xn64 = dy.astype(np.float64), x_norm.astype(np.float64)
                want_dx = (dy64 - dy64.mean(axis=(0, 2), keepdims=True) -
                           xn64 * (dy64 * xn64).mean(axis=(0, 2), keepdims=True)) / \
                    std[None, :, None]
                np.testing.assert_allclose(dx, want_dx, rtol=tol["rtol"] * 10,
                                           atol=tol["atol"] * 10)
                g_ch.bn_backward(dy, x_norm, std, True, dx)
                np.testing.assert_allclose(dx, dy64 / std[None, :, None], **tol)
                s, b = rng.normal(size=c).astype(dt), rng.normal(size=c).astype(dt)
                with launched(host, "scale_apply"):
                    g_ch.scale_apply(x, s, b, y)
                np.testing.assert_allclose(y, x64 * s[None, :, None] + b[None, :, None], **tol)
                g_ch.scale_apply(x, s, None, y)
                np.testing.assert_allclose(y, x64 * s[None, :, None], **tol)
                out1, out2 = rng.normal(size=c).astype(dt), rng.normal(size=c).astype(dt)
                want1 = out1 + 0.5 * dy64.sum(axis=(0, 2))
                want2 = out2 + 0.5 * (dy64 * x64).sum(axis=(0, 2))
                g_ch.channel_sums(dy, 2, out1, out2, b=x, scale=0.5, accumulate=True)
                np.testing.assert_allclose(out1, want1, **tol)
                np.testing.assert_allclose(out2, want2, **tol)
                checks += 13
    finally:
        restore()
    return checks


# ---- the fused training chains (ops/gpu/fused.py through ops/train_fused.py) ---------------------
def check_fused(host):
    """train_fused's chains through the kernels against its generic NumPy code."""
    rng = np.random.default_rng(6)
    checks = 0

    def both(fn):
        plain = fn()
        restore = _shim(host, [g_fused, g_ch], [_util])
        try:
            with launched(host, "chain_apply", "chain_backward", "sum_forward",
                          "sum_backward"):
                kernels = fn()
        finally:
            restore()
        return plain, kernels

    for dt in DTYPES:
        for shape, relu, scale, global_stats in [((4, 3, 1500), True, True, False),
                                                 ((2, 5, 9), False, True, False),
                                                 ((3, 2, 700), True, False, False),
                                                 ((2, 3, 10), True, True, True)]:
            x = rng.normal(size=shape).astype(dt) + 2
            dy = rng.normal(size=shape).astype(dt)
            c = shape[1]
            gamma = rng.normal(size=c).astype(dt) if scale else None
            beta = rng.normal(size=c).astype(dt) if scale else None
            running = [rng.normal(size=c).astype(dt), rng.uniform(1, 2, c).astype(dt),
                       np.array([2.0], dt)]
            xs = [rng.normal(size=shape).astype(dt) for _ in range(3)]

            def chain(x=x, dy=dy, gamma=gamma, beta=beta, running=running, xs=xs,
                      relu=relu, global_stats=global_stats):
                work = train_fused.Workspace()
                run = [a.copy() for a in running]
                y, xhat = np.empty_like(x), np.empty_like(x)
                std = train_fused.bn_forward(x, y, xhat, gamma, beta, run, global_stats, 1e-5,
                                             0.9, relu, work)
                dgamma = np.full(c, 0.5, dt) if scale else None
                dbeta = np.full(c, -0.5, dt) if scale else None
                dx, dtop = np.empty_like(x), np.empty_like(x)
                train_fused.bn_backward(dy.copy(), y, xhat, std, gamma, dgamma, dbeta, dx, dtop,
                                        global_stats, relu, work)
                s = np.empty_like(x)
                train_fused.sum_forward(xs, [1.0, -0.5, 2.0], s, relu)
                dz = dy.copy()
                dxs = [np.empty_like(x), None, np.empty_like(x)]
                train_fused.sum_backward(dz, s, [1.0, -0.5, 2.0], dxs, relu)
                out = [y, xhat, std.copy(), dx, dtop, s, dz, dxs[0], dxs[2]] + run
                return out + ([dgamma, dbeta] if scale else [])

            plain, kernels = both(chain)
            for k, (a, b) in enumerate(zip(plain, kernels)):
                np.testing.assert_allclose(b, a, rtol=TOL[dt]["rtol"] * 10,
                                           atol=TOL[dt]["atol"] * 10,
                                           err_msg="fused chain %s output %d" % (shape, k))
            checks += len(plain)
    return checks


# ---- the solvers' update (ops/gpu/solver_updates.py) ---------------------------------------------
#: sizes of the parameters a launch updates: one element, CHUNK boundaries crossed and met
SIZES = (35000, 7, 20000, g_su.CHUNK, 1)
COEFFICIENTS = {"momentum": 0.9, "one_plus_momentum": 1.9, "delta": 1e-6, "rms_decay": 0.98,
                "one_minus_rms": 0.02, "keep": 0.05, "beta1": 0.9, "one_minus_beta1": 0.1,
                "beta2": 0.999, "one_minus_beta2": 0.001, "eps": 1e-8}


def _is_device(*arrays):
    return any(a is not None for a in arrays) and \
        all(type(a).__name__ == "DeviceArray" for a in arrays if a is not None)


@contextlib.contextmanager
def _device_kernels(host):
    """GPU mode on the simulated device, its arrays taken for CuPy's by the solver update and
    its launches built for the host."""
    from pycaffe_lite.testing.simdevice import simulated_device

    with simulated_device() as dev:
        backend.set_mode_gpu()
        restore = install_shim(host, (_util, g_su), is_cupy_modules=(g_su,),
                               is_cupy=_is_device)
        try:
            yield dev
        finally:
            restore()
            backend.set_mode_cpu()


def check_solver_tables(host):
    """``Tables``/``upload``/``update_all`` of every rule, float32 and float64, against the
    module's generic array code on the same tables: L2 and L1 decay (one parameter without),
    iter_size's norm, the ``ok`` flag False (nothing changes) and True, and a launch of fewer
    blocks than chunks (as past 65535 chunks)."""
    from pycaffe_lite.testing.simdevice import copy_to_host

    rng = np.random.default_rng(8)
    with _device_kernels(host):
        xp = backend.xp()
        for dt in DTYPES:
            for rule, (coefs, states, _) in g_su.RULES.items():
                for l1 in (False, True):
                    host_arrays = [[rng.normal(size=n).astype(dt) for n in SIZES]
                                   for _ in range(2)]
                    host_arrays += [[(rng.uniform(0, 1, n) if rule in ("AdaGrad", "RMSProp",
                                                                       "AdaDelta") or k == 1
                                      else rng.normal(size=n)).astype(dt) for n in SIZES]
                                    for k in range(len(states))]
                    decays = [0.01, 0.0, 0.002, 0.05, 0.3]
                    values = [COEFFICIENTS[c] for c in coefs]
                    rates = [0.1, 0.2, 0.05, 0.1, 0.3]
                    results = []
                    for kernel in (False, True):
                        arrays = [[xp.asarray(a) for a in group] for group in host_arrays]
                        datas, diffs, state = arrays[0], arrays[1], arrays[2:]
                        tables = g_su.Tables(xp, rule, datas, diffs, state, decays)
                        assert tables.kernel_ready, "the tables were not made for a launch"
                        g_su.upload(tables, dt(0.5), values, rates)
                        if kernel:
                            before = [copy_to_host(a) for group in arrays for a in group]
                            with launched(host, "update_" + rule.lower()):
                                g_su.update_all(rule, tables, datas, diffs, state, l1,
                                                ok=xp.asarray(np.array(False)))
                            for a, b in zip(before, [copy_to_host(a) for group in arrays
                                                     for a in group]):
                                np.testing.assert_array_equal(b, a, err_msg="%s: ok False "
                                                              "changed an array" % rule)
                            g_su.update_all(rule, tables, datas, diffs, state, l1,
                                            ok=xp.asarray(np.array(True)))
                            host.grid_cap = 2  # fewer blocks than chunks: each takes several
                            try:
                                g_su.update_all(rule, tables, datas, diffs, state, l1)
                            finally:
                                host.grid_cap = None
                        else:
                            for _ in range(2):
                                g_su._update_generic(rule, tables, datas, diffs, state, l1,
                                                     None)
                        results.append([copy_to_host(a) for group in arrays for a in group])
                    for k, (a, b) in enumerate(zip(*results)):
                        np.testing.assert_allclose(b, a, **TOL[dt], err_msg="%s %s l1=%s "
                                                   "array %d" % (rule, dt.__name__, l1, k))
    print("shim: the solver update's launch of %d rules matches its array code, float32 and "
          "float64, L2 and L1, ok False and True" % len(g_su.RULES))


SOLVER_NET = """
name: "chunks"
layer { name: "input" type: "Input" top: "a" top: "b"
        input_param { shape { dim: 1 dim: 5000 } shape { dim: 1 dim: %d } } }
layer { name: "ip1" type: "InnerProduct" bottom: "a" top: "z1"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 7 } }
layer { name: "ip2" type: "InnerProduct" bottom: "a" top: "z2"
        param { lr_mult: 0.5 decay_mult: 2 }
        inner_product_param { num_output: 4 bias_term: false } }
layer { name: "ip3" type: "InnerProduct" bottom: "b" top: "z3"
        param { lr_mult: 1 decay_mult: 1 } inner_product_param { num_output: 1 bias_term: false } }
""" % g_su.CHUNK

SOLVER_RULES = {
    "SGD": 'type: "SGD" base_lr: 0.1 momentum: 0.9',
    "Nesterov": 'type: "Nesterov" base_lr: 0.1 momentum: 0.9',
    "AdaGrad": 'type: "AdaGrad" base_lr: 0.1 delta: 1e-6',
    "RMSProp": 'type: "RMSProp" base_lr: 0.05 rms_decay: 0.9 delta: 1e-6',
    "AdaDelta": 'type: "AdaDelta" base_lr: 1 momentum: 0.95 delta: 1e-6',
    "Adam": 'type: "Adam" base_lr: 0.01 momentum: 0.9 momentum2: 0.999 delta: 1e-8',
}
#: (regularization, weight_decay, iter_size) of each rule's two runs
SOLVER_SETTINGS = (("L2", 0.01, 1), ("L1", 0.003, 2))
ITERATIONS = 5
OK_ITERATION = 2  # on the device: a launch with ok False first, then with ok True


def _solver_run(rule, setting, device, host):
    """Five updates of ``rule`` on the net's params from fixed values and gradients: the
    solver's params and history (host copies) and the update launches run."""
    from helpers.solver import solver_param

    from pycaffe_lite.solvers import get_solver
    from pycaffe_lite.testing.simdevice import copy_to_host

    regularization, decay, iter_size = setting
    param = solver_param(SOLVER_RULES[rule] + ' lr_policy: "fixed" display: 0 max_iter: 10 '
                         'weight_decay: %g regularization_type: "%s" iter_size: %d'
                         % (decay, regularization, iter_size), SOLVER_NET)
    rng = np.random.default_rng(11)
    solver = get_solver(param)
    params = solver.net.learnable_params
    assert [p.count for p in params] == [35000, 7, 20000, g_su.CHUNK]
    for p in params:
        p.data[...] = rng.normal(size=p.shape) * 0.5
    launches = host.launches.get("update_" + rule.lower(), 0)
    for it in range(ITERATIONS):
        for p in params:
            p.diff[...] = rng.normal(size=p.shape) * iter_size
        if device and it == OK_ITERATION:
            # reading a blob on the host makes its host copy current: each launch comes
            # right after its prepare (write_data: the device copy current), as in the solver
            xp = backend.xp()
            before = [copy_to_host(a) for a in [p.data for p in params] + solver.history]
            arrays = solver.device_update_prepare(solver.get_learning_rate())
            assert arrays is not None, "the device update did not take the arrays"
            solver.device_update_run(arrays, ok=xp.asarray(np.array(False)))
            after = [copy_to_host(a) for a in [p.data for p in params] + solver.history]
            for a, b in zip(before, after):
                np.testing.assert_array_equal(b, a, err_msg="%s: ok False changed the "
                                              "params or history" % rule)
            arrays = solver.device_update_prepare(solver.get_learning_rate())
            solver.device_update_run(arrays, ok=xp.asarray(np.array(True)))
        else:
            solver.apply_update()
        solver.iter += 1
    out = [p.data.copy() for p in params] + [copy_to_host(h).copy() for h in solver.history]
    return out, host.launches.get("update_" + rule.lower(), 0) - launches


def check_solver_rules(host):
    """Every rule's update through the solver on the (simulated) device, its launch built for
    the host, against the NumPy solver steps in CPU mode (the compiled CPU kernels off)."""
    from pycaffe_lite.ops import cpu

    for rule in SOLVER_RULES:
        for setting in SOLVER_SETTINGS:
            old = cpu.set_kernels_enabled(False)
            try:
                want, _ = _solver_run(rule, setting, False, host)
            finally:
                cpu.set_kernels_enabled(old)
            with _device_kernels(host):
                got, launches = _solver_run(rule, setting, True, host)
            assert launches == ITERATIONS + 1, "%s: %d update launches" % (rule, launches)
            for k, (a, b) in enumerate(zip(want, got)):
                np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-6,
                                           err_msg="%s %s array %d" % (rule, setting, k))
    print("shim: the device update of %d solver rules matches the NumPy solvers (L2 and L1 "
          "decay, iter_size 1 and 2, %d iterations)" % (len(SOLVER_RULES), ITERATIONS))


# ---- the layers that dispatch to the kernels ---------------------------------------------------
LAYER_CASES = [
    ('type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 pad: 1 stride: 2 '
     'group: 2 dilation: 2 weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } '
     'engine: CAFFE }', [(2, 4, 9, 8)], [True], ["im2col_2d", "col2im_2d"]),
    ('type: "Deconvolution" convolution_param { num_output: 3 kernel_size: 3 stride: 2 '
     'weight_filler { type: "gaussian" } }', [(2, 2, 4, 5)], [True],
     ["im2col_2d", "col2im_2d"]),
    ('type: "Pooling" pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 }',
     [(2, 3, 7, 6)], [True], ["max_pool_forward", "max_pool_backward"]),
    ('type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }',
     [(2, 3, 7, 6)], [True], ["ave_pool_forward", "ave_pool_backward"]),
    ('type: "LRN" lrn_param { local_size: 5 alpha: 0.5 beta: 0.75 }', [(2, 7, 3, 4)], [True],
     ["lrn_forward", "lrn_backward"]),
    ('type: "LRN" lrn_param { local_size: 3 norm_region: WITHIN_CHANNEL }', [(2, 3, 5, 4)],
     [True], ["lrn_forward", "lrn_backward"]),
    ('type: "SoftmaxWithLoss" loss_param { ignore_label: 1 }', [(4, 5, 3), "labels"],
     [True, False], ["softmax_loss_log_prob", "softmax_loss_backward"]),
    ('type: "SoftmaxWithLoss" loss_param { ignore_label: 2 normalization: VALID }',
     [(4, 5, 3), "labels"], [True, False], ["softmax_loss_log_prob", "softmax_loss_backward"]),
    ('type: "Pooling" pooling_param { pool: AVE kernel_h: 3 kernel_w: 2 stride_h: 2 '
     'stride_w: 3 pad_h: 1 pad_w: 1 }', [(2, 3, 8, 9)], [True],
     ["ave_pool_forward", "ave_pool_backward"]),
    ('type: "BatchNorm"', [(3, 4, 5, 6)], [True],
     ["channel_sums", "bn_running", "bn_apply", "bn_backward"]),
    ('type: "BatchNorm" batch_norm_param { use_global_stats: true }', [(2, 3, 4, 5)], [True],
     ["bn_global", "bn_apply", "bn_backward"]),
    ('type: "Scale" scale_param { bias_term: true }', [(2, 3, 4, 5)], [True],
     ["scale_apply", "channel_sums"]),
    ('type: "Scale"', [(2, 3, 4, 5)], [True], ["scale_apply", "channel_sums"]),
]
LAYER_MODULES = (g_im2col, g_pool, g_lrn, g_sl, g_ch)


def check_layers_through_dispatch(host):
    """Layers whose hot paths dispatch to ops/gpu, run with the kernels (shim) and without."""
    from pycaffe_lite.layers.common import batch_norm_layer, scale_layer
    from pycaffe_lite.testing import make_layer, random_blobs

    def run(text, shapes, down, kernels, names):
        backend.set_random_seed(7)  # the same filled weights in both runs
        rng = np.random.default_rng(7)
        arrays = [rng.integers(0, 5, (4, 3)).astype(np.float32) if s == "labels" else
                  rng.normal(size=s).astype(np.float32) for s in shapes]
        layer = make_layer(text, np.float32)
        bottom = random_blobs(arrays, dtype=np.float32)
        top = random_blobs([np.zeros(1)], dtype=np.float32)
        restore = _shim(host, LAYER_MODULES, LAYER_MODULES[:-1] + (batch_norm_layer,
                                                                 scale_layer)) \
            if kernels else (lambda: None)
        try:
            with launched(host, *(names if kernels else ())):
                layer.SetUp(bottom, top)
                for b in layer.blobs:  # stored statistics and params: nonzero, positive
                    b.data[...] = rng.uniform(0.5, 2, b.shape)
                layer.Forward(bottom, top)
                if not layer.loss(0):
                    top[0].diff[...] = rng.normal(size=top[0].shape)
                layer.Backward(top, down, bottom)
        finally:
            restore()
        return [top[0].data.copy()] + [b.diff.copy() for b, d in zip(bottom, down) if d] + \
            [p.diff.copy() for p in layer.blobs] + [p.data.copy() for p in layer.blobs]

    for text, shapes, down, names in LAYER_CASES:
        for a, b in zip(run(text, shapes, down, False, names),
                        run(text, shapes, down, True, names)):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=text)
    print("shim: %d layers give the same results through the kernels as without"
          % len(LAYER_CASES))
