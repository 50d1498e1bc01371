"""GPU mode on a real NVIDIA GPU through CuPy (``@pytest.mark.gpu``: skipped, with the reason,
where ``pycaffe_lite.backend.gpu_available()`` is False; tests/conftest.py).

Tolerances (float32):

- every layer type, forward and backward, GPU vs CPU: ``rtol=1e-4, atol=1e-5`` (the CAFFE
  engine; GPU reductions and matrix products sum in another order than NumPy's), with the
  random numbers of Dropout and STOCHASTIC pooling drawn on the host in both modes
  (``gpu_cases.host_draws``); their own GPU draws (``cupy.random``) are checked by what they
  do: the kept fraction within 5 binomial sigmas, the same masks for the same seed;
- each CUDA kernel of :mod:`pycaffe_lite.ops.gpu` vs the NumPy function it replaces:
  ``rtol=1e-5, atol=1e-6`` (float32; the same terms, fused multiply-adds at most), and
  ``rtol=1e-12, atol=1e-13`` in float64;
- the cuDNN engine vs the CAFFE engine: ``rtol=1e-4, atol=1e-5`` (float32 convolutions never
  round through TF32 unless ``set_allow_tf32`` allows it; tests/test_gpu_cudnn.py checks
  cuDNN against a float64 reference);
- a short LeNet-style training run (4 iterations, SGD and Adam), GPU vs CPU weights:
  ``rtol=1e-3, atol=1e-5``, either engine;
- the fused solver updates (tiny net, 3 iterations, every rule): ``rtol=1e-5, atol=1e-6``.
"""

import contextlib
import subprocess
import sys

import numpy as np
import pytest
from helpers.gpu_cases import (CASES, SOLVERS, STEPS, _u, case, case_ids, make_solver, make_sources,
                       run_case, weights)
from helpers.solver import solver_param, tiny_net_text

from pycaffe_lite import backend, ops
from pycaffe_lite.ops import gpu
from pycaffe_lite.solvers import get_solver

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cupy_device")]

RTOL, ATOL = 1e-4, 1e-5
KERNEL_TOL = {np.float32: (1e-5, 1e-6), np.float64: (1e-12, 1e-13)}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return make_sources(tmp_path_factory.mktemp("gpu_sources"))


@pytest.fixture
def pydir(sources, monkeypatch):
    monkeypatch.syspath_prepend(sources["_dir"])
    return sources


@contextlib.contextmanager
def cudnn_enabled(flag):
    old = gpu.cudnn.set_enabled(flag)
    try:
        yield
    finally:
        gpu.cudnn.set_enabled(old)


def cp():
    return backend.device_module()


def host(a):
    return backend.to_host(a)


# ---- every layer type ---------------------------------------------------------------------------
@pytest.mark.parametrize("c", CASES, ids=case_ids())
def test_layer_forward_backward_gpu_equals_cpu(c, pydir):
    expected = run_case(c, pydir, gpu=False)
    with cudnn_enabled(False):
        got = run_case(c, pydir, gpu=True, tag="gpu")
    for i, (a, b) in enumerate(zip(expected[0], got[0])):
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL, err_msg="top %d data" % i)
    for i, (a, b) in enumerate(zip(expected[1], got[1])):
        if a is not None:
            np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL, err_msg="bottom %d diff" % i)
    for i, ((da, ga), (db, gb)) in enumerate(zip(expected[2], got[2])):
        np.testing.assert_allclose(db, da, rtol=RTOL, atol=ATOL, err_msg="param %d data" % i)
        np.testing.assert_allclose(gb, ga, rtol=RTOL, atol=ATOL, err_msg="param %d diff" % i)


