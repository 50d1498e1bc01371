"""cuDNN through NVIDIA's frontend and the per-channel kernels on a real GPU
(``@pytest.mark.gpu``: skipped where no GPU is usable).

References are independent: convolutions, their data and filter gradients in float64 NumPy
written out below (a sum over the kernel's positions); BatchNorm's and Scale's sums in float64
NumPy. Tolerance for float32 against the float64 reference: 2e-5 of the largest magnitude,
which float32 accumulation meets and TF32 (10-bit mantissa, about 1e-3) does not: so the test
also shows that no TF32 plan ran.
"""

import numpy as np
import pytest

from pycaffe_lite import backend
from pycaffe_lite.ops.gpu import channels, cudnn, cudnn_graphs

pytestmark = pytest.mark.gpu
REL = 2e-5


@pytest.fixture(autouse=True)
def real_gpu():
    old = backend.use_device_module(None)
    backend.set_mode_gpu()
    if not cudnn.available() or cudnn._state["fe"] is None:
        pytest.skip("the cuDNN frontend is not usable here: %s" % cudnn.unavailable_reason())
    yield backend.device_module()
    backend.set_mode_cpu()
    backend.use_device_module(old)


def out_size(n, k, p, s, d):
    return (n + 2 * p - (d * (k - 1) + 1)) // s + 1


def windows(shape, w_shape, pad, stride, dil):
    """For each kernel position (i, j): the slices of the padded input it reads."""
    N, C, H, W = shape
    K, Cg, kh, kw = w_shape
    oh = out_size(H, kh, pad[0], stride[0], dil[0])
    ow = out_size(W, kw, pad[1], stride[1], dil[1])
    for i in range(kh):
        for j in range(kw):
            yield i, j, (slice(i * dil[0], i * dil[0] + stride[0] * (oh - 1) + 1, stride[0]),
                         slice(j * dil[1], j * dil[1] + stride[1] * (ow - 1) + 1, stride[1]))


def conv_ref(x, w, pad, stride, dil, groups):
    N, C, H, W = x.shape
    K, Cg, kh, kw = w.shape
    Kg = K // groups
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0],) * 2, (pad[1],) * 2))
    oh, ow = out_size(H, kh, pad[0], stride[0], dil[0]), out_size(W, kw, pad[1], stride[1],
                                                                   dil[1])
    y = np.zeros((N, K, oh, ow))
    for i, j, (si, sj) in windows(x.shape, w.shape, pad, stride, dil):
        for g in range(groups):
            patch = xp[:, g * Cg:(g + 1) * Cg, si, sj]
            y[:, g * Kg:(g + 1) * Kg] += np.einsum("nchw,kc->nkhw", patch,
                                                   w[g * Kg:(g + 1) * Kg, :, i, j])
    return y


def conv_grads_ref(x, w, dy, pad, stride, dil, groups):
    """(dx, dw) of sum(conv(x, w) * dy), in float64."""
    N, C, H, W = x.shape
    K, Cg, kh, kw = w.shape
    Kg = K // groups
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0],) * 2, (pad[1],) * 2))
    dxp = np.zeros_like(xp)
    dw = np.zeros(w.shape)
    dy = dy.astype(np.float64)
    for i, j, (si, sj) in windows(x.shape, w.shape, pad, stride, dil):
        for g in range(groups):
            cs, ks = slice(g * Cg, (g + 1) * Cg), slice(g * Kg, (g + 1) * Kg)
            dw[ks, :, i, j] += np.einsum("nchw,nkhw->kc", xp[:, cs, si, sj], dy[:, ks])
            dxp[:, cs, si, sj] += np.einsum("nkhw,kc->nchw", dy[:, ks], w[ks, :, i, j])
    dx = dxp[:, :, pad[0]:pad[0] + H, pad[1]:pad[1] + W]
    return dx, dw


def assert_close(got, want, rel=REL):
    got = np.asarray(got, dtype=np.float64)
    scale = max(np.abs(want).max(), 1e-30)
    err = np.abs(got - want).max() / scale
    assert err <= rel, "largest difference %.3g of the largest magnitude (> %.1g)" % (err, rel)


