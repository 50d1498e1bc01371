"""The compiled host kernels (pycaffe_lite.ops.cpu, C built at install) against the NumPy code
they stand in for: the same results bit for bit, on every geometry the NumPy code handles.
Each test runs the public function twice, kernels on and off, on the same inputs."""

import importlib

import threading

import numpy as np
import pytest

from pycaffe_lite.ops import cpu, matmul, pooling
from pycaffe_lite.ops.cpu import _threads as cpu_threads
from helpers.kernel import kernels, needs_library

im2col = importlib.import_module("pycaffe_lite.ops.im2col")  # the module, not the function



def both(fn):
    """``fn()`` with the NumPy code, then with the compiled kernels."""
    with kernels(False):
        reference = fn()
    with kernels(True):
        compiled = fn()
    return reference, compiled


def layer_both_ways(make_layer, x, dy, dtype=np.float32):
    """A one-bottom layer's top and bottom gradient for ``x`` and ``dy`` (blobs of
    ``dtype``), with the NumPy code and with the compiled kernels: ``((y, dx), (y, dx))``."""
    import pycaffe_lite as caffe

    def run():
        bottom, top = caffe.Blob(x.shape, dtype), caffe.Blob(x.shape, dtype)
        bottom.data[...] = x
        layer = make_layer()
        layer.SetUp([bottom], [top])
        layer.Forward([bottom], [top])
        top.diff[...] = dy
        layer.Backward([top], [True], [bottom])
        return top.data.copy(), bottom.diff.copy()
    return both(run)


@needs_library
def test_supported_checks_arrays():
    a = np.zeros((2, 3), np.float32)
    with kernels(True):
        assert cpu.supported(a, np.zeros(3, np.int32))
        assert not cpu.supported(a, np.zeros(3, np.float64))  # mixed float types
        assert not cpu.supported(a.T)  # not C-contiguous
        assert not cpu.supported(np.zeros(3, np.float16))
        assert not cpu.supported(np.zeros(3, np.int64), a)
        assert not cpu.supported(np.zeros(3, np.int32))  # no float array
    with kernels(False):
        assert not cpu.supported(a)


CONV_GEOMETRIES = [
    # (batch, channels, H, W, kernel, pad, stride, dilation)
    (64, 1, 28, 28, (5, 5), (0, 0), (1, 1), (1, 1)),  # LeNet conv1
    (8, 3, 13, 11, (3, 3), (1, 1), (1, 1), (1, 1)),
    (5, 4, 17, 19, (3, 5), (2, 1), (2, 3), (1, 1)),
    (4, 2, 12, 12, (3, 3), (2, 2), (1, 1), (2, 2)),  # dilated
    (6, 3, 9, 9, (1, 1), (0, 0), (2, 2), (1, 1)),
    (4, 2, 6, 7, (4, 4), (3, 3), (3, 2), (1, 1)),  # pad larger than stride
]


@needs_library
def test_im2col_matches_direct_gather():
    """An independent reference: every column element read from the image by index, and
    the adjoint identity <im2col(x), c> == <x, col2im(c)>."""
    rng = np.random.default_rng(1)
    nb, nc, h, w = 4, 2, 7, 6
    kernel, pad, stride, dilation = (3, 2), (1, 2), (2, 1), (1, 2)
    x = rng.standard_normal((nb, nc, h, w)).astype(np.float32)
    oh, ow = im2col.conv_output_shape((h, w), kernel, pad, stride, dilation)
    with kernels(True):
        got = im2col.im2col(x, kernel, pad, stride, dilation)
    cols = got.reshape(nc, kernel[0], kernel[1], nb, oh, ow)
    for c in range(nc):
        for i in range(kernel[0]):
            for j in range(kernel[1]):
                for y in range(oh):
                    for z in range(ow):
                        r = y * stride[0] - pad[0] + i * dilation[0]
                        q = z * stride[1] - pad[1] + j * dilation[1]
                        inside = 0 <= r < h and 0 <= q < w
                        want = x[:, c, r, q] if inside else np.zeros(nb, np.float32)
                        assert np.array_equal(cols[c, i, j, :, y, z], want)
    col = rng.standard_normal(got.shape).astype(np.float32)
    with kernels(True):
        back = im2col.col2im(col, x.shape, kernel, pad, stride, dilation)
    assert np.isclose(np.vdot(got, col), np.vdot(x, back), rtol=1e-4)


