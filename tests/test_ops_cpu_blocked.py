"""The channel-blocked kernels (pycaffe_lite.ops.cpu.blocked): the direct convolution against
PyTorch's conv2d computed in float64 (an independent engine), pooling against Caffe's window
formulas written out here in NumPy, the layout against its definition; both instruction sets
(AVX-512F, B = 16, and AVX2 + FMA, B = 8) where the processor runs them."""

import os
import re

import numpy as np
import pytest

from pycaffe_lite.ops.cpu import _library, _threads as cpu_threads
from pycaffe_lite.ops.cpu import blocked
from helpers.kernel import kernels, needs_library


def _isa_runs(name):
    lib = _library.load()
    return lib is not None and bool(lib.pcl_blocked_isa() & {"avx512": 2, "avx2": 1}[name])


ISAS = [pytest.param(name, marks=pytest.mark.skipif(
    not _isa_runs(name), reason="this processor (or build) has no %s kernels" % name))
    for name in ("avx512", "avx2")]


@pytest.fixture(params=ISAS)
def B(request):
    old = blocked.set_isa(request.param)
    try:
        yield blocked.block_size()
    finally:
        blocked.set_isa(old)


def reference_blocked(x, B):
    """The layout's definition: channel c at [n, c // B, h, w, c % B], padding lanes 0."""
    n, c, h, w = x.shape
    cb = -(-c // B)
    padded = np.zeros((n, cb * B, h, w), np.float32)
    padded[:, :c] = x
    return padded.reshape(n, cb, B, h, w).transpose(0, 1, 3, 4, 2)


def torch_conv(x, w, b, stride, pad, dilation, group, residual=None, relu=False):
    """PyTorch's conv2d in float64, and the same of |x| and |w| (the error bound's scale)."""
    torch = pytest.importorskip("torch", reason="PyTorch (the reference) is a test dependency")
    F = torch.nn.functional
    xt, wt = torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64))
    bt = None if b is None else torch.from_numpy(b.astype(np.float64))
    y = F.conv2d(xt, wt, bt, stride, pad, dilation, group)
    scale = F.conv2d(xt.abs(), wt.abs(), None if b is None else bt.abs(), stride, pad,
                     dilation, group)
    if residual is not None:
        y = y + torch.from_numpy(residual.astype(np.float64))
        scale = scale + torch.from_numpy(np.abs(residual).astype(np.float64))
    if relu:
        y = torch.clamp(y, min=0)
    return y.numpy(), scale.numpy()


def assert_close(got, want, scale, terms):
    """Within the classical bound of a float32 sum of ``terms`` products (plus the bias and a
    residual): (terms + 2) * eps * sum |terms|."""
    bound = (terms + 2) * np.finfo(np.float32).eps * scale + 1e-30
    excess = np.abs(got.astype(np.float64) - want) - bound
    assert excess.max() <= 0, "off by %.3g beyond the bound" % excess.max()


def run_conv(B, x, w, b, stride, pad, dilation, group, *, input_blocked=True, relu=False,
             residual=None, y=None):
    packed = blocked.pack_conv(w, b, group, B, input_blocked=input_blocked)
    xb = blocked.to_blocked(x, B) if input_blocked else x
    k = w.shape[0]
    oh = (x.shape[2] + 2 * pad[0] - (dilation[0] * (w.shape[2] - 1) + 1)) // stride[0] + 1
    ow = (x.shape[3] + 2 * pad[1] - (dilation[1] * (w.shape[3] - 1) + 1)) // stride[1] + 1
    if y is None:
        y = np.full(blocked.blocked_shape((x.shape[0], k, oh, ow), B), np.nan, np.float32)
    rb = None if residual is None else blocked.to_blocked(residual, B)
    blocked.conv_forward(packed, xb, y, pad, stride, dilation, relu=relu, residual=rb)
    return y