GEOMETRIES = [
    # x shape, K, kernel, pad, stride, dilation, groups
    ((2, 4, 9, 8), 4, (3, 3), (1, 1), (2, 2), (1, 1), 2),
    ((2, 3, 11, 10), 5, (3, 3), (2, 2), (1, 1), (2, 2), 1),
    ((3, 6, 8, 8), 6, (3, 3), (1, 1), (1, 1), (1, 1), 6),  # depthwise
    ((2, 8, 7, 7), 16, (1, 1), (0, 0), (2, 2), (1, 1), 1),
    ((4, 64, 14, 14), 64, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((2, 3, 32, 32), 8, (7, 7), (3, 3), (2, 2), (1, 1), 1),
    ((2, 4, 6, 9), 6, (2, 3), (0, 1), (1, 2), (1, 1), 2),
]


def _arrays(cp, shape, K, kernel, groups, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    w = rng.uniform(-1, 1, (K, shape[1] // groups) + kernel).astype(np.float32)
    return x, w


@pytest.mark.parametrize("shape,K,kernel,pad,stride,dil,groups", GEOMETRIES)
def test_cudnn_convolution_and_gradients_equal_a_float64_reference(real_gpu, shape, K, kernel,
                                                                   pad, stride, dil, groups):
    cp = real_gpu
    x, w = _arrays(cp, shape, K, kernel, groups)
    want = conv_ref(x, w, pad, stride, dil, groups)
    y = cp.empty(want.shape, dtype=np.float32)
    assert cudnn.conv_forward(cp.asarray(x), cp.asarray(w), None, y, pad, stride, dil, groups)
    assert_close(y.get(), want)
    dy = np.random.default_rng(1).uniform(-1, 1, want.shape).astype(np.float32)
    dx_want, dw_want = conv_grads_ref(x, w, dy, pad, stride, dil, groups)
    dx = cp.empty(x.shape, dtype=np.float32)
    dw = cp.full(w.shape, 0.5, dtype=np.float32)  # cuDNN's gradient is added, as Caffe's
    done = cudnn.conv_backward(cp.asarray(x), cp.asarray(dy), cp.asarray(w), dx, dw, pad,
                               stride, dil, groups)
    assert done == (True, True)
    assert_close(dx.get(), dx_want)
    assert_close(dw.get() - 0.5, dw_want, rel=5e-5)
    # each of the three graphs ran through cuDNN (not the CAFFE fallback) with a plan kept
    dev = cp.cuda.runtime.getDevice()
    for kind in (cudnn_graphs.FPROP, cudnn_graphs.DGRAD, cudnn_graphs.WGRAD):
        k = cudnn_graphs.Key.make(kind, x.shape, w.shape, want.shape, pad, stride, dil,
                                  np.float32, dev)
        assert cudnn_graphs.CACHE.get(k) not in (None, False), kind


def test_fused_bias_and_relu_forward(real_gpu):
    cp = real_gpu
    x, w = _arrays(cp, (2, 16, 10, 10), 32, (3, 3), 1)
    b = np.random.default_rng(2).uniform(-1, 1, 32).astype(np.float32)
    pre = conv_ref(x, w, (1, 1), (1, 1), (1, 1), 1) + b[None, :, None, None]
    for relu, want in ((True, np.maximum(pre, 0)), (False, pre)):
        y = cp.empty(want.shape, dtype=np.float32)
        assert cudnn.conv_forward(cp.asarray(x), cp.asarray(w), cp.asarray(b), y, (1, 1),
                                  (1, 1), (1, 1), 1, relu=relu)
        assert_close(y.get(), want)
    # the first call chose between the fused graph and the convolution then a bias-and-ReLU
    # pass (the faster); both compute the same
    key = cudnn_graphs.Key.make(cudnn_graphs.FPROP_BIAS_RELU, x.shape, w.shape, pre.shape,
                                (1, 1), (1, 1), (1, 1), np.float32, cp.cuda.runtime.getDevice())
    assert key in cudnn_graphs.FUSED
    try:
        for choice in (True, False):
            cudnn_graphs.FUSED[key] = choice
            y = cp.full(pre.shape, np.nan, dtype=np.float32)
            assert cudnn.conv_forward(cp.asarray(x), cp.asarray(w), cp.asarray(b), y, (1, 1),
                                      (1, 1), (1, 1), 1, relu=True)
            assert_close(y.get(), np.maximum(pre, 0))
    finally:
        del cudnn_graphs.FUSED[key]


def test_a_graph_is_built_once_per_shape(real_gpu):
    cp = real_gpu
    x, w = _arrays(cp, (2, 8, 12, 12), 8, (3, 3), 1, seed=5)
    y = cp.empty((2, 8, 12, 12), dtype=np.float32)
    args = (cp.asarray(w), None, y, (1, 1), (1, 1), (1, 1), 1)
    before = cudnn_graphs.CACHE.builds
    cudnn.conv_forward(cp.asarray(x), *args)
    built = cudnn_graphs.CACHE.builds
    assert built == before + 1
    for _ in range(3):
        cudnn.conv_forward(cp.asarray(x), *args)
    assert cudnn_graphs.CACHE.builds == built
    key = cudnn_graphs.Key.make(cudnn_graphs.FPROP, x.shape, w.shape, y.shape, (1, 1), (1, 1),
                                (1, 1), np.float32, cp.cuda.runtime.getDevice())
    plan = cudnn_graphs.CACHE.get(key)
    if plan.timings:  # autotuned: the kept plan is the fastest timed
        assert plan.index == min(plan.timings, key=plan.timings.get)


def test_tf32_when_allowed_then_strict_again(real_gpu):
    cp = real_gpu
    x, w = _arrays(cp, (8, 64, 16, 16), 64, (3, 3), 1, seed=3)
    want = conv_ref(x, w, (1, 1), (1, 1), (1, 1), 1)
    old = cudnn_graphs.set_allow_tf32(True)
    try:
        y = cp.empty(want.shape, dtype=np.float32)
        assert cudnn.conv_forward(cp.asarray(x), cp.asarray(w), None, y, (1, 1), (1, 1),
                                  (1, 1), 1)
        assert_close(y.get(), want, rel=5e-3)  # TF32's rounding at most
    finally:
        cudnn_graphs.set_allow_tf32(old)
    y = cp.empty(want.shape, dtype=np.float32)
    assert cudnn.conv_forward(cp.asarray(x), cp.asarray(w), None, y, (1, 1), (1, 1), (1, 1), 1)
    assert_close(y.get(), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_channel_sums_equal_numpy(real_gpu, dtype):
    cp = real_gpu
    rng = np.random.default_rng(4)
    a = rng.normal(2.0, 3.0, (5, 7, 333)).astype(dtype)
    b = rng.normal(0.0, 1.0, a.shape).astype(dtype)
    rel = 1e-6 if dtype == np.float32 else 1e-12
    s1, s2 = cp.zeros(7, dtype=dtype), cp.full(7, 1.5, dtype=dtype)
    channels.channel_sums(cp.asarray(a), 2, s1, s2, b=cp.asarray(b), accumulate=True)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert_close(s1.get(), a64.sum(axis=(0, 2)), rel)
    assert_close(s2.get() - 1.5, (a64 * b64).sum(axis=(0, 2)), max(rel, 1e-5))
    mean, var = cp.empty(7, dtype=dtype), cp.empty(7, dtype=dtype)
    channels.bn_statistics(cp.asarray(a), mean, var)
    assert_close(mean.get(), a64.mean(axis=(0, 2)), rel)
    assert_close(var.get(), a64.var(axis=(0, 2)), rel)


def test_inner_product_forward_runs_as_a_cudnn_convolution(real_gpu, tmp_path):
    # an InnerProduct's forward on the GPU is cuDNN's 1x1 convolution (a CUDA graph can hold
    # it, cuBLAS it cannot): float64 reference, bias added
    import pycaffe_lite as caffe
    path = tmp_path / "ip.prototxt"
    path.write_text('layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 5 '
                    'dim: 3 dim: 4 dim: 2 } } }\nlayer { name: "ip" type: "InnerProduct" '
                    'bottom: "x" top: "y" inner_product_param { num_output: 7 weight_filler '
                    '{ type: "gaussian" } bias_filler { type: "gaussian" } } }')
    net = caffe.Net(str(path), caffe.TEST)
    x = np.random.default_rng(9).uniform(-1, 1, (5, 3, 4, 2)).astype(np.float32)
    net.blobs["x"].data[...] = x
    before = cudnn_graphs.CACHE.builds
    net.forward()
    w, b = (blob.data.astype(np.float64) for blob in net.params["ip"])
    assert_close(net.blobs["y"].data, x.reshape(5, -1).astype(np.float64) @ w.T + b)
    # two graphs: the convolution with its bias fused, and the convolution alone (then a pass
    # adding the bias), timed against each other once; the next forward builds nothing
    assert cudnn_graphs.CACHE.builds == before + 2
    key = cudnn_graphs.Key.make(cudnn_graphs.FPROP_BIAS, (5, 24, 1, 1), (7, 24, 1, 1),
                                (5, 7, 1, 1), (0, 0), (1, 1), (1, 1), np.float32,
                                backend.device_module().cuda.runtime.getDevice())
    assert key in cudnn_graphs.FUSED
    net.forward()
    assert cudnn_graphs.CACHE.builds == before + 2
    assert_close(net.blobs["y"].data, x.reshape(5, -1).astype(np.float64) @ w.T + b)