POOL_GEOMETRIES = [
    # (N, C, H, W, kernel, pad, stride)
    (64, 20, 24, 24, (2, 2), (0, 0), (2, 2)),  # LeNet pool1, exact tiling
    (3, 4, 13, 13, (3, 3), (0, 0), (2, 2)),  # CaffeNet-style overlapping windows
    (2, 3, 9, 10, (3, 3), (1, 1), (2, 2)),  # padding
    (2, 2, 7, 8, (3, 2), (0, 0), (3, 3)),  # ceil mode: the last windows hang over
    (2, 2, 6, 6, (4, 4), (2, 1), (1, 2)),
    (1, 1, 5, 5, (5, 5), (0, 0), (1, 1)),  # global
]


@needs_library
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", POOL_GEOMETRIES)
def test_max_pool(geometry, dtype):
    n, c, h, w, kernel, pad, stride = geometry
    ph = pooling.pooled_size(h, kernel[0], pad[0], stride[0])
    pw = pooling.pooled_size(w, kernel[1], pad[1], stride[1])
    rng = np.random.default_rng(3)
    # ties (rounded values), NaN and -inf exercise the first-maximum and skip rules
    x = np.round(rng.standard_normal((n, c, h, w)) * 2).astype(dtype)
    x.flat[::17] = np.nan
    x.flat[5::23] = -np.inf
    x[0, 0] = np.nan  # a plane with no value at all: -FLT_MAX and choice -1

    def forward():
        top = np.empty((n, c, ph, pw), dtype)
        arg = np.empty((n, c, ph, pw), np.int32)
        pooling.max_pool_forward(x, kernel, pad, stride, (ph, pw), top, arg)
        return top, arg
    (top_ref, arg_ref), (top, arg) = both(forward)
    assert np.array_equal(top, top_ref) and np.array_equal(arg, arg_ref)
    values = np.empty_like(top)  # the values only (no choices wanted): the same values
    cpu.max_pool_forward(x, kernel, pad, stride, (ph, pw), values, None)
    assert np.array_equal(values, top_ref)
    assert np.all(top[0, 0] == -np.finfo(np.float32).max) and np.all(arg[0, 0] == -1)
    dy = rng.standard_normal(top.shape).astype(dtype)

    def backward():
        dx = np.full(x.shape, 7, dtype)  # overwritten
        pooling.max_pool_backward(dy, arg, kernel, pad, stride, (ph, pw), dx)
        return dx
    ref, got = both(backward)
    assert np.array_equal(got, ref)
    # the gradient mass is conserved: every routed top gradient lands once
    assert np.isclose(got.sum(), dy[arg >= 0].sum(), rtol=1e-5)


@needs_library
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", POOL_GEOMETRIES + [
    (1, 3, 14, 14, (14, 14), (0, 0), (1, 1)),  # global, SqueezeNet's pool10
    (2, 2, 5, 6, (4, 4), (1, 1), (1, 1)),  # one output per plane, padding inside the window
    (1, 2, 3, 70, (1, 66), (0, 1), (1, 1))])  # a window wider than 64 columns
def test_ave_pool_forward(geometry, dtype):
    """AVE pooling's forward, compiled and NumPy: identical (NaN and infinities included),
    and equal to a loop over Caffe's windows with its divisors."""
    n, c, h, w, kernel, pad, stride = geometry
    pooled = tuple(pooling.pooled_size(s, k, p, st) for s, k, p, st in
                   zip((h, w), kernel, pad, stride))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    x.flat[7::29] = np.inf
    x.flat[11::31] = np.nan
    div = pooling.pool_divisors(h, w, kernel, pad, stride, pooled, dtype=dtype)

    def forward():
        top = np.full((n, c) + pooled, 5, dtype)  # overwritten
        pooling.ave_pool_forward(x, kernel, pad, stride, pooled, top, div)
        return top
    ref, got = both(forward)
    assert np.array_equal(got, ref, equal_nan=True)
    loop = np.empty_like(ref)
    for py in range(pooled[0]):
        for px in range(pooled[1]):
            r, q = py * stride[0] - pad[0], px * stride[1] - pad[1]
            hend, wend = min(r + kernel[0], h + pad[0]), min(q + kernel[1], w + pad[1])
            size = (hend - r) * (wend - q)
            window = x[:, :, max(r, 0):min(hend, h), max(q, 0):min(wend, w)]
            loop[:, :, py, px] = window.astype(np.float64).sum(axis=(2, 3)) / size
    np.testing.assert_allclose(got, loop, rtol=1e-5, atol=1e-6)


