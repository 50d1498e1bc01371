"""The direct 1x1 convolution on host arrays: a compiled kernel (``pointwise_forward`` in
ops/cpu/conv_impl.h) for the forward of narrow 1x1 layers (stride 1, no pad, one group), with
the bias and a folded ReLU applied before each register tile is stored.

For such a layer im2col is the identity and the forward is one matrix product per image,
``W (K, C) . x (C, P)``; with a short inner dimension C (16-128 input channels: SqueezeNet,
GoogLeNet's reductions, narrow ResNets) a BLAS call spends a large part of its time packing the
operands and waking its threads, and the bias and ReLU take one more pass over the output. The
kernel reads the input rows in place, keeps 4 output channels x 3 vectors of pixels in
registers and splits the (image, pixel block) pairs over the kernel threads.

:func:`takes` is the rule (:func:`pycaffe_lite.ops.conv.forward` asks it): float arrays the
compiled kernels take, a 1x1 stride-1 unpadded single-group geometry, at most
``MAX_IN_CHANNELS`` input channels and ``MAX_WEIGHTS`` filter values (the filters are re-read
per pixel block and should stay in the core's L2 cache). Results equal the matrix-product path
to float rounding: each output sums its C products in increasing channel order, within
``C * eps * sum |w x|`` of the exact sum (tests/test_ops_pointwise.py). It is opt-in
(``PYCAFFE_LITE_POINTWISE=1`` or :func:`set_enabled`): measured per core on a 2-core AVX2
machine it takes 0.8-2.1x the time of OpenBLAS's sgemm plus the bias pass on these shapes
(faster only on the narrowest, 16 input channels).
"""


import numpy as np

from . import cpu as _cpu
from ..switches import flag as flag_value, switch

# Measured on a 2-core AVX2 machine (benchmarks/bench_kernels.py --groups pointwise): see
# docs/performance.md, "Convolutions".
MAX_IN_CHANNELS = 128
MAX_WEIGHTS = 1 << 16
# pixels per block of the kernel: 3 vectors of 32 bytes
_BLOCK_BYTES = 3 * 32
# a kernel thread is worth its hand-off for about this many multiply-adds
_MIN_MACS_PER_THREAD = 1 << 18

# opt-in: on a 2-core AVX2 (Zen 3) machine OpenBLAS's sgemm still takes less time per core
# on most of these shapes (docs/performance.md, "Convolutions")
_enabled = [switch("PYCAFFE_LITE_POINTWISE", False)]


def set_enabled(flag):
    """Use the direct 1x1 kernel where the rule takes a layer (True) or never (False, the
    default). Returns the previous setting."""
    old = _enabled[0]
    _enabled[0] = flag_value(flag, "pointwise.set_enabled")
    return old


def enabled():
    return _enabled[0]


def takes(geom, x, weights, y, bias=None):
    """Whether :func:`forward` computes this convolution's forward."""
    if not (_enabled[0] and geom.is_1x1 and geom.group == 1
            and len(geom.kernel_shape) == 2 and not geom.force_nd_im2col):
        return False
    if geom.conv_in_channels > MAX_IN_CHANNELS or \
            geom.conv_in_channels * geom.conv_out_channels > MAX_WEIGHTS:
        return False
    nk, nc = geom.conv_out_channels, geom.conv_in_channels
    if x.ndim != 4 or x.shape[1] != nc or weights.shape[0] != nk or weights.size != nk * nc:
        return False
    return _cpu.supported(x, weights, y, bias)


def forward(x, weights, y, bias=None, relu=False):
    """``y (N, K, H, W)`` (overwritten) = the 1x1 convolution of ``x (N, C, H, W)`` with
    ``weights (K, C, 1, 1)`` (+ ``bias (K,)``), then ``max(y, 0)`` when ``relu`` (NaN
    kept)."""
    nb, nc = int(x.shape[0]), int(x.shape[1])
    nk = int(weights.shape[0])
    npix = int(np.prod(x.shape[2:]))
    block = _BLOCK_BYTES // x.itemsize
    units = nb * -(-npix // block)
    grain = max(1, _MIN_MACS_PER_THREAD // max(1, block * nk * nc))
    _cpu._split(_cpu._function("pointwise_forward", x.dtype), units,
                [_cpu._address(x), _cpu._address(weights),
                 None if bias is None else _cpu._address(bias), _cpu._address(y), nk, nc,
                 npix, int(bool(relu))], grain=grain)
    return y