# (N, C, K, H, W, kernel, stride, pad, dilation, group)
GEOMETRIES = [
    (1, 20, 37, 9, 11, (3, 3), (1, 1), (1, 1), (1, 1), 1),      # ragged C and K, 3x3 pad 1
    (1, 24, 40, 30, 31, (1, 1), (1, 1), (0, 0), (1, 1), 1),     # 1x1: one long row
    (1, 33, 17, 14, 13, (1, 1), (2, 2), (0, 0), (1, 1), 1),     # 1x1 stride 2
    (1, 16, 16, 15, 17, (3, 3), (2, 2), (1, 1), (1, 1), 1),     # stride 2
    (1, 19, 21, 12, 40, (3, 3), (1, 1), (2, 2), (2, 2), 1),     # dilation 2
    (2, 17, 30, 7, 7, (3, 3), (1, 1), (1, 1), (1, 1), 1),       # batch 2, 7x7 maps
    (1, 8, 9, 6, 50, (3, 5), (1, 3), (2, 1), (1, 1), 1),        # odd stride: small tiles
    (1, 32, 48, 27, 27, (5, 5), (1, 1), (2, 2), (1, 1), 1),     # GoogLeNet's 5x5
    (1, 13, 11, 3, 4, (3, 3), (1, 1), (1, 1), (1, 1), 1),       # every tile at an edge
    (1, 10, 20, 5, 200, (3, 3), (1, 1), (1, 1), (1, 1), 1),     # rows cut into runs
    (1, 3, 16, 40, 45, (11, 11), (4, 4), (2, 2), (1, 1), 1),    # AlexNet-like conv1 (blocked)
    (1, 96, 64, 13, 13, (5, 5), (1, 1), (2, 2), (1, 1), 2),     # CaffeNet conv2 (groups)
    (1, 64, 64, 9, 9, (3, 3), (1, 1), (1, 1), (1, 1), 4),       # 4 groups of 16 (B = 8: 2)
]