@needs_library
def test_max_pool_against_a_loop():
    """Independent reference: Caffe's scan, element by element."""
    rng = np.random.default_rng(4)
    x = np.round(rng.standard_normal((2, 2, 7, 7)) * 2).astype(np.float32)
    kernel, pad, stride = (3, 3), (1, 1), (2, 2)
    ph = pooling.pooled_size(7, 3, 1, 2)
    top = np.empty((2, 2, ph, ph), np.float32)
    arg = np.empty(top.shape, np.int32)
    with kernels(True):
        pooling.max_pool_forward(x, kernel, pad, stride, (ph, ph), top, arg)
    for n in range(2):
        for c in range(2):
            for py in range(ph):
                for px in range(ph):
                    hs, ws = py * 2 - 1, px * 2 - 1
                    best, pick = -np.finfo(np.float32).max, -1
                    for r in range(max(hs, 0), min(hs + 3, 7)):
                        for q in range(max(ws, 0), min(ws + 3, 7)):
                            if x[n, c, r, q] > best:
                                best, pick = x[n, c, r, q], (r - hs) * 3 + (q - ws)
                    assert top[n, c, py, px] == np.float32(best)
                    assert arg[n, c, py, px] == pick


@needs_library
def test_threads_split_gives_the_same_result(monkeypatch):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 8, 12, 12)).astype(np.float32)
    results = []
    for n in (1, 3):
        monkeypatch.setitem(cpu_threads._state, "threads", n)
        monkeypatch.setattr(cpu_threads, "MIN_ELEMENTS_PER_THREAD", 1)
        with kernels(True):
            results.append(im2col.im2col(x, (3, 3), (1, 1), (1, 1), (1, 1)))
    assert np.array_equal(results[0], results[1])


def test_split_finishes_the_work_when_the_pool_refuses_it(monkeypatch):
    """At interpreter exit the kernel threads take no more work: the calling thread does it
    all, and the result is the same."""
    class ClosedPool:
        size = 8
        closed = False

        def offer(self, job, helpers):
            raise RuntimeError("the kernel threads are closed")

    out = np.zeros(1000, np.int64)

    def fill(start, stop):
        out[start:stop] += np.arange(start, stop)

    monkeypatch.setitem(cpu_threads._state, "threads", 4)
    monkeypatch.setitem(cpu_threads._state, "pool", ClosedPool())
    cpu_threads.split(fill, 1000, ())
    assert np.array_equal(out, np.arange(1000))  # every element once


def test_split_waits_for_the_threads_before_an_error_or_interrupt_goes_on(monkeypatch):
    """The chunks write into the caller's arrays: whatever the calling thread raises, it
    unwinds only after every chunk a worker claimed has finished; a chunk's own error
    reaches the caller."""
    monkeypatch.setitem(cpu_threads._state, "threads", 2)
    entered, release = threading.Event(), threading.Event()
    finished = []

    def part(start, stop):
        if threading.current_thread().name.startswith("pycaffe-lite-kernel"):
            entered.set()
            release.wait()  # the worker's chunk runs on after the caller's chunk raised
            finished.append((start, stop))
            return
        entered.wait()  # a worker holds a chunk now
        release.set()
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cpu_threads.split(part, 10, ())
    assert finished and all(start > 0 for start, _ in finished)  # not the caller's chunk
    assert len(set(finished)) == len(finished)

    def failing(start, stop):
        if start:
            raise ValueError("part %d-%d failed" % (start, stop))

    with pytest.raises(ValueError, match=r"part \d+-\d+ failed"):
        cpu_threads.split(failing, 10, ())


def test_the_kernel_threads_end_when_their_pool_closes(monkeypatch):
    monkeypatch.setitem(cpu_threads._state, "threads", 3)
    pool = cpu_threads.pool(2)
    threads = list(pool.threads)
    assert len(threads) >= 2 and all(t.is_alive() for t in threads)
    pool.resources.release()
    assert not any(t.is_alive() for t in threads)
    out = np.zeros(12)

    def fill(start, stop):
        out[start:stop] = 1

    cpu_threads.split(fill, 12, ())  # a fresh pool replaces the closed one
    assert out.sum() == 12 and cpu_threads._state["pool"] is not pool