# ---- each kernel against the NumPy function it replaces -----------------------------------------
IM2COL_CASES = [
    # image shape, kernel, pad, stride, dilation
    ((2, 3, 7, 6), (3, 3), (1, 1), (2, 2), (1, 1)),
    ((1, 2, 9, 8), (3, 2), (0, 1), (1, 2), (2, 1)),
    ((3, 4, 5, 5), (1, 1), (0, 0), (1, 1), (1, 1)),
    ((2, 1, 4, 6), (5, 3), (2, 0), (3, 1), (1, 2)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,kernel,pad,stride,dilation", IM2COL_CASES)
def test_im2col_col2im_kernels_equal_numpy(dtype, shape, kernel, pad, stride, dilation):
    rtol, atol = KERNEL_TOL[dtype]
    x = np.random.default_rng(0).normal(size=shape).astype(dtype)
    cols = ops.im2col(x, kernel, pad, stride, dilation)
    backend.set_mode_gpu()
    gcols = gpu.im2col.im2col(cp().asarray(x), kernel, pad, stride, dilation)
    np.testing.assert_array_equal(host(gcols), cols)  # copies only: exact
    dcol = np.random.default_rng(1).normal(size=cols.shape).astype(dtype)
    img = ops.col2im(dcol, shape, kernel, pad, stride, dilation)
    gimg = gpu.im2col.col2im(cp().asarray(dcol), shape, kernel, pad, stride, dilation)
    np.testing.assert_allclose(host(gimg), img, rtol=rtol, atol=atol)
    # the dispatch at the top of the NumPy functions picks the kernels for CuPy arrays
    np.testing.assert_array_equal(host(ops.im2col(cp().asarray(x), kernel, pad, stride,
                                                  dilation)), cols)


POOL_CASES = [
    # input shape, kernel, pad, stride
    ((2, 3, 7, 6), (3, 3), (1, 1), (2, 2)),
    ((1, 2, 8, 8), (2, 2), (0, 0), (2, 2)),
    ((2, 2, 5, 7), (3, 2), (0, 1), (1, 3)),
    ((1, 1, 6, 6), (6, 6), (0, 0), (1, 1)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,kernel,pad,stride", POOL_CASES)
def test_pooling_kernels_equal_numpy(dtype, shape, kernel, pad, stride):
    rtol, atol = KERNEL_TOL[dtype]
    rng = np.random.default_rng(2)
    x = rng.normal(size=shape).astype(dtype)
    x.ravel()[::5] = x.ravel()[1]  # some ties
    n, c, h, w = shape
    pooled = tuple(ops.pooled_size(s, k, p, st) for s, k, p, st in
                   zip((h, w), kernel, pad, stride))
    top = np.empty((n, c) + pooled, dtype)
    arg = np.empty(top.shape, np.int32)
    ops.max_pool_forward(x, kernel, pad, stride, pooled, top, arg)
    dy = rng.normal(size=top.shape).astype(dtype)
    dx = np.empty_like(x)
    ops.max_pool_backward(dy, arg, kernel, pad, stride, pooled, dx)
    div = ops.pool_divisors(h, w, kernel, pad, stride, pooled, dtype=dtype)
    atop = np.empty_like(top)
    ops.ave_pool_forward(x, kernel, pad, stride, pooled, atop, div)
    adx = np.empty_like(x)
    ops.ave_pool_backward(dy, kernel, pad, stride, pooled, div, adx)

    backend.set_mode_gpu()
    gx, gdy, gdiv = cp().asarray(x), cp().asarray(dy), cp().asarray(div)
    gtop, garg = cp().empty(top.shape, dtype), cp().empty(top.shape, np.int32)
    ops.max_pool_forward(gx, kernel, pad, stride, pooled, gtop, garg)
    np.testing.assert_array_equal(host(gtop), top)
    np.testing.assert_array_equal(host(garg), arg)
    gdx = cp().empty(x.shape, dtype)
    ops.max_pool_backward(gdy, garg, kernel, pad, stride, pooled, gdx)
    np.testing.assert_allclose(host(gdx), dx, rtol=rtol, atol=atol)
    ops.ave_pool_forward(gx, kernel, pad, stride, pooled, gtop, gdiv)
    np.testing.assert_allclose(host(gtop), atop, rtol=rtol, atol=atol)
    ops.ave_pool_backward(gdy, kernel, pad, stride, pooled, gdiv, gdx)
    np.testing.assert_allclose(host(gdx), adx, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("text", [
    'type: "LRN" lrn_param { local_size: 5 alpha: 0.5 beta: 0.75 k: 1.5 }',
    'type: "LRN" lrn_param { local_size: 3 norm_region: WITHIN_CHANNEL alpha: 0.8 }'])
def test_lrn_kernels_equal_numpy(dtype, text):
    from pycaffe_lite.testing import make_layer, random_blobs

    # float64: pow() and the window sums' order cost a few ulps more than the other kernels
    rtol, atol = (1e-5, 1e-6) if dtype == np.float32 else (1e-10, 1e-12)
    x = np.random.default_rng(3).normal(size=(2, 7, 4, 5)).astype(dtype)
    dy = np.random.default_rng(4).normal(size=x.shape).astype(dtype)
    layer = make_layer(text, dtype)
    bottom, top = random_blobs([x], dtype=dtype), random_blobs([x], dtype=dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[0].diff[...] = dy
    layer.Backward(top, [True], bottom)
    across = layer.region == 0
    backend.set_mode_gpu()
    gx, gy = cp().asarray(x), cp().empty(x.shape, dtype)
    scale = gpu.lrn.lrn_forward(gx, gy, layer.size, layer.alpha, layer.beta, layer.k, across)
    np.testing.assert_allclose(host(gy), top[0].data, rtol=rtol, atol=atol)
    np.testing.assert_allclose(host(scale), layer.scale, rtol=rtol, atol=atol)
    gdx = cp().empty(x.shape, dtype)
    gpu.lrn.lrn_backward(gx, gy, cp().asarray(dy), scale, gdx, layer.size, layer.alpha,
                         layer.beta, across)
    np.testing.assert_allclose(host(gdx), bottom[0].diff, rtol=rtol, atol=atol)


def test_softmax_loss_kernels_equal_numpy():
    rng = np.random.default_rng(5)
    outer, channels, inner = 3, 5, 4
    prob = rng.uniform(0, 1, (outer, channels, inner)).astype(np.float32)
    prob[0, :, 0] = 0  # clipped at FLT_MIN
    index = rng.integers(0, channels, (outer, inner)).astype(np.int64)
    valid = rng.uniform(size=(outer, inner)) > 0.3
    picked = np.take_along_axis(prob, index[:, None, :], axis=1)[:, 0, :]
    log_p = np.where(valid, np.log(np.maximum(picked, np.float32(gpu.softmax_loss.FLT_MIN))), 0)
    onehot = (np.arange(channels)[None, :, None] == index[:, None, :]).astype(np.float32)
    scale = np.float32(0.25)
    dx = (prob - onehot) * valid[:, None, :].astype(np.float32) * scale
    backend.set_mode_gpu()
    g = [cp().asarray(a) for a in (prob, index, valid)]
    np.testing.assert_allclose(host(gpu.softmax_loss.masked_log_prob(*g)), log_p, rtol=1e-5,
                               atol=1e-6)
    gdx = cp().empty(prob.shape, np.float32)
    gpu.softmax_loss.backward(*g, cp().asarray(scale), gdx)
    np.testing.assert_allclose(host(gdx), dx, rtol=1e-6, atol=1e-7)


RULES = {
    "SGD": 'type: "SGD" base_lr: 0.1 momentum: 0.9 weight_decay: 0.01',
    "Nesterov": 'type: "Nesterov" base_lr: 0.1 momentum: 0.9 weight_decay: 0.01 '
                'regularization_type: "L1"',
    "AdaGrad": 'type: "AdaGrad" base_lr: 0.1 delta: 1e-6 iter_size: 2',
    "RMSProp": 'type: "RMSProp" base_lr: 0.05 rms_decay: 0.9 delta: 1e-6',
    "AdaDelta": 'type: "AdaDelta" base_lr: 1 momentum: 0.95 delta: 1e-6 weight_decay: 0.001',
    "Adam": 'type: "Adam" base_lr: 0.01 momentum: 0.9 momentum2: 0.999 delta: 1e-8',
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_fused_solver_update_kernels_equal_numpy(rule):
    from helpers.solver import batches, feed

    def run(on_gpu):
        backend.set_mode_gpu() if on_gpu else backend.set_mode_cpu()
        param = solver_param(RULES[rule] + ' lr_policy: "fixed" random_seed: 1 max_iter: 10 '
                             'display: 0', tiny_net_text())
        solver = get_solver(param)
        feed(solver.net, batches(4))
        solver.step(3)
        out = weights(solver.net) + [host(h) for h in solver.history]
        backend.set_mode_cpu()
        return out

    for a, b in zip(run(False), run(True)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


# ---- cuDNN engine -------------------------------------------------------------------------------
@pytest.mark.parametrize("text,shape", [
    ('type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 pad: 1 stride: 2 '
     'group: 2 weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" } }',
     (2, 4, 9, 8)),
    ('type: "Deconvolution" convolution_param { num_output: 6 kernel_size: 3 pad: 1 stride: 2 '
     'group: 2 weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" } }',
     (2, 4, 5, 4)),
    ('type: "Convolution" convolution_param { num_output: 6 kernel_size: 3 pad: 2 dilation: 2 '
     'group: 6 weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" } }',
     (2, 6, 7, 9)),
    ('type: "Pooling" pooling_param { pool: MAX kernel_size: 2 stride: 2 }', (2, 3, 8, 6)),
    ('type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 3 }', (2, 3, 9, 6)),
])
def test_cudnn_engine_equals_caffe_engine(text, shape, pydir):
    c = case("x", text.replace("param {", "param { engine: CUDNN", 1), [_u(shape)])
    caffe = case("x", text.replace("param {", "param { engine: CAFFE", 1), [_u(shape)])
    with cudnn_enabled(True):
        got = run_case(c, pydir, gpu=True)
        expected = run_case(caffe, pydir, gpu=True)
    for a, b in zip(expected[0] + [d for d in expected[1] if d is not None],
                    got[0] + [d for d in got[1] if d is not None]):
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL)
    for (da, ga), (db, gb) in zip(expected[2], got[2]):
        np.testing.assert_allclose(gb, ga, rtol=RTOL, atol=ATOL)


# ---- training -----------------------------------------------------------------------------------
@pytest.mark.parametrize("cudnn", [False, True], ids=["caffe-engine", "default-engine"])
@pytest.mark.parametrize("kind", sorted(SOLVERS))
def test_short_lenet_run_gpu_equals_cpu(kind, cudnn, tmp_path):
    cpu = make_solver(kind, tmp_path)
    cpu.step(STEPS)
    expected = weights(cpu.net)
    with cudnn_enabled(cudnn):
        backend.set_mode_gpu()
        solver = make_solver(kind, tmp_path)
        assert all(gpu.is_cupy(h) for h in solver.history)  # the state lives on the GPU
        solver.step(STEPS)
        got = weights(solver.net)
        backend.set_mode_cpu()
    for a, b in zip(expected, got):
        np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-5)


def test_data_layer_prefetches_into_pinned_memory_and_uploads(pydir):
    from pycaffe_lite import syncedmem
    from pycaffe_lite.blob import Blob
    from pycaffe_lite.layers import create_layer
    from pycaffe_lite.testing import layer_param

    text = ('type: "Data" data_param { source: "%s" batch_size: 2 backend: LMDB }'
            % pydir["lmdb"])
    backend.set_mode_gpu()
    layer = create_layer(layer_param(text), dtype=np.float32)
    top = [Blob((), np.float32), Blob((), np.float32)]
    layer.SetUp([], top)
    try:
        for _ in range(3):
            layer.Forward([], top)
            assert top[0].data_state == syncedmem.SYNCED
            assert gpu.is_cupy(top[0].read_data())
        host_buffer = top[0].synced_data.cpu()
        # cupyx.empty_pinned arrays live in a PinnedMemoryPointer's buffer
        assert "PinnedMemory" in type(host_buffer.base).__name__
    finally:
        layer.close()
        backend.set_mode_cpu()


def test_device_query_prints_name_memory_and_compute_capability():
    out = subprocess.run([sys.executable, "-m", "pycaffe_lite.cli", "device_query"],
                         capture_output=True, text=True, check=True).stdout
    props = backend.device_properties(0)
    assert props["name"] in out and props["compute_capability"] in out
    assert str(props["total_memory"]) in out


def test_labels_on_the_gpu_are_checked():
    from pycaffe_lite.errors import LayerError
    from pycaffe_lite.testing import make_layer, random_blobs

    backend.set_mode_gpu()
    layer = make_layer('type: "SoftmaxWithLoss"', np.float32)
    bottom = random_blobs([_u((4, 3)), np.array([0, 1, 5, 2], np.float32)], dtype=np.float32)
    top = random_blobs([np.zeros(())], dtype=np.float32)
    layer.SetUp(bottom, top)
    with pytest.raises(LayerError, match="label value 5 is out of range"):
        layer.Forward(bottom, top)


def test_dropout_and_stochastic_pooling_draw_with_cupy_random():
    from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs

    def dropout_mask(seed, shape=(8, 50, 25, 20)):
        backend.set_random_seed(seed)
        layer = make_layer('type: "Dropout" dropout_param { dropout_ratio: 0.3 }', np.float32)
        bottom = random_blobs([np.ones(shape)], dtype=np.float32)
        top = empty_blobs(1, np.float32)
        layer.SetUp(bottom, top)
        layer.Forward(bottom, top)
        assert gpu.is_cupy(top[0].read_data())
        return top[0].data != 0

    backend.set_mode_gpu()
    u = backend.random_uniform((1000, 100), np.float32, cp())
    assert gpu.is_cupy(u) and u.dtype == np.float32
    assert bool((u >= 0).all()) and bool((u < 1).all())
    mask = dropout_mask(5)
    n, p = mask.size, 0.7
    assert abs(int(mask.sum()) - n * p) <= 5 * np.sqrt(n * p * (1 - p))
    np.testing.assert_array_equal(dropout_mask(5), mask)
    assert not np.array_equal(dropout_mask(6), mask)

    backend.set_random_seed(4)  # 1 x 2 windows holding 1 and 3: 3 is picked 3/4 of the time
    x = np.empty((4, 10, 500, 2), np.float32)
    x[..., 0], x[..., 1] = 1.0, 3.0
    layer = make_layer('type: "Pooling" pooling_param { pool: STOCHASTIC kernel_h: 1 '
                       'kernel_w: 2 stride_h: 1 stride_w: 2 }', np.float32)
    bottom, top = random_blobs([x], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    y = top[0].data
    n, p = y.size, 0.75
    assert set(np.unique(y)) <= {1.0, 3.0}
    assert abs(int((y == 3.0).sum()) - n * p) <= 5 * np.sqrt(n * p * (1 - p))