@needs_library
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[:5])))
def test_conv_matches_torch(B, geometry):
    n, c, k, h, w_, kernel, stride, pad, dilation, group = geometry
    if group > 1 and ((c // group) % B or (k // group) % B):
        pytest.skip("channels per group not a multiple of %d" % B)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, c, h, w_)).astype(np.float32)
    w = rng.standard_normal((k, c // group) + kernel).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32)
    y = run_conv(B, x, w, b, stride, pad, dilation, group)
    want, scale = torch_conv(x, w, b, stride, pad, dilation, group)
    assert_close(blocked.from_blocked(y, k), want, scale, c // group * kernel[0] * kernel[1])
    if k % B:
        assert np.all(y[:, -1, ..., k % B:] == 0)  # padding lanes


@needs_library
@pytest.mark.parametrize("kernel, stride, pad", [(7, 2, 3), (3, 1, 1), (11, 4, 0), (3, 2, 0)])
def test_first_layer_reads_nchw(B, kernel, stride, pad):
    """A convolution of a 3-channel NCHW image (ResNet's 7x7 stride 2 pad 3 conv1, ...)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 37, 41)).astype(np.float32)
    w = rng.standard_normal((20, 3, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(20).astype(np.float32)
    s, p = (stride, stride), (pad, pad)
    y = run_conv(B, x, w, b, s, p, (1, 1), 1, input_blocked=False, relu=True)
    want, scale = torch_conv(x, w, b, s, p, (1, 1), 1, relu=True)
    assert_close(blocked.from_blocked(y, 20), want, scale, 3 * kernel * kernel)
    assert np.all(y[:, -1, ..., 20 % B:] == 0)


@needs_library
@pytest.mark.parametrize("stride, kernel, pad", [((1, 1), (3, 3), (1, 1)),
                                                 ((2, 2), (3, 3), (1, 1)),
                                                 ((1, 1), (5, 5), (2, 2))])
def test_depthwise_matches_torch(B, stride, kernel, pad):
    rng = np.random.default_rng(3)
    c = 20
    x = rng.standard_normal((2, c, 15, 18)).astype(np.float32)
    w = rng.standard_normal((c, 1) + kernel).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    assert blocked.pack_conv(w, b, c, B).depthwise
    y = run_conv(B, x, w, b, stride, pad, (1, 1), c)
    want, scale = torch_conv(x, w, b, stride, pad, (1, 1), c)
    assert_close(blocked.from_blocked(y, c), want, scale, kernel[0] * kernel[1])
    assert np.all(y[:, -1, ..., c % B:] == 0)


@needs_library
def test_residual_relu_and_no_bias(B):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 21, 10, 12)).astype(np.float32)
    w = rng.standard_normal((19, 21, 3, 3)).astype(np.float32)
    res = rng.standard_normal((2, 19, 10, 12)).astype(np.float32) * 10
    y = run_conv(B, x, w, None, (1, 1), (1, 1), (1, 1), 1, relu=True, residual=res)
    want, scale = torch_conv(x, w, None, (1, 1), (1, 1), (1, 1), 1, residual=res, relu=True)
    got = blocked.from_blocked(y, 19)
    assert_close(got, want, scale, 21 * 9)
    assert (got == 0).mean() > 0.2  # the ReLU did cut
    assert np.all(y[:, -1, ..., 19 % B:] == 0)


@needs_library
def test_residual_may_be_the_output(B):
    """y += conv(x) in place: the residual read from the output array itself."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 18, 9, 9)).astype(np.float32)
    w = rng.standard_normal((20, 18, 1, 1)).astype(np.float32)
    r = rng.standard_normal((1, 20, 9, 9)).astype(np.float32)
    y = blocked.to_blocked(r, B)
    blocked.conv_forward(blocked.pack_conv(w, None, 1, B), blocked.to_blocked(x, B), y, (0, 0),
                         (1, 1), (1, 1), relu=True, residual=y)
    want, scale = torch_conv(x, w, None, (1, 1), (0, 0), (1, 1), 1, residual=r, relu=True)
    assert_close(blocked.from_blocked(y, 20), want, scale, 18)


@needs_library
def test_output_into_a_slice_of_a_larger_buffer(B):
    """A Concat written in place: the convolution fills blocks [1, 1 + Kb) of a larger blocked
    buffer, reading its residual from a slice too; the other blocks stay as they were."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 10, 8, 9)).astype(np.float32)
    w = rng.standard_normal((2 * B, 10, 3, 3)).astype(np.float32)
    b = rng.standard_normal(2 * B).astype(np.float32)
    buf = rng.standard_normal((2, 4, 8, 9, B)).astype(np.float32)
    before = buf.copy()
    resbuf = rng.standard_normal((2, 5, 8, 9, B)).astype(np.float32)
    residual = resbuf[:, 3:5]
    packed = blocked.pack_conv(w, b, 1, B)
    blocked.conv_forward(packed, blocked.to_blocked(x, B), buf[:, 1:3], (1, 1), (1, 1),
                         (1, 1), relu=False, residual=residual)
    res_nchw = blocked.from_blocked(np.ascontiguousarray(residual), 2 * B)
    want, scale = torch_conv(x, w, b, (1, 1), (1, 1), (1, 1), 1, residual=res_nchw)
    assert_close(blocked.from_blocked(buf[:, 1:3], 2 * B), want, scale, 90)
    assert np.array_equal(buf[:, 0], before[:, 0])
    assert np.array_equal(buf[:, 3], before[:, 3])


@needs_library
def test_thread_count_does_not_change_results(B, monkeypatch):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 40, 23, 130)).astype(np.float32)  # rows cut into runs
    w = rng.standard_normal((40, 40, 3, 3)).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    xp = rng.standard_normal((2, 40, 23, 23)).astype(np.float32)
    results = []
    for n in (1, 3):
        monkeypatch.setitem(cpu_threads._state, "threads", n)
        y = run_conv(B, x, w, b, (1, 1), (1, 1), (1, 1), 1, relu=True)
        p = np.empty((2, -(-40 // B), 12, 12, B), np.float32)
        blocked.pool_forward(blocked.to_blocked(xp, B), p, "ave", (3, 3), (1, 1), (2, 2))
        d = run_conv(B, xp, w[:40, :1], None, (2, 2), (1, 1), (1, 1), 40)  # depthwise
        results.append((y, p, d))
    for one, three in zip(*results):
        assert np.array_equal(one, three)


# ---- layout ----------------------------------------------------------------------------------
@needs_library
@pytest.mark.parametrize("c", [1, 3, 8, 16, 21, 40])
def test_to_and_from_blocked(B, c):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, c, 5, 7)).astype(np.float32)
    xb = blocked.to_blocked(x, B)
    assert np.array_equal(xb, reference_blocked(x, B))
    assert np.array_equal(blocked.from_blocked(xb, c), x)


# ---- pooling ---------------------------------------------------------------------------------
def caffe_pooled(size, kernel, pad, stride):
    """Caffe's output size: ceil mode, the last window starting inside the padded image."""
    out = -(-(size + 2 * pad - kernel) // stride) + 1
    if pad and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def caffe_pool(x, method, kernel, pad, stride, oh, ow):
    """Caffe's pooling_layer.cpp forward loops, for (N, C, H, W)."""
    n, c, h, w = x.shape
    y = np.empty((n, c, oh, ow), np.float32)
    for ph in range(oh):
        for pw in range(ow):
            hs, ws = ph * stride[0] - pad[0], pw * stride[1] - pad[1]
            he, we = min(hs + kernel[0], h + pad[0]), min(ws + kernel[1], w + pad[1])
            size = (he - hs) * (we - ws)
            hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
            window = x[:, :, hs:he, ws:we].reshape(n, c, -1)
            if method == "max":
                y[:, :, ph, pw] = window.max(axis=2)
            else:
                y[:, :, ph, pw] = window.astype(np.float64).sum(axis=2) / size
    return y


@needs_library
@pytest.mark.parametrize("method", ["max", "ave"])
@pytest.mark.parametrize("h, w, kernel, pad, stride", [
    (13, 13, (3, 3), (0, 0), (2, 2)),    # ceil mode: the last window runs past the edge
    (14, 15, (3, 3), (1, 1), (2, 2)),    # padded
    (7, 9, (2, 3), (1, 2), (1, 2)),
    (7, 7, (7, 7), (0, 0), (1, 1)),      # global
])
def test_pooling_matches_caffe(B, method, h, w, kernel, pad, stride):
    rng = np.random.default_rng(8)
    c = 21
    x = rng.standard_normal((2, c, h, w)).astype(np.float32)
    oh = caffe_pooled(h, kernel[0], pad[0], stride[0])
    ow = caffe_pooled(w, kernel[1], pad[1], stride[1])
    buf = np.full((2, 2 + -(-c // B), oh, ow, B), 7.0, np.float32)
    y = buf[:, 1:-1]  # a slice of a larger buffer
    blocked.pool_forward(blocked.to_blocked(x, B), y, method, kernel, pad, stride)
    want = caffe_pool(x, method, kernel, pad, stride, oh, ow)
    got = blocked.from_blocked(y, c)
    if method == "max":
        assert np.array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.all(y[:, -1, ..., c % B:] == 0)
    assert np.all(buf[:, 0] == 7) and np.all(buf[:, -1] == 7)


@needs_library
def test_max_pooling_skips_nan(B):
    x = np.zeros((1, 1, 2, 2), np.float32)
    x[0, 0] = [[np.nan, -3], [-1, -2]]
    y = np.empty((1, 1, 1, 1, B), np.float32)
    blocked.pool_forward(blocked.to_blocked(x, B), y, "max", (2, 2), (0, 0), (1, 1))
    assert y[0, 0, 0, 0, 0] == -1  # Caffe's `if (x > top)` never takes a NaN


# ---- switches and errors ---------------------------------------------------------------------
@needs_library
def test_block_size_follows_switches():
    if not _isa_runs("avx2"):
        pytest.skip("no AVX2 + FMA kernels here")
    old = blocked.set_isa("avx2")
    try:
        assert blocked.block_size() == 8
        with kernels(False):
            assert blocked.block_size() is None
    finally:
        blocked.set_isa(old)
    assert blocked.set_isa(None) == old
    blocked.set_isa(old)
    with pytest.raises(ValueError, match="'avx512', 'avx2' or None"):
        blocked.set_isa("sse")


def test_set_isa_takes_any_case_as_the_variable_does():
    """PYCAFFE_LITE_BLOCKED_ISA=AVX2 was taken while set_isa("AVX2") raised."""
    old = blocked.set_isa("AVX2")
    try:
        assert blocked.set_isa(" Avx512 ") == "avx2"
        assert blocked.set_isa(None) == "avx512"
    finally:
        blocked.set_isa(old)


@needs_library
def test_isa_environment_variable():
    if not _isa_runs("avx2"):
        pytest.skip("no AVX2 + FMA kernels here")
    import subprocess
    import sys
    code = "from pycaffe_lite.ops.cpu import blocked; print(blocked.block_size())"
    env = dict(os.environ, PYCAFFE_LITE_BLOCKED_ISA="avx2")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "8"


@needs_library
def test_bad_shapes_are_named(B):
    w = np.zeros((32, 24, 3, 3), np.float32)
    packed = blocked.pack_conv(w, None, 1, B)
    x = np.zeros((1, -(-24 // B), 8, 8, B), np.float32)
    with pytest.raises(ValueError, match="output must be shaped"):
        blocked.conv_forward(packed, x, np.zeros((1, 32 // B, 7, 8, B), np.float32), (1, 1),
                             (1, 1), (1, 1))
    with pytest.raises(ValueError, match="input has 1 blocks"):
        blocked.conv_forward(packed, np.zeros((1, 1, 8, 8, B), np.float32),
                             np.zeros((1, 32 // B, 8, 8, B), np.float32), (1, 1), (1, 1), (1, 1))
    with pytest.raises(ValueError, match="float32"):
        blocked.conv_forward(packed, x.astype(np.float64),
                             np.zeros((1, 32 // B, 8, 8, B), np.float32), (1, 1), (1, 1), (1, 1))
    with pytest.raises(ValueError, match="residual must be shaped"):
        blocked.conv_forward(packed, x, np.zeros((1, 32 // B, 8, 8, B), np.float32), (1, 1),
                             (1, 1), (1, 1), residual=np.zeros((1, 32 // B, 8, 7, B), np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        blocked.conv_forward(packed, x, np.zeros((1, 32 // B, 8, 16, B), np.float32)[:, :, :, ::2],
                             (1, 1), (1, 1), (1, 1))
    with pytest.raises(ValueError, match="must not overlap its input"):
        big = np.zeros((1, 4, 8, 8, B), np.float32)
        blocked.conv_forward(blocked.pack_conv(np.zeros((B, B, 3, 3), np.float32), None, 1, B),
                             big[:, :1], big[:, :1], (1, 1), (1, 1), (1, 1))
    with pytest.raises(ValueError, match="not multiples of the block size"):
        blocked.pack_conv(np.zeros((30, 5, 3, 3), np.float32), None, 3, B)
    with pytest.raises(ValueError, match="group 1 only"):
        blocked.pack_conv(np.zeros((32, 16, 3, 3), np.float32), None, 2, B,
                          input_blocked=False)
    with pytest.raises(ValueError, match="block size 4 does not match"):
        blocked.to_blocked(np.zeros((1, 3, 2, 2), np.float32), 4)
    with pytest.raises(ValueError, match="pooling method"):
        blocked.pool_forward(x, x, "sum", (2, 2), (0, 0), (2, 2))
    with pytest.raises(ValueError, match="does not fit"):
        blocked.pool_forward(x, np.zeros((1, x.shape[1], 9, 9, B), np.float32), "max", (2, 2),
                             (0, 0), (2, 2))


def test_the_float_signatures_are_the_header():
    """The float-only prototypes _library.py gives ctypes are the ones blocked_impl.h exports,
    parameter by parameter."""
    folder = os.path.dirname(_library.__file__)
    with open(os.path.join(folder, "blocked_impl.h"), encoding="utf-8") as f:
        source = f.read()
    exported = {}
    for name, params in re.findall(r"EXPORT void pcl_(\w+)_f32\((.*?)\)\s*\{", source, re.S):
        text = "%s(%s)" % (name, " ".join(params.replace("restrict ", "").split()))
        exported.update(_library.parse_prototypes(text))
        exported[name] = exported[name][:-2]
    assert exported and exported == _library.SIGNATURES_F32