def test_threads_setting(monkeypatch):
    monkeypatch.setattr(cpu_threads, "match_blas", lambda n: None)  # OpenBLAS left as it is
    monkeypatch.setitem(cpu_threads._state, "threads", None)
    monkeypatch.setenv("PYCAFFE_LITE_CPU_THREADS", "3")
    assert cpu.threads() == 3
    monkeypatch.setitem(cpu_threads._state, "threads", None)
    monkeypatch.delenv("PYCAFFE_LITE_CPU_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert cpu.threads() == 2
    monkeypatch.setitem(cpu_threads._state, "threads", None)


@pytest.mark.parametrize("blocked", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_accumulate_matmul(dtype, blocked, monkeypatch):
    """``c += a @ b`` in place (one block, or many small ones), against NumPy's product."""
    if blocked:  # blocks of 2 rows of c
        monkeypatch.setattr(matmul, "_ACCUMULATE_BLOCK_BYTES", 2 * 5 * np.dtype(dtype).itemsize)
    rng = np.random.default_rng(6)
    a = rng.standard_normal((14, 9)).astype(dtype).T  # (9, 14), not C-contiguous
    b = rng.standard_normal((14, 5)).astype(dtype)
    c = rng.standard_normal((9, 5)).astype(dtype)
    expected = c + a @ b
    buffer = c.__array_interface__["data"][0]
    out = matmul.accumulate_matmul(c, a, b)
    assert out is c and c.__array_interface__["data"][0] == buffer
    assert np.allclose(c, expected, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)


def test_library_is_built_where_a_compiler_exists():
    """The kernels are an optional build; on a machine with a C compiler (CI's) they must
    have been built, or the tests above would skip instead of checking them."""
    import shutil
    import sysconfig
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip("no C compiler (%s) on this machine: the NumPy code runs" % compiler)
    assert cpu.library_available(), cpu.unavailable_reason()


@needs_library
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm, decay, l1", [(1, 0, False), (1, 5e-4, False), (0.5, 1e-3, True),
                                             (0.25, 0, False)])
def test_sgd_update_matches_the_numpy_steps(dtype, norm, decay, l1):
    """The fused step against SGDSolver's NumPy steps written out (same roundings)."""
    rng = np.random.default_rng(8)
    n = 1000
    data = rng.standard_normal(n).astype(dtype)
    data[:5] = 0  # sign(0) = 0
    diff = rng.standard_normal(n).astype(dtype)
    history = rng.standard_normal(n).astype(dtype)
    t = np.dtype(dtype).type
    rate, momentum = t(0.01), t(0.9)
    g = diff.copy()
    if norm != 1:
        g *= t(norm)
    if decay:
        g += (np.sign(data) if l1 else data) * t(decay)
    h = history * momentum
    g *= rate
    h += g
    cpu.sgd_update(diff, history, data, t(norm), t(decay), l1, rate, momentum)
    assert np.array_equal(history, h) and np.array_equal(diff, h)


@needs_library
def test_sgd_solver_steps_equal_with_and_without_kernels(tmp_path, monkeypatch):
    """A few SGD iterations (momentum, weight decay, iter_size 2) on a small conv net give
    the same weights with the compiled kernels and with the NumPy code (to float rounding:
    the two order a convolution's column matrix differently, so BLAS sums in another order;
    the update itself is checked bit for bit above)."""
    import pycaffe_lite as caffe
    from pycaffe_lite.solvers import get_solver
    from pycaffe_lite.proto import protoio
    net = """
    layer { name: "data" type: "DummyData" top: "data" top: "label"
      dummy_data_param { shape { dim: 8 dim: 2 dim: 12 dim: 12 } shape { dim: 8 }
        data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 1 } } }
    layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
      convolution_param { num_output: 4 kernel_size: 3 pad: 1
        weight_filler { type: "xavier" } bias_filler { type: "constant" value: 0.1 } } }
    layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
      pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
    layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
      inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
    """
    calls = []
    fused = cpu.solver_update_all
    monkeypatch.setattr(cpu, "solver_update_all",
                        lambda rule, diffs, *a: calls.append(len(diffs)) or fused(rule, diffs, *a))
    results = []
    for flag in (False, True):
        with kernels(flag):
            path = tmp_path / ("net%d.prototxt" % flag)
            path.write_text(net)
            param = protoio.read_solver_param(
                'net: "%s" base_lr: 0.05 momentum: 0.9 weight_decay: 0.01 iter_size: 2 '
                'lr_policy: "fixed" max_iter: 4 random_seed: 3 snapshot_after_train: false '
                'solver_mode: CPU' % path)
            caffe.set_random_seed(3)
            solver = get_solver(param)
            solver.step(4)
            results.append([p.data.copy() for p in solver.net.learnable_params])
    assert calls == [4] * 4  # 4 updates of 4 parameter blobs each, with the kernels only
    for a, b in zip(*results):
        assert np.allclose(a, b, rtol=1e-5, atol=1e-6)


@needs_library
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", CONV_GEOMETRIES + [(1, 3, 31, 29, (11, 11), (0, 0),
                                                         (4, 4), (1, 1))])
def test_im2col_and_col2im_batch_first(geometry, dtype):
    """Caffe's column layout, images side by side (im2col / col2im), and one image alone."""
    nb, nc, h, w, kernel, pad, stride, dilation = geometry
    rng = np.random.default_rng(9)
    for images in (nb, 1):
        check_batch_first(rng.standard_normal((images, nc, h, w)).astype(dtype), kernel, pad,
                          stride, dilation)


def check_batch_first(x, kernel, pad, stride, dilation):
    rng = np.random.default_rng(11)
    dtype = x.dtype
    ref, got = both(lambda: im2col.im2col(x, kernel, pad, stride, dilation))
    assert np.array_equal(got, ref)
    col = rng.standard_normal(ref.shape).astype(dtype)
    ref, got = both(lambda: im2col.col2im(col, x.shape, kernel, pad, stride, dilation))
    assert np.array_equal(got, ref)


@needs_library
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [1, 3, 5])
@pytest.mark.parametrize("beta", [0.75, 0.6])
def test_lrn_across_channels(dtype, size, beta):
    """LRN's forward and backward through the layer, with and without the compiled channel
    sums (and, for beta = 0.75, the compiled power): identical."""
    from pycaffe_lite.layers.vision.lrn_layer import LRNLayer
    from pycaffe_lite.proto import caffe_pb2
    rng = np.random.default_rng(10)
    x = rng.standard_normal((3, 7, 5, 4)).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    param = caffe_pb2.LayerParameter(name="norm", type="LRN")
    param.lrn_param.local_size = size
    param.lrn_param.alpha = 0.3
    param.lrn_param.beta = beta
    param.lrn_param.k = 2
    (y_ref, dx_ref), (y, dx) = layer_both_ways(lambda: LRNLayer(param), x, dy)
    assert np.array_equal(y, y_ref) and np.array_equal(dx, dx_ref)
    # independent reference for the forward
    pre = (size - 1) // 2
    sq = np.pad(x.astype(np.float64) ** 2, ((0, 0), (pre, pre), (0, 0), (0, 0)))
    scale = 2 + 0.3 / size * sum(sq[:, i:i + 7] for i in range(size))
    assert np.allclose(y, x * scale ** -beta, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lrn_power_three_quarters_is_within_three_ulp(dtype):
    """``x * scale^-0.75`` computed through two square roots (ops/lrn.py, both paths) against
    the power taken in extended precision: within 3 ulp (two square roots, a product and a
    quotient, each rounded once: at most about 2.25 ulp of relative error)."""
    from pycaffe_lite.ops.lrn import _times_power
    rng = np.random.default_rng(11)
    scale = np.concatenate([rng.uniform(1, 4, 5000), 10.0 ** rng.uniform(-6, 6, 5000)])
    scale = scale.astype(dtype)
    x = rng.standard_normal(scale.size).astype(dtype)
    wide = np.longdouble
    exact = x.astype(wide) * scale.astype(wide) ** wide(-0.75)
    got = _times_power(x, scale, 0.75, np.empty_like(x))
    ulp = np.spacing(np.abs(exact).astype(dtype)).astype(wide)
    assert np.max(np.abs(got.astype(wide) - exact) / ulp) <= 3.0


def _bits(a):
    return a.view(np.int32 if a.dtype == np.float32 else np.int64)


@needs_library
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,with_bias", [
    ((1, 5, 7, 3), True), ((3, 4, 2, 2), True), ((2, 3), True), ((1, 5, 7, 3), False),
    ((2, 3), False), ((40000,), False)])
@pytest.mark.parametrize("relu", [True, False])
def test_bias_relu_equals_numpy_bit_for_bit(dtype, shape, with_bias, relu):
    """One compiled pass of bias + ReLU against NumPy's ``x + b`` and ``maximum(., 0)``:
    the same bits, -0.0, NaN and infinities included, out of place and in place; parts
    split over threads (40000 elements: three parts, the last ragged)."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal(shape).astype(dtype)
    special = np.array([-0.0, 0.0, np.nan, np.inf, -np.inf, -1e-30], dtype)
    x.reshape(-1)[:special.size] = special[:x.size]
    bias = rng.standard_normal(shape[1]).astype(dtype) if with_bias else None
    ref = x.copy()
    if with_bias:
        ref += bias.reshape((1, -1) + (1,) * (x.ndim - 2))
    if relu:
        np.maximum(ref, 0, out=ref)
    got = cpu.bias_relu(x, np.empty_like(x), bias, relu)
    assert np.array_equal(_bits(got), _bits(ref))
    inplace = x.copy()
    cpu.bias_relu(inplace, inplace, bias, relu)
    assert np.array_equal(_bits(inplace), _bits(ref))


@needs_library
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("relu", [True, False])
def test_add_relu_equals_numpy_bit_for_bit(dtype, relu):
    """An Eltwise SUM of two blobs and its ReLU in one compiled pass against NumPy's ``a + b``
    and ``maximum(., 0)``: the same bits (NaN, infinities and -0.0 included), out of place and
    into one of its inputs, 150000 elements (split over threads)."""
    rng = np.random.default_rng(14)
    a = rng.standard_normal((3, 50, 1000)).astype(dtype)
    b = rng.standard_normal(a.shape).astype(dtype)
    a.reshape(-1)[:6] = [-0.0, 0.0, np.nan, np.inf, -np.inf, 1.0]
    b.reshape(-1)[:6] = [-0.0, -0.0, 1.0, -np.inf, 1.0, -1.0]
    ref = a + b
    if relu:
        np.maximum(ref, 0, out=ref)
    assert np.isnan(ref.reshape(-1)[:4]).sum() == 2
    got = cpu.add_relu(a, b, np.empty_like(a), relu)
    assert np.array_equal(_bits(got), _bits(ref))
    into = b.copy()
    cpu.add_relu(a, into, into, relu)
    assert np.array_equal(_bits(into), _bits(ref))


@needs_library
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_layer_with_and_without_kernels(dtype):
    """The ReLU layer's forward and gradient through the compiled kernels equal NumPy's
    ``maximum(x, 0)`` and ``dy * (x > 0)`` bit for bit (a NaN gradient where x <= 0 stays
    NaN, a negative one gives -0, as NumPy's product)."""
    from pycaffe_lite.layers.neuron.relu_layer import ReLULayer
    from pycaffe_lite.proto import caffe_pb2
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 3, 70, 90)).astype(dtype)
    x.reshape(-1)[:4] = [-0.0, np.nan, 0.0, -np.inf]
    dy = rng.standard_normal(x.shape).astype(dtype)
    dy.reshape(-1)[4:8] = np.nan
    param = caffe_pb2.LayerParameter(name="relu", type="ReLU")
    (y_ref, dx_ref), (y, dx) = layer_both_ways(lambda: ReLULayer(param), x, dy, dtype)
    assert np.array_equal(_bits(y), _bits(y_ref)) and np.array_equal(_bits(dx), _bits(dx_ref))
    # an independent reference: Caffe's max(x, 0) and dy * (x > 0)
    ok = ~np.isnan(x)
    assert np.array_equal(y[ok], np.where(x[ok] > 0, x[ok], 0))
    pos = x > 0
    assert np.array_equal(dx[pos], dy[pos], equal_nan=True)
    off = ~pos & ~np.isnan(dy)
    assert np.all(dx[off] == 0)
    assert np.all(np.isnan(dx[~pos & np.isnan(dy)]))


def test_the_c_signatures_are_the_headers():
    """The prototypes ops/cpu/_library.py declares (and gives ctypes) are the ones the C
    sources export, parameter by parameter."""
    import os
    import re

    from pycaffe_lite.ops.cpu import _library

    folder = os.path.dirname(_library.__file__)
    source = ""
    for name in ("kernels_impl.h", "conv_impl.h", "train_impl.h"):
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            source += f.read()
    exported = {}
    for name, params in re.findall(r"EXPORT void NAME\((\w+)\)\((.*?)\)\s*\{", source, re.S):
        text = "%s(%s)" % (name, " ".join(params.replace("restrict ", "").split()))
        exported.update(_library.parse_prototypes(text))
        # the parser's start/stop are the C source's own last two parameters here
        exported[name] = exported[name][:-2]
    assert exported and exported == _library.SIGNATURES
